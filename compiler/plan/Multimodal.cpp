//===- Multimodal.cpp - The stages and feeds of a multimodal plan ---------===//

#include "compiler/plan/Multimodal.h"
#include "compiler/plan/PlanEmitter.h"
#include "dialects/moe/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
namespace fb = moert::fb;

namespace moec::plan {
namespace {

/// The graph's @main, or null.
func::FuncOp getMainFunc(ModuleOp module) {
  return module.lookupSymbol<func::FuncOp>("main");
}

InFlightDiagnostic errorAt(MLIRContext *context, StringRef path) {
  return emitError(FileLineColLoc::get(context, path, 0, 0));
}

bool isType(Type type, int64_t rank, bool (*elem)(Type)) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.getRank() == rank && elem(ranked.getElementType());
}
bool isF32(Type t) { return t.isF32(); }
bool isI64(Type t) { return t.isInteger(64); }
bool isBool(Type t) { return t.isInteger(1); }

int64_t lastDim(Type type) {
  auto ranked = cast<RankedTensorType>(type);
  return ranked.getDimSize(ranked.getRank() - 1);
}

/// The trailing decimal index of a name ("deepstack_features.0" -> "0").
StringRef trailingIndex(StringRef name) {
  size_t digits = 0;
  while (digits < name.size() && llvm::isDigit(name[name.size() - 1 - digits]))
    ++digits;
  return name.take_back(digits);
}

/// The one f32 rank-3 output of `func`, else an error.
FailureOr<std::string> onlyOutput(const StageGraph &stage, func::FuncOp func,
                                  ArrayRef<std::string> skip = {}) {
  SmallVector<std::string> found;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (!llvm::is_contained(skip, getResultName(func, i)) &&
        isType(func.getResultTypes()[i], 3, isF32))
      found.push_back(getResultName(func, i));
  if (found.size() == 1)
    return found.front();
  return errorAt(func.getContext(), stage.path)
             << "the " << stage.name << " graph has " << found.size()
             << " f32 [1, n, H] outputs"
             << (skip.empty() ? "" : " besides its caches") << "; it needs one",
         failure();
}

/// Makes input `index` of `func`, an f32 [m, W], take `from` (f32
/// [b, t, W]) instead, flattened to [b * t, W] in front of its uses: the
/// view(-1, W) the model applies between its vision encoder and projector
/// (Llama 4's), which neither exported graph holds.
void takeFlattened(func::FuncOp func, unsigned index, RankedTensorType from) {
  BlockArgument arg = func.getArgument(index);
  Type flat = arg.getType();
  arg.setType(from);
  OpBuilder builder = OpBuilder::atBlockBegin(&func.getBody().front());
  Value rows =
      moe::FlattenOp::create(builder, arg.getLoc(), flat, arg, /*axis=*/2);
  arg.replaceAllUsesExcept(rows, rows.getDefiningOp());
  // Its symbols are the encoder output's now, not the exporter's names.
  func.removeArgAttr(index, "moe.dim_params");
  SmallVector<Type> types(func.getBody().getArgumentTypes());
  func.setFunctionType(
      FunctionType::get(func.getContext(), types, func.getResultTypes()));
}

/// Feeds every input of `stage`, a Vision stage after `previous`, the one
/// f32 output of `previous` that fits it: as it is, or flattened from
/// [b, t, W] to its [m, W].
LogicalResult feedFromPrevious(StageGraph &stage, int previousIndex,
                               const StageGraph &previous) {
  func::FuncOp func = getMainFunc(stage.module);
  func::FuncOp from = getMainFunc(previous.module);
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    std::string name = getArgName(func, i);
    SmallVector<unsigned> fits;
    for (unsigned r = 0; r < from.getNumResults(); ++r) {
      auto out = dyn_cast<RankedTensorType>(from.getResultTypes()[r]);
      if (out && type.getElementType().isF32() &&
          out.getElementType().isF32() &&
          (out.getRank() == type.getRank() ||
           (type.getRank() == 2 && out.getRank() == 3)) &&
          out.getDimSize(out.getRank() - 1) == lastDim(type))
        fits.push_back(r);
    }
    if (fits.size() != 1)
      return errorAt(func.getContext(), stage.path)
                 << "input '" << name << "' of the " << stage.name
                 << " graph is fed from the " << previous.name
                 << " graph's outputs, but " << fits.size()
                 << " of them are f32 of its width (one is needed)",
             failure();
    auto out = cast<RankedTensorType>(from.getResultTypes()[fits.front()]);
    if (out.getRank() != type.getRank())
      takeFlattened(func, i, out);
    stage.feeds.push_back({name, fb::FeedKind::StageOutput, previousIndex,
                           getResultName(from, fits.front())});
  }
  return success();
}

/// The grid rule's feed of vision input `name` (docs/multimodal.md,
/// "Vision inputs from the grid"), by its name and type: `cu_seqlens`
/// (integer [frames + 1]), `*position*` (i64 [p, 2]) and `interp*`
/// indices (i64 [p, k]) and weights (f32 [p, k]); Given for any other.
/// Reports an interpolation input that the config cannot drive.
FailureOr<fb::FeedKind> getGridFeed(const StageGraph &stage, StringRef name,
                                    RankedTensorType type,
                                    const MultimodalConfig &config,
                                    fb::GridRuleT &rule) {
  Type elem = type.getElementType();
  bool integer = elem.isInteger(64) || elem.isInteger(32);
  fb::FeedKind kind = fb::FeedKind::Given;
  if (name.contains_insensitive("cu_seqlens") && type.getRank() == 1 && integer)
    kind = fb::FeedKind::GridSegments;
  else if (name.contains_insensitive("position") && type.getRank() == 2 &&
           elem.isInteger(64) && !type.isDynamicDim(1) &&
           type.getDimSize(1) == 2)
    kind = fb::FeedKind::GridPatchPositions;
  else if (name.contains_insensitive("interp") && type.getRank() == 2 &&
           elem.isInteger(64) && name.contains_insensitive("ind"))
    kind = fb::FeedKind::GridInterpIndices;
  else if (name.contains_insensitive("interp") && type.getRank() == 2 &&
           elem.isF32() && name.contains_insensitive("weight"))
    kind = fb::FeedKind::GridInterpWeights;
  bool interp = kind == fb::FeedKind::GridInterpIndices ||
                kind == fb::FeedKind::GridInterpWeights;
  if (interp && (config.tableSide < 1 || config.gridFamily.empty()))
    return errorAt(type.getContext(), stage.path)
               << "input '" << name
               << "' takes the position table's interpolation taps, but "
                  "config.json's "
               << (config.tableSide < 1
                       ? "vision_config.num_position_embeddings is missing "
                         "or not a square"
                       : "vision model_type is no family the grid rule "
                         "knows (qwen3_vl, qwen3_vl_moe, qwen3_5, "
                         "qwen3_5_moe)"),
           failure();
  if (interp) {
    rule.table_side = config.tableSide;
    rule.interpolation = config.interpolation;
    rule.align_corners = config.alignCorners;
    int64_t taps =
        config.interpolation == fb::GridInterpolation::Bicubic ? 16 : 4;
    if (!type.isDynamicDim(1) && type.getDimSize(1) != taps)
      return errorAt(type.getContext(), stage.path)
                 << "input '" << name << "' has " << type.getDimSize(1)
                 << " taps a patch but the " << config.gridFamily
                 << " family's interpolation gives " << taps,
             failure();
  }
  return kind;
}

/// Records Llama 4's tile processor (docs/multimodal.md, "Llama 4's
/// tiles"): the encoder's one given f32 [tiles, 3, S, S] input takes the
/// tiles, S the processor's tile side where static; no grid.
LogicalResult recordTiles(MLIRContext *context, const StageGraph &encoder,
                          func::FuncOp func, const fb::ImageProcessorT &proc,
                          MultimodalSignature &mm) {
  SmallVector<std::pair<std::string, RankedTensorType>> tiles;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    if (isType(type, 4, isF32))
      tiles.push_back({getArgName(func, i), type});
  }
  if (tiles.size() != 1 || !mm.imageGrid.empty())
    return errorAt(context, encoder.path)
           << "the vision encoder has " << tiles.size()
           << " f32 [tiles, 3, S, S] inputs"
           << (mm.imageGrid.empty() ? "" : " and an image grid")
           << "; Llama4ImageProcessor's tiles feed one and no grid";
  auto [name, type] = tiles.front();
  int64_t want[] = {0, 3, proc.patch_size, proc.patch_size};
  for (int d = 1; d < 4; ++d)
    if (!type.isDynamicDim(d) && type.getDimSize(d) != want[d])
      return errorAt(context, encoder.path)
             << "pixel input '" << name << "' is [" << type.getShape()
             << "]; preprocessor_config.json's tiles are [tiles, 3, "
             << proc.patch_size << ", " << proc.patch_size << "]";
  mm.hasProcessor = true;
  mm.processor = proc;
  mm.processor.pixel_input = name;
  return success();
}

} // namespace

std::vector<std::string> getDecodeTokenFeeds(ModuleOp decode) {
  std::vector<std::string> names;
  func::FuncOp func = getMainFunc(decode);
  if (!func)
    return names;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    Type type = func.getArgument(i).getType();
    std::string name = getArgName(func, i);
    if ((isType(type, 2, isI64) &&
         StringRef(name).contains_insensitive("type")) ||
        isType(type, 2, isBool))
      names.push_back(name);
  }
  return names;
}

FailureOr<MultimodalSignature>
findMultimodalSignature(std::vector<StageGraph> &stages, ModuleOp decode,
                        StringRef decodePath, const MultimodalConfig &config,
                        GenerationSignature &sig) {
  MLIRContext *context = decode.getContext();
  MultimodalSignature mm;
  mm.imageTokenId = config.imageTokenId;
  mm.spatialMergeSize = std::max<int64_t>(1, config.spatialMergeSize);
  int embed = -1, prefill = -1, head = -1, vision = -1;
  for (auto [index, stage] : llvm::enumerate(stages)) {
    int i = static_cast<int>(index);
    // The last Vision stage gives the features (after a projector).
    if (stage.role == fb::StageRole::Vision)
      vision = i;
    if (stage.role == fb::StageRole::Embed)
      embed = i;
    if (stage.role == fb::StageRole::Prefill)
      prefill = i;
    if (stage.role == fb::StageRole::Head)
      head = i;
    if (!getMainFunc(stage.module))
      return errorAt(context, stage.path) << "the graph has no main function",
             failure();
  }
  if (vision < 0 || embed < 0 || prefill < 0)
    return errorAt(context, decodePath)
               << "a multimodal plan needs a vision encoder, an embedding "
                  "and a language model graph",
           failure();

  // The embedding: token ids in, [1, n, H] out; onnxruntime-genai's also
  // takes the image features (f32 [m, H]), fed below.
  StageGraph &embedStage = stages[embed];
  func::FuncOp embedFunc = getMainFunc(embedStage.module);
  std::string embedFeatures;
  Type featuresType;
  for (unsigned i = 0; i < embedFunc.getNumArguments(); ++i) {
    Type type = embedFunc.getArgument(i).getType();
    std::string name = getArgName(embedFunc, i);
    bool ids = isType(type, 2, isI64) && embedStage.feeds.empty();
    bool features = isType(type, 2, isF32) && embedFeatures.empty();
    if (!ids && !features)
      return errorAt(context, embedStage.path)
                 << "input '" << name
                 << "' of the embedding graph is neither the token ids (i64 "
                    "[1, n]) nor the image features (f32 [m, H]), one each; "
                    "the plan cannot feed it",
             failure();
    if (ids)
      embedStage.feeds.push_back({name, fb::FeedKind::TokenIds, -1, ""});
    else
      std::tie(embedFeatures, featuresType) = std::pair(name, type);
  }
  if (embedStage.feeds.empty())
    return errorAt(context, embedStage.path)
               << "the embedding graph takes no token ids (i64 [1, n])",
           failure();
  FailureOr<std::string> embeds = onlyOutput(embedStage, embedFunc);
  if (failed(embeds))
    return failure();
  int64_t width = lastDim(embedFunc.getResultTypes()[0]);

  // The vision encoder (the first Vision stage): every input is the
  // caller's; a later one (a projector) reads the stage before it. The
  // features are the last one's output of the language model's width
  // (`pooler_output` where several).
  StageGraph &visionStage = stages[vision];
  func::FuncOp visionFunc = getMainFunc(visionStage.module);
  for (int v = 1; v <= vision; ++v)
    if (failed(feedFromPrevious(stages[v], v - 1, stages[v - 1])))
      return failure();
  StageGraph &encoder = stages[0];
  func::FuncOp encoderFunc = getMainFunc(encoder.module);
  SmallVector<unsigned> wide;
  for (unsigned i = 0; i < visionFunc.getNumResults(); ++i)
    if (isType(visionFunc.getResultTypes()[i], 2, isF32) &&
        lastDim(visionFunc.getResultTypes()[i]) == width)
      wide.push_back(i);
  for (unsigned i : wide)
    if (wide.size() == 1 || getResultName(visionFunc, i) == "pooler_output")
      mm.imageFeatures = getResultName(visionFunc, i);
  if (mm.imageFeatures.empty())
    return errorAt(context, visionStage.path)
               << "cannot tell the image features among the " << wide.size()
               << " f32 [m, " << width
               << "] outputs of the vision encoder (one, or one named "
                  "'pooler_output')",
           failure();
  mm.imageFeaturesStage = vision;
  if (!embedFeatures.empty()) {
    if (lastDim(featuresType) != width)
      return errorAt(context, embedStage.path)
                 << "input '" << embedFeatures << "' of the embedding graph "
                 << "has width " << lastDim(featuresType)
                 << " but the image features have " << width,
             failure();
    embedStage.feeds.push_back(
        {embedFeatures, fb::FeedKind::StageOutput, vision, mm.imageFeatures});
  }
  SmallVector<std::pair<std::string, RankedTensorType>> pixels;
  for (unsigned i = 0; i < encoderFunc.getNumArguments(); ++i) {
    std::string name = getArgName(encoderFunc, i);
    auto type = cast<RankedTensorType>(encoderFunc.getArgument(i).getType());
    FailureOr<fb::FeedKind> kind =
        getGridFeed(encoder, name, type, config, mm.gridRule);
    if (failed(kind))
      return failure();
    encoder.feeds.push_back({name, *kind, -1, ""});
    if (*kind == fb::FeedKind::Given && isType(type, 2, isF32))
      pixels.push_back({name, type});
    // The grid: i64 [images, 3] named as such.
    if (type.getRank() == 2 && isI64(type.getElementType()) &&
        StringRef(name).contains_insensitive("grid")) {
      mm.imageGrid = name;
      mm.maxImages = type.isDynamicDim(0) ? 0 : type.getDimSize(0);
    }
  }
  if (config.hasProcessor &&
      config.processor.resize == fb::ImageResize::Llama4Tiles) {
    if (failed(
            recordTiles(context, encoder, encoderFunc, config.processor, mm)))
      return failure();
  } else if (config.hasProcessor) {
    // The processor's patches: the one given f32 [p, F] input, F = 3 *
    // temporal_patch_size * patch_size^2 where static.
    const fb::ImageProcessorT &proc = config.processor;
    int64_t width =
        3 * proc.temporal_patch_size * proc.patch_size * proc.patch_size;
    if (pixels.size() != 1 || mm.imageGrid.empty())
      return errorAt(context, encoder.path)
                 << "the vision encoder has " << pixels.size()
                 << " given f32 [p, F] inputs and "
                 << (mm.imageGrid.empty() ? "no" : "an")
                 << " image grid; preprocessor_config.json's patches and "
                    "grid feed one each",
             failure();
    auto [pixelName, type] = pixels.front();
    if (!type.isDynamicDim(1) && type.getDimSize(1) != width)
      return errorAt(context, encoder.path)
                 << "pixel input '" << pixelName << "' takes "
                 << type.getDimSize(1)
                 << " values a patch but preprocessor_config.json's gives 3 "
                    "x temporal_patch_size x patch_size^2 = "
                 << width,
             failure();
    mm.hasProcessor = true;
    mm.processor = proc;
    mm.processor.pixel_input = pixelName;
  }

  // The language model.
  StageGraph &lm = stages[prefill];
  func::FuncOp lmFunc = getMainFunc(lm.module);
  bool positions = false;
  for (unsigned i = 0; i < lmFunc.getNumArguments(); ++i) {
    std::string name = getArgName(lmFunc, i);
    Type type = lmFunc.getArgument(i).getType();
    StageFeed feed{name, fb::FeedKind::Given, -1, ""};
    if (isType(type, 3, isF32)) {
      feed = {name, fb::FeedKind::MergedEmbeddings, embed, *embeds};
    } else if (isType(type, 2, isI64) &&
               StringRef(name).contains_insensitive("position")) {
      // [1, n]: the tokens' indices (no position rows).
      feed.kind = fb::FeedKind::Positions;
      positions = true;
    } else if (isType(type, 3, isI64) &&
               StringRef(name).contains_insensitive("position")) {
      feed.kind = fb::FeedKind::Positions;
      positions = true;
      auto ranked = cast<RankedTensorType>(type);
      int64_t rows = ranked.getDimSize(0);
      if (mm.imageGrid.empty())
        return errorAt(context, encoder.path)
                   << "the vision encoder has no image grid input (i64 "
                      "[images, 3] named '*grid*'), which the M-RoPE "
                      "positions of the language model read",
               failure();
      if (config.spatialMergeSize < 1)
        return errorAt(context, lm.path)
                   << "positions '" << name
                   << "' are M-RoPE's, but config.json has no "
                      "vision_config.spatial_merge_size",
               failure();
      if (config.mropeSections != 3 || (rows != 3 && rows != 4))
        return errorAt(context, lm.path)
                   << "positions '" << name << "' have "
                   << (ShapedType::isDynamic(rows) ? std::string("dynamic")
                                                   : std::to_string(rows))
                   << " rows and config.json's mrope_section "
                   << config.mropeSections
                   << " sections; the position rule knows 3 sections as 3 "
                      "rows (t, h, w) or 4 (text, t, h, w: transformers 5)",
               failure();
      if (rows == 4)
        mm.positionRows.push_back(fb::PositionRow::Sequence);
      for (fb::PositionRow row :
           {fb::PositionRow::Time, fb::PositionRow::Height,
            fb::PositionRow::Width})
        mm.positionRows.push_back(row);
    } else if (isType(type, 2, isBool)) {
      feed.kind = fb::FeedKind::ImageTokenMask;
    } else if (isType(type, 2, isI64)) {
      feed.kind = StringRef(name).contains_insensitive("type")
                      ? fb::FeedKind::TokenTypes
                      : fb::FeedKind::TokenIds;
    } else if (isType(type, 2, isF32)) {
      // Deepstack features: the vision output of the same trailing index.
      StringRef index = trailingIndex(name);
      for (unsigned r = 0; r < visionFunc.getNumResults(); ++r) {
        std::string out = getResultName(visionFunc, r);
        if (out != mm.imageFeatures && !index.empty() &&
            trailingIndex(out) == index &&
            isType(visionFunc.getResultTypes()[r], 2, isF32))
          feed = {name, fb::FeedKind::StageOutput, vision, out};
      }
    }
    if (feed.kind == fb::FeedKind::Given)
      return errorAt(context, lm.path)
                 << "input '" << name
                 << "' of the language model is none of the embeddings, "
                    "positions, image mask, token types or a vision output "
                    "of the same index; the plan cannot feed it",
             failure();
    lm.feeds.push_back(std::move(feed));
  }
  if (!positions)
    return errorAt(context, lm.path)
               << "the language model takes no positions (i64 [1, n] or "
                  "[r, 1, n] named '*position*')",
           failure();
  // Its caches start the decode's; the other output is the hidden states.
  std::vector<std::string> caches;
  FailureOr<std::string> hidden = std::string();
  for (unsigned i = 0; i < lmFunc.getNumResults(); ++i) {
    std::string name = getResultName(lmFunc, i);
    if (llvm::any_of(sig.cache, [&](const CachePairInfo &pair) {
          return !name.empty() && StringRef(pair.output).ends_with(name);
        }))
      caches.push_back(name);
  }
  hidden = onlyOutput(lm, lmFunc, caches);
  if (failed(hidden) ||
      failed(matchPrefillCaches(decode, lm.module, lm.path, {*hidden}, sig)))
    return failure();

  if (head >= 0) {
    StageGraph &headStage = stages[head];
    func::FuncOp headFunc = getMainFunc(headStage.module);
    if (headFunc.getNumArguments() != 1 ||
        !isType(headFunc.getArgument(0).getType(), 3, isF32))
      return errorAt(context, headStage.path)
                 << "the head takes the hidden states (one f32 [1, n, H] "
                    "input)",
             failure();
    headStage.feeds.push_back({getArgName(headFunc, 0),
                               fb::FeedKind::LastPosition, prefill, *hidden});
    FailureOr<std::string> logits = onlyOutput(headStage, headFunc);
    if (failed(logits))
      return failure();
    mm.logitsStage = head;
    mm.logits = *logits;
  } else {
    mm.logitsStage = prefill;
    mm.logits = *hidden;
  }
  func::FuncOp decodeFunc = getMainFunc(decode);
  for (const std::string &name : getDecodeTokenFeeds(decode))
    for (unsigned i = 0; i < decodeFunc.getNumArguments(); ++i)
      if (getArgName(decodeFunc, i) == name)
        mm.decodeFeeds.push_back(
            {name,
             isType(decodeFunc.getArgument(i).getType(), 2, isBool)
                 ? fb::FeedKind::ImageTokenMask
                 : fb::FeedKind::TokenTypes,
             -1, ""});
  return mm;
}

LogicalResult takeTokenIds(ModuleOp decode, StringRef decodePath,
                           StringRef embedsInput, const StageGraph &embed,
                           StringRef idsInput) {
  MLIRContext *context = decode.getContext();
  func::FuncOp func = getMainFunc(decode);
  func::FuncOp embedFunc = getMainFunc(embed.module);
  auto argIndex = [](func::FuncOp f,
                     StringRef name) -> std::optional<unsigned> {
    for (unsigned i = 0; f && i < f.getNumArguments(); ++i)
      if (getArgName(f, i) == name)
        return i;
    return std::nullopt;
  };
  std::optional<unsigned> embeds = argIndex(func, embedsInput);
  if (!embeds || !isType(func.getArgument(*embeds).getType(), 3, isF32))
    return errorAt(context, decodePath)
               << "the decoder has no f32 [b, n, H] input '" << embedsInput
               << "' (genai_config.json's model.decoder.inputs."
                  "inputs_embeds)",
           failure();
  std::optional<unsigned> ids = argIndex(embedFunc, idsInput);
  if (!ids || !isType(embedFunc.getArgument(*ids).getType(), 2, isI64))
    return errorAt(context, embed.path)
               << "the embedding has no i64 [b, n] input '" << idsInput
               << "' (genai_config.json's model.embedding.inputs.input_ids)",
           failure();
  auto embedsType = cast<RankedTensorType>(func.getArgument(*embeds).getType());
  // The lookup: a Gather along axis 0 of a constant [vocab, H] by the ids.
  moe::ConstantOp table;
  for (Operation *user : embedFunc.getArgument(*ids).getUsers()) {
    auto gather = dyn_cast<moe::GatherOp>(user);
    auto constant =
        gather ? gather.getData().getDefiningOp<moe::ConstantOp>() : nullptr;
    auto type =
        constant ? dyn_cast<RankedTensorType>(constant.getType()) : nullptr;
    if (gather && gather.getAxis() == 0 &&
        gather.getIndices() == embedFunc.getArgument(*ids) && type &&
        type.hasStaticShape() && type.getRank() == 2 &&
        type.getElementType().isF32() &&
        type.getDimSize(1) == lastDim(embedsType))
      table = constant;
  }
  if (!table)
    return errorAt(context, embed.path)
               << "the embedding does not look '" << idsInput
               << "' up in a table (a Gather of a constant f32 [vocab, "
               << lastDim(embedsType)
               << "]), which the decode steps' embeddings are",
           failure();
  // The new input: the embeddings' [b, n] and their dimension names.
  Builder builder(context);
  auto idsType = RankedTensorType::get(embedsType.getShape().take_front(2),
                                       builder.getI64Type());
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("moe.name", builder.getStringAttr(idsInput))};
  if (auto params = func.getArgAttrOfType<ArrayAttr>(*embeds, "moe.dim_params"))
    if (params.size() == 3)
      attrs.push_back(builder.getNamedAttr(
          "moe.dim_params",
          builder.getArrayAttr(params.getValue().take_front(2))));
  BlockArgument embedsArg = func.getArgument(*embeds);
  if (failed(func.insertArgument(*embeds, idsType,
                                 builder.getDictionaryAttr(attrs),
                                 embedsArg.getLoc())))
    return failure();
  BlockArgument idsArg = func.getArgument(*embeds);
  OpBuilder body = OpBuilder::atBlockBegin(&func.getBody().front());
  Operation *copy = body.clone(*table.getOperation());
  Value looked = moe::GatherOp::create(body, idsArg.getLoc(), embedsType,
                                       copy->getResult(0), idsArg,
                                       body.getI64IntegerAttr(0))
                     .getResult();
  func.getArgument(*embeds + 1).replaceAllUsesWith(looked);
  return func.eraseArgument(*embeds + 1);
}

void fixInputDims(ModuleOp module, ArrayRef<std::string> dims,
                  llvm::StringSet<> &used) {
  func::FuncOp func = getMainFunc(module);
  if (!func || func.getBody().empty() || dims.empty())
    return;
  SmallVector<Type> types;
  for (BlockArgument arg : func.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    auto params =
        func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "moe.dim_params");
    SmallVector<int64_t> shape(type.getShape());
    for (int64_t d = 0; params && d < type.getRank() &&
                        d < static_cast<int64_t>(params.size());
         ++d) {
      auto param = dyn_cast<StringAttr>(params[d]);
      if (!param || !type.isDynamicDim(d))
        continue;
      for (const std::string &dim : dims) {
        auto [name, value] = StringRef(dim).split('=');
        int64_t size = 0;
        if (name != param.getValue() || value.getAsInteger(10, size))
          continue;
        shape[d] = size;
        used.insert(name);
      }
    }
    auto fixed = RankedTensorType::get(shape, type.getElementType());
    arg.setType(fixed);
    types.push_back(fixed);
  }
  func.setFunctionType(
      FunctionType::get(module.getContext(), types, func.getResultTypes()));
}

void pruneFeeds(std::vector<StageGraph> &stages) {
  for (StageGraph &stage : stages) {
    FailureOr<SmallVector<func::FuncOp>> funcs =
        getDeviceFunctions(stage.module);
    if (failed(funcs))
      continue;
    func::FuncOp func = funcs->front();
    llvm::erase_if(stage.feeds, [&](const StageFeed &feed) {
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        if (getArgName(func, i) == feed.input)
          return false;
      return true;
    });
  }
}

} // namespace moec::plan
