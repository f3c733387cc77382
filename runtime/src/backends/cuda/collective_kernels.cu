//===- collective_kernels.cu - AssignSlots, Regroup, Ungroup kernels ------===//
//
// Thread-index mapping around collective_logic.h: one thread per assignment
// (AssignSlots), per grouped row (Regroup's perm, Ungroup's claims), and per
// 4-byte word or byte of a row (the row copies). Rows are copied by words
// when their size and both buffers allow it.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/collective_kernels.h"

#include <cstdint>

namespace moert::cuda {
namespace {

constexpr int kBlock = 256;

unsigned blocksFor(int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  // A grid-stride loop covers the rest.
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1)
                                              : 65535);
}

__global__ void assignSlotsKernel(const int64_t *indices, int64_t T, int64_t k,
                                  const int64_t *offsets,
                                  const int64_t *slotList, int64_t experts,
                                  int64_t *slots, DeviceErrorRecord *errors,
                                  int step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * k;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t e = indices[i];
    if (!assignSlot(e, i / k, offsets, slotList, experts, &slots[i])) {
      slots[i] = -1;
      recordDeviceError(errors, kSlotExpertOutOfRange, step, e, i);
    }
  }
}

__global__ void regroupLayoutKernel(const int64_t *counts, int64_t N, int64_t S,
                                    int64_t R, int64_t *start, int64_t *offsets,
                                    DeviceErrorRecord *errors, int step) {
  int64_t bad = regroupLayout(counts, N, S, R, start, offsets);
  if (bad >= 0)
    recordDeviceError(errors, kRegroupCountDoesNotFit, step, bad, counts[bad]);
}

__global__ void regroupPermKernel(const int64_t *counts, const int64_t *start,
                                  const int64_t *offsets, int64_t N, int64_t S,
                                  int64_t R, int64_t *perm) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < R;
       r += int64_t(gridDim.x) * blockDim.x)
    perm[r] = regroupSource(r, counts, start, offsets, N, S);
}

/// to[r] = from[index[r]] (zero where index[r] < 0), in units of Word.
template <typename Word>
__global__ void gatherRowsKernel(const Word *from, const int64_t *index,
                                 int64_t R, int64_t rowWords, Word *to) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < R * rowWords; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / rowWords, w = i % rowWords;
    int64_t p = index[r];
    to[i] = p >= 0 ? from[p * rowWords + w] : Word(0);
  }
}

/// Claims out row perm[r] for grouped row r; a second claim is a repeat.
__global__ void ungroupClaimKernel(const int64_t *perm, int64_t R,
                                   unsigned long long *claim,
                                   DeviceErrorRecord *errors, int step) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < R;
       r += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = perm[r];
    if (int code = ungroupCheck(p, R)) {
      recordDeviceError(errors, code, step, r, p);
      continue;
    }
    if (p < 0)
      continue;
    unsigned long long mine = static_cast<unsigned long long>(r);
    unsigned long long none = ~0ull;
    if (atomicCAS(&claim[p], none, mine) != none)
      recordDeviceError(errors, kUngroupPermRepeats, step, r, p);
  }
}

/// out[p] = grouped[r] for the row r that claimed p; zero when none did.
template <typename Word>
__global__ void ungroupRowsKernel(const Word *grouped,
                                  const unsigned long long *claim, int64_t R,
                                  int64_t rowWords, Word *out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < R * rowWords; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = i / rowWords, w = i % rowWords;
    unsigned long long r = claim[p];
    out[i] = r != ~0ull ? grouped[int64_t(r) * rowWords + w] : Word(0);
  }
}

bool wordAligned(const void *a, const void *b, int64_t rowBytes) {
  return rowBytes % 4 == 0 && reinterpret_cast<uintptr_t>(a) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(b) % 4 == 0;
}

} // namespace

cudaError_t launchAssignSlots(const int64_t *indices, int64_t T, int64_t k,
                              const int64_t *offsets, const int64_t *slotList,
                              int64_t experts, int64_t *slots,
                              DeviceErrorRecord *errors, int step,
                              cudaStream_t stream) {
  if (T * k == 0)
    return cudaSuccess;
  assignSlotsKernel<<<blocksFor(T * k), kBlock, 0, stream>>>(
      indices, T, k, offsets, slotList, experts, slots, errors, step);
  return cudaGetLastError();
}

cudaError_t launchRegroup(const void *received, const int64_t *counts,
                          int64_t N, int64_t S, int64_t R, int64_t rowBytes,
                          void *grouped, int64_t *offsets, int64_t *perm,
                          void *scratch, DeviceErrorRecord *errors, int step,
                          cudaStream_t stream) {
  auto *start = static_cast<int64_t *>(scratch);
  regroupLayoutKernel<<<1, 1, 0, stream>>>(counts, N, S, R, start, offsets,
                                           errors, step);
  if (cudaError_t error = cudaGetLastError())
    return error;
  if (R == 0)
    return cudaSuccess;
  regroupPermKernel<<<blocksFor(R), kBlock, 0, stream>>>(counts, start, offsets,
                                                         N, S, R, perm);
  if (cudaError_t error = cudaGetLastError())
    return error;
  if (rowBytes == 0)
    return cudaSuccess;
  if (wordAligned(received, grouped, rowBytes)) {
    int64_t words = rowBytes / 4;
    gatherRowsKernel<<<blocksFor(R * words), kBlock, 0, stream>>>(
        static_cast<const uint32_t *>(received), perm, R, words,
        static_cast<uint32_t *>(grouped));
  } else {
    gatherRowsKernel<<<blocksFor(R * rowBytes), kBlock, 0, stream>>>(
        static_cast<const uint8_t *>(received), perm, R, rowBytes,
        static_cast<uint8_t *>(grouped));
  }
  return cudaGetLastError();
}

cudaError_t launchUngroup(const void *grouped, const int64_t *perm, int64_t R,
                          int64_t rowBytes, void *out, void *scratch,
                          DeviceErrorRecord *errors, int step,
                          cudaStream_t stream) {
  if (R == 0)
    return cudaSuccess;
  auto *claim = static_cast<unsigned long long *>(scratch);
  // All ones: no grouped row claimed the out row yet.
  if (cudaError_t error =
          cudaMemsetAsync(claim, 0xff, R * sizeof(unsigned long long), stream))
    return error;
  ungroupClaimKernel<<<blocksFor(R), kBlock, 0, stream>>>(perm, R, claim,
                                                          errors, step);
  if (cudaError_t error = cudaGetLastError())
    return error;
  if (rowBytes == 0)
    return cudaSuccess;
  if (wordAligned(grouped, out, rowBytes)) {
    int64_t words = rowBytes / 4;
    ungroupRowsKernel<<<blocksFor(R * words), kBlock, 0, stream>>>(
        static_cast<const uint32_t *>(grouped), claim, R, words,
        static_cast<uint32_t *>(out));
  } else {
    ungroupRowsKernel<<<blocksFor(R * rowBytes), kBlock, 0, stream>>>(
        static_cast<const uint8_t *>(grouped), claim, R, rowBytes,
        static_cast<uint8_t *>(out));
  }
  return cudaGetLastError();
}

} // namespace moert::cuda
