//===- SwitchLayer.h - Switch Transformers layers to sparse ops -*- C++ -*-===//
//
// The Switch Transformers form of an MoE layer, one of moe-detect-experts'
// forms: top-1 arg-max routing with a per-sequence capacity, dropped tokens
// passing through, and ReLU experts overwriting their tokens' rows.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_SWITCHLAYER_H
#define MOEC_PASSES_SWITCHLAYER_H

#include "dialects/moe/MoeOps.h"

#include "llvm/ADT/StringRef.h"

namespace moec {

/// Rewrites the Switch Transformers layer rooted at `argMax` into
/// moe.router -> moe.dispatch -> moe.experts -> moe.combine when the match
/// proves it exact; otherwise records why on `argMax` (no reason when the
/// arg-max is not over a softmax, so is no router at all). `pass` names the
/// rewrite in verification failures.
void detectSwitchLayer(moe::ArgMaxOp argMax, llvm::StringRef pass);

} // namespace moec

#endif // MOEC_PASSES_SWITCHLAYER_H
