//===- collective.cpp - The expert-parallel steps -------------------------===//
//
// The steps that move tokens between the devices of a multi-device plan
// (docs/expert-parallelism.md, docs/plan-format.md):
//
//   AssignSlots                 expert choices -> global slots (replicas)
//   AllToAll, AllToAllStart/Wait  rows to the devices owning their slots
//   Regroup, Ungroup            source-major <-> slot-major received rows
//
// The exchanges go through the session's Communicator; every count that
// arrives from another device is checked against the planned buffers before
// any byte moves.
//
//===----------------------------------------------------------------------===//

#include "kernels/collective.h"

#include <vector>

namespace moert::detail {

int64_t rowBytesOf(const Tensor &t) {
  return t.shape.span(1, t.shape.rank) *
         static_cast<int64_t>(dtypeSize(t.dtype));
}

absl::Status checkExchangeGroup(const KernelContext &ctx,
                                const Communicator &comm, int64_t N) {
  if (comm.size() != N)
    return ctx.error("num_devices is ", N, " but the ", comm.backend(),
                     " device group has ", comm.size(), " devices");
  const Shape &sendShape = ctx.in(1).shape;
  if (sendShape != Shape{N})
    return ctx.error("send_counts have shape ", sendShape.str(), "; expected [",
                     N, "]");
  return absl::OkStatus();
}

absl::Status checkSendCounts(const KernelContext &ctx, const int64_t *send,
                             int64_t N, int64_t rows) {
  int64_t sent = 0;
  for (int64_t p = 0; p < N; ++p) {
    if (send[p] < 0 || send[p] > rows - sent)
      return ctx.error("send_counts[", p, "] = ", send[p], " after ", sent,
                       " rows for lower devices does not fit the ", rows,
                       " rows of data");
    sent += send[p];
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> receivedRows(const KernelContext &ctx,
                                     const int64_t *recv, int64_t N) {
  int64_t rows = ctx.has(2) ? ctx.in(2).shape[0] : ctx.plannedDim(0, 0);
  int64_t received = 0;
  for (int64_t p = 0; p < N; ++p) {
    if (recv[p] < 0 || recv[p] > rows - received)
      return ctx.error("device ", p, " sends ", recv[p], " rows after ",
                       received, " from lower devices; `received` holds ", rows,
                       " rows");
    received += recv[p];
  }
  return rows;
}

void planExchange(const int64_t *send, const int64_t *recv, int64_t N,
                  int64_t rowBytes, int rank, bool tokens, ExchangeSpec &spec,
                  CommStats &stats) {
  int64_t sendAt = 0, recvAt = 0;
  for (int64_t p = 0; p < N; ++p) {
    spec.sendBytes.push_back(send[p] * rowBytes);
    spec.sendOffsets.push_back(sendAt * rowBytes);
    spec.recvBytes.push_back(recv[p] * rowBytes);
    spec.recvOffsets.push_back(recvAt * rowBytes);
    sendAt += send[p];
    recvAt += recv[p];
    if (p == rank) {
      stats.rowsKept += tokens ? send[p] : 0;
      continue;
    }
    stats.rowsSent += tokens ? send[p] : 0;
    stats.rowsReceived += tokens ? recv[p] : 0;
    stats.bytesSent += send[p] * rowBytes;
    stats.bytesReceived += recv[p] * rowBytes;
  }
  ++stats.exchanges;
}

absl::Status checkRegroupCounts(const KernelContext &ctx, const Shape &counts,
                                int64_t N, int64_t S) {
  if (counts[0] < N * S)
    return ctx.error("slot_counts have shape ", counts.str(),
                     "; expected at least ", N * S, " entries (", N,
                     " sources x ", S, " slots)");
  return absl::OkStatus();
}

absl::Status checkUngroupPerm(const KernelContext &ctx, const Shape &perm,
                              int64_t R) {
  if (perm != Shape{R})
    return ctx.error("perm has shape ", perm.str(), "; expected [", R,
                     "] (a row of grouped_out)");
  return absl::OkStatus();
}

namespace {

//===----------------------------------------------------------------------===//
// AssignSlots
//===----------------------------------------------------------------------===//

absl::Status assignSlotsKernel(KernelContext &ctx) {
  const Tensor &indices = ctx.in(0);
  const auto *attrs = ctx.attrs<fb::SlotAttrs>();
  const auto &offsets = *attrs->expert_slot_offsets();
  const auto &slots = *attrs->expert_slots();
  int64_t E = static_cast<int64_t>(offsets.size()) - 1;
  int64_t T = indices.shape[0], k = indices.shape[1];
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, indices.shape));
  const int64_t *idx = indices.as<const int64_t>();
  int64_t *slot = out->as<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int64_t e = idx[t * k + j];
      if (e == -1) {
        slot[t * k + j] = -1;
        continue;
      }
      if (e < 0 || e >= E)
        return ctx.error("expert index ", e, " at [", t, ", ", j,
                         "] is out of range [-1, ", E, ")");
      int64_t first = offsets[e], count = offsets[e + 1] - first;
      slot[t * k + j] = slots[first + t % count];
    }
  }
  return absl::OkStatus();
}

absl::Status validateAssignSlots(const StepCheck &check) {
  MOERT_RETURN_IF_ERROR(check.inType(0, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(0, 2));
  MOERT_RETURN_IF_ERROR(check.outType(0, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outRank(0, 2));
  const auto *attrs = check.attrs<fb::SlotAttrs>();
  const auto *offsets = attrs->expert_slot_offsets();
  const auto *slots = attrs->expert_slots();
  if (!offsets || offsets->size() < 2 || !slots)
    return check.error("expert_slot_offsets needs at least two entries and "
                       "expert_slots must be present");
  if (offsets->Get(0) != 0)
    return check.error("expert_slot_offsets[0] is ", offsets->Get(0),
                       "; expected 0");
  for (size_t e = 0; e + 1 < offsets->size(); ++e)
    if (offsets->Get(e + 1) <= offsets->Get(e))
      return check.error("expert ", e, " has no slot: expert_slot_offsets[",
                         e + 1, "] = ", offsets->Get(e + 1),
                         " is not greater than expert_slot_offsets[", e,
                         "] = ", offsets->Get(e));
  int64_t last = offsets->Get(offsets->size() - 1);
  if (last != static_cast<int64_t>(slots->size()))
    return check.error("expert_slot_offsets ends at ", last, " but there are ",
                       slots->size(), " expert_slots");
  for (size_t i = 0; i < slots->size(); ++i)
    if (slots->Get(i) < 0)
      return check.error("expert_slots[", i, "] = ", slots->Get(i),
                         " is negative");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// AllToAll, AllToAllStart, AllToAllWait
//===----------------------------------------------------------------------===//

/// Exchanges the counts, sizes the outputs and begins the row exchange of an
/// AllToAll or AllToAllStart step.
absl::StatusOr<ExchangeId> beginExchange(KernelContext &ctx) {
  CollectiveState *state = ctx.collectives();
  if (!state || !state->comm)
    return ctx.error("needs a communicator: run the multi-device plan with "
                     "`moe-run --devices N` or under mpirun");
  Communicator &comm = *state->comm;
  int64_t N = ctx.attrs<fb::CollectiveAttrs>()->num_devices();
  const Tensor &data = ctx.in(0);
  MOERT_RETURN_IF_ERROR(checkExchangeGroup(ctx, comm, N));
  const int64_t *send = ctx.in(1).as<const int64_t>();
  MOERT_RETURN_IF_ERROR(checkSendCounts(ctx, send, N, data.shape[0]));
  std::vector<int64_t> recv(N);
  MOERT_RETURN_IF_ERROR(
      comm.exchangeCounts(send, recv.data(), ctx.step().label));
  MOERT_ASSIGN_OR_RETURN(int64_t rows, receivedRows(ctx, recv.data(), N));
  Shape shape = data.shape;
  shape[0] = rows;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, shape));
  MOERT_ASSIGN_OR_RETURN(Tensor * counts, ctx.allocate(1, Shape{N}));
  std::copy(recv.begin(), recv.end(), counts->as<int64_t>());

  ExchangeSpec spec;
  spec.send = data.data;
  spec.recv = out->data;
  // Rows of a matrix are tokens (the dispatch and combine exchanges); the
  // per-slot counts travel as the elements of a vector.
  planExchange(send, recv.data(), N, rowBytesOf(data), comm.rank(),
               data.shape.rank >= 2, spec, state->stats);
  return comm.start(std::move(spec), ctx.step().label);
}

absl::Status allToAllKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(ExchangeId id, beginExchange(ctx));
  return ctx.collectives()->comm->wait(id);
}

absl::Status allToAllStartKernel(KernelContext &ctx) {
  MOERT_ASSIGN_OR_RETURN(ExchangeId id, beginExchange(ctx));
  ctx.collectives()->inFlight[ctx.step().index] = id;
  return absl::OkStatus();
}

absl::Status allToAllWaitKernel(KernelContext &ctx) {
  CollectiveState *state = ctx.collectives();
  if (!state || !state->comm)
    return ctx.error("needs a communicator");
  return state->comm->wait(state->inFlight[ctx.step().pairedStep]);
}

absl::Status validateAllToAll(const StepCheck &check) {
  int64_t N = check.attrs<fb::CollectiveAttrs>()->num_devices();
  if (N < 1)
    return check.error("num_devices ", N, " must be positive");
  if (check.in(0).rank < 1)
    return check.error("data must have a leading row dimension");
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  if (check.has(2) && check.in(2).rank < 1)
    return check.error("rows_like must have a leading dimension");
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outRank(0, check.in(0).rank));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outRank(1, 1));
  for (int d = 1; d < check.in(0).rank; ++d)
    if (check.in(0).dims[d].kind == fb::DimKind::Static &&
        check.out(0).dims[d].kind == fb::DimKind::Static &&
        check.in(0).dims[d].bound != check.out(0).dims[d].bound)
      return check.error("received is declared ", declaredShape(check.out(0)),
                         " but data is ", declaredShape(check.in(0)),
                         "; the trailing dimensions must agree");
  return absl::OkStatus();
}

/// The pairing with the AllToAllStart is checked by the loader, which knows
/// the whole schedule (loader/schedule_validation.cpp).
absl::Status validateAllToAllWait(const StepCheck &) {
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Regroup, Ungroup
//===----------------------------------------------------------------------===//

/// Copies row perm[r] of `from` to row r of `to` (rows of `rowBytes`), and
/// zeroes the rows of `to` whose perm is -1.
void gatherRows(ThreadPool &pool, const uint8_t *from, uint8_t *to,
                const int64_t *perm, int64_t rows, int64_t rowBytes) {
  pool.parallelFor(rows, rowGrain(rowBytes / 4), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      if (perm[r] >= 0)
        std::memcpy(to + r * rowBytes, from + perm[r] * rowBytes, rowBytes);
      else
        std::memset(to + r * rowBytes, 0, rowBytes);
    }
  });
}

absl::Status regroupKernel(KernelContext &ctx) {
  const Tensor &received = ctx.in(0);
  const Tensor &countsIn = ctx.in(1);
  const auto *attrs = ctx.attrs<fb::RegroupAttrs>();
  int64_t N = attrs->num_sources(), S = attrs->num_slots();
  int64_t R = received.shape[0];
  MOERT_RETURN_IF_ERROR(checkRegroupCounts(ctx, countsIn.shape, N, S));
  const int64_t *counts = countsIn.as<const int64_t>();
  // Where each (source, slot) block starts among the received rows.
  std::vector<int64_t> start(N * S);
  int64_t total = 0;
  for (int64_t i = 0; i < N * S; ++i) {
    if (counts[i] < 0 || counts[i] > R - total)
      return ctx.error("slot_counts[", i, "] = ", counts[i], " after ", total,
                       " rows does not fit the ", R, " received rows");
    start[i] = total;
    total += counts[i];
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * grouped, ctx.allocate(0, received.shape));
  MOERT_ASSIGN_OR_RETURN(Tensor * offsetsOut, ctx.allocate(1, Shape{S + 1}));
  MOERT_ASSIGN_OR_RETURN(Tensor * permOut, ctx.allocate(2, Shape{R}));
  int64_t *offsets = offsetsOut->as<int64_t>();
  int64_t *perm = permOut->as<int64_t>();
  int64_t r = 0;
  for (int64_t j = 0; j < S; ++j) {
    offsets[j] = r;
    for (int64_t s = 0; s < N; ++s)
      for (int64_t i = 0; i < counts[s * S + j]; ++i)
        perm[r++] = start[s * S + j] + i;
  }
  offsets[S] = r;
  std::fill(perm + r, perm + R, -1);
  gatherRows(ctx.pool(), received.data, grouped->data, perm, R,
             rowBytesOf(received));
  return absl::OkStatus();
}

absl::Status validateRegroup(const StepCheck &check) {
  const auto *attrs = check.attrs<fb::RegroupAttrs>();
  int64_t N = attrs->num_sources(), S = attrs->num_slots();
  int64_t product;
  if (N < 1 || S < 1 || !checkedMul(N, S, product))
    return check.error("num_sources ", N, " and num_slots ", S,
                       " must be positive");
  if (check.in(0).rank < 1)
    return check.error("received must have a leading row dimension");
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  MOERT_RETURN_IF_ERROR(check.outRank(0, check.in(0).rank));
  MOERT_RETURN_IF_ERROR(check.outType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outType(2, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.outRank(2, 1));
  const DimInfo &offsets = check.out(1).dims[0];
  if (offsets.kind == fb::DimKind::Static && offsets.bound - 1 != S)
    return check.error("offsets are declared ", declaredShape(check.out(1)),
                       "; expected [", S + 1, "] (num_slots + 1)");
  return absl::OkStatus();
}

absl::Status ungroupKernel(KernelContext &ctx) {
  const Tensor &grouped = ctx.in(0);
  const Tensor &permIn = ctx.in(1);
  int64_t R = grouped.shape[0];
  MOERT_RETURN_IF_ERROR(checkUngroupPerm(ctx, permIn.shape, R));
  // The inverse permutation: out row -> grouped row.
  const int64_t *perm = permIn.as<const int64_t>();
  std::vector<int64_t> inverse(R, -1);
  for (int64_t r = 0; r < R; ++r) {
    int64_t p = perm[r];
    if (p == -1)
      continue;
    if (p < 0 || p >= R)
      return ctx.error("perm[", r, "] = ", p, " is out of range [-1, ", R, ")");
    if (inverse[p] >= 0)
      return ctx.error("perm[", r, "] repeats row ", p, " of perm[", inverse[p],
                       "]");
    inverse[p] = r;
  }
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, grouped.shape));
  gatherRows(ctx.pool(), grouped.data, out->data, inverse.data(), R,
             rowBytesOf(grouped));
  return absl::OkStatus();
}

absl::Status validateUngroup(const StepCheck &check) {
  if (check.in(0).rank < 1)
    return check.error("grouped_out must have a leading row dimension");
  MOERT_RETURN_IF_ERROR(check.inType(1, bit(DType::I64)));
  MOERT_RETURN_IF_ERROR(check.inRank(1, 1));
  MOERT_RETURN_IF_ERROR(check.outMatchesIn(0, 0));
  return check.outRank(0, check.in(0).rank);
}

} // namespace

void registerCollectiveOps(OpRegistry &r) {
  r.add(fb::OpKind::AssignSlots,
        makeOp("AssignSlots", 1, 1, validateAssignSlots, assignSlotsKernel,
               fb::Attrs::SlotAttrs));

  // data, send_counts, rows_like? -> received, recv_counts
  for (auto [kind, name, kernel] :
       {std::make_tuple(fb::OpKind::AllToAll, "AllToAll", &allToAllKernel),
        std::make_tuple(fb::OpKind::AllToAllStart, "AllToAllStart",
                        &allToAllStartKernel)})
    r.add(kind, makeOp(name, 2, 3, validateAllToAll, kernel,
                       fb::Attrs::CollectiveAttrs)
                    .withOptionalInputs(0b100)
                    .withOutputs(2));

  // The start's inputs, then its outputs -> nothing.
  r.add(fb::OpKind::AllToAllWait,
        makeOp("AllToAllWait", 4, 5, validateAllToAllWait, allToAllWaitKernel)
            .withOptionalInputs(0b100)
            .withOutputs(0));

  r.add(fb::OpKind::Regroup, makeOp("Regroup", 2, 2, validateRegroup,
                                    regroupKernel, fb::Attrs::RegroupAttrs)
                                 .withOutputs(3));

  r.add(fb::OpKind::Ungroup,
        makeOp("Ungroup", 2, 2, validateUngroup, ungroupKernel));
}

} // namespace moert::detail
