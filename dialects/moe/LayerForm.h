//===- LayerForm.h - Which exported form a MoE layer came from --*- C++ -*-===//
//
// The detectors and the importer of com.microsoft.MoE mark each moe.experts
// they build with the form the layer had in the model, so that moec's
// summary and report can say how each layer was found.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECTS_MOE_LAYERFORM_H
#define MOEC_DIALECTS_MOE_LAYERFORM_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringRef.h"

namespace moec::moe {

/// The discardable string attribute of a moe.experts naming its layer's
/// form ("per-expert loop", "stacked", ...).
inline constexpr llvm::StringLiteral kLayerFormAttr = "moe.form";

/// Marks `experts` (a moe.experts) as built from a layer of `form`.
inline void setLayerForm(mlir::Operation *experts, llvm::StringRef form) {
  experts->setAttr(kLayerFormAttr,
                   mlir::Builder(experts->getContext()).getStringAttr(form));
}

/// The form `experts` was marked with, or "" when it has none.
inline llvm::StringRef getLayerForm(mlir::Operation *experts) {
  auto form = experts->getAttrOfType<mlir::StringAttr>(kLayerFormAttr);
  return form ? form.getValue() : llvm::StringRef();
}

} // namespace moec::moe

#endif // MOEC_DIALECTS_MOE_LAYERFORM_H
