//===- InputRanges.h - Value ranges of a plan's integer inputs -*- C++ -*-===//
//
// A plan may advise tools that generate inputs (moe-run without --input) of
// the values an integer input takes (`value_range`, docs/plan-format.md).
// Token ids are the case that matters: generated in [0, 2) they route every
// token alike and skew every benchmark, so an input that indexes an
// embedding table gets the table's rows.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PLAN_INPUTRANGES_H
#define MOEC_COMPILER_PLAN_INPUTRANGES_H

#include "mlir/IR/Value.h"

#include <cstdint>
#include <optional>

namespace moec::plan {

/// The rows of the smallest constant table that integer `input` indexes
/// (the indices of a moe.gather of a moe.constant, directly or through
/// reshapes, squeezes, flattens and integer casts): its values should lie in
/// [0, rows). nullopt when it indexes no constant table.
std::optional<int64_t> getEmbeddingRows(mlir::Value input);

} // namespace moec::plan

#endif // MOEC_COMPILER_PLAN_INPUTRANGES_H
