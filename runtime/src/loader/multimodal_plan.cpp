//===- multimodal_plan.cpp - Loading multimodal plans ---------------------===//

#include "loader/multimodal_plan.h"
#include "format/plan_file.h"
#include "loader/generation_plan.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

namespace moert::detail {
namespace {

/// At most this many stages (a vision encoder and projector, the embedding,
/// the language model and its head need five).
constexpr size_t kMaxStages = 16;
/// The largest spatial merge a plan may declare.
constexpr int64_t kMaxSpatialMerge = 1 << 10;

const char *roleName(StageRole role) {
  switch (role) {
  case StageRole::Vision:
    return "Vision";
  case StageRole::Embed:
    return "Embed";
  case StageRole::Prefill:
    return "Prefill";
  case StageRole::Head:
    return "Head";
  }
  return "?";
}

/// plan.fbs's name of `kind` (the values are the same).
const char *kindName(FeedKind kind) {
  return fb::EnumNameFeedKind(static_cast<fb::FeedKind>(kind));
}

/// Whether `t` is `dtype` of rank `rank`.
bool isA(const TensorInfo &t, DType dtype, int rank) {
  return t.dtype == dtype && t.rank == rank;
}

std::string describe(const TensorInfo &t) {
  return absl::StrCat(dtypeName(t.dtype), " ", describeDims(t));
}

/// Checks the feeds of one schedule (a stage's, or the decode schedule's
/// extra inputs) and records them in `out`.
class FeedChecker {
public:
  FeedChecker(const Plan::Impl &impl, const MultimodalDesc &mm)
      : impl_(impl), mm_(mm) {}

  /// `stage` is the fed stage's index (stages().size() for the decode
  /// schedule, whose feeds read no stage).
  absl::Status
  check(const Diag &diag, const ScheduleInfo &schedule, int stage,
        const flatbuffers::Vector<flatbuffers::Offset<fb::Feed>> *feeds,
        std::vector<FeedDesc> &out) const {
    bool decode = stage == static_cast<int>(mm_.stages.size());
    std::set<std::string> fed;
    for (size_t i = 0; feeds && i < feeds->size(); ++i) {
      const fb::Feed *fbFeed = feeds->Get(i);
      FeedDesc feed;
      feed.input = std::string(str(fbFeed->input()));
      uint8_t kind = static_cast<uint8_t>(fbFeed->kind());
      if (kind > static_cast<uint8_t>(fb::FeedKind::MAX))
        return diag.invalid("feed ", i, " has kind ", int(kind),
                            ", which is no FeedKind");
      feed.kind = static_cast<FeedKind>(kind);
      feed.stage = fbFeed->stage();
      feed.output = std::string(str(fbFeed->output()));
      Diag at = diag.nested(absl::StrCat("feed ", i, " '", feed.input, "' (",
                                         kindName(feed.kind), ")"));
      int32_t id = findSignatureTensor(schedule, true, feed.input);
      if (id < 0)
        return at.invalid("is not a graph input of the schedule");
      if (!fed.insert(feed.input).second)
        return at.invalid("the input is fed twice");
      MOERT_RETURN_IF_ERROR(
          checkOne(at, schedule.tensors[id], stage, decode, feed));
      feed.dtype = schedule.tensors[id].dtype;
      out.push_back(std::move(feed));
    }
    if (!decode)
      for (uint32_t id : schedule.inputs)
        if (!fed.count(std::string(schedule.tensors[id].name)))
          return diag.invalid("graph input '", schedule.tensors[id].name,
                              "' has no feed");
    return absl::OkStatus();
  }

private:
  /// The source output of `feed` (an earlier stage's output).
  absl::StatusOr<const TensorInfo *> source(const Diag &at, int stage,
                                            const FeedDesc &feed) const {
    if (feed.stage < 0 || feed.stage >= stage)
      return at.invalid("reads stage ", feed.stage,
                        ", which is not an earlier stage");
    const ScheduleInfo &from = impl_.stageSchedules[feed.stage];
    int32_t id = findSignatureTensor(from, false, feed.output);
    if (id < 0)
      return at.invalid("reads output '", feed.output, "' of stage ",
                        feed.stage, " '", mm_.stages[feed.stage].name,
                        "', which it does not have");
    return &from.tensors[id];
  }

  absl::Status checkOne(const Diag &at, const TensorInfo &input, int stage,
                        bool decode, const FeedDesc &feed) const {
    auto expect = [&](bool ok, absl::string_view what) {
      return ok ? absl::OkStatus()
                : at.invalid("the input is ", describe(input), "; the feed ",
                             "gives ", what);
    };
    if (decode && feed.kind != FeedKind::TokenIds &&
        feed.kind != FeedKind::TokenTypes &&
        feed.kind != FeedKind::ImageTokenMask)
      return at.invalid("a decode feed gives the new token's ids, types or "
                        "image mask only");
    StageRole role = decode ? StageRole::Prefill : mm_.stages[stage].role;
    switch (feed.kind) {
    case FeedKind::Given:
      if (role != StageRole::Vision)
        return at.invalid("only a Vision stage takes given inputs");
      return absl::OkStatus();
    case FeedKind::GridSegments:
    case FeedKind::GridPatchPositions:
    case FeedKind::GridInterpIndices:
    case FeedKind::GridInterpWeights:
      return checkGrid(at, input, role, feed, expect);
    case FeedKind::TokenIds:
    case FeedKind::TokenTypes:
      return expect(isA(input, DType::I64, 2), "i64 [1, n]");
    case FeedKind::ImageTokenMask:
      return expect(isA(input, DType::Bool, 2), "bool [1, n]");
    case FeedKind::Positions: {
      // No rows: the token's index, as a plain generation plan's.
      if (mm_.positionRows.empty())
        return expect(isA(input, DType::I64, 2),
                      "i64 [1, n] (the tokens' indices)");
      bool rows =
          isA(input, DType::I64, 3) &&
          input.dims[0].kind == fb::DimKind::Static &&
          input.dims[0].bound == static_cast<int64_t>(mm_.positionRows.size());
      return expect(rows, absl::StrCat("i64 [", mm_.positionRows.size(),
                                       ", 1, n] (the position rows)"));
    }
    case FeedKind::StageOutput: {
      MOERT_ASSIGN_OR_RETURN(const TensorInfo *from, source(at, stage, feed));
      return expect(
          from->dtype == input.dtype && from->rank == input.rank,
          absl::StrCat("output '", feed.output, "' ", describe(*from)));
    }
    case FeedKind::MergedEmbeddings: {
      MOERT_ASSIGN_OR_RETURN(const TensorInfo *from, source(at, stage, feed));
      if (mm_.stages[feed.stage].role != StageRole::Embed)
        return at.invalid("merges into stage ", feed.stage,
                          ", which is not the Embed stage");
      const TensorInfo &features =
          impl_.stageSchedules[mm_.imageFeaturesStage]
              .tensors[findSignatureTensor(
                  impl_.stageSchedules[mm_.imageFeaturesStage], false,
                  mm_.imageFeatures)];
      bool ok = isA(input, DType::F32, 3) && isA(*from, DType::F32, 3) &&
                from->dims[2].kind == fb::DimKind::Static &&
                features.dims[1].kind == fb::DimKind::Static &&
                features.dims[1].bound == from->dims[2].bound &&
                input.dims[2].kind == fb::DimKind::Static &&
                input.dims[2].bound == from->dims[2].bound;
      return expect(ok,
                    absl::StrCat("the embeddings '", feed.output, "' ",
                                 describe(*from),
                                 " merged with the image "
                                 "features '",
                                 mm_.imageFeatures, "' ", describe(features),
                                 " (f32, one static "
                                 "width)"));
    }
    case FeedKind::LastPosition: {
      MOERT_ASSIGN_OR_RETURN(const TensorInfo *from, source(at, stage, feed));
      bool ok = isA(input, DType::F32, 3) && isA(*from, DType::F32, 3) &&
                input.dims[1].bound >= 1;
      return expect(ok, absl::StrCat("the last position of '", feed.output,
                                     "' ", describe(*from),
                                     " as f32 [1, 1, "
                                     "H]"));
    }
    }
    return at.invalid("unknown feed kind");
  }

  /// A Grid* feed: a Vision stage's input, with the plan's rule, of the
  /// type the rule writes.
  template <typename Expect>
  absl::Status checkGrid(const Diag &at, const TensorInfo &input,
                         StageRole role, const FeedDesc &feed,
                         const Expect &expect) const {
    if (role != StageRole::Vision)
      return at.invalid("only a Vision stage takes the grid rule's inputs");
    // The table is checked for its version (loadRules).
    if (!hasGridRule_)
      return at.invalid("the plan has no grid_rule");
    int64_t taps = mm_.gridRule.bicubic ? 16 : 4;
    auto columns = [&](int64_t n) {
      return input.rank == 2 && (input.dims[1].kind != fb::DimKind::Static ||
                                 input.dims[1].bound == n);
    };
    switch (feed.kind) {
    case FeedKind::GridSegments:
      return expect((isA(input, DType::I32, 1) || isA(input, DType::I64, 1)),
                    "i32 or i64 [frames + 1] (segment bounds)");
    case FeedKind::GridPatchPositions:
      return expect(isA(input, DType::I64, 2) && columns(2),
                    "i64 [p, 2] (patch positions)");
    case FeedKind::GridInterpIndices:
    case FeedKind::GridInterpWeights:
      if (mm_.gridRule.tableSide < 1)
        return at.invalid("the grid rule has no position table (table_side "
                          "0) to interpolate");
      return expect(
          isA(input,
              feed.kind == FeedKind::GridInterpIndices ? DType::I64
                                                       : DType::F32,
              2) &&
              columns(taps),
          absl::StrCat(feed.kind == FeedKind::GridInterpIndices ? "i64" : "f32",
                       " [p, ", taps, "] (interpolation taps)"));
    default:
      return at.invalid("unknown feed kind");
    }
  }

public:
  bool hasGridRule_ = false;

private:
  const Plan::Impl &impl_;
  const MultimodalDesc &mm_;
};

/// The largest position table side and image processor sizes a plan may
/// declare.
constexpr int64_t kMaxTableSide = 1 << 16;
constexpr int64_t kMaxPatchSize = 1 << 10;
constexpr int64_t kMaxTemporalPatch = 64;
constexpr int64_t kMaxTiles = 1024;

/// Reads and checks the (1.22) grid rule and image processor tables.
absl::Status loadRules(const Diag &mm, const fb::Multimodal &table,
                       const Plan::Impl &impl, MultimodalDesc &desc) {
  if ((table.grid_rule() || table.image_processor()) &&
      impl.versionMinor < kFormatVersionMinorGridRule)
    return mm.invalid("grid_rule and image_processor need format ",
                      kFormatVersionMajor, ".", kFormatVersionMinorGridRule,
                      ", but the file is version ", impl.versionMajor, ".",
                      impl.versionMinor);
  if (const fb::GridRule *rule = table.grid_rule()) {
    uint8_t mode = static_cast<uint8_t>(rule->interpolation());
    if (mode > static_cast<uint8_t>(fb::GridInterpolation::MAX))
      return mm.invalid("grid_rule.interpolation ", int(mode),
                        " is no GridInterpolation");
    if (rule->table_side() < 0 || rule->table_side() > kMaxTableSide)
      return mm.invalid("grid_rule.table_side ", rule->table_side(),
                        " is not in [0, ", kMaxTableSide, "]");
    desc.gridRule = {rule->table_side(),
                     rule->interpolation() == fb::GridInterpolation::Bicubic,
                     rule->align_corners()};
  }
  const fb::ImageProcessor *proc = table.image_processor();
  if (!proc)
    return absl::OkStatus();
  Diag at = mm.nested("image_processor");
  ImageProcessorDesc &d = desc.imageProcessor;
  d.pixelInput = std::string(str(proc->pixel_input()));
  d.patchSize = proc->patch_size();
  d.temporalPatchSize = proc->temporal_patch_size();
  d.minPixels = proc->min_pixels();
  d.maxPixels = proc->max_pixels();
  d.doResize = proc->do_resize();
  d.doRescale = proc->do_rescale();
  d.rescaleFactor = proc->rescale_factor();
  d.doNormalize = proc->do_normalize();
  uint8_t resize = static_cast<uint8_t>(proc->resize());
  if (resize > static_cast<uint8_t>(fb::ImageResize::MAX))
    return at.invalid("resize ", int(resize), " is no ImageResize");
  d.glm4vResize = proc->resize() == fb::ImageResize::Glm4v;
  if (d.glm4vResize && impl.versionMinor < kFormatVersionMinorImageResize)
    return at.invalid("resize Glm4v needs format ", kFormatVersionMajor, ".",
                      kFormatVersionMinorImageResize,
                      ", but the file is version ", impl.versionMajor, ".",
                      impl.versionMinor);
  d.llama4Tiles = proc->resize() == fb::ImageResize::Llama4Tiles;
  d.maxTiles = proc->max_tiles();
  d.resizeToMaxCanvas = proc->resize_to_max_canvas();
  if (d.llama4Tiles) {
    if (impl.versionMinor < kFormatVersionMinorImageTiles)
      return at.invalid("resize Llama4Tiles needs format ", kFormatVersionMajor,
                        ".", kFormatVersionMinorImageTiles,
                        ", but the file is version ", impl.versionMajor, ".",
                        impl.versionMinor);
    if (d.maxTiles < 1 || d.maxTiles > kMaxTiles)
      return at.invalid("max_tiles ", d.maxTiles, " is not in [1, ", kMaxTiles,
                        "]");
    if (!d.doResize)
      return at.invalid("resize Llama4Tiles needs do_resize");
  }
  if (d.patchSize < 1 || d.patchSize > kMaxPatchSize)
    return at.invalid("patch_size ", d.patchSize, " is not in [1, ",
                      kMaxPatchSize, "]");
  if (d.temporalPatchSize < 1 || d.temporalPatchSize > kMaxTemporalPatch)
    return at.invalid("temporal_patch_size ", d.temporalPatchSize,
                      " is not in [1, ", kMaxTemporalPatch, "]");
  if (d.doResize && !d.llama4Tiles &&
      (d.minPixels < 1 || d.maxPixels < d.minPixels ||
       d.maxPixels > (int64_t{1} << 40)))
    return at.invalid("min_pixels ", d.minPixels, " and max_pixels ",
                      d.maxPixels, " are no range of pixel counts");
  if (!std::isfinite(d.rescaleFactor))
    return at.invalid("rescale_factor is not finite");
  for (auto [field, values, name] :
       {std::tuple(&d.imageMean, proc->image_mean(), "image_mean"),
        std::tuple(&d.imageStd, proc->image_std(), "image_std")}) {
    if (!values) {
      if (d.doNormalize)
        return at.invalid(name, " is missing");
      continue;
    }
    field->assign(values->begin(), values->end());
  }
  if (d.doNormalize &&
      (d.imageMean.size() != 3 || d.imageStd.size() != 3 ||
       std::any_of(d.imageStd.begin(), d.imageStd.end(),
                   [](double v) { return !(v != 0) || !std::isfinite(v); }) ||
       std::any_of(d.imageMean.begin(), d.imageMean.end(),
                   [](double v) { return !std::isfinite(v); })))
    return at.invalid("image_mean and image_std need 3 finite values each, "
                      "std nonzero");
  desc.hasImageProcessor = true;
  return absl::OkStatus();
}

/// Whether `a` and `b` declare the same tensors in the same order.
bool sameSignature(const std::vector<TensorDesc> &a,
                   const std::vector<TensorDesc> &b) {
  auto sameDims = [](const std::vector<DimDesc> &x,
                     const std::vector<DimDesc> &y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                      [](const DimDesc &p, const DimDesc &q) {
                        return p.kind == q.kind && p.bound == q.bound &&
                               p.symbol == q.symbol;
                      });
  };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [&](const TensorDesc &x, const TensorDesc &y) {
                      return x.name == y.name && x.dtype == y.dtype &&
                             sameDims(x.dims, y.dims);
                    });
}

} // namespace

absl::Status loadStages(const Diag &diag, const Layout &layout,
                        const fb::Multimodal &table, Plan::Impl &impl) {
  Diag mm = diag.nested("multimodal");
  if (impl.versionMinor < kFormatVersionMinorMultimodal)
    return mm.invalid("the table needs format ", kFormatVersionMajor, ".",
                      kFormatVersionMinorMultimodal,
                      ", but the file is version ", impl.versionMajor, ".",
                      impl.versionMinor);
  size_t devices = impl.schedules.size();
  if (devices != 1 && impl.versionMinor < kFormatVersionMinorMultimodalExperts)
    return mm.invalid("a multimodal plan has one device schedule before "
                      "format ",
                      kFormatVersionMajor, ".",
                      kFormatVersionMinorMultimodalExperts, ", not ", devices);
  const auto *stages = table.stages();
  if (stages->size() == 0 || stages->size() > kMaxStages)
    return mm.invalid(stages->size(), " stages; a multimodal plan has 1 to ",
                      kMaxStages);
  MultimodalDesc &desc = impl.multimodal;
  impl.stageSchedules.resize(stages->size());
  // Vision stages first, then the Embed, the Prefill and at most one Head.
  int lastRole = -1;
  for (size_t i = 0; i < stages->size(); ++i) {
    const fb::Stage *fbStage = stages->Get(i);
    StageDesc stage;
    stage.name = std::string(str(fbStage->name()));
    uint8_t role = static_cast<uint8_t>(fbStage->role());
    Diag at = mm.nested(absl::StrCat("stage ", i, " '", stage.name, "'"));
    if (role > static_cast<uint8_t>(fb::StageRole::MAX))
      return at.invalid("role ", int(role), " is no StageRole");
    stage.role = static_cast<StageRole>(role);
    if (int(role) < lastRole ||
        (int(role) == lastRole && stage.role != StageRole::Vision))
      return at.invalid("a ", roleName(stage.role), " stage after a ",
                        roleName(static_cast<StageRole>(lastRole)),
                        " one; the stages are Vision ones, then one Embed, "
                        "one Prefill and at most one Head");
    lastRole = role;
    if (stage.role == StageRole::Embed)
      desc.embedStage = static_cast<int>(i);
    if (stage.role == StageRole::Prefill)
      desc.prefillStage = static_cast<int>(i);
    // The Prefill stage runs on every device, beside its decode schedule,
    // whose tiered experts it may page (1.27); every other stage is one
    // schedule that each device runs.
    bool prefill = stage.role == StageRole::Prefill;
    const auto *others = fbStage->other_device_schedules();
    size_t schedules = 1 + (others ? others->size() : 0);
    if (schedules != (prefill ? devices : 1))
      return at.invalid(schedules, " schedules; ",
                        prefill ? "the Prefill stage has one per device ("
                                : "a stage other than the Prefill has one (",
                        prefill ? devices : 1, ")");
    const ScheduleInfo *decode = prefill ? &impl.schedules[0] : nullptr;
    MOERT_RETURN_IF_ERROR(validateSchedule(at, impl, layout,
                                           *fbStage->schedule(),
                                           impl.stageSchedules[i], decode));
    if (prefill)
      impl.prefillStageSchedules.resize(schedules - 1);
    for (size_t d = 1; d < schedules; ++d) {
      Diag device = at.nested(absl::StrCat("device ", d));
      ScheduleInfo &schedule = impl.prefillStageSchedules[d - 1];
      MOERT_RETURN_IF_ERROR(validateSchedule(device, impl, layout,
                                             *others->Get(d - 1), schedule,
                                             &impl.schedules[d]));
      // The feeds and the caches are the stage's, whichever device runs it.
      for (bool input : {true, false}) {
        const auto &mine = input ? schedule.inputDescs : schedule.outputDescs;
        const auto &first = input ? impl.stageSchedules[i].inputDescs
                                  : impl.stageSchedules[i].outputDescs;
        if (!sameSignature(mine, first))
          return device.invalid("its graph ", input ? "inputs" : "outputs",
                                " are not device 0's");
      }
    }
    if (impl.stageSchedules[i].tiers.present &&
        (!prefill || impl.versionMinor < kFormatVersionMinorMultimodalExperts))
      return at.invalid(prefill
                            ? "a Prefill stage pages tiered experts from "
                              "format 1.27"
                            : "only the Prefill stage pages tiered experts");
    desc.stages.push_back(std::move(stage));
  }
  if (desc.embedStage < 0 || desc.prefillStage < 0)
    return mm.invalid("no ", desc.embedStage < 0 ? "Embed" : "Prefill",
                      " stage");
  return absl::OkStatus();
}

absl::Status validateMultimodal(const Diag &diag, const fb::Multimodal &table,
                                Plan::Impl &impl) {
  Diag mm = diag.nested("multimodal");
  MultimodalDesc &desc = impl.multimodal;
  const GenerationDesc &gen = impl.generation;
  desc.imageTokenId = table.image_token_id();
  desc.imageFeaturesStage = table.image_features_stage();
  desc.imageFeatures = std::string(str(table.image_features()));
  desc.logitsStage = table.logits_stage();
  desc.logits = std::string(str(table.logits()));
  desc.spatialMergeSize = table.spatial_merge_size();
  desc.imageGrid = std::string(str(table.image_grid()));
  desc.maxImages = table.max_images();
  int numStages = static_cast<int>(desc.stages.size());
  if (desc.imageTokenId < 0 || desc.imageTokenId >= gen.vocabSize)
    return mm.invalid("image_token_id ", desc.imageTokenId,
                      " is not in the vocabulary [0, ", gen.vocabSize, ")");
  if (desc.spatialMergeSize < 1 || desc.spatialMergeSize > kMaxSpatialMerge)
    return mm.invalid("spatial_merge_size ", desc.spatialMergeSize,
                      " is not in [1, ", kMaxSpatialMerge, "]");
  if (desc.maxImages < 0 ||
      static_cast<uint64_t>(desc.maxImages) > kMaxDimBound)
    return mm.invalid("max_images ", desc.maxImages, " is not in [0, 2^40]");
  const auto *rows = table.position_rows();
  if (rows->size() > 8)
    return mm.invalid(rows->size(), " position rows; 0 to 8");
  bool gridRows = false;
  for (size_t r = 0; r < rows->size(); ++r) {
    uint8_t row = static_cast<uint8_t>(rows->Get(r));
    if (row > static_cast<uint8_t>(fb::PositionRow::MAX))
      return mm.invalid("position row ", r, " is ", int(row),
                        ", which is no PositionRow");
    desc.positionRows.push_back(static_cast<PositionRow>(row));
    gridRows |= desc.positionRows.back() != PositionRow::Sequence;
  }
  // Time, height and width rows place each image by its grid.
  if (desc.imageGrid.empty() && gridRows)
    return mm.invalid("no image_grid input, which the position rows read");
  if ((desc.imageGrid.empty() || rows->size() == 0) &&
      impl.versionMinor < kFormatVersionMinorIndexPositions)
    return mm.invalid("index positions or no image grid need format ",
                      kFormatVersionMajor, ".",
                      kFormatVersionMinorIndexPositions,
                      ", but the file is "
                      "version ",
                      impl.versionMajor, ".", impl.versionMinor);
  // The decode schedule's positions follow the same rows.
  if (gen.positionIds.empty() ||
      gen.positionRows != static_cast<int>(desc.positionRows.size()))
    return mm.invalid("the decode schedule's positions '", gen.positionIds,
                      "' have ", gen.positionRows, " rows but the rule ",
                      desc.positionRows.size());
  if (desc.imageFeaturesStage < 0 || desc.imageFeaturesStage >= numStages ||
      desc.stages[desc.imageFeaturesStage].role != StageRole::Vision)
    return mm.invalid("image_features_stage ", desc.imageFeaturesStage,
                      " is not a Vision stage");
  const ScheduleInfo &vision = impl.stageSchedules[desc.imageFeaturesStage];
  int32_t features = findSignatureTensor(vision, false, desc.imageFeatures);
  if (features < 0 || !isA(vision.tensors[features], DType::F32, 2))
    return mm.invalid("image features '", desc.imageFeatures,
                      "' are not an f32 [m, H] output of stage ",
                      desc.imageFeaturesStage);
  if (desc.logitsStage < 0 || desc.logitsStage >= numStages ||
      desc.logitsStage < desc.prefillStage)
    return mm.invalid("logits_stage ", desc.logitsStage,
                      " is neither the Prefill stage nor a later one");
  const ScheduleInfo &head = impl.stageSchedules[desc.logitsStage];
  int32_t logits = findSignatureTensor(head, false, desc.logits);
  if (logits < 0 || !isA(head.tensors[logits], DType::F32, 3) ||
      head.tensors[logits].dims[2].kind != fb::DimKind::Static ||
      head.tensors[logits].dims[2].bound != gen.vocabSize)
    return mm.invalid("logits '", desc.logits, "' are not an f32 [1, n, ",
                      gen.vocabSize, "] output of stage ", desc.logitsStage);

  MOERT_RETURN_IF_ERROR(loadRules(mm, table, impl, desc));
  FeedChecker checker(impl, desc);
  checker.hasGridRule_ = table.grid_rule() != nullptr;
  std::set<std::string> given;
  for (int s = 0; s < numStages; ++s) {
    StageDesc &stage = desc.stages[s];
    MOERT_RETURN_IF_ERROR(checker.check(
        mm.nested(absl::StrCat("stage ", s, " '", stage.name, "'")),
        impl.stageSchedules[s], s, table.stages()->Get(s)->feeds(),
        stage.feeds));
    for (const FeedDesc &feed : stage.feeds)
      if (feed.kind == FeedKind::Given) {
        if (!given.insert(feed.input).second)
          return mm.invalid("two Vision stages take given input '", feed.input,
                            "'");
        desc.givenInputs.push_back(feed.input);
      }
  }
  if (!desc.imageGrid.empty() && !given.count(desc.imageGrid))
    desc.givenInputs.push_back(desc.imageGrid);
  if (desc.hasImageProcessor && desc.imageGrid.empty() &&
      !desc.imageProcessor.llama4Tiles)
    return mm.invalid("image_processor needs an image_grid input");
  if (desc.hasImageProcessor) {
    // The pixel patches: a given f32 [p, 3 * temporal * patch^2] input
    // (Llama 4's tiles: f32 [tiles, 3, S, S]).
    const ImageProcessorDesc &proc = desc.imageProcessor;
    int64_t width =
        3 * proc.temporalPatchSize * proc.patchSize * proc.patchSize;
    bool found = false;
    for (int s = 0; s < numStages && !found; ++s)
      for (const FeedDesc &feed : desc.stages[s].feeds)
        if (feed.kind == FeedKind::Given && feed.input == proc.pixelInput) {
          const ScheduleInfo &schedule = impl.stageSchedules[s];
          const TensorInfo &t =
              schedule.tensors[findSignatureTensor(schedule, true, feed.input)];
          // Llama 4's tiles: f32 [tiles, 3, S, S].
          auto sized = [&](int d, int64_t size) {
            return t.dims[d].kind != fb::DimKind::Static ||
                   t.dims[d].bound == size;
          };
          if (proc.llama4Tiles
                  ? !isA(t, DType::F32, 4) || !sized(1, 3) ||
                        !sized(2, proc.patchSize) || !sized(3, proc.patchSize)
                  : !isA(t, DType::F32, 2) || !sized(1, width))
            return mm.invalid(
                "image_processor.pixel_input '", feed.input, "' is ",
                describe(t), "; the processor gives f32 ",
                proc.llama4Tiles ? absl::StrCat("[tiles, 3, ", proc.patchSize,
                                                ", ", proc.patchSize, "]")
                                 : absl::StrCat("[p, ", width, "]"));
          found = true;
          break;
        }
    if (!found)
      return mm.invalid("image_processor.pixel_input '", proc.pixelInput,
                        "' is no given vision input");
  }
  // A stage after the vision stages that reads their output (the Prefill,
  // or onnxruntime-genai's embedding taking the image features) has no
  // input without images.
  for (const StageDesc &stage : desc.stages)
    for (const FeedDesc &feed : stage.feeds) {
      if (stage.role == StageRole::Vision ||
          feed.kind != FeedKind::StageOutput ||
          desc.stages[feed.stage].role != StageRole::Vision)
        continue;
      if (stage.role != StageRole::Prefill &&
          impl.versionMinor < kFormatVersionMinorGenaiStages)
        return mm.invalid("stage '", stage.name, "' reads vision output '",
                          feed.output, "', which needs format ",
                          kFormatVersionMajor, ".",
                          kFormatVersionMinorGenaiStages);
      desc.textThroughDecode = true;
    }
  MOERT_RETURN_IF_ERROR(checker.check(mm.nested("decode"), impl.schedules[0],
                                      numStages, table.decode_feeds(),
                                      desc.decodeFeeds));
  impl.isMultimodal = true;
  return absl::OkStatus();
}

} // namespace moert::detail
