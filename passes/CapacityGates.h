//===- CapacityGates.h - Gates that fill slots up to a capacity -*- C++ -*-===//
//
// Switch (t5x, flaxformer) and GShard (DeepSpeed) write their gates as dense
// `[T, E, C]` tensors: `dispatch[t, e, c]` is 1 where token t holds slot c
// of expert e, and `combine[t, e, c]` is that assignment's weight. The
// matchers here prove, op by op, that such a pair is what `moe.router`
// with `capacity C` decides: which assignments it keeps (first choices in
// token order, then second choices), in which slot (the count of earlier
// kept assignments of the expert), and with which weight.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PASSES_CAPACITYGATES_H
#define MOEC_PASSES_CAPACITYGATES_H

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace moec {

/// A capacity gate: `moe.router %logits top k softmax capacity C
/// [normalize_kept eps]` decides exactly the assignments, slots and weights
/// that `dispatch` and `combine` (`[T, E, C]` f32) hold.
struct CapacityGate {
  /// The arg-max that heads the gate (GShard's second choice): where a
  /// near-miss is recorded.
  moe::ArgMaxOp anchor;
  /// The `[T, E]` f32 logits whose softmax scores the experts.
  mlir::Value logits;
  int64_t numExperts = 0, topK = 0, capacity = 0;
  /// GShard's renormalisation over the kept choices: the clamp's epsilon.
  std::optional<float> keptEpsilon;
  mlir::Value dispatch, combine;
};

/// The arg-max that heads the gate computing `dispatch`: the last in program
/// order among those `dispatch` is computed from (through at most a few
/// dozen ops), or null when none is.
moe::ArgMaxOp findCapacityAnchor(mlir::Value dispatch);

/// Matches the gate whose `[T, E, C]` slot mask is `dispatch` and whose
/// weights are `combine`, in the Switch (t5x) or GShard (DeepSpeed top-2)
/// form; returns why it is neither.
std::optional<std::string> matchCapacityGate(mlir::Value dispatch,
                                             mlir::Value combine,
                                             CapacityGate &gate);

/// Whether `einsum` has the operands `a` and `b` (in either order) and sums
/// like `aRoles,bRoles->outRoles`: each letter of the roles names one
/// dimension, e.g. ("tec", "th", "ech") for `einsum("th,tec->ech", x, d)`.
bool isEinsumOf(moe::EinsumOp einsum, mlir::Value a, llvm::StringRef aRoles,
                mlir::Value b, llvm::StringRef bRoles,
                llvm::StringRef outRoles);

} // namespace moec

#endif // MOEC_PASSES_CAPACITYGATES_H
