//===- collective.h - Checks shared by the expert-parallel steps *- C++ -*-===//
//
// The run-time checks and the exchange bookkeeping of AllToAll, Regroup and
// Ungroup that the CPU kernels (collective.cpp) and their GPU versions
// (cuda/collectives.cpp) share, so that both backends reject the same data
// with the same message and count the same traffic. Defined in
// collective.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_KERNELS_COLLECTIVE_H
#define MOERT_SRC_KERNELS_COLLECTIVE_H

#include "kernels/common.h"

namespace moert::detail {

/// Bytes of one row of `t`, whose dimension 0 is its rows.
int64_t rowBytesOf(const Tensor &t);

/// An exchange step's group against its attribute: `comm` has num_devices
/// `N` devices and send_counts (input 1) has shape [N].
absl::Status checkExchangeGroup(const KernelContext &ctx,
                                const Communicator &comm, int64_t N);

/// The `N` send counts (on the host) partition at most the `rows` rows of
/// data, in device order.
absl::Status checkSendCounts(const KernelContext &ctx, const int64_t *send,
                             int64_t N, int64_t rows);

/// The rows an exchange step receives into: as many as `rows_like` (input 2)
/// has, else the planned size of `received` (a device with few local rows
/// may still receive many). Fails unless the `N` received counts (on the
/// host) fit them, in device order.
absl::StatusOr<int64_t> receivedRows(const KernelContext &ctx,
                                     const int64_t *recv, int64_t N);

/// Fills the byte counts and offsets of `spec` (send and recv stay as they
/// are) for rows of `rowBytes` bytes and adds the exchange to `stats`: rows
/// a device keeps for itself (`rank`) are not traffic, and only the rows of
/// a matrix (`tokens`) count as tokens.
void planExchange(const int64_t *send, const int64_t *recv, int64_t N,
                  int64_t rowBytes, int rank, bool tokens, ExchangeSpec &spec,
                  CommStats &stats);

/// Regroup's slot_counts (`counts`) hold at least `N` x `S` entries: an
/// all-to-all's `received` may be longer, sized for any sender.
absl::Status checkRegroupCounts(const KernelContext &ctx, const Shape &counts,
                                int64_t N, int64_t S);

/// Ungroup's perm has shape [R], a row of grouped_out's `R` rows.
absl::Status checkUngroupPerm(const KernelContext &ctx, const Shape &perm,
                              int64_t R);

} // namespace moert::detail

#endif // MOERT_SRC_KERNELS_COLLECTIVE_H
