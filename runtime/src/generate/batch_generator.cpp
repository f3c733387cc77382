//===- batch_generator.cpp - Continuous batching over a generation plan ---===//
//
// The batched step runs the plan's prefill schedule (tokens along axis 1 of
// [1, n], positions from position_ids) over the rows of every active
// sequence, with its Attention steps replaced by the KV pool's attention
// (generate/kv_pool.h), and its CausalConv and GatedDeltaRule steps run per
// sequence from that sequence's slot of a state pool: what the compiler's
// verdict allows (the only steps that mix rows are the attention steps and
// the caches they read, and the recurrences from a zero state, whose new
// state is a state pair's start). Every other step runs its own kernel on
// all rows at once.
//
//===----------------------------------------------------------------------===//

#include "moert/batch_generator.h"

#include "exec/session_state.h"
#include "generate/generation_loop.h"
#include "generate/kv_pool.h"
#include "kernels/recurrent_state.h"
#include "loader/generation_plan.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>

namespace moert {

using detail::KernelContext;
using detail::KvPool;
using detail::PoolRow;
using detail::ScheduleInfo;
using detail::StatePool;
using detail::StateSegment;
using detail::StepInfo;
using detail::Tensor;
using detail::TensorInfo;

namespace {

/// One sequence from add() until it ends.
struct Sequence {
  int64_t id = 0;
  std::vector<int64_t> prompt;
  GenerateOptions options;
  Sampler sampler;
  int slot = -1;
  /// Prompt tokens fed so far; positions its slot holds.
  int64_t fed = 0;
  int64_t length = 0;
  int64_t lastToken = -1;
  int64_t newTokens = 0;
  std::vector<float> logits;

  Sequence(int64_t id, std::vector<int64_t> prompt, GenerateOptions options)
      : id(id), prompt(std::move(prompt)), options(std::move(options)),
        sampler(this->options.sampling) {}
  bool prefilled() const { return fed == static_cast<int64_t>(prompt.size()); }
};

/// An Attention step of the batched schedule and the pools of its keys and
/// values.
struct PoolStep {
  int keys = -1, values = -1;
  /// The sliding window (0: none), GenerationDesc::batchWindows.
  int64_t window = 0;
};

/// A CausalConv or GatedDeltaRule step of the batched schedule and the pool
/// of its state.
struct StateStep {
  int pool = -1;
};

} // namespace

struct BatchGenerator::Impl {
  const Plan &plan;
  const GenerationDesc &gen;
  BatchOptions options;
  std::string blocker;

  // Batched mode.
  const ScheduleInfo *schedule = nullptr;
  std::unique_ptr<detail::SessionState> state;
  uint8_t *arena = nullptr;
  std::vector<KvPool> pools;
  /// Per step of the schedule: its index in poolSteps, or -1.
  std::vector<int> poolStepOf;
  std::vector<PoolStep> poolSteps;
  std::vector<StatePool> statePools;
  /// Per step of the schedule: its index in stateSteps, or -1.
  std::vector<int> stateStepOf;
  std::vector<StateStep> stateSteps;
  /// The step's rows by sequence, kept to avoid allocating each step.
  std::vector<StateSegment> segments;
  /// Router steps and their expert counts.
  std::vector<int> routers;
  std::vector<std::vector<uint64_t>> selections;
  int64_t maxRows = 0;
  // The step's rows, kept to avoid allocating each step.
  std::vector<int64_t> ids, positions, positionRows;
  std::vector<PoolRow> rows;

  // Serial mode.
  std::unique_ptr<Generator> serial;

  // Sequences: `incoming` and `cancels` are shared with add() and cancel()
  // under `mutex`; the rest belongs to step().
  mutable std::mutex mutex;
  std::deque<std::unique_ptr<Sequence>> incoming;
  std::set<int64_t> runningIds;
  std::set<int64_t> cancels;
  int64_t nextId = 1;
  int inUse = 0;
  std::map<int64_t, std::vector<float>> keptLogits;
  BatchStats counters;

  std::vector<std::unique_ptr<Sequence>> running;
  std::vector<int> freeSlots;

  Impl(const Plan &plan, const GenerationDesc &gen) : plan(plan), gen(gen) {}
  ~Impl() { std::free(arena); }

  int slotCount() const { return serial ? 1 : options.slots; }

  /// Why the plan's prefill schedule cannot run the rows of several
  /// sequences with its attention over the pool; empty when it can, with
  /// the pools and pool steps set up.
  std::string findPoolSteps(int64_t slots);
  absl::Status runRows();
  absl::Status poolAttention(KernelContext &ctx, const PoolStep &step);
  /// Runs a CausalConv or GatedDeltaRule step per sequence from its slot of
  /// the state pool.
  absl::Status poolState(KernelContext &ctx, const StepInfo &step,
                         const StateStep &state);
  /// Counts the experts Router step `step` (routers[r]) chose.
  void countSelections(const StepInfo &step, int r);
  /// Per step: its index in routers, or -1.
  std::vector<int> routerOf;
  void finish(std::vector<SequenceEvent> &events, size_t index,
              FinishReason reason);
};

std::string BatchGenerator::Impl::findPoolSteps(int64_t slots) {
  if (!gen.hasPrefill)
    return "the plan has no prefill schedule (its decode schedule runs the "
           "prompt)";
  if (!gen.attentionMask.empty() && gen.prefillMask)
    return absl::StrCat("the graph takes an attention mask ('",
                        gen.attentionMask, "'), which spans a sequence");
  if (!gen.batchable)
    return gen.batchBlocker.empty()
               ? "the compiler did not prove that only causal attention "
                 "mixes the prefill schedule's token rows (a plan before "
                 "format 1.13)"
               : absl::StrCat("the prefill graph mixes token rows: ",
                              gen.batchBlocker);
  const ScheduleInfo &s = plan.impl().prefillSchedules[0];
  int32_t idsId = detail::findSignatureTensor(s, true, gen.inputIds);
  const TensorInfo &idsInfo = s.tensors[idsId];
  if (idsInfo.rank != 2 || idsInfo.dims[1].kind != fb::DimKind::Symbolic)
    return absl::StrCat("the prefill schedule's '", gen.inputIds,
                        "' has no symbolic token axis");
  maxRows = idsInfo.dims[1].bound;
  poolStepOf.assign(s.steps.size(), -1);
  // Each cache's present (prefill output) must be read only as the keys or
  // values of Attention steps, whose other operands are then the rows'.
  std::map<int32_t, int> poolOf, statePoolOf;
  for (const CachePairDesc &pair : gen.cache) {
    int32_t id = detail::findSignatureTensor(s, false, pair.prefillOutput);
    if (pair.state) {
      // A recurrence's new state (checked below), one per slot.
      const TensorInfo &t = s.tensors[id];
      int64_t elements = 1;
      for (int d = 0; d < t.rank; ++d)
        elements *= t.dims[d].bound;
      if (t.rank < 1 || t.dims[0].bound != 1)
        return absl::StrCat("state '", pair.prefillOutput,
                            "' is not of one sequence ([1, ...])");
      statePoolOf[id] = static_cast<int>(statePools.size());
      statePools.emplace_back(slots, elements);
      continue;
    }
    const TensorInfo &t = s.tensors[id];
    if (pair.axis != 2 || t.rank != 4 ||
        t.dims[0].kind != fb::DimKind::Static || t.dims[0].bound != 1 ||
        t.dims[3].kind != fb::DimKind::Static)
      return absl::StrCat("cache '", pair.prefillOutput,
                          "' is not [1, heads, positions, dim]");
    poolOf[id] = static_cast<int>(pools.size());
    pools.emplace_back(slots, t.dims[1].bound, gen.maxSeq, t.dims[3].bound);
  }
  // Each state's start is the new state of one CausalConv or GatedDeltaRule
  // step, which nothing reads; every such step has one.
  stateStepOf.assign(s.steps.size(), -1);
  std::set<int> claimed;
  for (const StepInfo &step : s.steps) {
    for (int32_t input : step.inputs)
      if (statePoolOf.count(input))
        return absl::StrCat("state '", s.tensors[input].name, "' is read by ",
                            step.label);
    if (step.op != fb::OpKind::CausalConv &&
        step.op != fb::OpKind::GatedDeltaRule)
      continue;
    auto pool = step.outputs.size() == 2 ? statePoolOf.find(step.outputs[1])
                                         : statePoolOf.end();
    if (pool == statePoolOf.end() || !claimed.insert(pool->second).second)
      return absl::StrCat(step.label,
                          " carries a state along the rows that is not the "
                          "start of a state pair of the plan");
    stateStepOf[step.index] = static_cast<int>(stateSteps.size());
    stateSteps.push_back({pool->second});
  }
  if (claimed.size() != statePools.size())
    return "a state pair's start is not the new state of a CausalConv or "
           "GatedDeltaRule step";
  for (const StepInfo &step : s.steps) {
    bool attention = step.op == fb::OpKind::Attention;
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      if (!poolOf.count(step.inputs[i]))
        continue;
      // As keys or values it is the pool; as the query, the rows' own.
      if (!attention || i > 2)
        return absl::StrCat("cache '", s.tensors[step.inputs[i]].name,
                            "' is read by ", step.label,
                            " other than as attention's query, keys or "
                            "values");
    }
    if (!attention)
      continue;
    auto k = poolOf.find(step.inputs[1]), v = poolOf.find(step.inputs[2]);
    if (k == poolOf.end() || v == poolOf.end())
      return absl::StrCat(step.label,
                          " attends over keys or values that are not a "
                          "cache of the plan");
    poolStepOf[step.index] = static_cast<int>(poolSteps.size());
    size_t n = poolSteps.size();
    poolSteps.push_back(
        {k->second, v->second,
         n < gen.batchWindows.size() ? gen.batchWindows[n] : 0});
  }
  if (!gen.batchWindows.empty() && gen.batchWindows.size() != poolSteps.size())
    return absl::StrCat("the plan gives ", gen.batchWindows.size(),
                        " attention windows for ", poolSteps.size(),
                        " attention steps");
  routerOf.assign(s.steps.size(), -1);
  for (const StepInfo &step : s.steps)
    if (step.op == fb::OpKind::Router) {
      const TensorInfo &logits = s.tensors[step.inputs[0]];
      routerOf[step.index] = static_cast<int>(routers.size());
      routers.push_back(step.index);
      selections.emplace_back(
          static_cast<size_t>(logits.dims[logits.rank - 1].bound), 0);
    }
  schedule = &s;
  return "";
}

absl::Status BatchGenerator::Impl::poolAttention(KernelContext &ctx,
                                                 const PoolStep &p) {
  const Tensor &q = ctx.in(0), &k = ctx.in(1), &v = ctx.in(2);
  int64_t n = static_cast<int64_t>(rows.size());
  KvPool &keys = pools[p.keys], &values = pools[p.values];
  if (q.shape[0] != 1 || q.shape[2] != n || k.shape[2] != n ||
      v.shape[2] != n || k.shape[1] != keys.heads() ||
      k.shape[3] != keys.dim() || v.shape[1] != values.heads() ||
      v.shape[3] != values.dim() || q.shape[3] != k.shape[3] ||
      keys.heads() != values.heads() || q.shape[1] % keys.heads() != 0)
    return ctx.error("query ", q.shape.str(), ", keys ", k.shape.str(),
                     " and values ", v.shape.str(), " are not the ", n,
                     " rows of the step over the KV pool");
  detail::PoolAttentionArgs args;
  args.rows = n;
  args.heads = q.shape[1];
  args.kvHeads = keys.heads();
  args.headDim = q.shape[3];
  args.valueDim = values.dim();
  args.scale = ctx.attrs<fb::AttentionAttrs>()->scale();
  args.softcap = ctx.attrs<fb::AttentionAttrs>()->softcap();
  args.window = p.window;
  if (ctx.has(4)) {
    if (ctx.in(4).shape[0] != args.heads)
      return ctx.error("sinks ", ctx.in(4).shape.str(),
                       " do not have one logit per query head");
    args.sinks = ctx.in(4).as<const float>();
  }
  args.query = q.as<const float>();
  args.key = k.as<const float>();
  args.value = v.as<const float>();
  args.rowSlots = rows.data();
  args.keys = &keys;
  args.values = &values;
  detail::Shape outShape = q.shape;
  outShape[3] = args.valueDim;
  MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, outShape));
  args.output = out->as<float>();
  detail::computePoolAttention(ctx.pool(), args);
  return absl::OkStatus();
}

absl::Status BatchGenerator::Impl::poolState(KernelContext &ctx,
                                             const StepInfo &step,
                                             const StateStep &p) {
  StatePool &pool = statePools[p.pool];
  int64_t n = static_cast<int64_t>(rows.size());
  // A sequence's rows are consecutive: its decode row, or its prompt chunk.
  segments.clear();
  for (int64_t r = 0; r < n; ++r) {
    if (!segments.empty() && rows[segments.back().begin].slot == rows[r].slot) {
      segments.back().end = r + 1;
      continue;
    }
    for (const StateSegment &segment : segments)
      if (rows[segment.begin].slot == rows[r].slot)
        return ctx.error("the rows of slot ", rows[r].slot,
                         " are not consecutive");
    segments.push_back({r, r + 1, pool.slot(rows[r].slot)});
  }
  const Tensor &state = ctx.in(step.op == fb::OpKind::CausalConv ? 2 : 3);
  if (state.shape.rank < 1 || state.shape[0] != 1 ||
      state.shape.numel() != pool.elements())
    return ctx.error("state ", state.shape.str(), " is not the ",
                     pool.elements(), " values of one sequence's");
  if (step.op == fb::OpKind::CausalConv) {
    const Tensor &x = ctx.in(0), &w = ctx.in(1);
    if (x.shape.rank != 3 || x.shape[0] != 1 || x.shape[2] != n ||
        w.shape.rank != 2 || x.shape[1] != w.shape[0] ||
        state.shape[1] != w.shape[0] || state.shape[2] != w.shape[1] - 1)
      return ctx.error("input ", x.shape.str(), ", weight ", w.shape.str(),
                       " and state ", state.shape.str(), " are not the ", n,
                       " rows of the step");
    detail::CausalConvArgs args;
    args.channels = w.shape[0];
    args.length = n;
    args.kernel = w.shape[1];
    args.silu = ctx.attrs<fb::CausalConvAttrs>()->silu();
    args.input = x.as<const float>();
    args.weight = w.as<const float>();
    args.bias = ctx.has(3) ? ctx.in(3).as<const float>() : nullptr;
    MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, x.shape));
    args.output = out->as<float>();
    detail::computeCausalConv(ctx.pool(), args, segments);
  } else {
    const Tensor &q = ctx.in(0), &k = ctx.in(1), &v = ctx.in(2);
    const detail::Shape &ss = state.shape;
    for (const Tensor *t : {&q, &k, &v, &ctx.in(4), &ctx.in(5)})
      if (t->shape[0] != 1 || t->shape[1] != n)
        return ctx.error(t->shape.str(), " is not the ", n,
                         " rows of the step");
    if (ss.rank != 4 || ss[1] != v.shape[2] || ss[2] != q.shape[3] ||
        ss[3] != v.shape[3] || k.shape[3] != q.shape[3] || q.shape[2] == 0 ||
        k.shape[2] == 0 || v.shape[2] % q.shape[2] != 0 ||
        v.shape[2] % k.shape[2] != 0)
      return ctx.error("query ", q.shape.str(), ", key ", k.shape.str(),
                       ", value ", v.shape.str(), " and state ", ss.str(),
                       " do not agree");
    detail::GatedDeltaArgs args;
    args.tokens = n;
    args.queryHeads = q.shape[2];
    args.keyHeads = k.shape[2];
    args.valueHeads = v.shape[2];
    args.keyDim = q.shape[3];
    args.valueDim = v.shape[3];
    args.scale = ctx.attrs<fb::GatedDeltaRuleAttrs>()->scale();
    args.query = q.as<const float>();
    args.key = k.as<const float>();
    args.value = v.as<const float>();
    args.decay = ctx.in(4).as<const float>();
    args.beta = ctx.in(5).as<const float>();
    MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(0, v.shape));
    args.output = out->as<float>();
    detail::computeGatedDeltaRule(ctx.pool(), args, segments);
  }
  // The step's own new state is no sequence's: nothing reads it.
  MOERT_ASSIGN_OR_RETURN(Tensor * next, ctx.allocate(1, state.shape));
  std::fill_n(next->as<float>(), state.shape.numel(), 0.0f);
  return absl::OkStatus();
}

absl::Status BatchGenerator::Impl::runRows() {
  detail::SessionState &s = *state;
  int64_t n = static_cast<int64_t>(ids.size());
  MOERT_RETURN_IF_ERROR(
      s.setInput(gen.inputIds, DType::I64, {1, n}, ids.data(), n * 8));
  if (!gen.positionIds.empty() && gen.positionRows == 0)
    MOERT_RETURN_IF_ERROR(s.setInput(gen.positionIds, DType::I64, {1, n},
                                     positions.data(), n * 8));
  if (!gen.positionIds.empty() && gen.positionRows > 0) {
    positionRows.clear();
    for (int r = 0; r < gen.positionRows; ++r)
      positionRows.insert(positionRows.end(), positions.begin(),
                          positions.end());
    MOERT_RETURN_IF_ERROR(
        s.setInput(gen.positionIds, DType::I64, {gen.positionRows, 1, n},
                   positionRows.data(), positionRows.size() * 8));
  }
  s.hasRun = false;
  MOERT_RETURN_IF_ERROR(s.bindSymbols());
  if (s.experts)
    s.experts->beginRun(s.expertView);
  s.stageInputs();
  for (const StepInfo &step : schedule->steps) {
    KernelContext ctx = s.context(step);
    if (s.experts)
      s.experts->beforeStep(step.index, s.tensors.data());
    int pool = poolStepOf[step.index], recurrence = stateStepOf[step.index];
    absl::Status status = pool >= 0 ? poolAttention(ctx, poolSteps[pool])
                          : recurrence >= 0
                              ? poolState(ctx, step, stateSteps[recurrence])
                              : step.def->kernel(ctx);
    if (!status.ok()) {
      if (s.experts)
        s.experts->cancelPrefetch();
      return status;
    }
    if (s.experts)
      s.experts->afterStep(step.index, s.tensors.data(), s.pool);
    if (routerOf[step.index] >= 0)
      countSelections(step, routerOf[step.index]);
  }
  s.hasRun = true;
  return absl::OkStatus();
}

void BatchGenerator::Impl::countSelections(const StepInfo &step, int r) {
  // Right after the Router ran: its arena slot is reused later in the run.
  const Tensor &chosen = state->tensors[step.outputs[1]];
  const int64_t *id = chosen.as<const int64_t>();
  std::vector<uint64_t> &counts = selections[r];
  int64_t experts = static_cast<int64_t>(counts.size());
  std::lock_guard<std::mutex> lock(mutex);
  for (int64_t i = 0, e = chosen.shape.numel(); i < e; ++i)
    if (id[i] >= 0 && id[i] < experts)
      ++counts[id[i]];
}

void BatchGenerator::Impl::finish(std::vector<SequenceEvent> &events,
                                  size_t index, FinishReason reason) {
  Sequence &seq = *running[index];
  if (!events.empty() && events.back().sequence == seq.id)
    events.back().finish = reason;
  else
    events.push_back({seq.id, -1, reason});
  if (seq.slot >= 0)
    freeSlots.push_back(seq.slot);
  {
    std::lock_guard<std::mutex> lock(mutex);
    runningIds.erase(seq.id);
    keptLogits.erase(seq.id);
    --inUse;
  }
  running.erase(running.begin() + static_cast<std::ptrdiff_t>(index));
}

BatchGenerator::BatchGenerator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
BatchGenerator::~BatchGenerator() = default;

absl::StatusOr<std::unique_ptr<BatchGenerator>>
BatchGenerator::create(const Plan &plan, const SessionOptions &session,
                       const BatchOptions &options) {
  const Plan::Impl &planImpl = plan.impl();
  MOERT_ASSIGN_OR_RETURN(const GenerationDesc *gen, detail::generationOf(plan));
  if (plan.numDevices() != 1)
    return absl::FailedPreconditionError(absl::StrCat(
        planImpl.source, ": the plan has ", plan.numDevices(),
        " device schedules; batched serving runs one-device plans "
        "(generate expert-parallel plans with moert::GroupGenerator)"));
  if (options.slots < 1 || options.slots > 4096)
    return absl::InvalidArgumentError(
        absl::StrCat("slots must be in [1, 4096], not ", options.slots));
  if (options.maxStepRows < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "the rows per step must be >= 0 (0: the plan's bound), not ",
        options.maxStepRows));
  auto impl = std::make_unique<Impl>(plan, *gen);
  impl->options = options;
  impl->blocker = impl->findPoolSteps(options.slots);
  if (impl->blocker.empty()) {
    if (options.maxStepRows > 0)
      impl->maxRows = std::min(impl->maxRows, options.maxStepRows);
    if (impl->maxRows < options.slots)
      return absl::InvalidArgumentError(absl::StrCat(
          planImpl.source, ": ", options.slots,
          " slots need a step of as many rows; a step runs at most ",
          impl->maxRows,
          " (the prefill schedule's bound: compile with a "
          "larger --max-seq, or use fewer slots)"));
    const ScheduleInfo &s = *impl->schedule;
    MOERT_RETURN_IF_ERROR(detail::checkSessionPlan(
        plan, Backend::Cpu, "batched serving runs cpu plans", 0));
    impl->state = std::make_unique<detail::SessionState>(
        planImpl, s, detail::sessionThreads(session.threads),
        /*collectStats=*/false);
    impl->arena = detail::allocateHostArena(s.arenaSize);
    if (!impl->arena)
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate the activation arena of ", s.arenaSize, " bytes"));
    impl->state->initTensors(impl->arena);
    MOERT_RETURN_IF_ERROR(impl->state->createExpertStore(
        0, session.deviceMemory, session.expertRead, session.expertPrefetch,
        session.expertCache));
    impl->ids.reserve(impl->maxRows);
    impl->positions.reserve(impl->maxRows);
    impl->rows.reserve(impl->maxRows);
    for (int slot = options.slots - 1; slot >= 0; --slot)
      impl->freeSlots.push_back(slot);
  } else {
    impl->pools.clear();
    impl->statePools.clear();
    impl->routers.clear();
    impl->selections.clear();
    std::fprintf(stderr, "moert: %s: serving one sequence at a time: %s\n",
                 planImpl.source.c_str(), impl->blocker.c_str());
    MOERT_ASSIGN_OR_RETURN(impl->serial, Generator::create(plan, session));
    impl->freeSlots.push_back(0);
  }
  return std::unique_ptr<BatchGenerator>(new BatchGenerator(std::move(impl)));
}

absl::StatusOr<int64_t> BatchGenerator::add(const std::vector<int64_t> &prompt,
                                            const GenerateOptions &options) {
  MOERT_RETURN_IF_ERROR(detail::checkPrompt(prompt, impl_->gen));
  MOERT_RETURN_IF_ERROR(
      detail::checkGenerateOptions(prompt, options, impl_->gen));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  int64_t id = impl_->nextId++;
  impl_->incoming.push_back(std::make_unique<Sequence>(id, prompt, options));
  return id;
}

bool BatchGenerator::cancel(int64_t sequence) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto &incoming = impl_->incoming;
  for (auto it = incoming.begin(); it != incoming.end(); ++it)
    if ((*it)->id == sequence) {
      incoming.erase(it);
      return true;
    }
  if (!impl_->runningIds.count(sequence))
    return false;
  impl_->cancels.insert(sequence);
  return true;
}

absl::StatusOr<std::vector<SequenceEvent>> BatchGenerator::step() {
  Impl &m = *impl_;
  std::vector<SequenceEvent> events;
  // Cancellations, then new sequences into free slots.
  std::set<int64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    cancels.swap(m.cancels);
  }
  for (size_t i = 0; i < m.running.size();)
    if (cancels.count(m.running[i]->id))
      m.finish(events, i, FinishReason::Cancelled);
    else
      ++i;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    while (!m.freeSlots.empty() && !m.incoming.empty()) {
      std::unique_ptr<Sequence> seq = std::move(m.incoming.front());
      m.incoming.pop_front();
      seq->slot = m.freeSlots.back();
      m.freeSlots.pop_back();
      // A new sequence starts from zero states.
      for (StatePool &pool : m.statePools)
        pool.reset(seq->slot);
      m.runningIds.insert(seq->id);
      ++m.inUse;
      m.running.push_back(std::move(seq));
    }
  }
  if (m.running.empty())
    return events;
  auto start = std::chrono::steady_clock::now();
  // Which sequence draws a token from which row's logits.
  std::vector<std::pair<size_t, int64_t>> draws;
  const float *logits = nullptr;
  int64_t vocab = m.gen.vocabSize;
  int64_t stepRows = 0, promptRows = 0;
  if (m.serial) {
    Sequence &seq = *m.running.front();
    if (!seq.prefilled()) {
      MOERT_RETURN_IF_ERROR(m.serial->prefill(seq.prompt));
      seq.fed = seq.length = static_cast<int64_t>(seq.prompt.size());
      stepRows = promptRows = seq.length;
    } else {
      MOERT_RETURN_IF_ERROR(m.serial->decode(seq.lastToken));
      ++seq.length;
      stepRows = 1;
    }
    logits = m.serial->logits().data();
    draws.push_back({0, 0});
  } else {
    m.ids.clear();
    m.positions.clear();
    m.rows.clear();
    // Decode rows first, then prompt rows while the step has room.
    for (size_t i = 0; i < m.running.size(); ++i) {
      Sequence &seq = *m.running[i];
      if (!seq.prefilled())
        continue;
      draws.push_back({i, static_cast<int64_t>(m.ids.size())});
      m.ids.push_back(seq.lastToken);
      m.positions.push_back(seq.length);
      m.rows.push_back({seq.slot, seq.length});
    }
    for (size_t i = 0; i < m.running.size(); ++i) {
      Sequence &seq = *m.running[i];
      int64_t room = m.maxRows - static_cast<int64_t>(m.ids.size());
      if (seq.prefilled() || room <= 0)
        continue;
      int64_t take =
          std::min(room, static_cast<int64_t>(seq.prompt.size()) - seq.fed);
      for (int64_t j = 0; j < take; ++j) {
        m.ids.push_back(seq.prompt[seq.fed + j]);
        m.positions.push_back(seq.fed + j);
        m.rows.push_back({seq.slot, seq.fed + j});
      }
      if (seq.fed + take == static_cast<int64_t>(seq.prompt.size()))
        draws.push_back({i, static_cast<int64_t>(m.ids.size()) - 1});
      promptRows += take;
    }
    stepRows = static_cast<int64_t>(m.ids.size());
    MOERT_RETURN_IF_ERROR(m.runRows());
    MOERT_ASSIGN_OR_RETURN(TensorData out, m.state->output(m.gen.logits));
    if (out.shape.size() != 3 || out.shape[1] != stepRows ||
        out.shape[2] != vocab)
      return absl::InternalError(absl::StrCat("the logits '", m.gen.logits,
                                              "' are not [1, ", stepRows, ", ",
                                              vocab, "]"));
    logits = static_cast<const float *>(out.data);
    // Prompt rows advance their sequences whether or not they draw.
    for (size_t i = 0; i < m.running.size(); ++i) {
      Sequence &seq = *m.running[i];
      if (seq.prefilled()) {
        ++seq.length;
        continue;
      }
      int64_t fed = 0;
      for (const PoolRow &row : m.rows)
        fed += row.slot == seq.slot;
      seq.fed += fed;
      seq.length += fed;
    }
  }
  std::vector<size_t> ended;
  std::vector<FinishReason> reasons;
  for (const auto &[index, row] : draws) {
    Sequence &seq = *m.running[index];
    const float *rowLogits = logits + row * vocab;
    int64_t token = seq.sampler.sample(rowLogits, vocab);
    seq.lastToken = token;
    ++seq.newTokens;
    if (m.options.keepLogits) {
      std::lock_guard<std::mutex> lock(m.mutex);
      m.keptLogits[seq.id].assign(rowLogits, rowLogits + vocab);
    }
    events.push_back({seq.id, token, FinishReason::None});
    const std::vector<int64_t> &stops = seq.options.stopIds;
    if (std::find(stops.begin(), stops.end(), token) != stops.end())
      events.back().finish = FinishReason::Stop;
    else if (seq.newTokens >= seq.options.maxNewTokens)
      events.back().finish = FinishReason::Length;
  }
  // End the finished sequences, the last index first.
  std::vector<std::pair<size_t, FinishReason>> done;
  for (size_t e = events.size() - draws.size(), d = 0; d < draws.size();
       ++e, ++d)
    if (events[e].finish != FinishReason::None)
      done.push_back({draws[d].first, events[e].finish});
  std::sort(done.begin(), done.end(),
            [](const auto &a, const auto &b) { return a.first > b.first; });
  for (const auto &[index, reason] : done) {
    Sequence &seq = *m.running[index];
    if (seq.slot >= 0)
      m.freeSlots.push_back(seq.slot);
    std::lock_guard<std::mutex> lock(m.mutex);
    m.runningIds.erase(seq.id);
    m.keptLogits.erase(seq.id);
    --m.inUse;
    m.running.erase(m.running.begin() + static_cast<std::ptrdiff_t>(index));
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::lock_guard<std::mutex> lock(m.mutex);
  ++m.counters.steps;
  m.counters.rows += stepRows;
  m.counters.promptRows += promptRows;
  m.counters.newTokens += static_cast<int64_t>(draws.size());
  m.counters.stepSeconds += seconds;
  return events;
}

bool BatchGenerator::hasWork() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return !impl_->incoming.empty() || impl_->inUse > 0;
}

int BatchGenerator::slots() const { return impl_->slotCount(); }

int BatchGenerator::slotsInUse() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->inUse;
}

int BatchGenerator::waiting() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<int>(impl_->incoming.size());
}

const std::string &BatchGenerator::batchBlocker() const {
  return impl_->blocker;
}

std::vector<std::vector<uint64_t>> BatchGenerator::expertSelections() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->selections;
}

BatchStats BatchGenerator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->counters;
}

std::vector<float> BatchGenerator::lastLogits(int64_t sequence) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->keptLogits.find(sequence);
  return it == impl_->keptLogits.end() ? std::vector<float>() : it->second;
}

int64_t BatchGenerator::vocabSize() const { return impl_->gen.vocabSize; }
int64_t BatchGenerator::maxSeq() const { return impl_->gen.maxSeq; }
int64_t BatchGenerator::maxStepRows() const {
  return impl_->serial ? impl_->gen.maxSeq : impl_->maxRows;
}

uint64_t BatchGenerator::poolBytes() const {
  if (impl_->serial)
    return impl_->serial->cacheBytes();
  uint64_t bytes = 0;
  for (const KvPool &pool : impl_->pools)
    bytes += pool.bytes();
  for (const StatePool &pool : impl_->statePools)
    bytes += pool.bytes();
  return bytes;
}

} // namespace moert
