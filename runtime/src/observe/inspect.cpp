//===- inspect.cpp - Human- and tool-readable dumps of a plan -------------===//

#include "observe/inspect.h"

#include "loader/plan_impl.h"
#include "tiers/expert_store.h"

#include "format/plan_bfbs_generated.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "flatbuffers/idl.h"

#include <algorithm>
#include <memory>

namespace moert {
namespace {

using detail::ScheduleInfo;
using detail::TensorInfo;

/// "[?<=64, 16]": static sizes, and bounds of symbolic (named) and dynamic
/// dimensions.
std::string shapeText(const Plan &plan, const TensorInfo &t) {
  std::vector<std::string> dims;
  for (int d = 0; d < t.rank; ++d) {
    const detail::DimInfo &dim = t.dims[d];
    switch (dim.kind) {
    case fb::DimKind::Static:
      dims.push_back(absl::StrCat(dim.bound));
      break;
    case fb::DimKind::Symbolic:
      dims.push_back(
          absl::StrCat(plan.symbols()[dim.symbol].name, "<=", dim.bound));
      break;
    default:
      dims.push_back(absl::StrCat("?<=", dim.bound));
    }
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string jsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      absl::StrAppend(&out, "\\", std::string(1, c));
    else if (static_cast<unsigned char>(c) < 0x20)
      absl::StrAppendFormat(&out, "\\u%04x", c);
    else
      out.push_back(c);
  }
  return out + "\"";
}

std::string idList(const std::vector<int32_t> &ids) {
  return absl::StrJoin(ids, ", ");
}

uint64_t weightBytes(const ScheduleInfo &s) {
  uint64_t bytes = 0;
  for (const TensorInfo &t : s.tensors)
    bytes += t.isWeight ? t.size : 0;
  return bytes;
}

/// `text` with every byte outside printable ASCII replaced by '?': names and
/// provenance come from an untrusted file and must not reach a terminal as
/// control sequences.
std::string printable(absl::string_view text) {
  std::string out(text);
  for (char &c : out)
    if (static_cast<unsigned char>(c) < 0x20 ||
        static_cast<unsigned char>(c) > 0x7e)
      c = '?';
  return out;
}

/// "input_ids i64 [batch<=1, seq<=256]" for each of `ids`.
std::string tensorList(const Plan &plan, const ScheduleInfo &s,
                       const std::vector<uint32_t> &ids) {
  std::vector<std::string> parts;
  for (uint32_t id : ids)
    parts.push_back(absl::StrCat(printable(s.tensors[id].name), " ",
                                 dtypeName(s.tensors[id].dtype), " ",
                                 shapeText(plan, s.tensors[id])));
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

/// The MoE layers of a schedule: its Experts steps, and the experts each
/// holds (dimension 0 of its w1, input 2; a device's shard under expert
/// parallelism).
std::string moeLayerText(const ScheduleInfo &s) {
  std::vector<int64_t> experts;
  for (const detail::StepInfo &step : s.steps)
    if (step.op == fb::OpKind::Experts && step.inputs.size() > 2 &&
        step.inputs[2] >= 0 && s.tensors[step.inputs[2]].rank > 0)
      experts.push_back(s.tensors[step.inputs[2]].dims[0].bound);
  if (experts.empty())
    return "no MoE layers";
  bool same = std::all_of(experts.begin(), experts.end(),
                          [&](int64_t e) { return e == experts.front(); });
  return absl::StrCat(
      experts.size(), " MoE layer", experts.size() == 1 ? "" : "s", " with ",
      same ? absl::StrCat(experts.front()) : absl::StrJoin(experts, "/"),
      " experts", experts.size() == 1 ? "" : " each");
}

/// ", 5 MatMulNBits and 2 Experts steps read int4 blocks of 32" (each kind
/// "with int8 activations" where its products quantize them) for the steps
/// that read block-quantized weights packed (format 1.11), or "".
std::string blockQuantText(const ScheduleInfo &s) {
  int matMuls = 0, experts = 0;
  std::vector<std::string> kinds;
  for (const detail::StepInfo &step : s.steps) {
    const fb::BlockQuantAttrs *quant = nullptr;
    if (step.op == fb::OpKind::MatMulNBits) {
      quant = step.fb->attrs_as<fb::BlockQuantAttrs>();
      ++matMuls;
    } else if (const auto *ffn = step.fb->attrs_as<fb::FfnAttrs>();
               ffn && ffn->block_quant()) {
      quant = ffn->block_quant();
      ++experts;
    }
    if (!quant)
      continue;
    std::string kind =
        absl::StrCat("int", quant->bits(), " blocks of ", quant->block_size(),
                     quant->int8_activations() ? " with int8 activations" : "");
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
      kinds.push_back(kind);
  }
  if (kinds.empty())
    return "";
  return absl::StrCat(", ", matMuls, " MatMulNBits and ", experts,
                      " Experts steps read ", absl::StrJoin(kinds, ", "));
}

/// The summary `moec inspect` starts with: where the plan came from, its
/// inputs and outputs, MoE layers, and each device's memory.
std::string summaryText(const Plan &plan) {
  const Plan::Impl &impl = plan.impl();
  std::string out;
  const ProvenanceDesc &p = impl.provenance;
  if (!p.compilerVersion.empty() || !p.modelFile.empty()) {
    absl::StrAppendFormat(&out, "compiled by %s (git %s) from %s",
                          printable(p.compilerVersion), printable(p.gitCommit),
                          printable(p.modelFile));
    if (!p.modelSha256.empty())
      absl::StrAppend(&out, " (sha256 ", p.modelSha256, ")");
    if (!p.prefillFile.empty())
      absl::StrAppend(&out, " and prefill ", printable(p.prefillFile),
                      " (sha256 ", p.prefillSha256, ")");
    absl::StrAppend(&out, "\n");
    std::vector<std::string> flags;
    for (const auto &[name, value] : p.flags)
      flags.push_back(absl::StrCat("--", printable(name), "=",
                                   value.empty() ? "''" : printable(value)));
    if (!flags.empty())
      absl::StrAppend(&out, "  options: ", absl::StrJoin(flags, " "), "\n");
  } else {
    absl::StrAppend(&out, "no provenance recorded (written by an older moec "
                          "or by the plan writer directly)\n");
  }
  const ScheduleInfo &first = impl.schedules.front();
  absl::StrAppend(&out, "inputs:  ", tensorList(plan, first, first.inputs),
                  "\noutputs: ", tensorList(plan, first, first.outputs), "\n");
  for (size_t d = 0; d < impl.schedules.size(); ++d) {
    const ScheduleInfo &s = impl.schedules[d];
    absl::StrAppendFormat(
        &out, "device %d: %s, arena %d bytes, weights %d bytes%s\n", d,
        moeLayerText(s), s.arenaSize, weightBytes(s), blockQuantText(s));
  }
  return out;
}

/// The JSON of each step's attribute table, through the schema's
/// reflection (the binary schema flatc embeds), so that every attribute of
/// every op prints without a printer per table.
class AttrPrinter {
public:
  AttrPrinter() {
    parser_.opts.strict_json = true;
    parser_.opts.indent_step = -1; // One line.
    // Every field, defaults included: a reader need not know the schema.
    parser_.opts.output_default_scalars_in_json = true;
    ok_ = parser_.Deserialize(fb::ProgramBinarySchema::data(),
                              fb::ProgramBinarySchema::size());
  }

  /// The step's attributes as a JSON object, or "null" when it has none.
  std::string print(const fb::Step &step) {
    const void *table = step.attrs();
    if (!ok_ || !table || step.attrs_type() == fb::Attrs::NONE)
      return "null";
    std::string name =
        absl::StrCat("moert.fb.", fb::EnumNameAttrs(step.attrs_type()));
    std::string text;
    if (!flatbuffers::GenerateTextFromTable(parser_, table, name, &text))
      return "null";
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
      text.pop_back();
    return text;
  }

private:
  flatbuffers::Parser parser_;
  bool ok_ = false;
};

/// "0-3, 6": the indices of the set entries of `hot`, ranges joined.
std::string indexRanges(const std::vector<bool> &hot) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < hot.size();) {
    if (!hot[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < hot.size() && hot[j + 1])
      ++j;
    parts.push_back(i == j ? absl::StrCat(i) : absl::StrCat(i, "-", j));
    i = j + 1;
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

} // namespace

std::string describeTiersText(const ExpertTiersDesc &t,
                              const std::string &indent) {
  std::string out = absl::StrFormat(
      "%stiers: budget %d bytes = resident weights %d + experts' cache %d "
      "(least %d); arena %d bytes besides\n%s  hot: %d experts, %d bytes; "
      "cold: %d experts, %d bytes\n",
      indent, t.budget, t.residentBytes, t.cacheBytes, t.windowBytes,
      t.arenaBytes, indent, t.hotExperts, t.hotBytes, t.coldExperts,
      t.coldBytes);
  if (t.prefetch != "none")
    absl::StrAppendFormat(
        &out, "%s  prefetch: %s, %d of %d layers read ahead\n", indent,
        t.prefetch, t.layersReadAhead, t.layers.size());
  for (const TierLayerDesc &layer : t.layers)
    absl::StrAppendFormat(&out,
                          "%s  step %d '%s': %d experts of %d bytes, hot %s\n",
                          indent, layer.stepIndex, layer.step, layer.experts,
                          layer.expertBytes, indexRanges(layer.hot));
  return out;
}

std::string describeTiersJson(const ExpertTiersDesc &t) {
  std::string out = absl::StrFormat(
      "{\"budget\": %d, \"resident_bytes\": %d, \"arena_bytes\": %d, "
      "\"cache_bytes\": %d, \"window_bytes\": %d, \"hot_experts\": %d, "
      "\"hot_bytes\": %d, \"cold_experts\": %d, \"cold_bytes\": %d, "
      "\"prefetch\": %s, \"layers_read_ahead\": %d, \"layers\": [",
      t.budget, t.residentBytes, t.arenaBytes, t.cacheBytes, t.windowBytes,
      t.hotExperts, t.hotBytes, t.coldExperts, t.coldBytes,
      jsonString(t.prefetch), t.layersReadAhead);
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const TierLayerDesc &layer = t.layers[l];
    std::vector<int> hot;
    for (size_t e = 0; e < layer.hot.size(); ++e)
      if (layer.hot[e])
        hot.push_back(static_cast<int>(e));
    absl::StrAppendFormat(&out,
                          "%s{\"step\": %d, \"name\": %s, \"experts\": %d, "
                          "\"expert_bytes\": %d, \"hot\": [%s]}",
                          l ? ", " : "", layer.stepIndex,
                          jsonString(layer.step), layer.experts,
                          layer.expertBytes, absl::StrJoin(hot, ", "));
  }
  return out + "]}";
}

uint64_t planWeightBytes(const Plan &plan, int device) {
  return weightBytes(plan.impl().schedules.at(device));
}

/// The names plan.fbs gives a stage role and a feed kind.
static const char *stageRoleName(StageRole role) {
  static const char *const names[] = {"Vision", "Embed", "Prefill", "Head"};
  return names[static_cast<int>(role)];
}
static const char *feedKindName(FeedKind kind) {
  return fb::EnumNameFeedKind(static_cast<fb::FeedKind>(kind));
}

/// The multimodal table's lines of describePlanText.
static std::string multimodalText(const MultimodalDesc &mm) {
  std::string out = absl::StrFormat(
      "\nmultimodal: image token %d, spatial merge %d, image grid '%s', at "
      "most %d images (0: any); vision inputs: %s\n",
      mm.imageTokenId, mm.spatialMergeSize, printable(mm.imageGrid),
      mm.maxImages, printable(absl::StrJoin(mm.givenInputs, ", ")));
  for (size_t s = 0; s < mm.stages.size(); ++s) {
    const StageDesc &stage = mm.stages[s];
    absl::StrAppendFormat(&out, "  stage %d '%s' (%s):", s,
                          printable(stage.name), stageRoleName(stage.role));
    for (const FeedDesc &feed : stage.feeds) {
      absl::StrAppendFormat(&out, " %s <- %s", printable(feed.input),
                            feedKindName(feed.kind));
      if (feed.stage >= 0)
        absl::StrAppendFormat(&out, "(%d '%s')", feed.stage,
                              printable(feed.output));
    }
    absl::StrAppend(&out, "\n");
  }
  if (mm.gridRule.tableSide)
    absl::StrAppendFormat(&out,
                          "  grid rule: position table %d x %d, %s, "
                          "align_corners %d\n",
                          mm.gridRule.tableSide, mm.gridRule.tableSide,
                          mm.gridRule.bicubic ? "bicubic" : "bilinear",
                          mm.gridRule.alignCorners);
  if (mm.hasImageProcessor) {
    const ImageProcessorDesc &p = mm.imageProcessor;
    absl::StrAppendFormat(
        &out,
        "  image processor: pixels '%s', patch %d, temporal %d, resize %d "
        "(pixels %d..%d), rescale %d (%g), normalize %d, sizing %s\n",
        printable(p.pixelInput), p.patchSize, p.temporalPatchSize, p.doResize,
        p.minPixels, p.maxPixels, p.doRescale, p.rescaleFactor, p.doNormalize,
        p.llama4Tiles
            ? absl::StrCat("llama4_tiles (at most ", p.maxTiles, " tiles",
                           p.resizeToMaxCanvas ? ", max canvas" : "", ")")
        : p.glm4vResize ? std::string("glm4v")
                        : std::string("qwen2_vl"));
  }
  return out;
}

std::string describePlanText(const Plan &plan) {
  const Plan::Impl &impl = plan.impl();
  std::string out = absl::StrFormat(
      "plan %s: format %d.%d, producer '%s', backend %s, %d device%s\n",
      printable(impl.source), impl.versionMajor, impl.versionMinor,
      printable(impl.producer), backendName(impl.target.backend),
      plan.numDevices(), plan.numDevices() == 1 ? "" : "s");
  absl::StrAppend(&out, summaryText(plan), "\n");
  for (const SymbolDesc &symbol : impl.symbols)
    absl::StrAppendFormat(&out, "symbol %s in [%d, %d]\n", symbol.name,
                          symbol.min, symbol.max);
  if (const GenerationDesc *gen = plan.generation()) {
    absl::StrAppendFormat(
        &out,
        "\ngeneration: max_seq %d, input_ids '%s', %s%slogits '%s' (vocab "
        "%d), %s, cache %d bytes at max_seq\n",
        gen->maxSeq, gen->inputIds,
        gen->positionIds.empty()
            ? std::string("no position_ids, ")
            : absl::StrCat("position_ids '", gen->positionIds, "', "),
        gen->attentionMask.empty()
            ? std::string()
            : absl::StrCat("attention_mask '", gen->attentionMask, "', "),
        gen->logits, gen->vocabSize,
        gen->hasPrefill ? "prefill schedule"
                        : "no prefill schedule (the decode schedule with an "
                          "empty past)",
        gen->cacheBytes);
    for (const CachePairDesc &pair : gen->cache)
      absl::StrAppendFormat(&out,
                            "  cache layer %d axis %d: '%s' -> '%s' (prefill "
                            "'%s')\n",
                            pair.layer, pair.axis, pair.input, pair.output,
                            pair.prefillOutput);
    bool states = std::any_of(gen->cache.begin(), gen->cache.end(),
                              [](const CachePairDesc &p) { return p.state; });
    if (gen->batchable)
      absl::StrAppend(&out,
                      states ? "  batching: proven (only causal attention and "
                               "recurrences from a zero state mix the prefill "
                               "schedule's token rows)"
                             : "  batching: proven (only causal attention "
                               "mixes the prefill schedule's token rows)",
                      gen->batchWindows.empty()
                          ? std::string()
                          : absl::StrCat(", attention windows ",
                                         absl::StrJoin(gen->batchWindows, " ")),
                      "\n");
    else if (!gen->batchBlocker.empty())
      absl::StrAppend(
          &out, "  batching: refused: ", printable(gen->batchBlocker), "\n");
  }
  if (const MultimodalDesc *mm = plan.multimodal())
    absl::StrAppend(&out, multimodalText(*mm));
  auto describe = [&](const ScheduleInfo &s, const std::string &what) {
    absl::StrAppendFormat(
        &out, "\n%s: %d steps, %d tensors, arena %d bytes, weights %d bytes\n",
        what, s.steps.size(), s.tensors.size(), s.arenaSize, weightBytes(s));
    if (s.tiers.present) {
      absl::StatusOr<ExpertTiersDesc> tiers = detail::describeTiers(impl, s, 0);
      absl::StrAppend(
          &out, tiers.ok()
                    ? describeTiersText(*tiers, "")
                    : absl::StrCat("tiers: ", tiers.status().message(), "\n"));
    }
    absl::StrAppend(&out, "\ntensors:\n");
    for (size_t i = 0; i < s.tensors.size(); ++i) {
      const TensorInfo &t = s.tensors[i];
      std::string role = t.paged           ? "paged"
                         : t.isWeight      ? "weight"
                         : t.isGraphInput  ? "input"
                         : t.isGraphOutput ? "output"
                                           : "arena";
      absl::StrAppendFormat(&out, "  %4d %-6s %-4s %-24s @%-10d %10d B  %s\n",
                            i, role, dtypeName(t.dtype), shapeText(plan, t),
                            t.offset, t.size, t.name);
    }
    absl::StrAppend(&out, "\nsteps:\n");
    for (const detail::StepInfo &step : s.steps)
      absl::StrAppendFormat(&out, "  %4d %-28s (%s) -> (%s)  %s\n", step.index,
                            fb::EnumNameOpKind(step.op), idList(step.inputs),
                            idList(step.outputs), step.name);
  };
  for (size_t d = 0; d < impl.schedules.size(); ++d)
    describe(impl.schedules[d], absl::StrCat("device ", d));
  for (size_t d = 0; d < impl.prefillSchedules.size(); ++d)
    describe(impl.prefillSchedules[d], absl::StrCat("prefill of device ", d));
  for (size_t i = 0; i < impl.stageSchedules.size(); ++i) {
    std::string stage = absl::StrCat(
        "stage ", i, " '", printable(impl.multimodal.stages[i].name), "'");
    // An expert-parallel plan's Prefill stage: one schedule per device.
    if (static_cast<int>(i) != impl.multimodal.prefillStage ||
        impl.prefillStageSchedules.empty()) {
      describe(impl.stageSchedules[i], stage);
      continue;
    }
    for (size_t d = 0; d < impl.schedules.size(); ++d)
      describe(impl.stageSchedule(i, static_cast<int>(d)),
               absl::StrCat(stage, " of device ", d));
  }
  return out;
}

std::string describePlanJson(const Plan &plan) {
  const Plan::Impl &impl = plan.impl();
  std::string out = absl::StrFormat(
      "{\"format\": \"%d.%d\", \"producer\": %s, \"backend\": \"%s\", "
      "\"devices\": %d, \"symbols\": [",
      impl.versionMajor, impl.versionMinor, jsonString(impl.producer),
      backendName(impl.target.backend), plan.numDevices());
  for (size_t i = 0; i < impl.symbols.size(); ++i)
    absl::StrAppendFormat(&out, "%s{\"name\": %s, \"min\": %d, \"max\": %d}",
                          i ? ", " : "", jsonString(impl.symbols[i].name),
                          impl.symbols[i].min, impl.symbols[i].max);
  const ProvenanceDesc &p = impl.provenance;
  std::vector<std::string> flags;
  for (const auto &[name, value] : p.flags)
    flags.push_back(
        absl::StrCat("[", jsonString(name), ", ", jsonString(value), "]"));
  absl::StrAppendFormat(
      &out,
      "], \"provenance\": {\"compiler_version\": %s, \"git_commit\": %s, "
      "\"model_file\": %s, \"model_sha256\": %s, \"prefill_file\": %s, "
      "\"prefill_sha256\": %s, \"flags\": [%s]",
      jsonString(p.compilerVersion), jsonString(p.gitCommit),
      jsonString(p.modelFile), jsonString(p.modelSha256),
      jsonString(p.prefillFile), jsonString(p.prefillSha256),
      absl::StrJoin(flags, ", "));
  AttrPrinter attrs;
  auto schedules = [&](const std::vector<ScheduleInfo> &all) {
    for (size_t d = 0; d < all.size(); ++d) {
      const ScheduleInfo &s = all[d];
      absl::StrAppendFormat(&out,
                            "%s{\"arena_bytes\": %d, \"weight_bytes\": %d, "
                            "\"tensors\": [",
                            d ? ", " : "", s.arenaSize, weightBytes(s));
      for (size_t i = 0; i < s.tensors.size(); ++i) {
        const TensorInfo &t = s.tensors[i];
        std::vector<std::string> dims;
        for (int k = 0; k < t.rank; ++k) {
          const detail::DimInfo &dim = t.dims[k];
          std::string symbol =
              dim.kind == fb::DimKind::Symbolic
                  ? absl::StrCat(", \"symbol\": ",
                                 jsonString(plan.symbols()[dim.symbol].name))
                  : "";
          dims.push_back(
              absl::StrFormat("{\"bound\": %d, \"kind\": \"%s\"%s}", dim.bound,
                              fb::EnumNameDimKind(dim.kind), symbol));
        }
        absl::StrAppendFormat(
            &out,
            "%s{\"id\": %d, \"name\": %s, \"dtype\": \"%s\", \"dims\": [%s], "
            "\"storage\": \"%s\", \"offset\": %d, \"bytes\": %d, \"input\": "
            "%s, \"output\": %s}",
            i ? ", " : "", i, jsonString(t.name), dtypeName(t.dtype),
            absl::StrJoin(dims, ", "),
            t.paged      ? "paged"
            : t.isWeight ? "weight"
                         : "arena",
            t.offset, t.size, t.isGraphInput ? "true" : "false",
            t.isGraphOutput ? "true" : "false");
      }
      absl::StrAppend(&out, "], \"steps\": [");
      for (const detail::StepInfo &step : s.steps)
        absl::StrAppendFormat(
            &out,
            "%s{\"op\": \"%s\", \"name\": %s, \"inputs\": [%s], "
            "\"outputs\": [%s], \"attrs\": %s, \"kernel\": %s}",
            step.index ? ", " : "", fb::EnumNameOpKind(step.op),
            jsonString(step.name), idList(step.inputs), idList(step.outputs),
            attrs.print(*step.fb),
            step.fb->kernel() ? jsonString(step.fb->kernel()->str())
                              : std::string("null"));
      absl::StrAppend(&out, "]");
      if (s.tiers.present)
        if (absl::StatusOr<ExpertTiersDesc> tiers =
                detail::describeTiers(impl, s, 0);
            tiers.ok())
          absl::StrAppend(&out, ", \"tiers\": ", describeTiersJson(*tiers));
      absl::StrAppend(&out, "}");
    }
  };
  absl::StrAppend(&out, "}, \"schedules\": [");
  schedules(impl.schedules);
  absl::StrAppend(&out, "]");
  if (const GenerationDesc *gen = plan.generation()) {
    std::string eos = "[";
    for (size_t i = 0; i < gen->eosIds.size(); ++i)
      absl::StrAppend(&eos, i ? ", " : "", gen->eosIds[i]);
    eos += "]";
    absl::StrAppendFormat(
        &out,
        ", \"generation\": {\"max_seq\": %d, \"input_ids\": %s, "
        "\"position_ids\": %s, \"attention_mask\": %s, \"logits\": %s, "
        "\"vocab\": %d, \"eos_ids\": %s, \"cache_bytes\": %d, "
        "\"batchable\": %s, \"batch_blocker\": %s, \"batch_windows\": "
        "[%s], \"cache\": [",
        gen->maxSeq, jsonString(gen->inputIds),
        gen->positionIds.empty() ? std::string("null")
                                 : jsonString(gen->positionIds),
        gen->attentionMask.empty() ? std::string("null")
                                   : jsonString(gen->attentionMask),
        jsonString(gen->logits), gen->vocabSize, eos, gen->cacheBytes,
        gen->batchable ? "true" : "false",
        gen->batchBlocker.empty() ? std::string("null")
                                  : jsonString(gen->batchBlocker),
        absl::StrJoin(gen->batchWindows, ", "));
    for (size_t i = 0; i < gen->cache.size(); ++i) {
      const CachePairDesc &pair = gen->cache[i];
      absl::StrAppendFormat(
          &out,
          "%s{\"input\": %s, \"output\": %s, \"prefill_output\": %s, "
          "\"layer\": %d, \"axis\": %d}",
          i ? ", " : "", jsonString(pair.input), jsonString(pair.output),
          jsonString(pair.prefillOutput), pair.layer, pair.axis);
    }
    absl::StrAppend(&out, "], \"prefill_schedules\": [");
    schedules(impl.prefillSchedules);
    absl::StrAppend(&out, "]}");
  }
  if (const MultimodalDesc *mm = plan.multimodal()) {
    std::vector<std::string> given;
    for (const std::string &name : mm->givenInputs)
      given.push_back(jsonString(name));
    absl::StrAppendFormat(
        &out,
        ", \"multimodal\": {\"image_token_id\": %d, \"spatial_merge_size\": "
        "%d, \"image_grid\": %s, \"max_images\": %d, \"given_inputs\": "
        "[%s], \"stages\": [",
        mm->imageTokenId, mm->spatialMergeSize, jsonString(mm->imageGrid),
        mm->maxImages, absl::StrJoin(given, ", "));
    for (size_t s = 0; s < mm->stages.size(); ++s) {
      const StageDesc &stage = mm->stages[s];
      bool everyDevice = static_cast<int>(s) == mm->prefillStage &&
                         !impl.prefillStageSchedules.empty();
      absl::StrAppendFormat(
          &out, "%s{\"name\": %s, \"role\": %s, \"schedules\": %d, ",
          s ? ", " : "", jsonString(stage.name),
          jsonString(stageRoleName(stage.role)),
          everyDevice ? impl.schedules.size() : 1);
      absl::StrAppend(&out, "\"feeds\": [");
      for (size_t f = 0; f < stage.feeds.size(); ++f) {
        const FeedDesc &feed = stage.feeds[f];
        absl::StrAppendFormat(&out,
                              "%s{\"input\": %s, \"kind\": %s, \"stage\": "
                              "%d, \"output\": %s}",
                              f ? ", " : "", jsonString(feed.input),
                              jsonString(feedKindName(feed.kind)), feed.stage,
                              jsonString(feed.output));
      }
      absl::StrAppend(&out, "]}");
    }
    absl::StrAppend(&out, "]}");
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

} // namespace moert
