//===- NearMiss.h - Why a candidate MoE layer was not detected --*- C++ -*-===//
//
// A detector that rejects a candidate layer cannot know whether a later
// detector takes it in another form, so it does not remark at once: it
// records its reason on the candidate's anchor op (its top-k, arg-max or
// sum). moe-report-near-misses runs after every detector and gives one
// remark per anchor whose layer stayed generic, with the first reason.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_NEARMISS_H
#define MOEC_PASSES_NEARMISS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

namespace moec {

/// The discardable attribute that holds an anchor's recorded reasons, in
/// the order the detectors gave them.
inline constexpr llvm::StringLiteral kNearMissesAttr = "moe.near_misses";

/// Records on `anchor` that the detector of `form` (e.g. "per-expert loop")
/// rejected the layer it anchors, for `reason`. The remark it may become
/// reads "MoE FORM not detected: REASON".
inline void recordNearMiss(mlir::Operation *anchor, llvm::StringRef form,
                           const llvm::Twine &reason) {
  mlir::Builder builder(anchor->getContext());
  llvm::SmallVector<mlir::Attribute> reasons;
  if (auto recorded = anchor->getAttrOfType<mlir::ArrayAttr>(kNearMissesAttr))
    llvm::append_range(reasons, recorded.getValue());
  reasons.push_back(
      builder.getStringAttr("MoE " + form + " not detected: " + reason));
  anchor->setAttr(kNearMissesAttr, builder.getArrayAttr(reasons));
}

} // namespace moec

#endif // MOEC_PASSES_NEARMISS_H
