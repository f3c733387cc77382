//===- generation_plan.cpp - Loading generation plans ---------------------===//

#include "loader/generation_plan.h"
#include "format/plan_file.h"

#include "absl/strings/str_cat.h"

#include <set>

namespace moert::detail {
namespace {

absl::string_view str(const flatbuffers::String *s) {
  return s ? absl::string_view(s->c_str(), s->size()) : absl::string_view();
}

/// Checks one schedule (decode or prefill) of a generation plan.
class ScheduleChecker {
public:
  ScheduleChecker(std::string prefix, const ScheduleInfo &schedule)
      : prefix_(std::move(prefix)), schedule_(schedule) {}

  template <typename... Args> absl::Status invalid(const Args &...args) const {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ": ", args...));
  }

  /// The tensor of the graph input or output `name`, or an error saying
  /// what `role` it was to play.
  absl::StatusOr<const TensorInfo *> find(bool input, absl::string_view name,
                                          absl::string_view role) const {
    int32_t id = findSignatureTensor(schedule_, input, name);
    if (id < 0)
      return invalid(role, " '", name, "' is not a graph ",
                     input ? "input" : "output", " of the schedule");
    return &schedule_.tensors[id];
  }

  /// input_ids, position_ids and attention_mask: i64 [1, n] (the mask's n
  /// counts the past too); the positions may also be [r, 1, n] with a
  /// static r of at most 8 (M-RoPE's rows, each the same for text).
  absl::Status checkTokens(absl::string_view name,
                           absl::string_view role) const {
    MOERT_ASSIGN_OR_RETURN(const TensorInfo *t, find(true, name, role));
    bool rows = role == "position_ids" && t->rank == 3 &&
                t->dims[0].kind == fb::DimKind::Static &&
                t->dims[0].bound >= 1 && t->dims[0].bound <= 8;
    if (t->dtype != DType::I64 || (t->rank != 2 && !rows))
      return invalid(role, " '", name, "' is ", dtypeName(t->dtype), " ",
                     describeDims(*t), "; a generation plan needs i64 [1, n]",
                     role == "position_ids" ? " or [r, 1, n]" : "");
    return absl::OkStatus();
  }

  /// The logits: f32 [1, n, vocab] with a static vocab; returns it.
  absl::StatusOr<int64_t> checkLogits(absl::string_view name) const {
    MOERT_ASSIGN_OR_RETURN(const TensorInfo *t, find(false, name, "logits"));
    if (t->dtype != DType::F32 || t->rank != 3 ||
        t->dims[2].kind != fb::DimKind::Static || t->dims[2].bound < 1)
      return invalid("logits '", name, "' is ", dtypeName(t->dtype), " ",
                     describeDims(*t),
                     "; a generation plan needs f32 [1, n, vocab]");
    return t->dims[2].bound;
  }

private:
  std::string prefix_;
  const ScheduleInfo &schedule_;
};

/// Whether `a` and `b` agree on every dimension but `axis` that both know
/// statically.
bool sameApartFrom(const TensorInfo &a, const TensorInfo &b, int axis) {
  if (a.rank != b.rank || a.dtype != b.dtype)
    return false;
  for (int d = 0; d < a.rank; ++d)
    if (d != axis && a.dims[d].kind == fb::DimKind::Static &&
        b.dims[d].kind == fb::DimKind::Static &&
        a.dims[d].bound != b.dims[d].bound)
      return false;
  return true;
}

} // namespace

int32_t findSignatureTensor(const ScheduleInfo &schedule, bool inputs,
                            absl::string_view name) {
  const std::vector<uint32_t> &ids =
      inputs ? schedule.inputs : schedule.outputs;
  for (uint32_t id : ids)
    if (schedule.tensors[id].name == name)
      return static_cast<int32_t>(id);
  return -1;
}

absl::Status validateGeneration(const std::string &source,
                                const fb::Generation &fbGen, Plan::Impl &impl,
                                const fb::Multimodal *multimodal) {
  std::string prefix = absl::StrCat(source, ": generation");
  auto invalid = [&](const auto &...args) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": ", args...));
  };
  GenerationDesc gen;
  gen.maxSeq = fbGen.max_seq();
  gen.inputIds = std::string(str(fbGen.input_ids()));
  gen.positionIds = std::string(str(fbGen.position_ids()));
  gen.attentionMask = std::string(str(fbGen.attention_mask()));
  if (const auto *eos = fbGen.eos_ids()) {
    if (eos->size() > 64)
      return invalid(eos->size(), " eos ids; at most 64");
    gen.eosIds.assign(eos->begin(), eos->end());
  }
  gen.logits = std::string(str(fbGen.logits()));
  gen.hasPrefill = !impl.prefillSchedules.empty();
  gen.batchable = fbGen.batchable();
  gen.batchBlocker = std::string(str(fbGen.batch_blocker()));
  if ((gen.batchable || !gen.batchBlocker.empty()) &&
      impl.versionMinor < kFormatVersionMinorBatchRows)
    return invalid("a batching verdict needs format ", kFormatVersionMajor, ".",
                   kFormatVersionMinorBatchRows, ", but the file is version ",
                   impl.versionMajor, ".", impl.versionMinor);
  if (const auto *windows = fbGen.batch_windows()) {
    if (impl.versionMinor < kFormatVersionMinorBatchWindows)
      return invalid("batch_windows need format ", kFormatVersionMajor, ".",
                     kFormatVersionMinorBatchWindows,
                     ", but the file is version ", impl.versionMajor, ".",
                     impl.versionMinor);
    if (!gen.batchable)
      return invalid("batch_windows without batchable");
    for (int64_t w : *windows)
      if (w < 0 || static_cast<uint64_t>(w) > kMaxDimBound)
        return invalid("batch window ", w, " is not in [0, 2^40]");
    gen.batchWindows.assign(windows->begin(), windows->end());
  }
  if (gen.batchable && !gen.batchBlocker.empty())
    return invalid("batchable with a batch_blocker");
  if (gen.batchable && !gen.hasPrefill)
    return invalid("batchable without prefill schedules");
  if (gen.batchBlocker.size() > 4096)
    return invalid("batch_blocker of ", gen.batchBlocker.size(),
                   " bytes; at most 4096");
  if (gen.maxSeq < 2 || static_cast<uint64_t>(gen.maxSeq) > kMaxDimBound)
    return invalid("max_seq ", gen.maxSeq, " is not in [2, 2^40]");
  const auto *pairs = fbGen.cache();
  if (!pairs || pairs->size() == 0)
    return invalid("no cache pairs");
  if (impl.versionMinor < kFormatVersionMinorGenai &&
      (gen.positionIds.empty() || !gen.attentionMask.empty() ||
       !gen.eosIds.empty()))
    return invalid("a table without position_ids or with an attention_mask "
                   "needs format ",
                   kFormatVersionMajor, ".", kFormatVersionMinorGenai,
                   ", but the file is version ", impl.versionMajor, ".",
                   impl.versionMinor);
  // The token inputs the generator sets; their names must differ.
  std::vector<std::pair<std::string, std::string>> tokenInputs = {
      {"input_ids", gen.inputIds}};
  if (!gen.positionIds.empty())
    tokenInputs.emplace_back("position_ids", gen.positionIds);
  if (!gen.attentionMask.empty())
    tokenInputs.emplace_back("attention_mask", gen.attentionMask);
  for (size_t i = 0; i < tokenInputs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (tokenInputs[i].second == tokenInputs[j].second)
        return invalid(tokenInputs[j].first, " and ", tokenInputs[i].first,
                       " are both '", tokenInputs[i].second, "'");

  for (size_t device = 0; device < impl.schedules.size(); ++device) {
    const ScheduleInfo &decode = impl.schedules[device];
    ScheduleChecker dec(absl::StrCat(prefix, ": schedule ", device), decode);
    for (const auto &[role, name] : tokenInputs)
      MOERT_RETURN_IF_ERROR(dec.checkTokens(name, role));
    if (!gen.positionIds.empty()) {
      const TensorInfo &positions =
          decode.tensors[findSignatureTensor(decode, true, gen.positionIds)];
      gen.positionRows =
          positions.rank == 3 ? static_cast<int>(positions.dims[0].bound) : 0;
    }
    MOERT_ASSIGN_OR_RETURN(int64_t vocab, dec.checkLogits(gen.logits));
    // A multimodal plan's caches start in its Prefill stage (loadStages).
    int prefillStage = multimodal ? impl.multimodal.prefillStage : -1;
    const ScheduleInfo &prefill =
        prefillStage >= 0 ? impl.stageSchedule(prefillStage, device)
        : gen.hasPrefill  ? impl.prefillSchedules[device]
                          : decode;
    ScheduleChecker pre(
        prefillStage >= 0
            ? absl::StrCat(prefix, ": stage ", prefillStage, " '",
                           impl.multimodal.stages[prefillStage].name, "'")
            : absl::StrCat(prefix, ": prefill schedule ", device),
        prefill);
    if (gen.hasPrefill) {
      // From 1.23 a first prompt may mask causally by itself, without the
      // decode schedule's attention mask.
      gen.prefillMask =
          gen.attentionMask.empty() ||
          impl.versionMinor < kFormatVersionMinorStatePrefill ||
          findSignatureTensor(prefill, true, gen.attentionMask) >= 0;
      size_t prefillInputs = tokenInputs.size() - (gen.prefillMask ? 0 : 1);
      for (const auto &[role, name] : tokenInputs)
        if (gen.prefillMask || name != gen.attentionMask)
          MOERT_RETURN_IF_ERROR(pre.checkTokens(name, role));
      MOERT_ASSIGN_OR_RETURN(int64_t prefillVocab, pre.checkLogits(gen.logits));
      if (prefillVocab != vocab)
        return pre.invalid("logits have ", prefillVocab,
                           " entries per token but the decode schedule's ",
                           vocab);
      // The generator sets only the token inputs of the prefill.
      if (prefill.inputs.size() != prefillInputs) {
        std::string names;
        for (const auto &input : tokenInputs)
          if (gen.prefillMask || input.second != gen.attentionMask)
            absl::StrAppend(&names, names.empty() ? "" : ", ", input.first);
        return pre.invalid("has ", prefill.inputs.size(),
                           " graph inputs; a prefill takes ", names, " only");
      }
    }
    gen.vocabSize = vocab;
    for (int64_t id : gen.eosIds)
      if (id < 0 || id >= vocab)
        return invalid("eos id ", id, " is not in the vocabulary [0, ", vocab,
                       ")");

    std::set<std::string> inputs;
    for (const auto &input : tokenInputs)
      inputs.insert(input.second);
    // The multimodal table's decode feeds (validateMultimodal checks them).
    if (multimodal && multimodal->decode_feeds())
      for (const fb::Feed *feed : *multimodal->decode_feeds())
        if (!inputs.insert(std::string(str(feed->input()))).second)
          return dec.invalid("decode feed '", str(feed->input()),
                             "' is also a name of the generation table");
    std::set<std::string> outputs = {gen.logits}, prefillOutputs = {gen.logits};
    for (size_t k = 0; k < pairs->size(); ++k) {
      const fb::CachePair *fbPair = pairs->Get(k);
      CachePairDesc pair;
      pair.input = std::string(str(fbPair->input()));
      pair.output = std::string(str(fbPair->output()));
      pair.prefillOutput = std::string(str(fbPair->prefill_output()));
      pair.layer = fbPair->layer();
      pair.axis = fbPair->axis();
      pair.state = fbPair->state();
      std::string role = absl::StrCat("cache pair ", k);
      MOERT_ASSIGN_OR_RETURN(const TensorInfo *past,
                             dec.find(true, pair.input, role));
      MOERT_ASSIGN_OR_RETURN(const TensorInfo *present,
                             dec.find(false, pair.output, role));
      MOERT_ASSIGN_OR_RETURN(const TensorInfo *start,
                             pre.find(false, pair.prefillOutput, role));
      if (!inputs.insert(pair.input).second ||
          !outputs.insert(pair.output).second ||
          !prefillOutputs.insert(pair.prefillOutput).second)
        return dec.invalid(role, " reuses a name of another pair or of the "
                                 "tokens, positions or logits");
      if (!gen.hasPrefill && prefillStage < 0 &&
          pair.prefillOutput != pair.output)
        return dec.invalid(role, ": prefill_output '", pair.prefillOutput,
                           "' must be the output '", pair.output,
                           "' in a plan without prefill schedules");
      if (pair.state) {
        if (impl.versionMinor < kFormatVersionMinorGenai)
          return dec.invalid(role, " is a state pair, which needs format ",
                             kFormatVersionMajor, ".",
                             kFormatVersionMinorGenai);
        // From 1.23, a prefill schedule runs a first prompt from zero
        // states and gives each state's start.
        if ((prefillStage >= 0 &&
             impl.versionMinor < kFormatVersionMinorGenaiStages) ||
            (gen.hasPrefill &&
             impl.versionMinor < kFormatVersionMinorStatePrefill))
          return dec.invalid(
              role, " is a state pair; a plan with one has no prefill ",
              "schedules before format ", kFormatVersionMajor, ".",
              kFormatVersionMinorStatePrefill, ", nor prefill stages before ",
              kFormatVersionMajor, ".", kFormatVersionMinorGenaiStages);
        auto sameState = [&](const TensorInfo &other) {
          bool same = past->dtype == DType::F32 && past->rank == other.rank &&
                      other.dtype == DType::F32;
          for (int d = 0; same && d < past->rank; ++d)
            same = past->dims[d].kind == fb::DimKind::Static &&
                   other.dims[d].kind == fb::DimKind::Static &&
                   past->dims[d].bound == other.dims[d].bound;
          return same;
        };
        if (!sameState(*present) ||
            ((gen.hasPrefill || prefillStage >= 0) && !sameState(*start)))
          return dec.invalid(
              role, ": state input '", pair.input, "' ", describeDims(*past),
              ", output '", pair.output, "' ", describeDims(*present),
              " and prefill output '", pair.prefillOutput, "' ",
              describeDims(*start), " must be f32 of one static shape");
        if (device == 0) {
          uint64_t elements = 1;
          for (int d = 0; d < past->rank; ++d)
            elements *= static_cast<uint64_t>(past->dims[d].bound);
          gen.cacheBytes += elements * dtypeSize(past->dtype);
          gen.cache.push_back(std::move(pair));
        }
        continue;
      }
      if (past->dtype != DType::F32 || pair.axis < 0 || pair.axis >= past->rank)
        return dec.invalid(role, ": input '", pair.input, "' is ",
                           dtypeName(past->dtype), " ", describeDims(*past),
                           " with axis ", pair.axis,
                           "; a cache is f32 with its axis among its dims");
      if (!sameApartFrom(*past, *present, pair.axis) ||
          !sameApartFrom(*past, *start, pair.axis))
        return dec.invalid(role, ": input '", pair.input, "' ",
                           describeDims(*past), ", output '", pair.output, "' ",
                           describeDims(*present), " and prefill output '",
                           pair.prefillOutput, "' ", describeDims(*start),
                           " differ in more than axis ", pair.axis);
      // The generator holds the caches at max_seq: every other dim static.
      for (int d = 0; d < past->rank; ++d)
        if (d != pair.axis && past->dims[d].kind != fb::DimKind::Static)
          return dec.invalid(role, ": input '", pair.input, "' ",
                             describeDims(*past), " has a dynamic dim ", d,
                             " besides its sequence axis ", pair.axis);
      if (present->dims[pair.axis].bound < gen.maxSeq ||
          past->dims[pair.axis].bound < gen.maxSeq - 1)
        return dec.invalid(role, ": input '", pair.input, "' ",
                           describeDims(*past), " and output '", pair.output,
                           "' ", describeDims(*present),
                           " cannot hold max_seq ", gen.maxSeq,
                           " positions along axis ", pair.axis);
      if (device == 0) {
        uint64_t elements = static_cast<uint64_t>(gen.maxSeq);
        for (int d = 0; d < past->rank; ++d)
          if (d != pair.axis)
            elements *= static_cast<uint64_t>(past->dims[d].bound);
        gen.cacheBytes += elements * dtypeSize(past->dtype);
        gen.cache.push_back(std::move(pair));
      }
    }
    if (inputs.size() != decode.inputs.size())
      for (uint32_t id : decode.inputs)
        if (!inputs.count(std::string(decode.tensors[id].name)))
          return dec.invalid("graph input '", decode.tensors[id].name,
                             "' is neither the tokens, the positions nor a "
                             "cache; the generator cannot feed it");
  }
  impl.generation = std::move(gen);
  impl.isGeneration = true;
  return absl::OkStatus();
}

} // namespace moert::detail
