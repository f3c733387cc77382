//===- expert_prefetch.cpp - Pre-gating of tiered MoE layers --------------===//
//
// Prefetch of tiered plans (docs/tiered-experts.md): while layer L computes,
// the experts layer L+1 will need are read ahead. Which ones is predicted by
// running layer L+1's router on layer L's router input (pre-gating: the
// hidden state changes little from one layer to the next, and its residual
// part not at all). A prediction only chooses what to read; the real routing
// still decides what runs, and a mispredicted expert is read on demand, so
// outputs do not depend on it.
//
//===----------------------------------------------------------------------===//

#include "tiers/expert_store.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moert::detail {

const char *expertPrefetchName(ExpertPrefetch prefetch) {
  switch (prefetch) {
  case ExpertPrefetch::NextLayer:
    return "next-layer";
  case ExpertPrefetch::NextMicroBatch:
    return "next-micro-batch";
  case ExpertPrefetch::None:
    break;
  }
  return "none";
}

absl::StatusOr<ExpertPrefetch> parseExpertPrefetch(absl::string_view text,
                                                   ExpertPrefetch planDefault) {
  if (text.empty())
    return planDefault;
  for (ExpertPrefetch prefetch :
       {ExpertPrefetch::None, ExpertPrefetch::NextLayer,
        ExpertPrefetch::NextMicroBatch})
    if (text == expertPrefetchName(prefetch))
      return prefetch;
  return absl::InvalidArgumentError(
      absl::StrCat("the expert prefetch must be none, next-layer or "
                   "next-micro-batch, not '",
                   text, "'"));
}

namespace {

/// The step producing tensor `id`, or null.
const StepInfo *producer(const ScheduleInfo &schedule, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= schedule.tensors.size())
    return nullptr;
  int32_t step = schedule.tensors[id].producer;
  return step >= 0 ? &schedule.steps[step] : nullptr;
}

/// A resident f32 weight of static shape, or null.
const TensorInfo *residentWeight(const ScheduleInfo &schedule, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= schedule.tensors.size())
    return nullptr;
  const TensorInfo &t = schedule.tensors[id];
  if (!t.isWeight || t.paged || !t.weightData || t.dtype != DType::F32)
    return nullptr;
  for (int d = 0; d < t.rank; ++d)
    if (t.dims[d].kind != fb::DimKind::Static)
      return nullptr;
  return &t;
}

/// The gate of the Experts step `experts`: Experts <- offsets of Dispatch
/// <- indices of Router <- logits of MatMul(tokens, W [H, E]), with the
/// Dispatch reading the same tokens.
GateInfo findGate(const ScheduleInfo &schedule, const StepInfo &experts) {
  GateInfo gate;
  if (experts.inputs.size() < 2)
    return gate;
  const StepInfo *dispatch = producer(schedule, experts.inputs[1]);
  if (!dispatch || dispatch->op != fb::OpKind::Dispatch ||
      dispatch->inputs.size() < 2)
    return gate;
  const StepInfo *router = producer(schedule, dispatch->inputs[1]);
  if (!router || router->op != fb::OpKind::Router || router->inputs.empty())
    return gate;
  const StepInfo *matmul = producer(schedule, router->inputs[0]);
  if (!matmul || matmul->inputs.size() < 2 ||
      matmul->inputs[0] != dispatch->inputs[0])
    return gate;
  if (matmul->op == fb::OpKind::Gemm) {
    // Y = alpha A B' + beta C, A the tokens [T, H] (not transposed).
    const auto *gemm = matmul->fb->attrs_as<fb::GemmAttrs>();
    if (!gemm || gemm->trans_a())
      return gate;
    gate.transposed = gemm->trans_b();
    gate.alpha = gemm->alpha();
    gate.beta = gemm->beta();
    if (matmul->inputs.size() > 2 && matmul->inputs[2] >= 0) {
      const TensorInfo *c = residentWeight(schedule, matmul->inputs[2]);
      if (!c || c->rank > 1)
        return GateInfo();
      gate.addend = reinterpret_cast<const float *>(c->weightData);
      gate.addendSize = static_cast<int64_t>(c->size / 4);
    }
  } else if (matmul->op != fb::OpKind::MatMul || matmul->inputs.size() != 2) {
    return gate;
  }
  const TensorInfo *w = residentWeight(schedule, matmul->inputs[1]);
  const TensorInfo &x = schedule.tensors[matmul->inputs[0]];
  const auto *attrs = router->fb->attrs_as<fb::RouterAttrs>();
  if (!w || w->rank != 2 || x.dtype != DType::F32 || x.rank < 2 || !attrs)
    return GateInfo();
  int64_t hidden = w->dims[gate.transposed ? 1 : 0].bound,
          E = w->dims[gate.transposed ? 0 : 1].bound;
  if (gate.addend && gate.addendSize != 1 && gate.addendSize != E)
    return GateInfo();
  if (x.dims[x.rank - 1].kind != fb::DimKind::Static ||
      x.dims[x.rank - 1].bound != hidden || attrs->top_k() < 1 ||
      attrs->top_k() > E)
    return GateInfo();
  if (router->inputs.size() > 1 && router->inputs[1] >= 0) {
    const TensorInfo *bias = residentWeight(schedule, router->inputs[1]);
    if (!bias || static_cast<int64_t>(bias->size) != E * 4)
      return GateInfo();
    gate.bias = reinterpret_cast<const float *>(bias->weightData);
  }
  gate.tokens = matmul->inputs[0];
  gate.weight = reinterpret_cast<const float *>(w->weightData);
  gate.hidden = hidden;
  gate.experts = E;
  gate.router = router->index;
  gate.topK = attrs->top_k();
  gate.sigmoid = attrs->score_function() == fb::ScoreFunction::Sigmoid;
  return gate;
}

} // namespace

std::vector<GateInfo> findGates(const ScheduleInfo &schedule) {
  std::vector<GateInfo> gates;
  for (const TierLayerInfo &layer : schedule.tiers.layers) {
    GateInfo gate = findGate(schedule, schedule.steps[layer.step]);
    if (gate.experts != layer.experts)
      gate = GateInfo();
    gates.push_back(gate);
  }
  return gates;
}

std::vector<int32_t> pregatingTargets(const ScheduleInfo &schedule,
                                      const std::vector<GateInfo> &gates) {
  // Each tiered layer whose router can be evaluated on the previous tiered
  // layer's tokens (the same hidden size) is read ahead for by that layer.
  const TierInfo &tiers = schedule.tiers;
  std::vector<int32_t> next(tiers.layers.size(), -1);
  std::vector<uint32_t> order(tiers.layers.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return tiers.layers[a].step < tiers.layers[b].step;
  });
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    const GateInfo &from = gates[order[i]], &to = gates[order[i + 1]];
    if (from.router >= 0 && to.router >= 0 && from.hidden == to.hidden)
      next[order[i]] = static_cast<int32_t>(order[i + 1]);
  }
  return next;
}

std::vector<uint32_t> predictExperts(const GateInfo &gate, const float *x,
                                     int64_t tokens, int64_t maxTokens,
                                     ThreadPool &pool) {
  const int64_t H = gate.hidden, E = gate.experts, k = gate.topK;
  int64_t used = std::min(tokens, std::max<int64_t>(1, maxTokens));
  std::vector<int64_t> chosen(used * k);
  pool.parallelFor(used, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> logits(E), order(E);
    std::vector<int64_t> ids(E);
    for (int64_t i = begin; i < end; ++i) {
      const float *row = x + (i * tokens / used) * H;
      std::fill(logits.begin(), logits.end(), 0.0f);
      if (gate.transposed) {
        for (int64_t e = 0; e < E; ++e) {
          const float *w = gate.weight + e * H;
          float sum = 0;
          for (int64_t h = 0; h < H; ++h)
            sum += row[h] * w[h];
          logits[e] = sum;
        }
      } else {
        for (int64_t h = 0; h < H; ++h) {
          float v = row[h];
          const float *w = gate.weight + h * E;
          for (int64_t e = 0; e < E; ++e)
            logits[e] += v * w[e];
        }
      }
      for (int64_t e = 0; e < E; ++e) {
        logits[e] *= gate.alpha;
        if (gate.addend)
          logits[e] += gate.beta * gate.addend[gate.addendSize == 1 ? 0 : e];
      }
      // Softmax and sigmoid keep the logits' order; a selection bias is
      // added to the scores themselves.
      if (gate.bias) {
        float max = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) {
          logits[e] = gate.sigmoid ? 1.0f / (1.0f + std::exp(-logits[e]))
                                   : std::exp(logits[e] - max);
          sum += logits[e];
        }
        for (int64_t e = 0; e < E; ++e)
          logits[e] = (gate.sigmoid ? logits[e] : float(logits[e] / sum)) +
                      gate.bias[e];
      }
      for (float &value : logits)
        if (std::isnan(value))
          value = -INFINITY;
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(
          ids.begin(), ids.begin() + k, ids.end(), [&](int64_t a, int64_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
          });
      std::copy(ids.begin(), ids.begin() + k, chosen.begin() + i * k);
    }
  });
  std::vector<int64_t> count(E, 0);
  for (int64_t e : chosen)
    ++count[e];
  std::vector<uint32_t> experts;
  for (int64_t e = 0; e < E; ++e)
    if (count[e])
      experts.push_back(static_cast<uint32_t>(e));
  std::stable_sort(experts.begin(), experts.end(),
                   [&](uint32_t a, uint32_t b) { return count[a] > count[b]; });
  return experts;
}

void ExpertStore::issuePrefetch() {
  issueAfter_ = -1;
  if (predictedLayer_ < 0)
    return;
  uint32_t layer = static_cast<uint32_t>(predictedLayer_);
  predictedLayer_ = -1;
  bool queued = false;
  for (uint32_t e : predicted_) {
    if (cache_.peek({layer, e}))
      continue;
    bool allocFailed = false;
    ExpertCache::Entry *entry = insertEntry({layer, e}, allocFailed);
    // The rest are read on demand: reads ahead never wait for room.
    if (!entry)
      break;
    cache_.lock(entry);
    entry->state = ExpertCache::Entry::State::Queued;
    entry->prefetched = true;
    static_cast<Payload *>(entry->payload)->ahead = true;
    queue_.push_back({{layer, e}, view_});
    ++views_[view_].paging[layer].prefetch.issued;
    queued = true;
  }
  predicted_.clear();
  if (queued)
    changed_.notify_all();
}

void ExpertStore::dropQueued(uint32_t layer,
                             const std::vector<uint32_t> &keep) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    ExpertCache::Entry *entry = cache_.peek(it->key);
    if (entry && entry->state == ExpertCache::Entry::State::Queued &&
        (it->key.layer != layer ||
         std::find(keep.begin(), keep.end(), it->key.expert) == keep.end())) {
      release(static_cast<Payload *>(cache_.erase(entry)));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void ExpertStore::cancelPrefetch() {
  std::unique_lock<std::mutex> lock(mutex_);
  predictedLayer_ = issueAfter_ = -1;
  abandonAwaiting(lock);
  for (const QueuedRead &read : queue_)
    if (ExpertCache::Entry *entry = cache_.peek(read.key);
        entry && entry->state == ExpertCache::Entry::State::Queued)
      release(static_cast<Payload *>(cache_.erase(entry)));
  queue_.clear();
  changed_.wait(lock, [&] { return loading_ == 0; });
}

uint32_t ExpertStore::planPrefetch(View &view, ExpertPrefetch prefetch) {
  const ScheduleInfo &schedule = *view.schedule;
  const TierInfo &tiers = schedule.tiers;
  if (prefetch == ExpertPrefetch::NextMicroBatch) {
    // Each micro-batch's Experts step of a layer reads ahead for the next
    // one when the next one's offsets are computed before it runs.
    view.nextRows.assign(schedule.steps.size(), {});
    uint32_t layers = 0;
    auto before = [&](int32_t tensor, int32_t step) {
      return tensor >= 0 && schedule.tensors[tensor].dtype == DType::I64 &&
             schedule.tensors[tensor].producer < step;
    };
    for (const TierLayerInfo &layer : tiers.layers) {
      bool any = false;
      std::vector<int32_t> steps = layer.moreSteps;
      steps.push_back(layer.step);
      std::sort(steps.begin(), steps.end());
      for (size_t i = 0; i + 1 < steps.size(); ++i) {
        const StepInfo &next = schedule.steps[steps[i + 1]];
        int32_t offsets = next.inputs.size() > 1 ? next.inputs[1] : -1;
        View::RoutedRows rows;
        if (before(offsets, steps[i])) {
          rows.tensor = offsets;
        } else if (offsets >= 0 && schedule.tensors[offsets].producer >= 0) {
          // Offsets regrouped after this step, from counts known before.
          const StepInfo &regroup =
              schedule.steps[schedule.tensors[offsets].producer];
          const auto *attrs = regroup.fb->attrs_as<fb::RegroupAttrs>();
          if (regroup.op == fb::OpKind::Regroup && attrs &&
              regroup.outputs.size() > 1 && regroup.outputs[1] == offsets &&
              regroup.inputs.size() > 1 &&
              before(regroup.inputs[1], steps[i]) &&
              attrs->num_slots() == layer.experts && attrs->num_sources() > 0) {
            rows.tensor = regroup.inputs[1];
            rows.sources = attrs->num_sources();
          }
        }
        if (rows.tensor < 0)
          continue;
        view.nextRows[steps[i]] = rows;
        any = true;
      }
      layers += any;
    }
    return layers;
  }
  if (prefetch != ExpertPrefetch::NextLayer)
    return 0;
  view.gates = findGates(schedule);
  view.routerLayer.assign(schedule.steps.size(), -1);
  view.nextLayer = pregatingTargets(schedule, view.gates);
  uint32_t ahead = 0;
  for (size_t l = 0; l < tiers.layers.size(); ++l)
    if (view.nextLayer[l] >= 0) {
      view.routerLayer[view.gates[l].router] = static_cast<int32_t>(l);
      ++ahead;
    }
  return ahead;
}

uint32_t ExpertStore::layersReadAhead(const ScheduleInfo &schedule,
                                      ExpertPrefetch prefetch) {
  View view;
  view.schedule = &schedule;
  return planPrefetch(view, prefetch);
}

} // namespace moert::detail
