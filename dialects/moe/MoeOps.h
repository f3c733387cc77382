//===- MoeOps.h - moe dialect ops -------------------------------*- C++ -*-===//

#ifndef MOEC_DIALECTS_MOE_MOEOPS_H
#define MOEC_DIALECTS_MOE_MOEOPS_H

#include "dialects/moe/GraphOpsCommon.h"
#include "dialects/moe/MoeDialect.h"
#include "dialects/moe/MoeTraits.h"
#include "dialects/moe/PlanStep.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/moe/MoeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/moe/MoeAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/moe/MoeOps.h.inc"

#endif // MOEC_DIALECTS_MOE_MOEOPS_H
