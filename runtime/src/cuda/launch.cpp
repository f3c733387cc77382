//===- launch.cpp - Host-side launch planning of the CUDA backend ---------===//

#include "cuda/launch.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>

namespace moert::cuda {

absl::Status planFusedArgs(const detail::Shape &out,
                           const detail::Shape *const *inputs, int count,
                           FusedArgs &args) {
  if (count < 1 || count > kFusedMaxOperands)
    return absl::InvalidArgumentError(absl::StrCat("a fused kernel takes 1 to ",
                                                   kFusedMaxOperands,
                                                   " inputs, not ", count));
  if (out.rank > kFusedMaxRank)
    return absl::InvalidArgumentError(
        absl::StrCat("output rank ", out.rank, " exceeds ", kFusedMaxRank));
  // Per output dim (outer to inner): its size and each input's element
  // stride along it, 0 where the input is broadcast.
  int64_t sizes[kFusedMaxRank];
  int64_t strides[kFusedMaxOperands][kFusedMaxRank];
  for (int i = 0; i < count; ++i) {
    const detail::Shape &in = *inputs[i];
    if (in.rank > out.rank)
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " of shape ", in.str(),
                       " has a higher rank than the output ", out.str()));
    int64_t stride = 1;
    for (int d = out.rank - 1; d >= 0; --d) {
      int k = d - (out.rank - in.rank);
      int64_t size = k >= 0 ? in[k] : 1;
      if (size != out[d] && size != 1)
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " of shape ", in.str(),
                         " does not broadcast to ", out.str()));
      strides[i][d] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  // Drop size-1 dims, then merge dim d into its outer neighbour when every
  // operand steps over the pair as over one dim.
  int rank = 0;
  for (int d = 0; d < out.rank; ++d) {
    if (out[d] == 1)
      continue;
    bool merge = rank > 0;
    for (int i = 0; merge && i < count; ++i)
      merge = strides[i][rank - 1] == strides[i][d] * out[d];
    if (merge) {
      sizes[rank - 1] *= out[d];
      for (int i = 0; i < count; ++i)
        strides[i][rank - 1] = strides[i][d];
      continue;
    }
    sizes[rank] = out[d];
    for (int i = 0; i < count; ++i)
      strides[i][rank] = strides[i][d];
    ++rank;
  }
  std::memset(&args, 0, sizeof(args));
  args.numel = out.numel();
  args.rank = rank;
  args.num_inputs = count;
  for (int d = 0; d < rank; ++d)
    args.shape[d] = sizes[d];
  for (int i = 0; i < count; ++i)
    for (int d = 0; d < rank; ++d)
      args.strides[i][d] = strides[i][d];
  return absl::OkStatus();
}

unsigned gridSize(int64_t n, int blockSize, int smCount, int blocksPerSm) {
  if (n <= 0 || blockSize <= 0)
    return 1;
  int64_t needed = (n + blockSize - 1) / blockSize;
  int64_t cap = std::max<int64_t>(1, int64_t(std::max(smCount, 1)) *
                                         std::max(blocksPerSm, 1));
  return static_cast<unsigned>(std::clamp<int64_t>(needed, 1, cap));
}

} // namespace moert::cuda
