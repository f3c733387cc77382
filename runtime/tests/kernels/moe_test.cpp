//===- moe_test.cpp - Router, Dispatch, Experts, SharedExpert, Combine ----===//
//
// Every kernel against a naive double-precision reference written from the
// moe dialect's op semantics: gate variants, capacity, grouped selection,
// every activation in both weight layouts, empty experts, one token and many.
//
//===----------------------------------------------------------------------===//

#include "expert_network.h"
#include "format/plan_writer.h"
#include "kernels/stream.h"
#include "moert/stats.h"
#include "plan_bytes.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moert::testing {
namespace {

using fb::OpKind;

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

/// Indices of `values` sorted best first, ties to the lower index.
std::vector<int64_t> rank(const std::vector<double> &values) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  return order;
}

/// The op's numbered steps, literally, for `sequences` sequences of tokens.
void referenceRouter(const RouterSpec &spec, const std::vector<float> &logits,
                     const std::vector<float> *bias, int64_t E,
                     int64_t sequences, std::vector<float> &weights,
                     std::vector<int64_t> &indices) {
  int64_t T = logits.size() / E, k = spec.topK;
  weights.assign(T * k, 0);
  indices.assign(T * k, 0);
  for (int64_t t = 0; t < T; ++t) {
    const float *l = logits.data() + t * E;
    std::vector<double> s(E), c(E);
    double max = *std::max_element(l, l + E), sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (spec.afterTopK)
        s[e] = l[e];
      else if (spec.score == fb::ScoreFunction::Sigmoid)
        s[e] = 1 / (1 + std::exp(-double(l[e])));
      else
        sum += s[e] = std::exp(double(l[e]) - max);
    }
    for (int64_t e = 0; e < E; ++e) {
      if (!spec.afterTopK && spec.score == fb::ScoreFunction::Softmax)
        s[e] /= sum;
      c[e] = s[e] + (bias ? (*bias)[e] : 0.0);
    }
    std::vector<bool> eligible(E, true);
    if (spec.groups > 1) {
      int64_t size = E / spec.groups;
      std::vector<double> groupScore(spec.groups);
      for (int64_t g = 0; g < spec.groups; ++g) {
        std::vector<double> members(c.begin() + g * size,
                                    c.begin() + (g + 1) * size);
        std::vector<int64_t> order = rank(members);
        groupScore[g] = members[order[0]] + members[order[1]];
      }
      std::vector<int64_t> order = rank(groupScore);
      eligible.assign(E, false);
      for (int64_t i = 0; i < spec.keep; ++i)
        for (int64_t e = 0; e < size; ++e)
          eligible[order[i] * size + e] = true;
    }
    std::vector<double> candidates(E);
    for (int64_t e = 0; e < E; ++e)
      candidates[e] = eligible[e] ? c[e] : -INFINITY;
    std::vector<int64_t> order = rank(candidates);
    std::vector<double> w(k);
    for (int64_t j = 0; j < k; ++j)
      w[j] = s[order[j]];
    if (spec.afterTopK) {
      double m = *std::max_element(w.begin(), w.end()), total = 0;
      for (double &v : w)
        total += v = std::exp(v - m);
      for (double &v : w)
        v /= total;
    }
    if (spec.normalize) {
      double total = std::accumulate(w.begin(), w.end(), 0.0);
      for (double &v : w)
        v /= total + 1e-20;
    }
    for (int64_t j = 0; j < k; ++j) {
      weights[t * k + j] = static_cast<float>(w[j] * spec.scale);
      indices[t * k + j] = order[j];
    }
  }
  if (!spec.capacity)
    return;
  int64_t length = T / sequences;
  for (int64_t b = 0; b < sequences; ++b) {
    std::vector<int64_t> load(E, 0);
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = b * length; t < (b + 1) * length; ++t) {
        int64_t &e = indices[t * k + j];
        if (load[e] == spec.capacity)
          e = -1;
        else
          ++load[e];
      }
  }
  // 9. normalize_kept: over each token's kept choices, in f32 as GShard.
  if (spec.keptEpsilon == 0)
    return;
  for (int64_t t = 0; t < T; ++t) {
    float sum = 0;
    for (int64_t j = 0; j < k; ++j)
      if (indices[t * k + j] >= 0)
        sum += weights[t * k + j];
    for (int64_t j = 0; j < k; ++j) {
      float &w = weights[t * k + j];
      w = indices[t * k + j] >= 0 ? w / std::max(sum, spec.keptEpsilon) : 0;
    }
  }
}

/// Runs a Router step on logits of `shape` and checks it against the
/// reference.
void checkRouter(const RouterSpec &spec, std::vector<int64_t> shape,
                 uint32_t seed, bool withBias = false) {
  int64_t E = shape.back(), count = 1;
  for (int64_t d : shape)
    count *= d;
  std::vector<float> logits = randomFloats(count, seed);
  for (float &v : logits)
    v *= 3;
  std::vector<float> bias = randomFloats(E, seed + 1);
  std::vector<int64_t> outShape = shape;
  outShape.back() = spec.topK;
  std::vector<PlanDim> outDims(outShape.begin(), outShape.end());
  std::vector<std::optional<Value>> inputs = {f32(shape, logits)};
  if (withBias)
    inputs.push_back(f32({E}, bias));
  auto r = runStep(OpKind::Router, inputs,
                   {{DType::F32, outDims}, {DType::I64, outDims}},
                   routerAttrs(spec), /*threads=*/3);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> weights;
  std::vector<int64_t> indices;
  referenceRouter(spec, logits, withBias ? &bias : nullptr, E,
                  shape.size() == 3 ? shape[0] : 1, weights, indices);
  EXPECT_EQ((*r)[1].as<int64_t>(), indices);
  expectNear((*r)[0], outShape, weights, 1e-6f);
}

TEST(Router, SoftmaxTopTwoRenormalisedOneTokenAndMany) {
  RouterSpec mixtral;
  mixtral.normalize = true;
  checkRouter(mixtral, {1, 8}, 1);
  checkRouter(mixtral, {700, 8}, 2);
}

TEST(Router, SoftmaxWithoutRenormalisation) {
  RouterSpec qwen;
  qwen.topK = 4;
  checkRouter(qwen, {33, 60}, 3);
}

TEST(Router, SigmoidBiasGroupsAndScale) {
  // DeepSeek-V3: the bias picks the experts, the weights stay unbiased.
  RouterSpec deepseek;
  deepseek.score = fb::ScoreFunction::Sigmoid;
  deepseek.topK = 4;
  deepseek.groups = 4;
  deepseek.keep = 2;
  deepseek.normalize = true;
  deepseek.scale = 2.5f;
  checkRouter(deepseek, {1, 32}, 4, /*withBias=*/true);
  checkRouter(deepseek, {257, 32}, 5, /*withBias=*/true);
}

TEST(Router, GroupedSelectionOnlyPicksFromKeptGroups) {
  // Groups {0,1}, {2,3}, {4,5}: group scores 1.1, 1.6, 1.2; keep 1 group, so
  // the best single expert (4, in a losing group) is not eligible.
  RouterSpec spec;
  spec.score = fb::ScoreFunction::Sigmoid;
  spec.topK = 2;
  spec.groups = 3;
  spec.keep = 1;
  std::vector<float> logits = {0.1f, 1.0f, 0.8f, 0.8f, 1.2f, 0.0f};
  // Work with the scores directly: the bias makes c = logits exactly after
  // subtracting the sigmoid.
  std::vector<float> bias(6);
  for (int e = 0; e < 6; ++e)
    bias[e] = logits[e] - 1 / (1 + std::exp(-logits[e]));
  auto r =
      runStep(OpKind::Router, {f32({1, 6}, logits), f32({6}, bias)},
              {{DType::F32, {1, 2}}, {DType::I64, {1, 2}}}, routerAttrs(spec));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{2, 3}));
}

TEST(Router, SoftmaxAfterTopK) {
  RouterSpec gptOss;
  gptOss.topK = 4;
  gptOss.afterTopK = true;
  checkRouter(gptOss, {1, 32}, 6);
  checkRouter(gptOss, {50, 32}, 7);
}

TEST(Router, TiesGoToTheLowerExpertIndex) {
  RouterSpec spec;
  spec.topK = 3;
  auto r =
      runStep(OpKind::Router, {f32({1, 5}, {1, 2, 1, 2, 2})},
              {{DType::F32, {1, 3}}, {DType::I64, {1, 3}}}, routerAttrs(spec));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{1, 3, 4}));
}

TEST(Router, NaNRanksAboveEveryNumber) {
  RouterSpec spec;
  spec.score = fb::ScoreFunction::Sigmoid;
  spec.topK = 2;
  auto r =
      runStep(OpKind::Router, {f32({1, 4}, {0, NAN, 5, 1})},
              {{DType::F32, {1, 2}}, {DType::I64, {1, 2}}}, routerAttrs(spec));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{1, 2}));
}

/// Routes four tokens top-2 of 3 experts with capacity 2 (and `spec`'s other
/// attributes): first choices of all tokens are accepted before any second
/// choice. Token choices: t0 (0, 1), t1 (0, 2), t2 (0, 1), t3 (1, 0). First
/// choices: e0 gets t0, t1; t2's is dropped; e1 gets t3. Second choices: t0
/// -> e1 (2nd slot), t1 -> e2, t2 -> e1 (full: dropped), t3 -> e0 (full:
/// dropped). Returns the weights after checking those indices.
std::vector<float> routeWithCapacityTwo(RouterSpec spec) {
  spec.capacity = 2;
  std::vector<float> logits = {3, 2, 0, 3, 0, 2, 3, 2, 0, 2, 3, 0};
  auto r =
      runStep(OpKind::Router, {f32({4, 3}, logits)},
              {{DType::F32, {4, 2}}, {DType::I64, {4, 2}}}, routerAttrs(spec));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok())
    return {};
  EXPECT_EQ((*r)[1].as<int64_t>(),
            (std::vector<int64_t>{0, 1, 0, 2, -1, -1, 1, -1}));
  return (*r)[0].as<float>();
}

TEST(Router, CapacityDropsInPriorityOrder) {
  std::vector<float> w = routeWithCapacityTwo(RouterSpec());
  ASSERT_EQ(w.size(), 8u);
  // Dropped assignments keep their weights.
  EXPECT_GT(w[4], 0.5f);
  EXPECT_GT(w[7], 0.0f);
}

TEST(Router, SwitchCapacityCountsPerSequence) {
  RouterSpec switchTop1;
  switchTop1.topK = 1;
  switchTop1.capacity = 3;
  checkRouter(switchTop1, {3, 10, 4}, 8);
  // k = 2 with capacity over [B, S, E] as well.
  RouterSpec spec;
  spec.capacity = 4;
  spec.normalize = true;
  checkRouter(spec, {2, 9, 4}, 9);
}

TEST(Router, GShardRenormalisesOverTheKeptChoices) {
  // routeWithCapacityTwo's example with normalize_kept: t0 and t1 keep both
  // choices (their two weights sum to 1), t2 keeps none and t3 only its
  // first (weight 1); rejected weights are 0.
  RouterSpec spec;
  spec.keptEpsilon = 1.1920929e-7f;
  std::vector<float> w = routeWithCapacityTwo(spec);
  ASSERT_EQ(w.size(), 8u);
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.0f);
  EXPECT_GT(w[0], w[1]);
  EXPECT_FLOAT_EQ(w[2] + w[3], 1.0f);
  EXPECT_EQ(w[4], 0.0f);
  EXPECT_EQ(w[5], 0.0f);
  EXPECT_EQ(w[6], 1.0f);
  EXPECT_EQ(w[7], 0.0f);
  // Against the reference, over [T, E] and [B, S, E], with drops.
  spec.capacity = 2;
  checkRouter(spec, {60, 4}, 10);
  checkRouter(spec, {3, 20, 4}, 11);
  spec.topK = 1;
  checkRouter(spec, {40, 8}, 12);
}

/// Checks that `writer`'s plan is written as 1.10, and that the same bytes
/// declared 1.9 are refused with `message`.
void expectFormat110(PlanWriter &writer, const std::string &message) {
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->versionMinor(), detail::kFormatVersionMinorKeptNormalize);
  std::vector<uint8_t> older =
      rewrite(*bytes, [](detail::FileHeader &header, auto &) {
        header.versionMinor = detail::kFormatVersionMinorGenai;
      });
  EXPECT_THAT(Plan::loadFromMemory(older.data(), older.size()).status(),
              StatusHas(message));
}

TEST(Router, NormalizeKeptNeedsFormat110) {
  // A plan with a kept renormalisation is 1.10; a file that declares itself
  // older with one is refused (a 1.9 runtime would ignore the field).
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  int32_t logits = s.addTensor("logits", DType::F32, dimsOf({4, 3}));
  s.addInput(logits);
  int32_t w = s.addTensor("w", DType::F32, dimsOf({4, 2}));
  int32_t i = s.addTensor("i", DType::I64, dimsOf({4, 2}));
  s.addOutput(w);
  s.addOutput(i);
  RouterSpec spec;
  spec.capacity = 2;
  spec.keptEpsilon = 1e-7f;
  s.addStep(OpKind::Router, "router", {logits}, {w, i}, routerAttrs(spec));
  expectFormat110(writer, "step 0 is a Router with normalize_kept, which "
                          "needs format 1.10, but the file is version 1.9");
}

TEST(Experts, ReluSquaredNeedsFormat110) {
  // relu_squared experts are written as 1.10; a file that declares itself
  // older with them is refused (a 1.9 runtime does not know the activation).
  Network net;
  net.activation = fb::Activation::ReluSquared;
  net.init(/*experts=*/2, /*hidden=*/4, /*inter=*/3, /*seed=*/5);
  PlanWriter writer;
  ScheduleBuilder &s = writer.schedule();
  ExpertsSignature sig = addExpertsSignature(s, /*N=*/2, net.H, net.E);
  addExpertsStep(s, net, sig.tokens, sig.offsets, sig.out);
  expectFormat110(writer, "step 0 has the relu_squared activation, which "
                          "needs format 1.10, but the file is version 1.9");
}

TEST(Router, RejectsInvalidAttributesAtLoad) {
  auto load = [](const RouterSpec &spec, int64_t experts = 8) {
    return runStep(OpKind::Router,
                   {f32({1, experts}, randomFloats(experts, 1))},
                   {{DType::F32, {1, spec.topK}}, {DType::I64, {1, spec.topK}}},
                   routerAttrs(spec))
        .status();
  };
  RouterSpec spec;
  spec.topK = 9;
  EXPECT_THAT(load(spec), StatusHas("top_k 9 is not in [1, 8]"));
  spec = RouterSpec();
  spec.groups = 3;
  EXPECT_THAT(load(spec), StatusHas("n_group 3 does not divide the 8"));
  spec.groups = 4;
  spec.keep = 5;
  EXPECT_THAT(load(spec), StatusHas("topk_group 5 is not in [1, 4]"));
  spec = RouterSpec();
  spec.groups = 8;
  EXPECT_THAT(load(spec), StatusHas("a group scores by its best two"));
  spec = RouterSpec();
  spec.topK = 5;
  spec.groups = 4;
  spec.keep = 2;
  EXPECT_THAT(load(spec), StatusHas("hold fewer than top_k = 5"));
  spec = RouterSpec();
  spec.afterTopK = true;
  spec.normalize = true;
  EXPECT_THAT(load(spec), StatusHas("score_after_topk needs softmax"));
  spec = RouterSpec();
  spec.scale = 0;
  EXPECT_THAT(load(spec), StatusHas("must be positive and finite"));
  spec = RouterSpec();
  spec.capacity = -1;
  EXPECT_THAT(load(spec), StatusHas("capacity -1 is negative"));
  spec = RouterSpec();
  spec.keptEpsilon = 1e-7f;
  EXPECT_THAT(load(spec), StatusHas("with a capacity"));
  spec.capacity = 4;
  spec.normalize = true;
  EXPECT_THAT(load(spec), StatusHas("without normalize"));
  spec.normalize = false;
  spec.keptEpsilon = -1;
  EXPECT_THAT(load(spec), StatusHas("must be positive and finite"));
  // The output's last dimension must be top_k.
  EXPECT_THAT(runStep(OpKind::Router, {f32({1, 4}, {1, 2, 3, 4})},
                      {{DType::F32, {1, 3}}, {DType::I64, {1, 3}}},
                      routerAttrs(RouterSpec()))
                  .status(),
              StatusHas("must be top_k = 2"));
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

fb::AttrsUnion dispatchAttrs(int64_t experts) {
  fb::DispatchAttrsT a;
  a.num_experts = experts;
  return attrs(a);
}

TEST(Dispatch, GroupsRowsByExpertStably) {
  // 3 tokens, k = 2, 4 experts (expert 3 gets none); one dropped assignment.
  std::vector<float> x = {1, 1, 2, 2, 3, 3};
  std::vector<int64_t> idx = {2, 0, 0, -1, 2, 1};
  auto r = runStep(OpKind::Dispatch, {f32({3, 2}, x), i64({3, 2}, idx)},
                   {{DType::F32, {6, 2}}, {DType::I64, {5}}, {DType::I64, {6}}},
                   dispatchAttrs(4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[1].as<int64_t>(), (std::vector<int64_t>{0, 2, 3, 5, 5}));
  EXPECT_EQ((*r)[2].as<int64_t>(), (std::vector<int64_t>{1, 2, 5, 0, 4, -1}));
  expectNear((*r)[0], {6, 2}, {1, 1, 2, 2, 3, 3, 1, 1, 3, 3, 0, 0});
}

TEST(Dispatch, ManyTokensMatchACountingSort) {
  const int64_t T = 300, k = 3, H = 5, E = 7;
  std::vector<float> x = randomFloats(T * H, 10);
  std::vector<int64_t> idx(T * k);
  for (int64_t a = 0; a < T * k; ++a)
    idx[a] = (a * 7919 + a / 5) % (E + 1) - 1; // Some -1, expert 6 rare.
  auto r = runStep(
      OpKind::Dispatch, {f32({T, H}, x), i64({T, k}, idx)},
      {{DType::F32, {T * k, H}}, {DType::I64, {E + 1}}, {DType::I64, {T * k}}},
      dispatchAttrs(E));
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int64_t> offsets = (*r)[1].as<int64_t>();
  std::vector<int64_t> source = (*r)[2].as<int64_t>();
  std::vector<float> rows = (*r)[0].as<float>();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(offsets[e], row);
    for (int64_t a = 0; a < T * k; ++a)
      if (idx[a] == e) {
        ASSERT_EQ(source[row], a);
        for (int64_t h = 0; h < H; ++h)
          EXPECT_EQ(rows[row * H + h], x[a / k * H + h]);
        ++row;
      }
  }
  EXPECT_EQ(offsets[E], row);
  for (; row < T * k; ++row)
    EXPECT_EQ(source[row], -1);
}

TEST(Dispatch, RejectsOutOfRangeExpertIndices) {
  auto r = runStep(OpKind::Dispatch, {f32({2, 1}, {1, 2}), i64({2, 1}, {0, 3})},
                   {{DType::F32, {2, 1}}, {DType::I64, {4}}, {DType::I64, {2}}},
                   dispatchAttrs(3));
  EXPECT_THAT(r.status(), StatusHas("expert index 3 at position 1 is out of "
                                    "range [-1, 3)"));
  r = runStep(OpKind::Dispatch, {f32({2, 1}, {1, 2}), i64({2, 1}, {0, 1})},
              {{DType::F32, {2, 1}}, {DType::I64, {3}}, {DType::I64, {2}}},
              dispatchAttrs(3));
  EXPECT_THAT(r.status(), StatusHas("expected [4] (num_experts + 1)"));
}

//===----------------------------------------------------------------------===//
// Experts and SharedExpert
//===----------------------------------------------------------------------===//

TEST(Experts, EveryActivationLayoutAndPackingFewRowsPerExpert) {
  // Decoding-sized groups (the weight-streaming regime), with empty experts
  // and padding rows.
  for (Network net : everyNetwork()) {
    SCOPED_TRACE(describe(net));
    net.init(/*experts=*/5, /*hidden=*/12, /*inter=*/20, 11);
    checkExperts(net, {1, 0, 3, 0, 2}, /*padding=*/2, 12);
  }
}

TEST(Experts, EveryActivationLayoutAndPackingManyRowsPerExpert) {
  // GEMM-sized groups: more rows than one chunk for expert 1, a narrow
  // expert next to wide ones, an empty one.
  for (Network net : everyNetwork()) {
    SCOPED_TRACE(describe(net));
    net.init(/*experts=*/4, /*hidden=*/16, /*inter=*/24, 13);
    checkExperts(net, {40, 300, 0, 5}, /*padding=*/0, 14, /*threads=*/3);
  }
}

TEST(Experts, ColumnBlocksOfLargeNarrowExperts) {
  // Large enough that narrow experts split into several column blocks per
  // projection, with a remainder block.
  for (auto glu : {fb::GluLayout::Interleaved, fb::GluLayout::Concatenated}) {
    Network net;
    net.separateUp = false;
    net.glu = glu;
    net.biases = true;
    net.init(/*experts=*/3, /*hidden=*/256, /*inter=*/200, 15);
    checkExperts(net, {16, 1, 7}, 3, 16, /*threads=*/4);
  }
  Network w3;
  w3.inOut = true;
  w3.init(/*experts=*/2, /*hidden=*/272, /*inter=*/136, 17);
  checkExperts(w3, {9, 2}, 0, 18, /*threads=*/2);
  // Rows too long for serial column blocks: 16 rows run as a wide expert
  // next to a narrow one.
  Network longRows;
  longRows.activation = fb::Activation::Gelu;
  longRows.separateUp = false;
  longRows.biases = true;
  longRows.init(/*experts=*/2, /*hidden=*/1040, /*inter=*/48, 19);
  checkExperts(longRows, {16, 1}, 1, 20, /*threads=*/2);
}

TEST(Experts, SgemmBlocksWhereOneDnnHasNoF32Brgemm) {
  // The f32 GEMM blocks run oneDNN's brgemm matmul where it has one (AVX-512)
  // and sgemm elsewhere: the sgemm path, on every CPU.
  SgemmBlocks sgemm;
  for (Network net : everyNetwork()) {
    SCOPED_TRACE(describe(net));
    net.init(/*experts=*/4, /*hidden=*/16, /*inter=*/24, 13);
    checkExperts(net, {40, 300, 0, 5}, /*padding=*/0, 14, /*threads=*/3);
  }
}

TEST(Experts, RowSplitsOfFewRowsWithInOutWeights) {
  // [K, out] weights and up to 8 rows split along K into blocks of 128
  // weight rows whose partial products are summed: several blocks and a
  // short last one (150 = 128 + 22, 300 = 2 x 128 + 44), next to an expert
  // of 9 rows that runs GEMMs instead.
  for (Network net : everyNetwork()) {
    if (!net.inOut)
      continue;
    SCOPED_TRACE(describe(net));
    net.init(/*experts=*/4, /*hidden=*/150, /*inter=*/300, 21);
    checkExperts(net, {1, 8, 0, 9}, /*padding=*/1, 22, /*threads=*/3);
  }
}

TEST(Experts, InPlaceOverTheTokens) {
  // The output takes the tokens' arena slot: narrow and wide experts, chunks.
  Network net;
  net.separateUp = false;
  net.glu = fb::GluLayout::Interleaved;
  net.biases = true;
  net.init(/*experts=*/4, /*hidden=*/16, /*inter=*/24, 33);
  checkExperts(net, {3, 270, 0, 20}, /*padding=*/5, 34, 2, /*inPlace=*/true);
}

TEST(Experts, OneTokenAndEveryExpertEmpty) {
  Network net;
  net.init(/*experts=*/6, /*hidden=*/8, /*inter=*/16, 19);
  checkExperts(net, {0, 0, 0, 0, 1, 0}, 0, 20);
  // All assignments dropped: only padding rows, all zero.
  checkExperts(net, {0, 0, 0, 0, 0, 0}, 4, 21);
}

TEST(Experts, RejectsInconsistentOffsetsAndShapes) {
  Network net;
  net.init(2, 4, 6, 22);
  auto run = [&](std::vector<int64_t> offsets, const Network &n) {
    std::vector<std::optional<Value>> inputs = {
        f32({3, n.H}, randomFloats(3 * n.H, 1)), i64({3}, offsets)};
    for (auto &w : n.weightInputs(true))
      inputs.push_back(std::move(w));
    return runStep(OpKind::Experts, inputs, {{DType::F32, {3, n.H}}},
                   n.attributes())
        .status();
  };
  EXPECT_THAT(run({0, 2, 1}, net),
              StatusHas("offsets[2] = 1 is not in [offsets[1] = 2, 3]"));
  EXPECT_THAT(run({0, 2, 4}, net),
              StatusHas("offsets[2] = 4 is not in [offsets[1] = 2, 3]"));
  EXPECT_THAT(run({1, 2, 3}, net), StatusHas("offsets[0] is 1; expected 0"));
  std::vector<std::optional<Value>> badW2 = {
      f32({3, 4}, randomFloats(12, 1)),
      i64({3}, {0, 1, 2}),
      f32({2, 6, 4}, net.w1),
      std::nullopt,
      f32({2, 6, 4}, net.w3),
      std::nullopt,
      f32({2, 4, 5}, randomFloats(40, 2))};
  EXPECT_THAT(
      runStep(OpKind::Experts, badW2, {{DType::F32, {3, 4}}}, net.attributes())
          .status(),
      StatusHas("w2 has shape [2, 4, 5]; expected [2, 4, 6] ([E, H, "
                "F] with layout out_in)"));
  Network noGlu = net;
  noGlu.w3.clear();
  EXPECT_THAT(run({0, 1, 2}, noGlu), StatusHas("needs a glu layout"));
  Network relu = net;
  relu.activation = fb::Activation::Relu;
  EXPECT_THAT(run({0, 1, 2}, relu),
              StatusHas("w3 needs a gated activation, not Relu"));
  Network alpha = net;
  alpha.alpha = 2;
  EXPECT_THAT(run({0, 1, 2}, alpha),
              StatusHas("alpha, beta and limit apply only to clamped_swiglu"));
}

/// Runs a SharedExpert step on T tokens and checks it against the reference.
void checkShared(const Network &net, int64_t T, const std::vector<float> *gate,
                 std::vector<int64_t> gateShape, uint32_t seed) {
  std::vector<float> x = randomFloats(T * net.H, seed);
  std::vector<std::optional<Value>> inputs = {f32({T, net.H}, x)};
  for (auto &w : net.weightInputs(/*lead=*/false))
    inputs.push_back(std::move(w));
  inputs.push_back(gate ? std::optional<Value>(f32(gateShape, *gate))
                        : std::nullopt);
  auto r = runStep(OpKind::SharedExpert, inputs, {{DType::F32, {T, net.H}}},
                   net.attributes(), 3);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> expected;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> y = net.apply(0, x.data() + t * net.H);
    double factor = 1;
    if (gate) {
      double dot = 0;
      for (int64_t h = 0; h < net.H; ++h)
        dot += double(x[t * net.H + h]) * (*gate)[h];
      factor = 1 / (1 + std::exp(-dot));
    }
    for (double v : y)
      expected.push_back(static_cast<float>(v * factor));
  }
  expectNear((*r)[0], {T, net.H}, expected, 1e-4f);
}

TEST(SharedExpert, PlainAndSigmoidGatedOneTokenAndMany) {
  Network qwen; // SwiGLU with w3, out_in, gated by [1, H].
  qwen.init(1, 16, 40, 23);
  std::vector<float> gate = randomFloats(16, 24);
  checkShared(qwen, 1, &gate, {1, 16}, 25);
  checkShared(qwen, 300, &gate, {16, 1}, 26);
  checkShared(qwen, 20, &gate, {16}, 27);
  Network deepseek; // Fused concatenated gate/up, in_out, biases, no gate.
  deepseek.separateUp = false;
  deepseek.glu = fb::GluLayout::Concatenated;
  deepseek.inOut = true;
  deepseek.biases = true;
  deepseek.init(1, 16, 24, 28);
  checkShared(deepseek, 1, nullptr, {}, 29);
  checkShared(deepseek, 70, nullptr, {}, 30);
}

TEST(SharedExpert, RejectsAGateOfTheWrongSize) {
  Network net;
  net.init(1, 4, 6, 31);
  std::vector<std::optional<Value>> inputs = {f32({2, 4}, randomFloats(8, 1))};
  for (auto &w : net.weightInputs(false))
    inputs.push_back(std::move(w));
  inputs.push_back(f32({2, 2}, {1, 2, 3, 4}));
  EXPECT_THAT(runStep(OpKind::SharedExpert, inputs, {{DType::F32, {2, 4}}},
                      net.attributes())
                  .status(),
              StatusHas("gate has shape [2, 2]; expected [4], [4, 1] or "
                        "[1, 4]"));
}

//===----------------------------------------------------------------------===//
// Weight-streaming products (kernels/stream.h)
//===----------------------------------------------------------------------===//

TEST(Stream, RowRangeIsThePartialProductOverTheRange) {
  // Rows of x longer than K (a leading dimension), outputs that are and are
  // not a multiple of the vector width, ranges with 4-row groups and a
  // remainder, and an empty range (zeros).
  const int64_t K = 37, ldx = 40;
  for (int64_t n : {1, 3, 8})
    for (int64_t out : {5, 8, 29})
      for (auto [k0, k1] :
           {std::pair<int64_t, int64_t>{0, 37}, {4, 11}, {10, 10}}) {
        SCOPED_TRACE(absl::StrCat(n, " rows, ", out, " outputs, rows [", k0,
                                  ", ", k1, ")"));
        std::vector<float> x = randomFloats(n * ldx, 31);
        std::vector<float> w = randomFloats(K * out, 32);
        std::vector<float> c(n * out, NAN);
        detail::streamRowRange(x.data(), n, ldx, w.data(),
                               detail::StreamWeights::F32, out, k0, k1,
                               c.data());
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < out; ++j) {
            double sum = 0;
            for (int64_t k = k0; k < k1; ++k)
              sum += double(x[r * ldx + k]) * w[k * out + j];
            EXPECT_NEAR(c[r * out + j], sum, 1e-5) << r << ", " << j;
          }
      }
}

TEST(Stream, ProjectColumnBlocksOfOutInWeights) {
  // A block of columns [3, 24) of a 29-output [out, K] matrix, with and
  // without a bias, into an output with a leading dimension; 5 rows (tiles
  // of 2 and a remainder row), K not a multiple of the vector width.
  const int64_t n = 5, K = 37, out = 29, c0 = 3, m = 21, ldc = 23;
  std::vector<float> x = randomFloats(n * K, 33);
  std::vector<float> w = randomFloats(out * K, 34);
  std::vector<float> bias = randomFloats(out, 35);
  for (bool withBias : {false, true}) {
    SCOPED_TRACE(withBias ? "bias" : "no bias");
    std::vector<float> c(n * ldc, -1.0f);
    detail::streamProject(x.data(), n, K, w.data(), detail::StreamWeights::F32,
                          c0, m, nullptr, withBias ? bias.data() : nullptr,
                          c.data(), ldc);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < m; ++j) {
        double sum = withBias ? bias[c0 + j] : 0.0;
        for (int64_t k = 0; k < K; ++k)
          sum += double(x[r * K + k]) * w[(c0 + j) * K + k];
        EXPECT_NEAR(c[r * ldc + j], sum, 1e-5) << r << ", " << j;
      }
      // Past the block, the output row is untouched.
      EXPECT_EQ(c[r * ldc + m], -1.0f);
      EXPECT_EQ(c[r * ldc + m + 1], -1.0f);
    }
  }
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

TEST(Combine, WeightedUnpermuteWithPassThroughOfDroppedTokens) {
  // T = 3, k = 2, H = 2. Assignment (1, 1) was dropped; row 4 is padding.
  std::vector<float> y = {10, 10, 20, 20, 30, 30, 40, 40, 99, 99};
  std::vector<int64_t> source = {1, 2, 5, 0, -1};
  std::vector<float> w = {0.5f, 0.25f, 1, 2, 0.1f, 0.2f};
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> idx = {0, 1, 1, -1, 0, 1};
  Value plain =
      run1(OpKind::Combine, {f32({5, 2}, y), i64({5}, source), f32({3, 2}, w)},
           {DType::F32, {3, 2}});
  expectNear(plain, {3, 2}, {22.5f, 22.5f, 20, 20, 6, 6});
  Value passthrough = run1(OpKind::Combine,
                           {f32({5, 2}, y), i64({5}, source), f32({3, 2}, w),
                            f32({3, 2}, x), i64({3, 2}, idx)},
                           {DType::F32, {3, 2}});
  expectNear(passthrough, {3, 2}, {22.5f, 22.5f, 26, 28, 6, 6});
}

TEST(Combine, ManyTokensMatchAScatter) {
  const int64_t T = 200, k = 4, H = 9, N = T * k;
  std::vector<float> y = randomFloats(N * H, 32), w = randomFloats(T * k, 33);
  // A permutation of the assignments with a few dropped (source -1).
  std::vector<int64_t> source(N);
  std::iota(source.begin(), source.end(), 0);
  std::reverse(source.begin(), source.end());
  for (int64_t r = 0; r < N; r += 17)
    source[r] = -1;
  std::vector<double> expected(T * H, 0.0);
  for (int64_t r = 0; r < N; ++r)
    if (source[r] >= 0)
      for (int64_t h = 0; h < H; ++h)
        expected[source[r] / k * H + h] += w[source[r]] * y[r * H + h];
  Value out =
      run1(OpKind::Combine, {f32({N, H}, y), i64({N}, source), f32({T, k}, w)},
           {DType::F32, {T, H}}, {}, 3);
  expectNear(out, {T, H}, std::vector<float>(expected.begin(), expected.end()));
}

TEST(Combine, RejectsBadSources) {
  auto run = [](std::vector<int64_t> source) {
    return runStep(OpKind::Combine,
                   {f32({2, 1}, {1, 2}), i64({2}, source), f32({1, 2}, {1, 1})},
                   {{DType::F32, {1, 1}}})
        .status();
  };
  EXPECT_THAT(run({0, 2}), StatusHas("source[1] = 2 is out of range [-1, 2)"));
  EXPECT_THAT(run({1, 1}),
              StatusHas("source[1] repeats assignment 1 of source[0]"));
  EXPECT_THAT(runStep(OpKind::Combine,
                      {f32({1, 1}, {1}), i64({1}, {0}), f32({1, 1}, {1}),
                       f32({1, 1}, {1}), std::nullopt},
                      {{DType::F32, {1, 1}}})
                  .status(),
              StatusHas("passthrough and indices must be given together"));
}

//===----------------------------------------------------------------------===//
// A whole routed layer, and its stats
//===----------------------------------------------------------------------===//

TEST(MoeLayer, RouterDispatchExpertsCombineMatchTheDenseFormula) {
  const int64_t maxTokens = 64, E = 6, k = 2, H = 8, F = 12;
  Network net;
  net.init(E, H, F, 40);
  PlanWriter writer;
  int tokens = writer.addSymbol("T", 1, maxTokens);
  ScheduleBuilder &s = writer.schedule();
  PlanDim T = PlanDim::symbol(tokens);
  int32_t x = s.addTensor("x", DType::F32, {T, H});
  int32_t logits = s.addTensor("logits", DType::F32, {T, E});
  int32_t w = s.addTensor("w", DType::F32, {PlanDim::dynamic(maxTokens), k});
  int32_t idx =
      s.addTensor("idx", DType::I64, {PlanDim::dynamic(maxTokens), k});
  int32_t rows =
      s.addTensor("rows", DType::F32, {PlanDim::dynamic(maxTokens * k), H});
  int32_t offsets = s.addTensor("offsets", DType::I64, {E + 1});
  int32_t source =
      s.addTensor("source", DType::I64, {PlanDim::dynamic(maxTokens * k)});
  int32_t y =
      s.addTensor("y", DType::F32, {PlanDim::dynamic(maxTokens * k), H});
  int32_t out =
      s.addTensor("out", DType::F32, {PlanDim::dynamic(maxTokens), H});
  int32_t w1 = s.addWeight("w1", DType::F32, {E, F, H}, net.w1.data(),
                           net.w1.size() * 4);
  int32_t w3 = s.addWeight("w3", DType::F32, {E, F, H}, net.w3.data(),
                           net.w3.size() * 4);
  int32_t w2 = s.addWeight("w2", DType::F32, {E, H, F}, net.w2.data(),
                           net.w2.size() * 4);
  s.addInput(x);
  s.addInput(logits);
  RouterSpec spec;
  spec.normalize = true;
  spec.capacity = 5;
  s.addStep(OpKind::Router, "router", {logits}, {w, idx}, routerAttrs(spec));
  s.addStep(OpKind::Dispatch, "dispatch", {x, idx}, {rows, offsets, source},
            dispatchAttrs(E));
  s.addStep(OpKind::Experts, "experts", {rows, offsets, w1, -1, w3, -1, w2, -1},
            {y}, net.attributes());
  s.addStep(OpKind::Combine, "combine", {y, source, w, x, idx}, {out});
  s.addOutput(out);
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto plan = Plan::loadFromMemory(bytes->data(), bytes->size());
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto session = Session::create(**plan, {/*threads=*/2});
  ASSERT_TRUE(session.ok()) << session.status();

  for (int64_t n : {int64_t{1}, int64_t{13}, maxTokens}) {
    std::vector<float> xv = randomFloats(n * H, 41 + n);
    std::vector<float> lv = randomFloats(n * E, 42 + n);
    ASSERT_TRUE(
        (*session)
            ->setInput("x", DType::F32, {n, H}, xv.data(), xv.size() * 4)
            .ok());
    ASSERT_TRUE(
        (*session)
            ->setInput("logits", DType::F32, {n, E}, lv.data(), lv.size() * 4)
            .ok());
    (*session)->resetStats();
    absl::Status status = (*session)->run();
    ASSERT_TRUE(status.ok()) << status;
    std::vector<float> weights;
    std::vector<int64_t> chosen;
    referenceRouter(spec, lv, nullptr, E, 1, weights, chosen);
    std::vector<double> expected(n * H, 0.0);
    std::vector<uint64_t> load(E, 0);
    uint64_t dropped = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) {
        int64_t e = chosen[t * k + j];
        std::vector<double> ye(xv.begin() + t * H, xv.begin() + (t + 1) * H);
        if (e >= 0)
          ye = net.apply(e, xv.data() + t * H);
        else
          ++dropped;
        if (e >= 0)
          ++load[e];
        for (int64_t h = 0; h < H; ++h)
          expected[t * H + h] += weights[t * k + j] * ye[h];
      }
    auto result = (*session)->output("out");
    ASSERT_TRUE(result.ok()) << result.status();
    Value got;
    got.shape = result->shape;
    const auto *p = static_cast<const uint8_t *>(result->data);
    got.bytes.assign(p, p + result->bytes);
    expectNear(got, {n, H},
               std::vector<float>(expected.begin(), expected.end()), 1e-4f);

    // The router and the experts report the same loads.
    std::vector<StepStats> stats = (*session)->stepStats();
    ASSERT_EQ(stats.size(), 4u);
    EXPECT_EQ(stats[0].expertLoad, load);
    EXPECT_EQ(stats[0].droppedAssignments, dropped);
    EXPECT_EQ(stats[2].expertLoad, load);
    EXPECT_TRUE(stats[1].expertLoad.empty());

    // One layer; every assignment is kept by its expert or dropped.
    std::vector<MoeLayerStats> layers = moeLayerStats(**plan, stats);
    ASSERT_EQ(layers.size(), 1u);
    const MoeLayerStats &layer = layers[0];
    EXPECT_EQ(layer.name, "dispatch");
    EXPECT_EQ(layer.router, 0);
    EXPECT_EQ(layer.dispatch, 1);
    EXPECT_EQ(layer.experts, 2);
    EXPECT_EQ(layer.combine, 3);
    EXPECT_EQ(layer.sharedExpert, -1);
    EXPECT_EQ(layer.runs, 1u);
    EXPECT_EQ(layer.tokensPerExpert, load);
    EXPECT_EQ(layer.droppedAssignments, dropped);
    EXPECT_EQ(layer.keptAssignments() + layer.droppedAssignments,
              static_cast<uint64_t>(n * k));
    EXPECT_EQ(layer.expertsSeconds, stats[2].totalSeconds);
    uint64_t most = *std::max_element(load.begin(), load.end());
    EXPECT_DOUBLE_EQ(layer.imbalance(),
                     double(most) * E / double(layer.keptAssignments()));
    if (n == maxTokens) {
      EXPECT_GT(dropped, 0u); // 6 experts of capacity 5, 128 assignments.
    }
  }
}

} // namespace
} // namespace moert::testing
