//===- expert_store_test.cpp - Tiered expert weights
//-----------------------===//
//
// The expert cache's bookkeeping (LRU order, pinning, locks, the capacity
// never exceeded), and tiered plans end to end through the plan writer:
// outputs bit for bit those of the all-resident plan at every budget and
// read mode, the budget respected, and corrupt or truncated paged sections
// refused at load (or, for a cold expert's bytes, at the read) with an error
// naming the section or the step.
//
//===----------------------------------------------------------------------===//

#include "expert_network.h"
#include "format/file_io.h"
#include "format/plan_file.h"
#include "format/plan_writer.h"
#include "format/tier_assignment.h"
#include "plan_bytes.h"
#include "tiers/expert_store.h"

#include <fstream>
#include <random>

namespace moert::testing {
namespace {

using detail::ExpertCache;
using detail::ExpertKey;

std::vector<uint32_t> experts(const std::vector<ExpertKey> &keys) {
  std::vector<uint32_t> out;
  for (const ExpertKey &key : keys)
    out.push_back(key.expert);
  return out;
}

TEST(ExpertCache, EvictsTheLeastRecentlyUsed) {
  ExpertCache cache(300);
  std::vector<ExpertCache::Evicted> evicted;
  for (uint32_t e = 0; e < 3; ++e)
    ASSERT_NE(cache.insert({0, e}, 100, false, evicted), nullptr);
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(experts(cache.order()), (std::vector<uint32_t>{2, 1, 0}));
  ASSERT_NE(cache.find({0, 0}), nullptr); // A hit makes 0 the newest.
  EXPECT_EQ(experts(cache.order()), (std::vector<uint32_t>{0, 2, 1}));
  ASSERT_NE(cache.insert({0, 3}, 100, false, evicted), nullptr);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key.expert, 1u);
  EXPECT_EQ(cache.find({0, 1}), nullptr);
  EXPECT_EQ(cache.used(), 300u);
}

TEST(ExpertCache, NeverEvictsPinnedOrLockedEntries) {
  ExpertCache cache(300);
  std::vector<ExpertCache::Evicted> evicted;
  ExpertCache::Entry *pinned = cache.insert({1, 0}, 100, true, evicted);
  ExpertCache::Entry *locked = cache.insert({1, 1}, 100, false, evicted);
  ASSERT_NE(pinned, nullptr);
  ASSERT_NE(locked, nullptr);
  cache.lock(locked);
  ASSERT_NE(cache.insert({1, 2}, 100, false, evicted), nullptr);
  // Room for one more only by evicting expert 2, the one neither pinned nor
  // locked, though it is the newest.
  ASSERT_NE(cache.insert({1, 3}, 100, false, evicted), nullptr);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key.expert, 2u);
  cache.lock(cache.find({1, 3}));
  evicted.clear();
  // Everything pinned or locked: the insertion fails and evicts nothing.
  EXPECT_EQ(cache.insert({1, 4}, 100, false, evicted), nullptr);
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(cache.pinnedBytes(), 100u);
  cache.unlock(locked);
  EXPECT_NE(cache.insert({1, 4}, 100, false, evicted), nullptr);
  EXPECT_EQ(evicted.back().key.expert, 1u);
  // Larger than the whole cache: never.
  EXPECT_EQ(cache.insert({1, 5}, 301, false, evicted), nullptr);
}

TEST(ExpertCache, RandomTrafficNeverExceedsTheCapacity) {
  std::mt19937 rng(7);
  ExpertCache cache(1000);
  std::vector<ExpertCache::Evicted> evicted;
  std::vector<ExpertCache::Entry *> locked;
  for (int step = 0; step < 5000; ++step) {
    ExpertKey key{static_cast<uint32_t>(rng() % 3),
                  static_cast<uint32_t>(rng() % 40)};
    ExpertCache::Entry *entry = cache.find(key);
    if (!entry)
      entry = cache.insert(key, 50 + rng() % 200, rng() % 50 == 0, evicted);
    if (entry && rng() % 4 == 0) {
      cache.lock(entry);
      locked.push_back(entry);
    }
    if (locked.size() > 3) {
      for (ExpertCache::Entry *l : locked)
        cache.unlock(l);
      locked.clear();
    }
    ASSERT_LE(cache.used(), cache.capacity());
    for (const ExpertCache::Evicted &old : evicted)
      ASSERT_EQ(cache.find(old.key), nullptr);
    evicted.clear();
  }
}

TEST(ExpertCache, PeekLeavesTheOrder) {
  ExpertCache cache(300);
  std::vector<ExpertCache::Evicted> evicted;
  for (uint32_t e = 0; e < 3; ++e)
    ASSERT_NE(cache.insert({0, e}, 100, false, evicted), nullptr);
  ExpertCache::Entry *entry = cache.peek({0, 0});
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->state, ExpertCache::Entry::State::Ready);
  EXPECT_EQ(experts(cache.order()), (std::vector<uint32_t>{2, 1, 0}));
  EXPECT_EQ(cache.peek({0, 7}), nullptr);
  // A queued read ahead holds its lock: never evicted until it is done.
  entry->state = ExpertCache::Entry::State::Queued;
  cache.lock(entry);
  ASSERT_NE(cache.insert({0, 3}, 100, false, evicted), nullptr);
  EXPECT_EQ(evicted.back().key.expert, 1u);
}

/// A top-2 gate of H = 3, E = 4 over `w` ([E, H] when `transposed`), and
/// three tokens: token 0 picks 0 then 3; token 1 picks 2 then 3; token 2
/// picks 0, 3 (3 three times, 0 twice, 2 once).
detail::GateInfo testGate(const std::vector<float> &w, bool transposed) {
  detail::GateInfo gate;
  gate.weight = w.data();
  gate.transposed = transposed;
  gate.hidden = 3;
  gate.experts = 4;
  gate.topK = 2;
  gate.router = 0;
  return gate;
}
const std::vector<float> kGateTokens = {1, 0, 0, 0, 0, 1, 2, 0, 0};

TEST(Prefetch, PredictsTheRoutersTopKMostSelectedFirst) {
  // logits = x @ w, w [3, 4].
  std::vector<float> w = {1, 0, 0, 0.5f, //
                          0, 1, 0, 0.5f, //
                          0, 0, 1, 0.5f};
  detail::GateInfo gate = testGate(w, false);
  const std::vector<float> &x = kGateTokens;
  detail::ThreadPool pool(2);
  EXPECT_EQ(detail::predictExperts(gate, x.data(), 3, 128, pool),
            (std::vector<uint32_t>{3, 0, 2}));
  // At most one token (evenly spaced: token 0).
  EXPECT_EQ(detail::predictExperts(gate, x.data(), 3, 1, pool),
            (std::vector<uint32_t>{0, 3}));
  // A selection bias is added to the softmax scores: expert 1 wins.
  std::vector<float> bias = {0, 2, 0, 0};
  gate.bias = bias.data();
  EXPECT_EQ(detail::predictExperts(gate, x.data(), 1, 128, pool),
            (std::vector<uint32_t>{0, 1}));
}

TEST(Prefetch, PredictsAGemmGateOfTransposedWeight) {
  // A Gemm as exporters write nn.Linear: logits = alpha x @ w' + beta c,
  // w [E = 4, H = 3] (the MatMul test's weight transposed).
  std::vector<float> w = {1,    0,    0, //
                          0,    1,    0, //
                          0,    0,    1, //
                          0.5f, 0.5f, 0.5f};
  detail::GateInfo gate = testGate(w, true);
  const std::vector<float> &x = kGateTokens;
  detail::ThreadPool pool(2);
  EXPECT_EQ(detail::predictExperts(gate, x.data(), 3, 128, pool),
            (std::vector<uint32_t>{3, 0, 2}));
  // beta c lifts expert 1 to the top: token 0's logits [1, 4, 0, 0.5] pick
  // 1 and 0 (each once: listed by index).
  std::vector<float> c = {0, 4, 0, 0};
  gate.addend = c.data();
  gate.addendSize = 4;
  gate.beta = 1.0f;
  EXPECT_EQ(detail::predictExperts(gate, x.data(), 1, 128, pool),
            (std::vector<uint32_t>{0, 1}));
  gate.beta = 0.0f;
  gate.alpha = -1.0f;
  // Token 0: -[1, 0, 0, 0.5]: experts 1 and 2 (0 each), the lower first.
  EXPECT_EQ(detail::predictExperts(gate, x.data(), 1, 128, pool),
            (std::vector<uint32_t>{1, 2}));
}

TEST(TierAssignment, HotExpertsFollowTheRanksAndLeaveTheWindow) {
  std::vector<detail::TierLayerShape> layers = {{4, 100}, {4, 100}};
  // Index order: expert 0 of both layers, then expert 1, ...
  auto byIndex = detail::rankExperts(layers, {});
  EXPECT_EQ(byIndex[0], (std::vector<uint32_t>{0, 2, 4, 6}));
  EXPECT_EQ(byIndex[1], (std::vector<uint32_t>{1, 3, 5, 7}));
  auto byLoad = detail::rankExperts(layers, {{1, 9, 0, 0}, {0, 0, 0, 5}});
  EXPECT_EQ(byLoad[0][1], 0u);
  EXPECT_EQ(byLoad[1][3], 1u);
  EXPECT_EQ(byLoad[0][0], 2u);
  uint64_t window = detail::coldWindow(layers, 2);
  EXPECT_EQ(window, 200u);
  auto some = detail::assignTiers(1000 + 500, 1000, layers, byLoad, window);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->hotCount, 3u); // 300 bytes hot, 200 left for cold ones.
  auto all = detail::assignTiers(1000 + 800, 1000, layers, byLoad, window);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->hotCount, 8u);
  EXPECT_THAT(
      detail::assignTiers(1000 + 199, 1000, layers, byLoad, window).status(),
      StatusHas("give at least 1200 bytes"));
}

std::vector<uint8_t> tieredPlan(const Network &net, int64_t N, bool tiered,
                                uint64_t budget = uint64_t{1} << 40,
                                std::vector<double> loads = {}) {
  absl::StatusOr<std::vector<uint8_t>> bytes =
      writeTieredPlan(net, N, tiered, budget, std::move(loads));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

std::string writeTemp(const std::vector<uint8_t> &bytes,
                      const std::string &name) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  return path;
}

struct TieredRun {
  std::vector<float> y;
  ExpertCacheStats cache;
  StepStats step;
};

absl::StatusOr<TieredRun> runPlan(const Plan &plan, const std::vector<float> &x,
                                  const std::vector<int64_t> &offsets,
                                  int64_t H, uint64_t deviceMemory = 0,
                                  std::string read = "pread", int runs = 1,
                                  std::string cache = "static") {
  SessionOptions options;
  options.threads = 2;
  options.deviceMemory = deviceMemory;
  options.expertRead = read;
  options.expertCache = cache;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                         Session::create(plan, options));
  int64_t N = x.size() / H, E = offsets.size() - 1;
  MOERT_RETURN_IF_ERROR(session->setInput("x", DType::F32, {N, H}, x.data(),
                                          x.size() * sizeof(float)));
  MOERT_RETURN_IF_ERROR(session->setInput("offsets", DType::I64, {E + 1},
                                          offsets.data(),
                                          offsets.size() * sizeof(int64_t)));
  for (int r = 0; r < runs; ++r)
    MOERT_RETURN_IF_ERROR(session->run());
  MOERT_ASSIGN_OR_RETURN(Value y, outputValue(*session, "y"));
  TieredRun run{y.as<float>(), session->expertCacheStats(),
                session->stepStats().at(0)};
  return run;
}

Network testNetwork(bool int8) {
  Network net;
  net.biases = true;
  net.init(/*experts=*/8, /*hidden=*/64, /*inter=*/96, /*seed=*/11);
  if (int8)
    net.quantize();
  return net;
}

/// Two Experts steps of one tiered layer, as an expert-parallel plan's
/// micro-batches are (format 1.7): both read `net`'s paged weights (the
/// second its own copy when `ownWeights`, which the writer refuses), on the
/// same tokens, into "y" and "y2".
absl::StatusOr<std::vector<uint8_t>>
writeMicroBatchPlan(const Network &net, int64_t N, bool ownWeights) {
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  auto [tokens, offs, out] = addExpertsSignature(s, N, net.H, net.E);
  int32_t out2 = s.addTensor("y2", DType::F32, {N, net.H});
  s.addOutput(out2);
  int section = writer.addWeightSection(/*paged=*/true);
  auto addWeights = [&] {
    std::vector<int32_t> inputs = {tokens, offs};
    int slot = 0;
    for (auto &w : net.weightInputs(/*lead=*/true))
      inputs.push_back(w ? s.addWeight(absl::StrCat("w", slot++), w->dtype,
                                       w->shape, w->bytes.data(),
                                       w->bytes.size(), section)
                         : (++slot, -1));
    return inputs;
  };
  std::vector<int32_t> inputs = addWeights();
  int first = s.addStep(fb::OpKind::Experts, "experts.0", inputs, {out},
                        net.attributes());
  if (ownWeights)
    inputs = addWeights();
  int second = s.addStep(fb::OpKind::Experts, "experts.1", inputs, {out2},
                         net.attributes());
  s.setExpertTiers(uint64_t{1} << 40, {{first, {}, {second}}});
  return writer.serialize();
}

TEST(TieredExperts, MicroBatchStepsPageOneLayer) {
  Network net = testNetwork(false);
  std::vector<int64_t> offsets = {0, 3, 3, 5, 9, 9, 10, 12, 12};
  int64_t N = offsets.back();
  std::vector<float> x = randomFloats(N * net.H, 5);
  std::vector<uint8_t> resident = tieredPlan(net, N, false);
  auto plain = Plan::loadFromMemory(resident.data(), resident.size());
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<TieredRun> want = runPlan(**plain, x, offsets, net.H);
  ASSERT_TRUE(want.ok()) << want.status();

  absl::StatusOr<std::vector<uint8_t>> bytes =
      writeMicroBatchPlan(net, N, /*ownWeights=*/false);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::load(writeTemp(*bytes, "micro.plan"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), 7);
  absl::StatusOr<ExpertTiersDesc> all = (*plan)->expertTiers();
  ASSERT_TRUE(all.ok()) << all.status();
  uint64_t expert = all->layers[0].expertBytes;
  for (uint64_t hot : {8, 2, 0}) {
    SCOPED_TRACE(absl::StrCat(hot, " of 8 hot"));
    SessionOptions options;
    options.threads = 2;
    options.deviceMemory =
        all->residentBytes + (hot + (hot < 8 ? 2 : 0)) * expert;
    auto session = Session::create(**plan, options);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)
                    ->setInput("x", DType::F32, {N, net.H}, x.data(),
                               x.size() * sizeof(float))
                    .ok());
    ASSERT_TRUE((*session)
                    ->setInput("offsets", DType::I64,
                               {static_cast<int64_t>(offsets.size())},
                               offsets.data(), offsets.size() * sizeof(int64_t))
                    .ok());
    ASSERT_TRUE((*session)->run().ok());
    for (const char *name : {"y", "y2"}) {
      absl::StatusOr<Value> y = outputValue(**session, name);
      ASSERT_TRUE(y.ok()) << y.status();
      expectSameFloats(y->as<float>(), want->y);
    }
    // Both steps acquire the 5 experts with rows; the layer's counters
    // count once: its first step carries them.
    std::vector<StepStats> steps = (*session)->stepStats();
    EXPECT_TRUE(steps[0].tiered && steps[1].tiered);
    EXPECT_EQ(steps[0].cache.hits + steps[0].cache.misses, 2u * 5);
    EXPECT_EQ(steps[1].cache.hits + steps[1].cache.misses, 0u);
  }
  EXPECT_THAT(writeMicroBatchPlan(net, N, /*ownWeights=*/true).status(),
              StatusHas("does not read step 0's paged weights at the same "
                        "inputs"));
}

TEST(TieredExperts, BitIdenticalToResidentAtEveryBudgetAndReadMode) {
  for (bool int8 : {false, true}) {
    Network net = testNetwork(int8);
    // Few rows per expert (streamed) and many (GEMMs), expert 5 idle.
    for (std::vector<int64_t> rows :
         {std::vector<int64_t>{1, 2, 0, 1, 1, 0, 2, 1},
          std::vector<int64_t>{40, 3, 20, 0, 17, 0, 33, 30}}) {
      std::vector<int64_t> offsets = {0};
      for (int64_t n : rows)
        offsets.push_back(offsets.back() + n);
      int64_t N = offsets.back();
      std::vector<float> x = randomFloats(N * net.H, 3);
      std::vector<uint8_t> resident = tieredPlan(net, N, false);
      auto plain = Plan::loadFromMemory(resident.data(), resident.size());
      ASSERT_TRUE(plain.ok()) << plain.status();
      absl::StatusOr<TieredRun> want = runPlan(**plain, x, offsets, net.H);
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_FALSE(want->cache.tiered);

      std::string path = writeTemp(tieredPlan(net, N, true), "tiered.plan");
      auto plan = Plan::load(path);
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_TRUE((*plan)->tiered());
      absl::StatusOr<ExpertTiersDesc> all = (*plan)->expertTiers();
      ASSERT_TRUE(all.ok()) << all.status();
      EXPECT_EQ(all->hotExperts, 8u);
      uint64_t fixed = all->residentBytes;
      uint64_t expert = all->layers[0].expertBytes;
      for (uint64_t resident : {8, 4, 2, 0})
        for (const char *read : {"pread", "direct", "mmap"}) {
          SCOPED_TRACE(absl::StrCat(int8 ? "int8" : "f32", ", ", N, " rows, ",
                                    resident, " of 8 hot, ", read));
          // Room for the hot experts and two cold ones.
          uint64_t budget =
              fixed + (resident + (resident < 8 ? 2 : 0)) * expert;
          absl::StatusOr<TieredRun> got =
              runPlan(**plan, x, offsets, net.H, budget, read, /*runs=*/2);
          ASSERT_TRUE(got.ok()) << got.status();
          expectSameFloats(got->y, want->y);
          EXPECT_TRUE(got->cache.tiered);
          EXPECT_EQ(got->cache.hotExperts, resident);
          EXPECT_LE(got->cache.usedBytes, got->cache.capacityBytes);
          EXPECT_EQ(got->cache.capacityBytes, budget - fixed);
          int active = 6;
          EXPECT_EQ(got->step.cache.hits + got->step.cache.misses, 2u * active);
          if (resident == 8) {
            EXPECT_EQ(got->step.cache.misses, 0u);
          }
          if (resident == 0) {
            EXPECT_GE(got->step.cache.rounds, 2u * 3); // 6 experts, 2 a round.
          }
          EXPECT_EQ(got->step.cache.bytesPagedIn,
                    got->step.cache.misses * expert);
        }
      // Each cache policy: the same outputs; the hot set read at the start,
      // only the policy's share of it pinned.
      for (auto [cache, pinned] :
           std::vector<std::pair<const char *, uint32_t>>{
               {"lru", 0},
               {"lfu", 0},
               {"adaptive", 0},
               {"lru:0.5", 2},
               {"lfu:0.75", 3},
               {"adaptive:0.5", 2}}) {
        SCOPED_TRACE(
            absl::StrCat(int8 ? "int8" : "f32", ", ", N, " rows, ", cache));
        uint64_t budget = fixed + (4 + 2) * expert;
        absl::StatusOr<TieredRun> got =
            runPlan(**plan, x, offsets, net.H, budget, "pread", 3, cache);
        ASSERT_TRUE(got.ok()) << got.status();
        expectSameFloats(got->y, want->y);
        EXPECT_EQ(got->cache.hotExperts, pinned);
        EXPECT_EQ(got->cache.policy, cache);
        EXPECT_LE(got->cache.usedBytes, got->cache.capacityBytes);
        EXPECT_EQ(got->step.cache.hits + got->step.cache.misses, 3u * 6);
      }
    }
  }
}

TEST(TieredExperts, ReadsTheMissesWhileTheHitsCompute) {
  Network net = testNetwork(false);
  // Experts 0, 1, 3, 4, 6 and 7 have rows; 0 to 3 are hot (by index).
  std::vector<int64_t> offsets = {0, 1, 3, 3, 4, 5, 5, 7, 8};
  int64_t N = offsets.back();
  std::vector<float> x = randomFloats(N * net.H, 9);
  std::vector<uint8_t> resident = tieredPlan(net, N, false);
  auto plain = Plan::loadFromMemory(resident.data(), resident.size());
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<TieredRun> want = runPlan(**plain, x, offsets, net.H);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<uint8_t> good = tieredPlan(net, N, true);
  auto plan = Plan::load(writeTemp(good, "overlap.plan"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<ExpertTiersDesc> all = (*plan)->expertTiers();
  ASSERT_TRUE(all.ok()) << all.status();
  uint64_t expert = all->layers[0].expertBytes;
  uint64_t budget = all->residentBytes + (4 + 2) * expert;
  for (const char *read : {"pread", "direct", "mmap"}) {
    SCOPED_TRACE(read);
    absl::StatusOr<TieredRun> got =
        runPlan(**plan, x, offsets, net.H, budget, read, /*runs=*/1);
    ASSERT_TRUE(got.ok()) << got.status();
    expectSameFloats(got->y, want->y);
    // The hits (0, 1, 3) in a round of their own while the readers read 4
    // and 6 (the cold cache holds two), then 4 and 6 (together, or each as
    // its read ends), then 7 in their room: 3 or 4 rounds, where reading
    // the misses before computing anything takes 2.
    EXPECT_EQ(got->step.cache.hits, 3u);
    EXPECT_EQ(got->step.cache.misses, 3u);
    EXPECT_GE(got->step.cache.rounds, 3u);
    EXPECT_LE(got->step.cache.rounds, 4u);
    EXPECT_EQ(got->step.cache.bytesPagedIn, 3 * expert);
  }
  // A cold expert that fails its checksum while the hits compute: the step
  // reads it again and names it.
  std::vector<uint8_t> bad = good;
  detail::SectionEntry paged =
      detail::decodeSection(bad.data() + kFileHeaderSize + kSectionEntrySize);
  uint64_t w1 = net.weightInputs(/*lead=*/true)[0]->bytes.size() / net.E;
  bad[paged.offset + 6 * w1 + 5] ^= 1; // Expert 6 of w1.
  auto corrupt = Plan::load(writeTemp(bad, "overlap_flip.plan"));
  ASSERT_TRUE(corrupt.ok()) << corrupt.status();
  EXPECT_THAT(runPlan(**corrupt, x, offsets, net.H, budget).status(),
              StatusHas("step 0 'experts' (Experts): expert 6's bytes of "
                        "'w0' (input 2, section 1"));
}

TEST(TieredExperts, AutoReadsDirectWhenTheColdExpertsDoNotFit) {
  using detail::chooseExpertReadMode;
  constexpr uint64_t G = uint64_t{1} << 30;
  EXPECT_EQ(chooseExpertReadMode(7 * G, G + G / 2, 3 * G),
            detail::ExpertReadMode::Direct);
  EXPECT_EQ(chooseExpertReadMode(G, G, 3 * G), detail::ExpertReadMode::Pread);
  // Nothing cold, or the memory unknown.
  EXPECT_EQ(chooseExpertReadMode(0, 4 * G, 3 * G),
            detail::ExpertReadMode::Pread);
  EXPECT_EQ(chooseExpertReadMode(7 * G, G, 0), detail::ExpertReadMode::Pread);
  EXPECT_GT(processMemoryAvailable(), 0u);
  EXPECT_THAT(detail::parseExpertReadMode("fast").status(),
              StatusHas("must be pread, direct, mmap or auto, not 'fast'"));

  // A small plan's cold experts fit: buffered reads, the same outputs.
  Network net = testNetwork(false);
  std::vector<int64_t> offsets = {0, 1, 3, 3, 4, 5, 5, 7, 8};
  int64_t N = offsets.back();
  std::vector<float> x = randomFloats(N * net.H, 4);
  std::vector<uint8_t> resident = tieredPlan(net, N, false);
  auto plain = Plan::loadFromMemory(resident.data(), resident.size());
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<TieredRun> want = runPlan(**plain, x, offsets, net.H);
  ASSERT_TRUE(want.ok()) << want.status();
  auto plan = Plan::load(writeTemp(tieredPlan(net, N, true), "auto.plan"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<ExpertTiersDesc> all = (*plan)->expertTiers();
  ASSERT_TRUE(all.ok()) << all.status();
  absl::StatusOr<TieredRun> got =
      runPlan(**plan, x, offsets, net.H,
              all->residentBytes + 4 * all->layers[0].expertBytes, "auto");
  ASSERT_TRUE(got.ok()) << got.status();
  expectSameFloats(got->y, want->y);
  EXPECT_EQ(got->cache.readMode, "pread");
}

TEST(ExpertCache, WithAHalfLifeEvictsTheLeastUsed) {
  ExpertCache cache(300);
  cache.setEviction(ExpertCache::Eviction::Lfu, 100);
  std::vector<ExpertCache::Evicted> evicted;
  // Expert 0 looked up three times, 1 twice, 2 once (the newest).
  for (uint32_t e : {0, 0, 1, 0, 1, 2}) {
    if (!cache.find({0, e})) {
      ASSERT_NE(cache.insert({0, e}, 100, false, evicted), nullptr);
    }
  }
  ASSERT_TRUE(evicted.empty());
  // 3 evicts 2, the least used, not 0, the least recently used.
  ASSERT_EQ(cache.find({0, 3}), nullptr);
  ASSERT_NE(cache.insert({0, 3}, 100, false, evicted), nullptr);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key.expert, 2u);
  // Two more lookups of 3: 2 again evicts 1, now the least used; then after
  // many lookups of 3 and 2, 0's old uses weigh least: 1 evicts 0.
  ASSERT_NE(cache.find({0, 3}), nullptr);
  ASSERT_NE(cache.find({0, 3}), nullptr);
  evicted.clear();
  ASSERT_EQ(cache.find({0, 2}), nullptr);
  ASSERT_NE(cache.insert({0, 2}, 100, false, evicted), nullptr);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key.expert, 1u);
  for (int i = 0; i < 400; ++i)
    for (uint32_t e : {3u, 2u})
      ASSERT_NE(cache.find({0, e}), nullptr);
  evicted.clear();
  ASSERT_EQ(cache.find({0, 1}), nullptr);
  ASSERT_NE(cache.insert({0, 1}, 100, false, evicted), nullptr);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key.expert, 0u);
  EXPECT_EQ(cache.used(), 300u);
}

TEST(ExpertCache, PoliciesParse) {
  for (const char *text : {"", "static", "lru", "lfu", "lru:0.5", "lfu:1",
                           "adaptive", "adaptive:0.25"}) {
    absl::StatusOr<detail::ExpertCachePolicy> policy =
        detail::parseExpertCachePolicy(text);
    ASSERT_TRUE(policy.ok()) << text << ": " << policy.status();
    std::string name = detail::expertCachePolicyName(*policy);
    EXPECT_EQ(name, *text ? text : "static");
  }
  for (const char *text : {"lru:", "lru:2", "lfu:-1", "lfu:x", "mru",
                           "static:1", "adaptive:", "arc"})
    EXPECT_FALSE(detail::parseExpertCachePolicy(text).ok()) << text;
}

/// The tiers of `net`'s one-layer plan with every expert hot (its resident
/// and per-expert bytes).
absl::StatusOr<ExpertTiersDesc> allHotTiers(const Network &net) {
  std::vector<uint8_t> probe = tieredPlan(net, 4, true);
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Plan> loaded,
                         Plan::loadFromMemory(probe.data(), probe.size()));
  return loaded->expertTiers();
}

TEST(TieredExperts, ThePlansTiersFollowTheProfileAndTheBudget) {
  Network net = testNetwork(false);
  absl::StatusOr<ExpertTiersDesc> all = allHotTiers(net);
  ASSERT_TRUE(all.ok()) << all.status();
  uint64_t fixed = all->residentBytes;
  uint64_t expert = all->layers[0].expertBytes;
  // Three hot experts, the three most loaded, and room for two cold ones.
  std::vector<uint8_t> bytes =
      tieredPlan(net, 4, true, fixed + 5 * expert, {1, 0, 7, 0, 9, 0, 0, 3});
  auto plan = Plan::loadFromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorTiers);
  absl::StatusOr<ExpertTiersDesc> tiers = (*plan)->expertTiers();
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_EQ(
      tiers->layers[0].hot,
      (std::vector<bool>{false, false, true, false, true, false, false, true}));
  EXPECT_EQ(tiers->coldBytes, 5 * expert);
  // Too small for one token's two experts: refused when written.
  EXPECT_THAT(writeTieredPlan(net, 4, true, fixed + expert, {}).status(),
              StatusHas("the cold experts' cache needs at least"));
}

TEST(TieredExperts, ThePlansPrefetchIsRecordedAndLeavesRoomToReadAhead) {
  Network net = testNetwork(false);
  absl::StatusOr<ExpertTiersDesc> all = allHotTiers(net);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->prefetch, "none");
  uint64_t budget = all->residentBytes + 5 * all->layers[0].expertBytes;
  // Without a prefetch the cold cache keeps room for one token's two
  // experts (3 hot); with one, for a second layer's two as well (1 hot).
  for (auto [prefetch, hot] : {std::pair(fb::TierPrefetch::None, 3u),
                               std::pair(fb::TierPrefetch::NextLayer, 1u)}) {
    absl::StatusOr<std::vector<uint8_t>> bytes =
        writeTieredPlan(net, 4, true, budget, {}, prefetch);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->versionMinor(),
              prefetch == fb::TierPrefetch::None
                  ? detail::kFormatVersionMinorTiers
                  : detail::kFormatVersionMinorTierPrefetch);
    absl::StatusOr<ExpertTiersDesc> tiers = (*plan)->expertTiers();
    ASSERT_TRUE(tiers.ok()) << tiers.status();
    EXPECT_EQ(tiers->hotExperts, hot);
    EXPECT_EQ(tiers->prefetch,
              prefetch == fb::TierPrefetch::None ? "none" : "next-layer");
    // One layer: nothing to read ahead for.
    EXPECT_EQ(tiers->layersReadAhead, 0u);
    if (prefetch == fb::TierPrefetch::None)
      continue;
    // A file that declares an older version cannot carry the policy.
    std::vector<uint8_t> older = *bytes;
    detail::FileHeader header = detail::decodeHeader(older.data());
    header.versionMinor = detail::kFormatVersionMinorMicroBatchTiers;
    detail::encodeHeader(header, older.data());
    header.checksum =
        detail::headerChecksum(older.data(), older.data() + kFileHeaderSize,
                               header.sectionCount * kSectionEntrySize);
    detail::encodeHeader(header, older.data());
    EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
                StatusHas("expert tiers: a prefetch needs format 1.8, but "
                          "the file is version 1.7"));
  }
  EXPECT_THAT(writeTieredPlan(net, 4, true, budget, {},
                              static_cast<fb::TierPrefetch>(7))
                  .status(),
              StatusHas("prefetch 7 is no TierPrefetch"));
  // A file with a value outside the enum: the two plans differ only in the
  // policy's byte (1 and 2), which becomes 7 (the checksums repaired).
  absl::StatusOr<std::vector<uint8_t>> nextLayer =
      writeTieredPlan(net, 4, true, budget, {}, fb::TierPrefetch::NextLayer);
  absl::StatusOr<std::vector<uint8_t>> nextBatch = writeTieredPlan(
      net, 4, true, budget, {}, fb::TierPrefetch::NextMicroBatch);
  ASSERT_TRUE(nextLayer.ok() && nextBatch.ok());
  ASSERT_EQ(nextLayer->size(), nextBatch->size());
  detail::SectionEntry program =
      detail::decodeSection(nextLayer->data() + kFileHeaderSize);
  std::vector<size_t> differ;
  for (size_t i = 0; i < program.size; ++i)
    if ((*nextLayer)[program.offset + i] != (*nextBatch)[program.offset + i])
      differ.push_back(i);
  ASSERT_EQ(differ.size(), 1u);
  std::vector<uint8_t> bad = flipProgram(*nextLayer, differ[0], 1 ^ 7);
  EXPECT_THAT(Plan::loadFromMemory(bad.data(), bad.size()).status(),
              StatusHas("expert tiers: prefetch 7 is no read-ahead policy"));
}

/// Overwrites 4 bytes of `bytes` at `offset` and repairs the checksums of
/// the header (and of the program when it holds `offset`).
void patchFile(std::vector<uint8_t> &bytes, uint64_t offset, uint32_t value,
               bool fixHeader) {
  std::memcpy(bytes.data() + offset, &value, 4);
  if (!fixHeader)
    return;
  detail::FileHeader header = detail::decodeHeader(bytes.data());
  size_t table = header.sectionCount * kSectionEntrySize;
  header.checksum = detail::headerChecksum(
      bytes.data(), bytes.data() + kFileHeaderSize, table);
  detail::encodeHeader(header, bytes.data());
}

TEST(TieredExperts, CorruptPagedSectionsAreClearErrors) {
  Network net = testNetwork(false);
  std::vector<uint8_t> good = tieredPlan(net, 4, true);
  detail::FileHeader header = detail::decodeHeader(good.data());
  ASSERT_EQ(header.sectionCount, 2u);
  detail::SectionEntry paged =
      detail::decodeSection(good.data() + kFileHeaderSize + kSectionEntrySize);
  ASSERT_EQ(paged.flags, kSectionFlagPaged);

  // A paged section past the end of the file: refused at load, named.
  {
    std::vector<uint8_t> bad = good;
    uint64_t size = paged.size + 4096;
    uint64_t at = kFileHeaderSize + kSectionEntrySize + 16;
    std::memcpy(bad.data() + at, &size, 8);
    patchFile(bad, at, static_cast<uint32_t>(size), true);
    std::string path = writeTemp(bad, "paged_oob.plan");
    EXPECT_THAT(Plan::load(path).status(), StatusHas("section 1: bytes ["));
  }
  // Truncated inside the paged section: refused at load.
  {
    std::vector<uint8_t> bad(good.begin(), good.end() - 100);
    std::string path = writeTemp(bad, "paged_truncated.plan");
    EXPECT_THAT(Plan::load(path).status(), StatusHas("(truncated?)"));
  }
  // A flipped byte of a cold expert: the read of that expert fails with
  // the step and expert named; the load and the session succeed.
  {
    std::vector<uint8_t> bad = good;
    bad[paged.offset + 5] ^= 1; // Expert 0 of w1.
    std::string path = writeTemp(bad, "paged_flip.plan");
    auto plan = Plan::load(path);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<ExpertTiersDesc> tiers = (*plan)->expertTiers();
    ASSERT_TRUE(tiers.ok());
    uint64_t expert = tiers->layers[0].expertBytes;
    uint64_t fixed = tiers->residentBytes;
    std::vector<int64_t> offsets = {0, 1, 2, 3, 4, 4, 4, 4, 4};
    std::vector<float> x = randomFloats(4 * net.H, 1);
    EXPECT_THAT(runPlan(**plan, x, offsets, net.H, fixed + 2 * expert).status(),
                StatusHas("step 0 'experts' (Experts): expert 0's bytes of "
                          "'w0' (input 2, section 1"));
    // Hot, it fails when the session starts.
    EXPECT_THAT(runPlan(**plan, x, offsets, net.H).status(),
                StatusHas("fail their checksum"));
  }
  // Paged weights in a plan that declares no tiers: refused at load.
  {
    PlanWriter writer;
    ScheduleBuilder &s = writer.schedule();
    int32_t x = s.addTensor("x", DType::F32, {4});
    int32_t y = s.addTensor("y", DType::F32, {4});
    std::vector<float> w(4, 1.0f);
    int32_t weight = s.addWeight("w", DType::F32, {4}, w.data(), 16,
                                 writer.addWeightSection(true));
    s.addInput(x);
    s.addOutput(y);
    s.addStep(fb::OpKind::Add, "add", {x, weight}, {y});
    absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
    ASSERT_TRUE(bytes.ok());
    EXPECT_THAT(Plan::loadFromMemory(bytes->data(), bytes->size()).status(),
                StatusHas("lies in paged section 1 but the schedule has no "
                          "expert tiers"));
  }
  // A budget on a plan that is not tiered.
  {
    std::vector<uint8_t> plain = tieredPlan(net, 4, false);
    auto plan = Plan::loadFromMemory(plain.data(), plain.size());
    ASSERT_TRUE(plan.ok());
    SessionOptions options;
    options.deviceMemory = 1 << 20;
    EXPECT_THAT(Session::create(**plan, options).status(),
                StatusHas("needs a tiered plan"));
  }
}

} // namespace
} // namespace moert::testing
