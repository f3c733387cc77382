//===- MoeDialect.cpp - moe dialect registration --------------------------===//

#include "dialects/moe/MoeDialect.h"
#include "dialects/moe/MoeOps.h"
#include "dialects/moe/MoeVisionOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec::moe;

#include "dialects/moe/MoeDialect.cpp.inc"
#include "dialects/moe/MoeEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/moe/MoeAttrs.cpp.inc"

void MoeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/moe/MoeOps.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/moe/MoeVisionOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/moe/MoeAttrs.cpp.inc"
      >();
}

Operation *MoeDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, type, elements);
}

#define GET_OP_CLASSES
#include "dialects/moe/MoeOps.cpp.inc"
