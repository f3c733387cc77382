//===- multimodal_prefill.cpp - A multimodal plan's prompt ----------------===//
//
// Generator::prefill with vision inputs (docs/plan-format.md, "Multimodal
// plans"): the stages of the plan's Multimodal table in order, each input
// fed as its Feed says, the Prefill stage's presents starting the caches.
//
//===----------------------------------------------------------------------===//

#include "generate/generation_loop.h"
#include "generate/generator_impl.h"
#include "generate/grid_rule.h"
#include "generate/mrope_positions.h"
#include "loader/plan_impl.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

namespace moert {
namespace {

/// What the stages of one prompt produce and read.
struct PromptRun {
  const MultimodalDesc &mm;
  const std::vector<int64_t> &ids;
  std::map<std::string, const TensorData *> given;
  bool images = false;
  std::vector<int64_t> positions;
  /// The grid rule's values for the prompt's images.
  detail::GridTensors grid;
  /// Buffers a feed computed, kept until the stage ran.
  std::vector<std::vector<uint8_t>> scratch;
  /// Where the Vision stages ran an image at a time: the outputs later
  /// stages read, each the images' rows in order, by (stage, output).
  std::map<std::pair<int, std::string>, NamedTensor> visionOutputs;
};

/// Output `name` of stage `stage`: the images' rows in order where the
/// Vision stages ran an image at a time, else the stage's session's.
absl::StatusOr<TensorData> stageOutput(const PromptRun &run,
                                       Generator::Impl &impl, int stage,
                                       const std::string &name) {
  auto it = run.visionOutputs.find({stage, name});
  if (it != run.visionOutputs.end())
    return it->second.view();
  return impl.stages[stage]->output(name);
}

/// The vision inputs by name, checked against the plan's: each known and
/// given once, every one given when the prompt has image tokens, none
/// otherwise.
absl::Status checkGiven(PromptRun &run, const VisionInputs &vision,
                        int64_t imageTokens) {
  const MultimodalDesc &mm = run.mm;
  for (const auto &[name, tensor] : vision) {
    if (!std::count(mm.givenInputs.begin(), mm.givenInputs.end(), name))
      return absl::InvalidArgumentError(
          absl::StrCat("vision input '", name, "' is not one of the plan's (",
                       absl::StrJoin(mm.givenInputs, ", "), ")"));
    if (!run.given.emplace(name, &tensor).second)
      return absl::InvalidArgumentError(
          absl::StrCat("vision input '", name, "' is given twice"));
  }
  if (imageTokens == 0 && !vision.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "vision inputs are given but the prompt has no image token (id ",
        mm.imageTokenId, ")"));
  if (imageTokens == 0)
    return absl::OkStatus();
  if (vision.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt has ", imageTokens, " image tokens (id ",
                     mm.imageTokenId, ") but no image: give the vision inputs ",
                     absl::StrJoin(mm.givenInputs, ", ")));
  for (const std::string &name : mm.givenInputs)
    if (!run.given.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat("the prompt has image tokens but vision input '", name,
                       "' is missing (the plan takes ",
                       absl::StrJoin(mm.givenInputs, ", "), ")"));
  run.images = true;
  return absl::OkStatus();
}

/// For a plan of tiles (no grid, 4-D pixels): how many features each of
/// the given tiles gave, which is how many image tokens the prompt holds
/// per tile (Llama 4's layout, docs/multimodal.md).
std::string tileHint(const PromptRun &run, int64_t features) {
  const MultimodalDesc &mm = run.mm;
  if (!mm.imageGrid.empty() || !mm.hasImageProcessor ||
      !mm.imageProcessor.llama4Tiles)
    return "";
  auto it = run.given.find(mm.imageProcessor.pixelInput);
  if (it == run.given.end() || it->second->shape.size() != 4 ||
      it->second->shape[0] < 1)
    return "";
  int64_t tiles = it->second->shape[0];
  return absl::StrCat(" (", tiles, " tiles of ", features / tiles,
                      " image tokens each)");
}

/// Feeds `feed` into `session`, stage `stage`'s.
absl::Status setFeed(PromptRun &run, Generator::Impl &impl, Session &session,
                     const FeedDesc &feed) {
  const MultimodalDesc &mm = run.mm;
  int64_t n = static_cast<int64_t>(run.ids.size());
  switch (feed.kind) {
  case FeedKind::Given: {
    // Checked against the plan's input (dtype, rank, sizes, bounds).
    const TensorData &t = *run.given.at(feed.input);
    return session.setInput(feed.input, t.dtype, t.shape, t.data, t.bytes);
  }
  case FeedKind::TokenIds:
  case FeedKind::TokenTypes:
  case FeedKind::ImageTokenMask:
    return detail::setTokenFeed(session, feed.input, feed.kind, run.ids,
                                mm.imageTokenId);
  case FeedKind::Positions: {
    // No rows: the tokens' indices, i64 [1, n].
    std::vector<int64_t> shape = {1, n};
    if (!mm.positionRows.empty())
      shape = {static_cast<int64_t>(mm.positionRows.size()), 1, n};
    return session.setInput(feed.input, DType::I64, shape, run.positions.data(),
                            run.positions.size() * 8);
  }
  case FeedKind::StageOutput: {
    MOERT_ASSIGN_OR_RETURN(TensorData out,
                           stageOutput(run, impl, feed.stage, feed.output));
    return session.setInput(feed.input, out.dtype, out.shape, out.data,
                            out.bytes);
  }
  case FeedKind::MergedEmbeddings: {
    MOERT_ASSIGN_OR_RETURN(TensorData embeds,
                           impl.stages[feed.stage]->output(feed.output));
    int64_t width = embeds.shape[2];
    run.scratch.emplace_back(static_cast<const uint8_t *>(embeds.data),
                             static_cast<const uint8_t *>(embeds.data) +
                                 embeds.bytes);
    std::vector<uint8_t> &merged = run.scratch.back();
    if (run.images) {
      MOERT_ASSIGN_OR_RETURN(
          TensorData features,
          stageOutput(run, impl, mm.imageFeaturesStage, mm.imageFeatures));
      int64_t tokens =
          std::count(run.ids.begin(), run.ids.end(), mm.imageTokenId);
      if (features.shape[0] != tokens || features.shape[1] != width)
        return absl::InvalidArgumentError(absl::StrCat(
            "the vision encoder gave image features [",
            absl::StrJoin(features.shape, ", "), "] but the prompt has ",
            tokens, " image tokens of width ", width,
            "; the vision inputs do not describe the prompt's images",
            tileHint(run, features.shape[0])));
      // The image tokens' rows, in order, become the features' rows.
      size_t row = static_cast<size_t>(width) * sizeof(float), next = 0;
      for (int64_t i = 0; i < n; ++i)
        if (run.ids[i] == mm.imageTokenId)
          std::memcpy(
              merged.data() + i * row,
              static_cast<const uint8_t *>(features.data) + next++ * row, row);
    }
    return session.setInput(feed.input, DType::F32, embeds.shape, merged.data(),
                            merged.size());
  }
  case FeedKind::GridSegments:
  case FeedKind::GridPatchPositions:
  case FeedKind::GridInterpIndices:
  case FeedKind::GridInterpWeights: {
    NamedTensor t = detail::gridFeedTensor(run.grid, feed);
    return session.setInput(feed.input, t.dtype, t.shape, t.bytes.data(),
                            t.bytes.size());
  }
  case FeedKind::LastPosition: {
    MOERT_ASSIGN_OR_RETURN(TensorData hidden,
                           impl.stages[feed.stage]->output(feed.output));
    int64_t width = hidden.shape[2];
    const float *last =
        static_cast<const float *>(hidden.data) + (hidden.shape[1] - 1) * width;
    return session.setInput(feed.input, DType::F32, {1, 1, width}, last,
                            width * sizeof(float));
  }
  }
  return absl::InternalError("unknown feed kind");
}

/// The grid rule's values, when a stage takes them, and the check that the
/// given pixel patches (the f32 [p, F] given inputs of such a stage) have
/// the grids' patch count.
absl::Status computeGrid(PromptRun &run,
                         const std::vector<detail::ImageGrid> &grids) {
  const MultimodalDesc &mm = run.mm;
  bool any = false;
  for (const StageDesc &stage : mm.stages)
    for (const FeedDesc &feed : stage.feeds)
      any |= detail::isGridFeed(feed.kind);
  if (!any)
    return absl::OkStatus();
  MOERT_ASSIGN_OR_RETURN(
      run.grid,
      detail::computeGridTensors(mm.gridRule, mm.spatialMergeSize, grids));
  for (const StageDesc &stage : mm.stages)
    for (const FeedDesc &feed : stage.feeds) {
      if (feed.kind != FeedKind::Given || feed.input == mm.imageGrid)
        continue;
      const TensorData &t = *run.given.at(feed.input);
      if (t.dtype == DType::F32 && t.shape.size() == 2 &&
          t.shape[0] != run.grid.patches)
        return absl::InvalidArgumentError(
            absl::StrCat("vision input '", feed.input, "' has ", t.shape[0],
                         " patches but the grids in '", mm.imageGrid, "' make ",
                         run.grid.patches));
    }
  return absl::OkStatus();
}

/// Whether the prompt's `grids.size()` images run through the Vision
/// stages one at a time: more than the encoder takes (the exports' take
/// one). Each image's inputs are then its row of the grid and its rows of
/// the pixel patches, so every other given input must be per-patch rows,
/// f32 [p, F], as many as the grids' patches.
absl::StatusOr<bool> oneAtATime(const PromptRun &run,
                                const std::vector<detail::ImageGrid> &grids) {
  const MultimodalDesc &mm = run.mm;
  int64_t images = static_cast<int64_t>(grids.size());
  if (!mm.maxImages || images <= mm.maxImages)
    return false;
  int64_t patches = 0;
  for (int64_t i = 0; i < images; ++i) {
    const detail::ImageGrid &g = grids[i];
    if (g.t < 1 || g.h < 1 || g.w < 1 || g.t > (1 << 20) || g.h > (1 << 20) ||
        g.w > (1 << 20) || g.t * g.h > (1 << 30) / g.w)
      return absl::InvalidArgumentError(
          absl::StrCat("image ", i, " has grid ", g.t, " x ", g.h, " x ", g.w,
                       "; each of t, h, w must be at least 1"));
    patches += g.t * g.h * g.w;
  }
  for (const auto &[name, t] : run.given) {
    if (name == mm.imageGrid)
      continue;
    if (t->dtype != DType::F32 || t->shape.size() != 2)
      return absl::InvalidArgumentError(absl::StrCat(
          "vision input '", mm.imageGrid, "' has ", images,
          " images but the plan's vision encoder takes at most ", mm.maxImages,
          ", and vision input '", name,
          "' is no per-patch f32 [p, F] input to split the images by"));
    if (t->shape[0] != patches)
      return absl::InvalidArgumentError(absl::StrCat(
          "vision input '", name, "' has ", t->shape[0],
          " patches but the grids in '", mm.imageGrid, "' make ", patches));
  }
  return true;
}

/// Where a plan without a grid runs the Vision stages a few tiles at a
/// time (Llama 4's encoder, traced on one tile, takes one): the rows
/// [first, first + count) of every given input of each run, or none where
/// the encoder takes them all. The given inputs must agree on their rows,
/// and the runs divide them evenly.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>>
tileRuns(const PromptRun &run, Generator::Impl &impl) {
  const MultimodalDesc &mm = run.mm;
  std::vector<std::pair<int64_t, int64_t>> runs;
  if (!run.images || !mm.imageGrid.empty() || mm.stages.empty() ||
      mm.stages[0].role != StageRole::Vision)
    return runs;
  const std::vector<TensorDesc> &inputs =
      impl.plan.impl().stageSchedules[0].inputDescs;
  int64_t rows = -1, take = 0;
  std::string name;
  for (const auto &[given, t] : run.given) {
    if (t->shape.empty())
      return runs;
    if (rows >= 0 && t->shape[0] != rows)
      return absl::InvalidArgumentError(absl::StrCat(
          "vision input '", given, "' has ", t->shape[0], " rows but '", name,
          "' has ", rows, "; the encoder's inputs are per tile"));
    rows = t->shape[0];
    name = given;
    for (const TensorDesc &desc : inputs)
      if (desc.name == given && !desc.dims.empty() &&
          desc.dims[0].kind == DimDesc::Kind::Static)
        take = desc.dims[0].bound;
  }
  if (take < 1 || rows <= take)
    return runs;
  if (rows % take)
    return absl::InvalidArgumentError(
        absl::StrCat("vision input '", name, "' has ", rows,
                     " tiles but the plan's vision encoder takes ", take,
                     " at a time, which does not divide them"));
  for (int64_t first = 0; first < rows; first += take)
    runs.push_back({first, take});
  return runs;
}

/// Runs the Vision stages once per part: an image (`grids`: its row of the
/// grid and its rows of the patches) or a run of tiles (`runs`: those rows
/// of every given input), and keeps the outputs later stages read, the
/// parts' rows concatenated in order (the exports' encoders attend within
/// an image, or a tile, so this is what one run over all of them gives).
absl::Status
runVisionInParts(PromptRun &run, Generator::Impl &impl,
                 const std::vector<detail::ImageGrid> &grids,
                 const std::vector<std::pair<int64_t, int64_t>> &runs,
                 double &seconds) {
  const MultimodalDesc &mm = run.mm;
  std::set<std::pair<int, std::string>> read = {
      {mm.imageFeaturesStage, mm.imageFeatures}};
  for (const StageDesc &stage : mm.stages)
    if (stage.role != StageRole::Vision)
      for (const FeedDesc &feed : stage.feeds)
        if (feed.kind == FeedKind::StageOutput &&
            mm.stages[feed.stage].role == StageRole::Vision)
          read.insert({feed.stage, feed.output});
  std::map<std::string, const TensorData *> all = run.given;
  int64_t first = 0;
  size_t count = grids.empty() ? runs.size() : grids.size();
  for (size_t i = 0; i < count; ++i) {
    int64_t rows = 0;
    if (grids.empty()) {
      first = runs[i].first;
      rows = runs[i].second;
    } else {
      rows = grids[i].t * grids[i].h * grids[i].w;
    }
    std::vector<TensorData> parts;
    parts.reserve(all.size());
    run.given.clear();
    for (const auto &[name, t] : all) {
      const uint8_t *data = static_cast<const uint8_t *>(t->data);
      if (name == mm.imageGrid) {
        parts.push_back({DType::I64, {1, 3}, data + i * 24, 24});
      } else {
        size_t row = t->bytes / static_cast<size_t>(t->shape[0]);
        std::vector<int64_t> shape = t->shape;
        shape[0] = rows;
        parts.push_back({t->dtype, shape, data + first * row, rows * row});
      }
      run.given[name] = &parts.back();
    }
    first += rows;
    absl::Status status =
        grids.empty() ? absl::OkStatus() : computeGrid(run, {grids[i]});
    for (size_t s = 0; s < mm.stages.size() && status.ok(); ++s) {
      const StageDesc &stage = mm.stages[s];
      if (stage.role != StageRole::Vision)
        continue;
      Session &session = *impl.stages[s];
      for (const FeedDesc &feed : stage.feeds)
        if (status.ok())
          status = setFeed(run, impl, session, feed);
      auto start = std::chrono::steady_clock::now();
      if (status.ok())
        status = session.run();
      seconds += std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - start)
                     .count();
      if (!status.ok())
        status =
            absl::Status(status.code(), absl::StrCat("stage '", stage.name,
                                                     "': ", status.message()));
      run.scratch.clear();
    }
    for (const auto &[stage, name] : read) {
      if (!status.ok())
        break;
      absl::StatusOr<TensorData> out = impl.stages[stage]->output(name);
      if (!out.ok()) {
        status = out.status();
        break;
      }
      auto [it, added] = run.visionOutputs.try_emplace({stage, name});
      NamedTensor &kept = it->second;
      if (added) {
        kept = {name, out->dtype, out->shape, {}};
        kept.shape[0] = 0;
      }
      if (out->shape.empty() || out->dtype != kept.dtype ||
          !std::equal(out->shape.begin() + 1, out->shape.end(),
                      kept.shape.begin() + 1, kept.shape.end())) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "stage '", mm.stages[stage].name, "': output '", name, "' is [",
            absl::StrJoin(out->shape, ", "), "], which does not add rows to [",
            absl::StrJoin(kept.shape, ", "), "] of the images before"));
        break;
      }
      kept.shape[0] += out->shape[0];
      const uint8_t *bytes = static_cast<const uint8_t *>(out->data);
      kept.bytes.insert(kept.bytes.end(), bytes, bytes + out->bytes);
    }
    if (!status.ok()) {
      run.given = all;
      return absl::Status(
          status.code(),
          grids.empty() ? absl::StrCat("tiles ", first - rows, "..", first - 1,
                                       ": ", status.message())
                        : absl::StrCat("image ", i, ": ", status.message()));
    }
  }
  run.given = all;
  return absl::OkStatus();
}

/// What a prompt's stages need before any of them runs, checked: the
/// given vision inputs, the images' grids, whether the Vision stages run an
/// image (or some tiles) at a time, the grid rule's values and the
/// positions.
struct PreparedPrompt {
  std::vector<detail::ImageGrid> grids;
  bool split = false;
  std::vector<std::pair<int64_t, int64_t>> tiles;
  int64_t positionDelta = 0;
};

absl::StatusOr<PreparedPrompt> preparePrompt(PromptRun &run,
                                             Generator::Impl &impl,
                                             const VisionInputs &vision) {
  const MultimodalDesc &mm = run.mm;
  const std::vector<int64_t> &prompt = run.ids;
  MOERT_RETURN_IF_ERROR(detail::checkPrompt(prompt, impl.gen));
  PreparedPrompt prepared;
  int64_t imageTokens =
      std::count(prompt.begin(), prompt.end(), mm.imageTokenId);
  MOERT_RETURN_IF_ERROR(checkGiven(run, vision, imageTokens));
  if (run.images && !mm.imageGrid.empty()) {
    MOERT_ASSIGN_OR_RETURN(
        prepared.grids,
        detail::readImageGrids(mm, *run.given.at(mm.imageGrid)));
    MOERT_ASSIGN_OR_RETURN(prepared.split, oneAtATime(run, prepared.grids));
    if (!prepared.split)
      MOERT_RETURN_IF_ERROR(computeGrid(run, prepared.grids));
  }
  detail::PromptPositions positions;
  if (std::all_of(
          mm.positionRows.begin(), mm.positionRows.end(),
          [](PositionRow row) { return row == PositionRow::Sequence; })) {
    // No time, height or width row: every row holds the token's index.
    positions.values.resize(std::max<size_t>(1, mm.positionRows.size()) *
                            prompt.size());
    for (size_t i = 0; i < positions.values.size(); ++i)
      positions.values[i] = static_cast<int64_t>(i % prompt.size());
  } else {
    MOERT_ASSIGN_OR_RETURN(
        positions,
        detail::computePromptPositions(prompt, mm.imageTokenId, prepared.grids,
                                       mm.spatialMergeSize, mm.positionRows));
  }
  run.positions = std::move(positions.values);
  prepared.positionDelta = positions.delta;
  // A grid plan splits by image (split), one without by tiles (tiles).
  MOERT_ASSIGN_OR_RETURN(prepared.tiles, tileRuns(run, impl));
  return prepared;
}

} // namespace

absl::Status Generator::checkPrompt(const std::vector<int64_t> &prompt,
                                    const VisionInputs &vision) {
  if (!impl_->mm)
    return vision.empty() ? detail::checkPrompt(prompt, impl_->gen)
                          : absl::InvalidArgumentError(
                                "vision inputs need a multimodal plan");
  PromptRun run{*impl_->mm, prompt, {}, false, {}, {}, {}, {}};
  return preparePrompt(run, *impl_, vision).status();
}

absl::Status Generator::prefill(const std::vector<int64_t> &prompt,
                                const VisionInputs &vision) {
  Impl &impl = *impl_;
  if (!impl.mm)
    return vision.empty() ? prefill(prompt)
                          : absl::InvalidArgumentError(
                                "vision inputs need a multimodal plan");
  const MultimodalDesc &mm = *impl.mm;
  const GenerationDesc &gen = impl.gen;
  PromptRun run{mm, prompt, {}, false, {}, {}, {}, {}};
  MOERT_ASSIGN_OR_RETURN(PreparedPrompt prepared,
                         preparePrompt(run, impl, vision));
  detail::resetCaches(impl);
  length_ = 0;
  times_.visionSeconds = 0;
  std::vector<detail::ImageGrid> &grids = prepared.grids;
  bool split = prepared.split;
  if (!run.images && mm.textThroughDecode) {
    // The Prefill stage needs image rows: the decode schedule runs the
    // text, a token at a time, at the rule's positions (delta 0).
    impl.positionDelta = 0;
    Session &decode = *impl.decode;
    for (size_t i = 0; i < prompt.size(); ++i)
      MOERT_RETURN_IF_ERROR(detail::runStep(impl, decode, decode.state_, false,
                                            {prompt[i]},
                                            static_cast<int64_t>(i)));
    length_ = static_cast<int64_t>(prompt.size());
    return readLogits(decode);
  }
  const std::vector<std::pair<int64_t, int64_t>> &tiles = prepared.tiles;
  if (split || !tiles.empty())
    MOERT_RETURN_IF_ERROR(runVisionInParts(
        run, impl, split ? grids : std::vector<detail::ImageGrid>{}, tiles,
        times_.visionSeconds));
  split |= !tiles.empty();
  for (size_t s = 0; s < mm.stages.size(); ++s) {
    const StageDesc &stage = mm.stages[s];
    if (stage.role == StageRole::Vision && (!run.images || split))
      continue;
    Session &session = *impl.stages[s];
    for (const FeedDesc &feed : stage.feeds) {
      absl::Status status = setFeed(run, impl, session, feed);
      if (!status.ok())
        return absl::Status(
            status.code(),
            absl::StrCat("stage '", stage.name, "': ", status.message()));
    }
    bool prefillStage = static_cast<int>(s) == mm.prefillStage;
    if (prefillStage)
      MOERT_RETURN_IF_ERROR(detail::bindCaches(impl, session.state_, true));
    auto start = std::chrono::steady_clock::now();
    absl::Status status = session.run();
    if (stage.role == StageRole::Vision)
      times_.visionSeconds += std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
    if (!status.ok())
      return absl::Status(status.code(), absl::StrCat("stage '", stage.name,
                                                      "': ", status.message()));
    if (prefillStage)
      MOERT_RETURN_IF_ERROR(
          detail::finishCaches(impl, session, session.state_, true, 0,
                               static_cast<int64_t>(prompt.size())));
    run.scratch.clear();
  }
  MOERT_ASSIGN_OR_RETURN(TensorData logits,
                         impl.stages[mm.logitsStage]->output(mm.logits));
  int64_t vocab = gen.vocabSize;
  if (logits.shape.size() != 3 || logits.shape[1] < 1 ||
      logits.shape[2] != vocab)
    return absl::InternalError(absl::StrCat("the logits '", mm.logits,
                                            "' are not [1, n, ", vocab, "]"));
  const float *last =
      static_cast<const float *>(logits.data) + (logits.shape[1] - 1) * vocab;
  logits_.assign(last, last + vocab);
  impl.positionDelta = prepared.positionDelta;
  length_ = static_cast<int64_t>(prompt.size());
  return absl::OkStatus();
}

} // namespace moert
