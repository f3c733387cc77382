//===- broadcast.cpp - Broadcasting and operand helpers -------------------===//

#include "exec/broadcast_layout.h"
#include "kernels/common.h"

#include <algorithm>

namespace moert::detail {

BroadcastLoop::BroadcastLoop(const Shape &out, const Shape *const *inputs,
                             int count)
    : count_(count) {
  rank_ = collapseBroadcast(out, inputs, count, dims_, strides_);
  if (rank_ == 0) {
    dims_[0] = 1;
    for (int i = 0; i < count; ++i)
      strides_[i][0] = 0;
    rank_ = 1;
  }
}

void BroadcastLoop::rowOffsets(int64_t row, int64_t *offsets) const {
  for (int i = 0; i < count_; ++i)
    offsets[i] = 0;
  for (int d = rank_ - 2; d >= 0 && row > 0; --d) {
    int64_t index = row % dims_[d];
    row /= dims_[d];
    for (int i = 0; i < count_; ++i)
      offsets[i] += index * strides_[i][d];
  }
}

bool broadcastShapes(const Shape *const *shapes, int count, Shape &out) {
  int rank = 0;
  for (int i = 0; i < count; ++i)
    rank = std::max(rank, shapes[i]->rank);
  out.rank = rank;
  for (int d = 0; d < rank; ++d) {
    int64_t size = 1;
    for (int i = 0; i < count; ++i) {
      const Shape &s = *shapes[i];
      int id = d - (rank - s.rank);
      if (id < 0 || s[id] == 1)
        continue;
      if (size != 1 && size != s[id])
        return false;
      size = s[id];
    }
    out[d] = size;
  }
  return true;
}

absl::Status broadcastOrError(const KernelContext &ctx,
                              const Shape *const *shapes, int count,
                              Shape &out) {
  if (broadcastShapes(shapes, count, out))
    return absl::OkStatus();
  std::string list;
  for (int i = 0; i < count; ++i)
    absl::StrAppend(&list, i ? ", " : "", shapes[i]->str());
  return ctx.error("input shapes ", list, " do not broadcast");
}

absl::Status checkBroadcastRank(const StepCheck &check) {
  int rank = 0;
  for (int i = 0; i < check.numInputs(); ++i)
    if (check.has(i))
      rank = std::max(rank, check.in(i).rank);
  for (int o = 0; o < check.numOutputs(); ++o)
    MOERT_RETURN_IF_ERROR(check.outRank(o, rank));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> scalarInput(const KernelContext &ctx, int i,
                                    const char *what) {
  const Tensor &t = ctx.in(i);
  if (t.numel() != 1)
    return ctx.error(what, " (input ", i, ") must have one element; it has ",
                     "shape ", t.shape.str());
  return readIndex(t, 0);
}

absl::Status listInput(const KernelContext &ctx, int i, const char *what,
                       std::vector<int64_t> &out) {
  out.clear();
  if (!ctx.has(i))
    return absl::OkStatus();
  const Tensor &t = ctx.in(i);
  if (t.shape.rank > 1)
    return ctx.error(what, " (input ", i, ") must be 1-D; it has shape ",
                     t.shape.str());
  int64_t n = t.numel();
  out.reserve(n);
  for (int64_t k = 0; k < n; ++k)
    out.push_back(readIndex(t, k));
  return absl::OkStatus();
}

absl::Status normalizeAxes(const KernelContext &ctx, std::vector<int64_t> &axes,
                           int rank, const char *what) {
  bool seen[kMaxRank] = {};
  for (int64_t &axis : axes) {
    int normalized;
    if (!normalizeAxis(axis, rank, normalized))
      return ctx.error(what, " ", axis, " is out of range for rank ", rank);
    if (seen[normalized])
      return ctx.error(what, " ", axis, " is repeated");
    seen[normalized] = true;
    axis = normalized;
  }
  return absl::OkStatus();
}

} // namespace moert::detail
