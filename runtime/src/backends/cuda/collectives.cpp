//===- collectives.cpp - The expert-parallel steps on the GPU -------------===//
//
// The host side of AssignSlots, Regroup and Ungroup on the GPU (kernels in
// collective_kernels.cu, per-thread logic in collective_logic.h), and of
// AllToAll / AllToAllStart / AllToAllWait over the NCCL communicator
// (moert/nccl.h) with the rows in device memory. The shape checks and the
// traffic counters are the CPU kernels' own (kernels/collective.h).
//
// The exchanges are the documented exception to "a device op never waits
// for the device": NCCL takes its byte counts from the host, so an exchange
// copies its N send counts back (a stream synchronisation) and exchanges the
// counts (the communicator's one synchronisation per exchange) before it
// enqueues the rows on the communication stream. The rows then move without
// the host: `wait` orders the compute stream after them.
//
// The session gives these ops the exchange steps only when its communicator
// is an NCCL one (session.cpp, planDeviceOps); with a host communicator the
// exchanges run on the host.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/collective_kernels.h"
#include "backends/cuda/device_op.h"
#include "kernels/collective.h"
#include "moert/nccl.h"

#include "absl/strings/str_cat.h"

#include <vector>

namespace moert::cuda {
namespace {

using detail::CollectiveState;
using detail::KernelContext;
using detail::rowBytesOf;
using detail::ScheduleInfo;
using detail::Shape;
using detail::StepInfo;
using detail::Tensor;

//===----------------------------------------------------------------------===//
// AssignSlots
//===----------------------------------------------------------------------===//

uint64_t assignSlotsScratch(const StepInfo &step, const ScheduleInfo &) {
  const auto *attrs = step.fb->attrs_as_SlotAttrs();
  if (!attrs || !attrs->expert_slot_offsets() || !attrs->expert_slots())
    return 0;
  return (attrs->expert_slot_offsets()->size() +
          attrs->expert_slots()->size()) *
         sizeof(int64_t);
}

absl::Status assignSlotsRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &indices = ctx.in(0);
  const auto *attrs = ctx.attrs<fb::SlotAttrs>();
  const auto &offsets = *attrs->expert_slot_offsets();
  const auto &slots = *attrs->expert_slots();
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, indices.shape).status());
  MOERT_ASSIGN_OR_RETURN(const void *in, step.input(0));
  // The attributes travel to the scratch on the stream, before the kernel.
  auto *table = static_cast<int64_t *>(step.scratch());
  MOERT_RETURN_IF_ERROR(step.check(
      cudaMemcpyAsync(table, offsets.data(), offsets.size() * sizeof(int64_t),
                      cudaMemcpyHostToDevice, step.stream()),
      "cudaMemcpyAsync"));
  MOERT_RETURN_IF_ERROR(
      step.check(cudaMemcpyAsync(table + offsets.size(), slots.data(),
                                 slots.size() * sizeof(int64_t),
                                 cudaMemcpyHostToDevice, step.stream()),
                 "cudaMemcpyAsync"));
  return step.check(
      launchAssignSlots(static_cast<const int64_t *>(in), indices.shape[0],
                        indices.shape[1], table, table + offsets.size(),
                        static_cast<int64_t>(offsets.size()) - 1,
                        static_cast<int64_t *>(step.output(0)), step.errors(),
                        step.step.index, step.stream()),
      "launchAssignSlots");
}

std::string assignSlotsError(const DeviceErrorRecord &record) {
  return absl::StrCat("expert index ", record.a, " at assignment ", record.b,
                      " is out of range");
}

//===----------------------------------------------------------------------===//
// Regroup, Ungroup
//===----------------------------------------------------------------------===//

uint64_t regroupScratch(const StepInfo &step, const ScheduleInfo &) {
  const auto *attrs = step.fb->attrs_as_RegroupAttrs();
  return attrs ? static_cast<uint64_t>(regroupScratchBytes(attrs->num_sources(),
                                                           attrs->num_slots()))
               : 0;
}

absl::Status regroupRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &received = ctx.in(0);
  const Tensor &countsIn = ctx.in(1);
  const auto *attrs = ctx.attrs<fb::RegroupAttrs>();
  int64_t N = attrs->num_sources(), S = attrs->num_slots();
  int64_t R = received.shape[0];
  MOERT_RETURN_IF_ERROR(detail::checkRegroupCounts(ctx, countsIn.shape, N, S));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, received.shape).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(1, Shape{S + 1}).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(2, Shape{R}).status());
  MOERT_ASSIGN_OR_RETURN(const void *rows, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *counts, step.input(1));
  return step.check(launchRegroup(rows, static_cast<const int64_t *>(counts), N,
                                  S, R, rowBytesOf(received), step.output(0),
                                  static_cast<int64_t *>(step.output(1)),
                                  static_cast<int64_t *>(step.output(2)),
                                  step.scratch(), step.errors(),
                                  step.step.index, step.stream()),
                    "launchRegroup");
}

std::string regroupError(const DeviceErrorRecord &record) {
  return absl::StrCat("slot_counts[", record.a, "] = ", record.b,
                      " does not fit the received rows");
}

uint64_t ungroupScratch(const StepInfo &step, const ScheduleInfo &schedule) {
  // One claim per row of `out`, at its planned bound: ctx.allocate holds
  // every run to it before the kernels launch.
  const detail::TensorInfo &out = schedule.tensors[step.outputs[0]];
  int64_t rows = out.rank > 0 ? out.dims[0].bound : 0;
  return static_cast<uint64_t>(ungroupScratchBytes(rows));
}

absl::Status ungroupRun(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  const Tensor &grouped = ctx.in(0);
  const Tensor &permIn = ctx.in(1);
  int64_t R = grouped.shape[0];
  MOERT_RETURN_IF_ERROR(detail::checkUngroupPerm(ctx, permIn.shape, R));
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, grouped.shape).status());
  MOERT_ASSIGN_OR_RETURN(const void *rows, step.input(0));
  MOERT_ASSIGN_OR_RETURN(const void *perm, step.input(1));
  return step.check(launchUngroup(rows, static_cast<const int64_t *>(perm), R,
                                  rowBytesOf(grouped), step.output(0),
                                  step.scratch(), step.errors(),
                                  step.step.index, step.stream()),
                    "launchUngroup");
}

std::string ungroupError(const DeviceErrorRecord &record) {
  if (record.code == kUngroupPermRepeats)
    return absl::StrCat("perm[", record.a, "] repeats row ", record.b);
  return absl::StrCat("perm[", record.a, "] = ", record.b, " is out of range");
}

//===----------------------------------------------------------------------===//
// AllToAll, AllToAllStart, AllToAllWait over NCCL
//===----------------------------------------------------------------------===//

/// The step's NCCL endpoint (the session gives these steps to the GPU only
/// with one).
absl::StatusOr<NcclCommunicator *> ncclOf(DeviceStep &step) {
  CollectiveState *state = step.ctx.collectives();
  if (!state || !state->comm ||
      std::string_view(state->comm->backend()) != "nccl")
    return step.ctx.error("runs on the GPU only with the NCCL communicator");
  auto *comm = static_cast<NcclCommunicator *>(state->comm);
  comm->setComputeStream(step.stream());
  return comm;
}

/// Checks the counts, exchanges them, sizes the outputs and begins the row
/// exchange of an AllToAll or AllToAllStart step (as the CPU kernel's
/// beginExchange, with device buffers).
absl::StatusOr<ExchangeId> beginDeviceExchange(DeviceStep &step) {
  KernelContext &ctx = step.ctx;
  MOERT_ASSIGN_OR_RETURN(NcclCommunicator * comm, ncclOf(step));
  int64_t N = ctx.attrs<fb::CollectiveAttrs>()->num_devices();
  const Tensor &data = ctx.in(0);
  MOERT_RETURN_IF_ERROR(detail::checkExchangeGroup(ctx, *comm, N));
  // NCCL needs the counts on the host: the only read of device data here.
  // The compute stream may wait for an earlier exchange on the GPU (a
  // stream-ordered wait); the communicator is drained against its deadline
  // first, so that a dead peer aborts it instead of hanging the copy below.
  MOERT_RETURN_IF_ERROR(comm->synchronize(ctx.step().label));
  std::vector<int64_t> send(N), recv(N);
  MOERT_ASSIGN_OR_RETURN(const void *sendCounts, step.input(1));
  MOERT_RETURN_IF_ERROR(
      step.check(cudaMemcpyAsync(send.data(), sendCounts, N * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, step.stream()),
                 "cudaMemcpyAsync"));
  MOERT_RETURN_IF_ERROR(step.check(cudaStreamSynchronize(step.stream()),
                                   "cudaStreamSynchronize"));
  MOERT_RETURN_IF_ERROR(
      detail::checkSendCounts(ctx, send.data(), N, data.shape[0]));
  MOERT_RETURN_IF_ERROR(
      comm->exchangeCounts(send.data(), recv.data(), ctx.step().label));
  MOERT_ASSIGN_OR_RETURN(int64_t rows,
                         detail::receivedRows(ctx, recv.data(), N));
  Shape shape = data.shape;
  shape[0] = rows;
  MOERT_RETURN_IF_ERROR(ctx.allocate(0, shape).status());
  MOERT_RETURN_IF_ERROR(ctx.allocate(1, Shape{N}).status());
  // recv_counts: pageable source, so the copy has read it when it returns.
  MOERT_RETURN_IF_ERROR(step.check(
      cudaMemcpyAsync(step.output(1), recv.data(), N * sizeof(int64_t),
                      cudaMemcpyHostToDevice, step.stream()),
      "cudaMemcpyAsync"));
  MOERT_ASSIGN_OR_RETURN(const void *rowsIn, step.input(0));

  ExchangeSpec spec;
  spec.send = rowsIn;
  spec.recv = step.output(0);
  detail::planExchange(send.data(), recv.data(), N, rowBytesOf(data),
                       comm->rank(), data.shape.rank >= 2, spec,
                       ctx.collectives()->stats);
  return comm->start(std::move(spec), ctx.step().label);
}

absl::Status allToAllRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(ExchangeId id, beginDeviceExchange(step));
  return step.ctx.collectives()->comm->wait(id);
}

absl::Status allToAllStartRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(ExchangeId id, beginDeviceExchange(step));
  step.ctx.collectives()->inFlight[step.step.index] = id;
  return absl::OkStatus();
}

absl::Status allToAllWaitRun(DeviceStep &step) {
  MOERT_ASSIGN_OR_RETURN(NcclCommunicator * comm, ncclOf(step));
  return comm->wait(step.ctx.collectives()->inFlight[step.step.pairedStep]);
}

const DeviceOp kAssignSlots{nullptr, assignSlotsRun, assignSlotsScratch,
                            assignSlotsError};
const DeviceOp kRegroup{nullptr, regroupRun, regroupScratch, regroupError};
const DeviceOp kUngroup{nullptr, ungroupRun, ungroupScratch, ungroupError};
const DeviceOp kAllToAll{nullptr, allToAllRun, nullptr, nullptr};
const DeviceOp kAllToAllStart{nullptr, allToAllStartRun, nullptr, nullptr};
const DeviceOp kAllToAllWait{nullptr, allToAllWaitRun, nullptr, nullptr};

} // namespace

const DeviceOp *collectiveDeviceOp(fb::OpKind op) {
  switch (op) {
  case fb::OpKind::AssignSlots:
    return &kAssignSlots;
  case fb::OpKind::Regroup:
    return &kRegroup;
  case fb::OpKind::Ungroup:
    return &kUngroup;
  case fb::OpKind::AllToAll:
    return &kAllToAll;
  case fb::OpKind::AllToAllStart:
    return &kAllToAllStart;
  case fb::OpKind::AllToAllWait:
    return &kAllToAllWait;
  default:
    return nullptr;
  }
}

} // namespace moert::cuda
