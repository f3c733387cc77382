//===- launch.cpp - Host-side launch planning of the CUDA backend ---------===//

#include "backends/cuda/launch.h"
#include "exec/broadcast_layout.h"

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
  for (int i = 0; i < count; ++i) {
    const detail::Shape &in = *inputs[i];
    if (in.rank > out.rank)
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " of shape ", in.str(),
                       " has a higher rank than the output ", out.str()));
    for (int k = 0; k < in.rank; ++k)
      if (in[k] != 1 && in[k] != out[k + out.rank - in.rank])
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " of shape ", in.str(),
                         " does not broadcast to ", out.str()));
  }
  int64_t sizes[kFusedMaxRank];
  int64_t strides[kFusedMaxOperands][kMaxRank];
  int rank = detail::collapseBroadcast(out, inputs, count, sizes, strides);
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
