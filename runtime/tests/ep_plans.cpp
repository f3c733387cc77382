//===- ep_plans.cpp - Expert-parallel test plans --------------------------===//

#include "ep_plans.h"

#include <cmath>
#include <numeric>

namespace moert::testing {
namespace {

using fb::OpKind;

constexpr int64_t kE = kLayerExperts, kK = kLayerTopK, kH = kLayerHidden,
                  kF = kLayerInter, kMaxT = kLayerMaxTokens;

/// Fixed values in (-1, 1) that differ per element and per `seed`.
std::vector<float> values(size_t count, int seed) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = std::sin(1.7f * static_cast<float>(i) + 3.1f * seed);
  return out;
}

/// The layer's weights: gate [H, E], w1 [E, H, F], w2 [E, F, H].
struct Weights {
  std::vector<float> gate = values(kH * kE, 1);
  std::vector<float> w1 = values(kE * kH * kF, 2);
  std::vector<float> w2 = values(kE * kF * kH, 3);
};

fb::AttrsUnion ffnAttrs() {
  fb::FfnAttrsT a;
  a.activation = fb::Activation::Silu;
  return attrs(a);
}

fb::AttrsUnion routerAttrs() {
  fb::RouterAttrsT a;
  a.top_k = kK;
  a.normalize = true;
  return attrs(a);
}

fb::AttrsUnion axis0() { return attrs(fb::AxisAttrsT()); }

} // namespace

absl::StatusOr<std::vector<uint8_t>>
writeMoeLayerPlan(const Placement *placement, bool overlap) {
  Weights w;
  int N = placement ? static_cast<int>(placement->slotBegin.size()) - 1 : 1;
  PlanWriter writer({Backend::Cpu, static_cast<uint32_t>(N), 0});
  int T = writer.addSymbol("T", 1, kMaxT);
  int64_t S = placement ? placement->slotExpert.size() : kE;
  int32_t gate0 = -1;
  for (int d = 0; d < N; ++d) {
    ScheduleBuilder &s = writer.schedule(d);
    auto tensor = [&](const std::string &name, DType dtype,
                      std::vector<PlanDim> dims) {
      return s.addTensor(name, dtype, std::move(dims));
    };
    auto rowsDim = PlanDim::dynamic(kMaxT * kK);
    int32_t x = tensor("x", DType::F32, {PlanDim::symbol(T), kH});
    s.addInput(x);
    int32_t gate = d == 0 ? s.addWeight("gate", DType::F32, {kH, kE},
                                        w.gate.data(), w.gate.size() * 4)
                          : s.addSharedWeight("gate", 0, gate0);
    if (d == 0)
      gate0 = gate;
    int32_t logits = tensor("logits", DType::F32, {PlanDim::symbol(T), kE});
    int32_t weights = tensor("weights", DType::F32, {PlanDim::symbol(T), kK});
    int32_t idx = tensor("idx", DType::I64, {PlanDim::symbol(T), kK});
    s.addStep(OpKind::MatMul, "gate", {x, gate}, {logits});
    s.addStep(OpKind::Router, "router", {logits}, {weights, idx},
              routerAttrs());
    int32_t chosen = idx;
    if (placement) {
      std::vector<int64_t> offsets(kE + 1, 0), slots;
      for (int64_t e = 0; e < kE; ++e) {
        for (int64_t slot = 0; slot < S; ++slot)
          if (placement->slotExpert[slot] == e)
            slots.push_back(slot);
        offsets[e + 1] = static_cast<int64_t>(slots.size());
      }
      chosen = tensor("slots", DType::I64, {PlanDim::symbol(T), kK});
      s.addStep(OpKind::AssignSlots, "assign", {idx}, {chosen},
                slotAttrs(offsets, slots));
    }
    fb::DispatchAttrsT dispatch;
    dispatch.num_experts = S;
    int32_t rows = tensor("rows", DType::F32, {rowsDim, kH});
    int32_t off = tensor("off", DType::I64, {S + 1});
    int32_t src = tensor("src", DType::I64, {rowsDim});
    s.addStep(OpKind::Dispatch, "dispatch", {x, chosen}, {rows, off, src},
              attrs(dispatch));
    // The experts this device holds, stacked.
    int64_t first = placement ? placement->slotBegin[d] : 0;
    int64_t local = placement ? placement->slotBegin[d + 1] - first : kE;
    std::vector<float> w1, w2;
    for (int64_t j = 0; j < local; ++j) {
      int64_t e = placement ? placement->slotExpert[first + j] : j;
      w1.insert(w1.end(), w.w1.begin() + e * kH * kF,
                w.w1.begin() + (e + 1) * kH * kF);
      w2.insert(w2.end(), w.w2.begin() + e * kF * kH,
                w.w2.begin() + (e + 1) * kF * kH);
    }
    int32_t w1t = s.addWeight("w1", DType::F32, {local, kH, kF}, w1.data(),
                              w1.size() * 4);
    int32_t w2t = s.addWeight("w2", DType::F32, {local, kF, kH}, w2.data(),
                              w2.size() * 4);
    int32_t expertRows = rows, expertOffsets = off;
    int32_t received = -1, perm = -1, recvCounts = -1;
    if (placement) {
      // send[p] = off[slotBegin[p + 1]] - off[slotBegin[p]]; slot counts.
      auto gather = [&](const std::string &name, std::vector<int64_t> at) {
        int64_t n = static_cast<int64_t>(at.size());
        int32_t index =
            s.addWeight(name + ".idx", DType::I64, {n}, at.data(), n * 8);
        int32_t out = tensor(name, DType::I64, {n});
        s.addStep(OpKind::Gather, name, {off, index}, {out}, axis0());
        return out;
      };
      auto sub = [&](const std::string &name, int32_t a, int32_t b, int64_t n) {
        int32_t out = tensor(name, DType::I64, {n});
        s.addStep(OpKind::Sub, name, {a, b}, {out});
        return out;
      };
      const std::vector<int64_t> &begin = placement->slotBegin;
      std::vector<int64_t> hi(begin.begin() + 1, begin.end()),
          lo(begin.begin(), begin.end() - 1), next(S), prev(S), perDevice(N);
      std::iota(next.begin(), next.end(), 1);
      std::iota(prev.begin(), prev.end(), 0);
      for (int p = 0; p < N; ++p)
        perDevice[p] = begin[p + 1] - begin[p];
      int32_t upper = gather("hi", hi);
      int32_t lower = gather("lo", lo);
      int32_t send = sub("send", upper, lower, N);
      int32_t nextOff = gather("next", next);
      int32_t prevOff = gather("prev", prev);
      int32_t slotCounts = sub("slot_cnt", nextOff, prevOff, S);
      int32_t sizes =
          s.addWeight("sizes", DType::I64, {N}, perDevice.data(), N * 8);
      int32_t countsIn = tensor("cnt_recv", DType::I64, {N * S});
      int32_t countsFrom = tensor("cnt_from", DType::I64, {N});
      s.addStep(OpKind::AllToAll, "a2a_counts", {slotCounts, sizes},
                {countsIn, countsFrom}, collectiveAttrs(N));
      received =
          tensor("recv", DType::F32, {PlanDim::dynamic(N * kMaxT * kK), kH});
      recvCounts = tensor("rcnt", DType::I64, {N});
      if (overlap) {
        s.addStep(OpKind::AllToAllStart, "a2a_start", {rows, send},
                  {received, recvCounts}, collectiveAttrs(N));
        // Work that does not touch the exchange runs meanwhile.
        int32_t scaled =
            tensor("logits2", DType::F32, {PlanDim::symbol(T), kE});
        s.addStep(OpKind::Add, "busy", {logits, logits}, {scaled});
        s.addStep(OpKind::AllToAllWait, "a2a_wait",
                  {rows, send, received, recvCounts}, {});
      } else {
        s.addStep(OpKind::AllToAll, "a2a_dispatch", {rows, send},
                  {received, recvCounts}, collectiveAttrs(N));
      }
      expertRows =
          tensor("grouped", DType::F32, {PlanDim::dynamic(N * kMaxT * kK), kH});
      expertOffsets = tensor("loff", DType::I64, {local + 1});
      perm = tensor("perm", DType::I64, {PlanDim::dynamic(N * kMaxT * kK)});
      s.addStep(OpKind::Regroup, "regroup", {received, countsIn},
                {expertRows, expertOffsets, perm}, regroupAttrs(N, local));
    }
    int32_t y = tensor("y", DType::F32, {PlanDim::dynamic(N * kMaxT * kK), kH});
    s.addStep(OpKind::Experts, "experts",
              {expertRows, expertOffsets, w1t, -1, -1, -1, w2t, -1}, {y},
              ffnAttrs());
    int32_t expertOut = y;
    if (placement) {
      int32_t back =
          tensor("back", DType::F32, {PlanDim::dynamic(N * kMaxT * kK), kH});
      s.addStep(OpKind::Ungroup, "ungroup", {y, perm}, {back});
      expertOut = tensor("out_rows", DType::F32, {rowsDim, kH});
      int32_t unused = tensor("out_counts", DType::I64, {N});
      s.addStep(OpKind::AllToAll, "a2a_combine", {back, recvCounts, rows},
                {expertOut, unused}, collectiveAttrs(N));
    }
    int32_t out = tensor("out", DType::F32, {PlanDim::symbol(T), kH});
    s.addStep(OpKind::Combine, "combine", {expertOut, src, weights}, {out});
    s.addOutput(out);
  }
  return writer.serialize();
}

} // namespace moert::testing
