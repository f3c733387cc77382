//===- plan.cpp - Plan loading and validation -----------------------------===//
//
// Loading never trusts the file: the header, the section table, every section
// checksum, the FlatBuffer (its Verifier) and then every id, offset, size,
// dtype, rank, arity and attribute of the program are checked before anything
// is used, so that a corrupt or hostile plan gives an error, not a crash.
//
//===----------------------------------------------------------------------===//

#include "exec/ops.h"
#include "format/file_io.h"
#include "format/plan_file.h"
#include "loader/diag.h"
#include "loader/generation_plan.h"
#include "tiers/tier_validation.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sys/mman.h>
#include <tuple>
#include <unistd.h>
#include <unordered_set>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "plan files are little-endian and mapped in place");

namespace moert {

using detail::Diag;
using detail::DimInfo;
using detail::ScheduleInfo;
using detail::StepInfo;
using detail::TensorInfo;

Plan::Impl::~Impl() {
  if (mapping)
    ::munmap(mapping, mappingSize);
  std::free(ownedCopy);
  if (fd >= 0)
    ::close(fd);
}

absl::Status Plan::Impl::readBytes(uint64_t offset, void *out,
                                   size_t size) const {
  if (offset > this->size || size > this->size - offset)
    return absl::OutOfRangeError(absl::StrCat(
        source, ": bytes [", offset, ", +", size, ") are past the end"));
  if (fd < 0) {
    std::memcpy(out, data + offset, size);
    return absl::OkStatus();
  }
  auto *bytes = static_cast<uint8_t *>(out);
  while (size) {
    ssize_t n = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return absl::DataLossError(absl::StrCat(
          source, ": cannot read bytes [", offset, ", +", size, "): ",
          n < 0 ? std::strerror(errno)
                : "the file is shorter than its header says"));
    bytes += n;
    offset += n;
    size -= n;
  }
  return absl::OkStatus();
}

namespace {

std::string hex32(uint32_t value) { return absl::StrFormat("0x%08x", value); }

absl::string_view str(const flatbuffers::String *s) {
  return s ? absl::string_view(s->c_str(), s->size()) : absl::string_view();
}

bool overflowsAdd(uint64_t a, uint64_t b, uint64_t limit) {
  uint64_t sum;
  return __builtin_add_overflow(a, b, &sum) || sum > limit;
}

/// Whether bytes [begin, end) of the plan are all zero: read in place where
/// mapped, else (past a tiered plan's mapped prefix) through readBytes.
absl::StatusOr<bool> allZero(const Plan::Impl &impl, uint64_t begin,
                             uint64_t end) {
  auto zero = [](uint8_t byte) { return byte == 0; };
  uint64_t mapped = std::min<uint64_t>(end, impl.mappedSize);
  if (begin < mapped &&
      !std::all_of(impl.data + begin, impl.data + mapped, zero))
    return false;
  uint8_t buffer[4096];
  for (uint64_t at = std::max(begin, mapped); at < end;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(end - at, sizeof buffer));
    MOERT_RETURN_IF_ERROR(impl.readBytes(at, buffer, n));
    if (!std::all_of(buffer, buffer + n, zero))
      return false;
    at += n;
  }
  return true;
}

/// The file-level structure: header, section table, checksums, program.
struct Layout {
  std::vector<detail::SectionEntry> sections;
  const fb::Program *program = nullptr;
};

absl::Status validateHeader(const Diag &diag, const uint8_t *data, size_t size,
                            Plan::Impl &impl, Layout &layout) {
  if (size < kFileHeaderSize)
    return diag.invalid("file is ", size, " bytes, smaller than the ",
                        kFileHeaderSize, "-byte plan header (truncated?)");
  detail::FileHeader header = detail::decodeHeader(data);
  if (std::memcmp(header.magic, kPlanMagic, sizeof(kPlanMagic)) != 0)
    return diag.invalid("not a moec plan (bad magic bytes)");
  if (header.versionMajor != kFormatVersionMajor ||
      header.versionMinor > kFormatVersionMinor)
    return diag.unsupported(
        "plan format version ", header.versionMajor, ".", header.versionMinor,
        " is not supported; this runtime reads version ", kFormatVersionMajor,
        ".0 to ", kFormatVersionMajor, ".", kFormatVersionMinor);
  if (header.headerSize != kFileHeaderSize ||
      header.sectionTableOffset != kFileHeaderSize)
    return diag.invalid("header size ", header.headerSize,
                        " and section table offset ", header.sectionTableOffset,
                        " must both be ", kFileHeaderSize);
  if (header.fileSize != size)
    return diag.invalid("header records a file size of ", header.fileSize,
                        " bytes but the file has ", size, " (truncated?)");
  if (header.sectionCount == 0 || header.sectionCount > kMaxSections)
    return diag.invalid("section count ", header.sectionCount,
                        " is not in [1, ", kMaxSections, "]");
  uint64_t tableEnd =
      kFileHeaderSize + uint64_t{header.sectionCount} * kSectionEntrySize;
  if (tableEnd > size)
    return diag.invalid("section table of ", header.sectionCount,
                        " entries ends at byte ", tableEnd,
                        ", past the end of the file (", size, " bytes)");
  if (header.flags != 0 || !header.reservedZero)
    return diag.invalid("header flags and reserved bytes must be zero");
  uint32_t crc = detail::headerChecksum(data, data + kFileHeaderSize,
                                        tableEnd - kFileHeaderSize);
  if (crc != header.checksum)
    return diag.dataLoss("header checksum mismatch (stored ",
                         hex32(header.checksum), ", computed ", hex32(crc),
                         "): the header or section table is corrupt");
  if (header.backend != static_cast<uint32_t>(Backend::Cpu) &&
      header.backend != static_cast<uint32_t>(Backend::Cuda))
    return diag.invalid("unknown target backend ", header.backend);
  if (header.deviceCount == 0 || header.deviceCount > kMaxDevices)
    return diag.invalid("device count ", header.deviceCount, " is not in [1, ",
                        kMaxDevices, "]");
  impl.versionMajor = header.versionMajor;
  impl.versionMinor = header.versionMinor;
  impl.target.backend = static_cast<Backend>(header.backend);
  impl.target.deviceCount = header.deviceCount;
  impl.target.cudaArch = header.cudaArch;

  // Sections: known kinds, inside the file past the table, aligned, disjoint.
  const fb::Program *program = nullptr;
  std::vector<std::pair<uint64_t, uint32_t>> byOffset;
  for (uint32_t i = 0; i < header.sectionCount; ++i) {
    detail::SectionEntry entry = detail::decodeSection(
        data + kFileHeaderSize + uint64_t{i} * kSectionEntrySize);
    Diag sdiag = diag.nested(absl::StrCat("section ", i));
    if (entry.kind != static_cast<uint32_t>(SectionKind::Program) &&
        entry.kind != static_cast<uint32_t>(SectionKind::Weights))
      return sdiag.invalid("unknown section kind ", entry.kind);
    bool paged = entry.kind == static_cast<uint32_t>(SectionKind::Weights) &&
                 entry.flags == kSectionFlagPaged;
    if ((entry.flags != 0 && !paged) || entry.reserved != 0)
      return sdiag.invalid(
          "flags and reserved fields must be zero (a weight section may be "
          "flagged paged, ",
          kSectionFlagPaged, ")");
    if (paged && header.versionMinor < detail::kFormatVersionMinorTiers)
      return sdiag.invalid(
          "is a paged weight section, which needs format ", kFormatVersionMajor,
          ".", detail::kFormatVersionMinorTiers, ", but the file is version ",
          header.versionMajor, ".", header.versionMinor);
    if (entry.offset < tableEnd || overflowsAdd(entry.offset, entry.size, size))
      return sdiag.invalid("bytes [", entry.offset, ", +", entry.size,
                           ") are not inside the file after the section table "
                           "(bytes [",
                           tableEnd, ", ", size, "))");
    bool isProgram = entry.kind == static_cast<uint32_t>(SectionKind::Program);
    uint64_t alignment =
        isProgram ? kProgramSectionAlignment : kWeightSectionAlignment;
    if (entry.offset % alignment != 0)
      return sdiag.invalid("offset ", entry.offset, " is not a multiple of ",
                           alignment);
    // A tiered plan is mapped up to its first paged section: everything the
    // runtime reads in place lies before it.
    if (!paged && entry.offset + entry.size > impl.mappedSize)
      return sdiag.invalid("bytes [", entry.offset, ", +", entry.size,
                           ") lie after a paged weight section (at byte ",
                           impl.mappedSize,
                           "); paged sections must follow every other");
    // Weight sections are checked once the program says which ones the
    // device uses (verifyWeightSections).
    bool checked = isProgram;
    if (checked) {
      uint32_t sum = detail::crc32(0, data + entry.offset, entry.size);
      if (sum != entry.checksum)
        return sdiag.dataLoss(
            isProgram ? "program" : "weights", " checksum mismatch (stored ",
            hex32(entry.checksum), ", computed ", hex32(sum), ")");
    }
    if (isProgram) {
      if (program)
        return sdiag.invalid("a second program section");
      if (entry.size < 8 || entry.size >= FLATBUFFERS_MAX_BUFFER_SIZE)
        return sdiag.invalid("program size ", entry.size,
                             " is not in [8, 2 GiB)");
      const uint8_t *buffer = data + entry.offset;
      if (!fb::ProgramBufferHasIdentifier(buffer))
        return sdiag.invalid("program lacks the FlatBuffer identifier '",
                             fb::ProgramIdentifier(), "'");
      flatbuffers::Verifier::Options vopts;
      vopts.max_depth = 16;
      vopts.max_tables = 1u << 26;
      flatbuffers::Verifier verifier(buffer, entry.size, vopts);
      if (!fb::VerifyProgramBuffer(verifier))
        return sdiag.invalid("program FlatBuffer fails verification");
      program = fb::GetProgram(buffer);
    }
    byOffset.emplace_back(entry.offset, i);
    layout.sections.push_back(entry);
  }
  if (!program)
    return diag.invalid("no program section");
  // Sections are disjoint and every byte outside them is zero padding, so
  // that no byte of the file escapes a check.
  std::sort(byOffset.begin(), byOffset.end());
  uint64_t covered = tableEnd;
  for (size_t k = 0; k < byOffset.size(); ++k) {
    const detail::SectionEntry &entry = layout.sections[byOffset[k].second];
    if (entry.offset < covered)
      return diag.invalid("section ", byOffset[k].second,
                          " overlaps the section before it");
    MOERT_ASSIGN_OR_RETURN(bool zero, allZero(impl, covered, entry.offset));
    if (!zero)
      return diag.dataLoss("padding before section ", byOffset[k].second,
                           " is not zero");
    covered = entry.offset + entry.size;
  }
  MOERT_ASSIGN_OR_RETURN(bool zero, allZero(impl, covered, size));
  if (!zero)
    return diag.dataLoss("padding after the last section is not zero");
  layout.program = program;
  return absl::OkStatus();
}

absl::Status validateTensor(const Diag &diag, const fb::Tensor &tensor,
                            const Plan::Impl &impl, const Layout &layout,
                            uint64_t arenaSize, TensorInfo &info) {
  info.name = str(tensor.name());
  auto dtype = static_cast<DType>(tensor.dtype());
  if (dtypeSize(dtype) == 0)
    return diag.invalid("unknown dtype ", static_cast<int>(tensor.dtype()));
  info.dtype = dtype;
  const auto *dims = tensor.dims();
  size_t rank = dims ? dims->size() : 0;
  if (rank > static_cast<size_t>(kMaxRank))
    return diag.invalid("rank ", rank, " exceeds the maximum ", kMaxRank);
  info.rank = static_cast<int>(rank);
  // The FlatBuffers verifier checks a vector's length field, not that its
  // elements are aligned for their type: a crafted file can place the 8-byte
  // Dim structs at a 4-byte boundary, and reading them would be undefined.
  if (rank && reinterpret_cast<uintptr_t>(dims->Data()) % alignof(fb::Dim))
    return diag.invalid("dims are not aligned to ", alignof(fb::Dim), " bytes");
  int64_t maxElements = 1;
  for (size_t d = 0; d < rank; ++d) {
    const fb::Dim *dim = dims->Get(d);
    DimInfo &out = info.dims[d];
    out.bound = dim->bound();
    out.kind = dim->kind();
    out.symbol = -1;
    if (out.bound < 0 || static_cast<uint64_t>(out.bound) > kMaxDimBound)
      return diag.invalid("dim ", d, " has size or bound ", out.bound,
                          ", outside [0, 2^40]");
    switch (dim->kind()) {
    case fb::DimKind::Static:
    case fb::DimKind::Dynamic:
      break;
    case fb::DimKind::Symbolic: {
      int32_t symbol = dim->symbol();
      if (symbol < 0 || static_cast<size_t>(symbol) >= impl.symbols.size())
        return diag.invalid("dim ", d, " names symbol ", symbol, " but the ",
                            "program has ", impl.symbols.size(), " symbols");
      if (out.bound != impl.symbols[symbol].max)
        return diag.invalid("dim ", d, " has bound ", out.bound,
                            " but its symbol '", impl.symbols[symbol].name,
                            "' has max ", impl.symbols[symbol].max);
      out.symbol = symbol;
      break;
    }
    default:
      return diag.invalid("dim ", d, " has unknown kind ",
                          static_cast<int>(dim->kind()));
    }
    if (!detail::checkedMul(maxElements, out.bound, maxElements))
      return diag.invalid("element count of ", describeDims(info),
                          " overflows");
  }
  int64_t elementSize = static_cast<int64_t>(dtypeSize(dtype));
  int64_t maxBytes;
  if (!detail::checkedMul(maxElements, elementSize, maxBytes))
    return diag.invalid("byte size of ", describeDims(info), " overflows");
  info.offset = tensor.offset();
  info.size = tensor.size();
  if (info.offset % elementSize != 0)
    return diag.invalid("offset ", info.offset, " is not a multiple of the ",
                        elementSize, "-byte element size");
  if (const fb::ValueRange *range = tensor.value_range())
    if (range->lo() >= range->hi())
      return diag.invalid("value range [", range->lo(), ", ", range->hi(),
                          ") is empty");
  switch (tensor.storage()) {
  case fb::Storage::Arena:
    if (info.size < static_cast<uint64_t>(maxBytes))
      return diag.invalid("planned size ", info.size, " bytes is less than ",
                          maxBytes, " bytes needed by ", dtypeName(dtype), " ",
                          describeDims(info));
    if (overflowsAdd(info.offset, info.size, arenaSize))
      return diag.invalid("arena bytes [", info.offset, ", +", info.size,
                          ") exceed the arena size ", arenaSize);
    return absl::OkStatus();
  case fb::Storage::Weight: {
    info.isWeight = true;
    for (int d = 0; d < info.rank; ++d)
      if (info.dims[d].kind != fb::DimKind::Static)
        return diag.invalid("weights must have static shapes; dim ", d,
                            " is not");
    if (info.size != static_cast<uint64_t>(maxBytes))
      return diag.invalid("weight size ", info.size, " bytes differs from ",
                          maxBytes, " bytes of ", dtypeName(dtype), " ",
                          describeDims(info));
    uint32_t section = tensor.section();
    if (section >= layout.sections.size() ||
        layout.sections[section].kind !=
            static_cast<uint32_t>(SectionKind::Weights))
      return diag.invalid("section ", section, " is not a weight section");
    const detail::SectionEntry &entry = layout.sections[section];
    info.section = section;
    if (overflowsAdd(info.offset, info.size, entry.size))
      return diag.invalid("bytes [", info.offset, ", +", info.size,
                          ") exceed weight section ", section, " (", entry.size,
                          " bytes)");
    if (entry.flags & kSectionFlagPaged) {
      info.paged = true;
      info.fileOffset = entry.offset + info.offset;
      return absl::OkStatus();
    }
    info.weightData = impl.data + entry.offset + info.offset;
    return absl::OkStatus();
  }
  }
  return diag.invalid("unknown storage ", static_cast<int>(tensor.storage()));
}

/// Checks the step's arity, tensor ids (defined before use, produced once),
/// attribute table and op-specific rules; records producers and last uses.
absl::Status validateStep(const Diag &diag, ScheduleInfo &schedule,
                          const fb::Step &fbStep, int index, StepInfo &step) {
  step.fb = &fbStep;
  step.op = fbStep.op();
  step.index = index;
  step.name = str(fbStep.name());
  step.def = detail::findOp(step.op);
  if (!step.def)
    return diag.invalid("step ", index, " '", step.name, "': unknown op kind ",
                        static_cast<int>(step.op),
                        " (the plan needs a newer runtime)");
  const detail::OpDef &def = *step.def;
  step.label =
      absl::StrCat("step ", index, " '", step.name, "' (", def.name, ")");
  auto error = [&](const auto &...args) {
    return diag.invalid(step.label, ": ", args...);
  };
  size_t numTensors = schedule.tensors.size();
  if (const auto *ids = fbStep.inputs())
    step.inputs.assign(ids->begin(), ids->end());
  if (const auto *ids = fbStep.outputs())
    step.outputs.assign(ids->begin(), ids->end());
  int numInputs = static_cast<int>(step.inputs.size());
  int numOutputs = static_cast<int>(step.outputs.size());
  if (numInputs < def.minInputs || numInputs > def.maxInputs)
    return error("has ", numInputs, " inputs; expected ", def.minInputs,
                 def.maxInputs == detail::kVariadic
                     ? " or more"
                     : absl::StrCat(" to ", def.maxInputs));
  if (numOutputs < def.minOutputs || numOutputs > def.maxOutputs)
    return error("has ", numOutputs, " outputs; expected ", def.minOutputs,
                 def.maxOutputs == detail::kVariadic
                     ? " or more"
                     : absl::StrCat(" to ", def.maxOutputs));
  for (int i = 0; i < numInputs; ++i) {
    int32_t id = step.inputs[i];
    if (id == -1) {
      if (i >= 32 || !(def.optionalInputs & (1u << i)))
        return error("input ", i, " is required but omitted");
      continue;
    }
    if (id < 0 || static_cast<size_t>(id) >= numTensors)
      return error("input ", i, " names tensor ", id, " but the schedule has ",
                   numTensors);
    TensorInfo &tensor = schedule.tensors[id];
    if (!tensor.isWeight && !tensor.isGraphInput && tensor.producer < 0)
      return error("input ", i, " '", tensor.name,
                   "' is used before any step produces it");
  }
  for (int o = 0; o < numOutputs; ++o) {
    int32_t id = step.outputs[o];
    if (id < 0 || static_cast<size_t>(id) >= numTensors)
      return error("output ", o, " names tensor ", id, " but the schedule has ",
                   numTensors);
    TensorInfo &tensor = schedule.tensors[id];
    if (tensor.isWeight || tensor.isGraphInput || tensor.producer >= 0)
      return error("output ", o, " '", tensor.name, "' is ",
                   tensor.isWeight ? "a weight"
                   : tensor.isGraphInput
                       ? "a graph input"
                       : "already produced by an earlier step",
                   "; every output must be a fresh arena tensor");
    tensor.producer = index;
  }
  if (fbStep.attrs_type() != def.attrs)
    return error(
        "expects ",
        def.attrs == fb::Attrs::NONE
            ? std::string("no attributes")
            : absl::StrCat(fb::EnumNameAttrs(def.attrs), " attributes"),
        ", found ",
        fbStep.attrs_type() == fb::Attrs::NONE
            ? std::string("none")
            : absl::StrCat(fb::EnumNameAttrs(fbStep.attrs_type())));
  if (def.attrs != fb::Attrs::NONE && !fbStep.attrs())
    return error("attribute table is missing");
  MOERT_RETURN_IF_ERROR(
      diag.wrap(def.validate(detail::StepCheck(schedule, step))));
  for (int32_t id : step.inputs)
    if (id >= 0)
      schedule.tensors[id].lastUse = index;
  return absl::OkStatus();
}

/// Checks the collective steps against the whole schedule: their group size
/// is the plan's device count, and every AllToAllStart is completed by one
/// later AllToAllWait that names exactly the start's inputs then outputs,
/// with no step in between reading the rows still in flight.
absl::Status validateCollectives(const Diag &diag, ScheduleInfo &schedule,
                                 uint32_t deviceCount) {
  // The `received` tensor of each exchange in flight -> its start step.
  std::map<int32_t, int> inFlight;
  for (StepInfo &step : schedule.steps) {
    auto error = [&](const auto &...args) {
      return diag.invalid(step.label, ": ", args...);
    };
    int64_t devices = -1;
    if (step.op == fb::OpKind::AllToAll || step.op == fb::OpKind::AllToAllStart)
      devices = step.fb->attrs_as_CollectiveAttrs()->num_devices();
    if (devices >= 0 && devices != deviceCount)
      return error("exchanges with ", devices, " devices but the plan has ",
                   deviceCount);
    if (step.op == fb::OpKind::AllToAllWait) {
      int32_t received = step.inputs[step.inputs.size() - 2];
      auto it = inFlight.find(received);
      if (it == inFlight.end())
        return error("waits for '",
                     received >= 0 ? schedule.tensors[received].name : "",
                     "', which no earlier AllToAllStart is receiving");
      const StepInfo &start = schedule.steps[it->second];
      std::vector<int32_t> expected = start.inputs;
      expected.insert(expected.end(), start.outputs.begin(),
                      start.outputs.end());
      if (step.inputs != expected)
        return error("must name the inputs then the outputs of ", start.label,
                     " (", expected.size(), " tensors)");
      step.pairedStep = it->second;
      inFlight.erase(it);
      continue;
    }
    for (int32_t id : step.inputs)
      if (auto it = inFlight.find(id); it != inFlight.end())
        return error("reads '", schedule.tensors[id].name,
                     "' before the AllToAllWait of ",
                     schedule.steps[it->second].label);
    if (step.op == fb::OpKind::AllToAllStart)
      inFlight.emplace(step.outputs[0], step.index);
  }
  if (!inFlight.empty())
    return diag.invalid(schedule.steps[inFlight.begin()->second].label,
                        ": no AllToAllWait completes the exchange");
  return absl::OkStatus();
}

/// Checks the memory plan: two arena tensors that are live at the same time
/// never share bytes, except an in-place step output that takes exactly the
/// slot of an input read for the last time by that step.
absl::Status validateArena(const Diag &diag, const ScheduleInfo &schedule) {
  int numSteps = static_cast<int>(schedule.steps.size());
  auto lifetimeEnd = [&](const TensorInfo &t) {
    return t.isGraphOutput ? numSteps : std::max(t.lastUse, t.producer);
  };
  // Tensors that become live at step s (index s + 1; graph inputs at -1) and
  // tensors whose last step is s.
  std::vector<std::vector<uint32_t>> starts(numSteps + 1), ends(numSteps + 2);
  for (uint32_t id = 0; id < schedule.tensors.size(); ++id) {
    const TensorInfo &t = schedule.tensors[id];
    if (t.isWeight || t.size == 0 || (!t.isGraphInput && t.producer < 0))
      continue;
    int start = t.isGraphInput ? -1 : t.producer;
    starts[start + 1].push_back(id);
    ends[lifetimeEnd(t) + 1].push_back(id);
  }
  std::multimap<uint64_t, uint32_t> live;
  auto describe = [&](uint32_t id) {
    const TensorInfo &t = schedule.tensors[id];
    return absl::StrCat("tensor ", id, " '", t.name, "' (bytes [", t.offset,
                        ", ", t.offset + t.size, "), live from ",
                        t.isGraphInput ? std::string("the start")
                                       : absl::StrCat("step ", t.producer),
                        " to ",
                        t.isGraphOutput ? std::string("the end")
                                        : absl::StrCat("step ", lifetimeEnd(t)),
                        ")");
  };
  for (int s = -1; s < numSteps; ++s) {
    const StepInfo *step = s >= 0 ? &schedule.steps[s] : nullptr;
    for (uint32_t id : starts[s + 1]) {
      const TensorInfo &t = schedule.tensors[id];
      uint64_t end = t.offset + t.size;
      auto conflict = [&](uint32_t other) -> absl::Status {
        const TensorInfo &u = schedule.tensors[other];
        if (step && u.offset == t.offset && lifetimeEnd(u) == s &&
            step->outputs[0] == static_cast<int32_t>(id))
          for (size_t p = 0; p < step->inputs.size() && p < 32; ++p)
            if (step->inputs[p] == static_cast<int32_t>(other) &&
                (step->def->inPlaceInputs >> p & 1))
              return absl::OkStatus();
        return diag.invalid("memory plan overlaps live tensors: ",
                            describe(other), " and ", describe(id));
      };
      // Live intervals are disjoint but for in-place pairs at one offset, so
      // only the intervals starting in [offset, end) and those at the
      // greatest offset below can reach this one.
      auto it = live.lower_bound(t.offset);
      for (auto j = it; j != live.end() && j->first < end; ++j)
        MOERT_RETURN_IF_ERROR(conflict(j->second));
      if (it != live.begin()) {
        uint64_t below = std::prev(it)->first;
        for (auto j = live.lower_bound(below); j != it; ++j)
          if (below + schedule.tensors[j->second].size > t.offset)
            MOERT_RETURN_IF_ERROR(conflict(j->second));
      }
      live.emplace(t.offset, id);
    }
    for (uint32_t id : ends[s + 1]) {
      auto range = live.equal_range(schedule.tensors[id].offset);
      for (auto j = range.first; j != range.second; ++j)
        if (j->second == id) {
          live.erase(j);
          break;
        }
    }
  }
  return absl::OkStatus();
}

TensorDesc describeTensor(const Plan::Impl &impl, const fb::Tensor &tensor,
                          const TensorInfo &info) {
  TensorDesc desc;
  desc.name = std::string(info.name);
  desc.dtype = info.dtype;
  for (int d = 0; d < info.rank; ++d) {
    DimDesc dim;
    dim.bound = info.dims[d].bound;
    switch (info.dims[d].kind) {
    case fb::DimKind::Symbolic:
      dim.kind = DimDesc::Kind::Symbolic;
      dim.symbol = impl.symbols[info.dims[d].symbol].name;
      break;
    case fb::DimKind::Dynamic:
      dim.kind = DimDesc::Kind::Dynamic;
      break;
    default:
      dim.kind = DimDesc::Kind::Static;
      break;
    }
    desc.dims.push_back(std::move(dim));
  }
  if (const fb::ValueRange *range = tensor.value_range()) {
    desc.hasValueRange = true;
    desc.valueLo = range->lo();
    desc.valueHi = range->hi();
  }
  desc.replicated = tensor.replicated();
  return desc;
}

absl::Status validateSchedule(const Diag &diag, const Plan::Impl &impl,
                              const Layout &layout, const fb::Schedule &fbSched,
                              ScheduleInfo &schedule,
                              const ScheduleInfo *decode = nullptr) {
  schedule.arenaSize = fbSched.arena_size();
  if (schedule.arenaSize > kMaxArenaSize)
    return diag.invalid("arena size ", schedule.arenaSize,
                        " bytes exceeds the limit of 2^48");
  const auto *tensors = fbSched.tensors();
  size_t numTensors = tensors ? tensors->size() : 0;
  if (numTensors > static_cast<size_t>(INT32_MAX))
    return diag.invalid("too many tensors");
  schedule.tensors.resize(numTensors);
  for (size_t id = 0; id < numTensors; ++id) {
    const fb::Tensor *tensor = tensors->Get(id);
    Diag tdiag = diag.nested(
        absl::StrCat("tensor ", id, " '", str(tensor->name()), "'"));
    MOERT_RETURN_IF_ERROR(validateTensor(tdiag, *tensor, impl, layout,
                                         schedule.arenaSize,
                                         schedule.tensors[id]));
  }

  // Graph inputs live in the arena and have unique, non-empty names.
  auto checkSignature = [&](const flatbuffers::Vector<uint32_t> *ids,
                            const char *what, std::vector<uint32_t> &out,
                            bool isInput) -> absl::Status {
    std::set<std::string> names;
    std::unordered_set<uint32_t> seen;
    size_t count = ids ? ids->size() : 0;
    for (size_t k = 0; k < count; ++k) {
      uint32_t id = ids->Get(k);
      if (id >= numTensors)
        return diag.invalid(what, " ", k, " names tensor ", id,
                            " but the schedule has ", numTensors);
      TensorInfo &info = schedule.tensors[id];
      if (info.name.empty())
        return diag.invalid(what, " ", k, " (tensor ", id, ") has no name");
      if (!names.insert(std::string(info.name)).second ||
          !seen.insert(id).second)
        return diag.invalid(what, " name '", info.name, "' appears twice");
      if (isInput) {
        if (info.isWeight)
          return diag.invalid(what, " '", info.name, "' is a weight");
        info.isGraphInput = true;
      } else {
        info.isGraphOutput = true;
      }
      out.push_back(id);
    }
    return absl::OkStatus();
  };
  MOERT_RETURN_IF_ERROR(
      checkSignature(fbSched.inputs(), "input", schedule.inputs, true));
  MOERT_RETURN_IF_ERROR(
      checkSignature(fbSched.outputs(), "output", schedule.outputs, false));

  const auto *steps = fbSched.steps();
  size_t numSteps = steps ? steps->size() : 0;
  if (numSteps > static_cast<size_t>(INT32_MAX) - 2)
    return diag.invalid("too many steps");
  schedule.steps.resize(numSteps);
  for (size_t s = 0; s < numSteps; ++s) {
    const fb::Step &step = *steps->Get(s);
    // The least format version that has what the step uses, with what it
    // uses, or 0 when the file's version has all of it.
    auto needs = [&]() -> std::pair<uint16_t, const char *> {
      const auto *router = step.attrs_as<fb::RouterAttrs>();
      const auto *ffn = step.attrs_as<fb::FfnAttrs>();
      const auto *attrs = step.attrs_as<fb::AttentionAttrs>();
      bool attention = step.op() == fb::OpKind::Attention;
      // An older writer could not have meant them: a 1.8 reader would
      // ignore the softcap, and refuse the sinks input by arity.
      bool sinks = attention && step.inputs() && step.inputs()->size() > 4;
      bool softcap = attention && attrs && attrs->softcap() != 0.0f;
      bool blockQuant =
          step.op() == fb::OpKind::MatMulNBits || (ffn && ffn->block_quant());
      const fb::BlockQuantAttrs *quant =
          ffn ? ffn->block_quant() : step.attrs_as<fb::BlockQuantAttrs>();
      bool int8Activations = quant && quant->int8_activations();
      const std::pair<uint16_t, const char *> features[] = {
          {step.op() == fb::OpKind::Conv ? detail::kFormatVersionMinorVision
                                         : 0,
           "is a Conv step"},
          {int8Activations ? detail::kFormatVersionMinorInt8Activations : 0,
           "has int8 activations"},
          {blockQuant ? detail::kFormatVersionMinorBlockQuant : 0,
           "has block-quantized weights"},
          {attention ? detail::kFormatVersionMinorAttention : 0,
           "is an Attention step"},
          {router && router->normalize_kept_epsilon() != 0.0f
               ? detail::kFormatVersionMinorKeptNormalize
               : 0,
           "is a Router with normalize_kept"},
          {ffn && ffn->activation() == fb::Activation::ReluSquared
               ? detail::kFormatVersionMinorKeptNormalize
               : 0,
           "has the relu_squared activation"},
          {step.op() == fb::OpKind::GatedDeltaRule
               ? detail::kFormatVersionMinorGenai
               : 0,
           "is a GatedDeltaRule step"},
          {sinks ? detail::kFormatVersionMinorGenai : 0,
           "is an Attention step with a sinks input"},
          {softcap ? detail::kFormatVersionMinorGenai : 0,
           "is an Attention step with a softcap"}};
      for (const auto &feature : features)
        if (impl.versionMinor < feature.first)
          return feature;
      return {0, nullptr};
    };
    if (auto [minor, what] = needs(); what)
      return diag.invalid("step ", s, " ", what, ", which needs format ",
                          kFormatVersionMajor, ".", minor,
                          ", but the file is version ", impl.versionMajor, ".",
                          impl.versionMinor);
    MOERT_RETURN_IF_ERROR(validateStep(diag, schedule, step,
                                       static_cast<int>(s), schedule.steps[s]));
  }
  for (uint32_t id : schedule.outputs) {
    const TensorInfo &info = schedule.tensors[id];
    if (!info.isWeight && !info.isGraphInput && info.producer < 0)
      return diag.invalid("output '", info.name, "' is produced by no step");
  }
  MOERT_RETURN_IF_ERROR(
      validateCollectives(diag, schedule, impl.target.deviceCount));
  MOERT_RETURN_IF_ERROR(validateArena(diag, schedule));
  MOERT_RETURN_IF_ERROR(
      detail::validateTiers(diag, impl, fbSched, schedule, decode));

  for (uint32_t id : schedule.inputs)
    schedule.inputDescs.push_back(
        describeTensor(impl, *tensors->Get(id), schedule.tensors[id]));
  for (uint32_t id : schedule.outputs)
    schedule.outputDescs.push_back(
        describeTensor(impl, *tensors->Get(id), schedule.tensors[id]));
  return absl::OkStatus();
}

/// A tiered generation plan's device holds the resident weights of its
/// decode and prefill schedules at once: both schedules' tiers count every
/// resident range of either once.
void countSharedResidents(ScheduleInfo &decode, ScheduleInfo &prefill) {
  if (!decode.tiers.present || !prefill.tiers.present)
    return;
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (const ScheduleInfo *schedule : {&decode, &prefill})
    for (const TensorInfo &t : schedule->tensors)
      if (t.isWeight && !t.paged && seen.insert({t.section, t.offset}).second &&
          schedule == &prefill)
        decode.tiers.residentBytes += t.size;
  prefill.tiers.residentBytes = decode.tiers.residentBytes;
}

/// Reads the informational provenance table. It is never executed, but
/// moec inspect prints it: the checks keep a crafted plan from flooding the
/// terminal or faking a digest.
absl::Status readProvenance(const Diag &diag, const fb::Program &program,
                            ProvenanceDesc &out) {
  const fb::Provenance *provenance = program.provenance();
  if (!provenance)
    return absl::OkStatus();
  constexpr size_t kMaxText = 4096, kMaxFlags = 64;
  auto text = [&](const flatbuffers::String *s, const char *field,
                  std::string &into) -> absl::Status {
    absl::string_view value = str(s);
    if (value.size() > kMaxText)
      return diag.invalid("provenance.", field, " is ", value.size(),
                          " bytes long; at most ", kMaxText, " are allowed");
    into = std::string(value);
    return absl::OkStatus();
  };
  auto digest = [&](const flatbuffers::String *s, const char *field,
                    std::string &into) -> absl::Status {
    if (absl::Status status = text(s, field, into); !status.ok())
      return status;
    bool hex = into.size() == 64 &&
               into.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!into.empty() && !hex)
      return diag.invalid("provenance.", field,
                          " is not a SHA-256 digest (64 lower-case hex "
                          "digits)");
    return absl::OkStatus();
  };
  for (absl::Status status :
       {text(provenance->compiler_version(), "compiler_version",
             out.compilerVersion),
        text(provenance->git_commit(), "git_commit", out.gitCommit),
        text(provenance->model_file(), "model_file", out.modelFile),
        digest(provenance->model_sha256(), "model_sha256", out.modelSha256),
        text(provenance->prefill_file(), "prefill_file", out.prefillFile),
        digest(provenance->prefill_sha256(), "prefill_sha256",
               out.prefillSha256)})
    if (!status.ok())
      return status;
  if (const auto *flags = provenance->flags()) {
    if (flags->size() > kMaxFlags)
      return diag.invalid("provenance.flags has ", flags->size(),
                          " entries; at most ", kMaxFlags, " are allowed");
    for (const fb::CompileFlag *flag : *flags) {
      std::string name, value;
      if (absl::Status status = text(flag->name(), "flags.name", name);
          !status.ok())
        return status;
      if (absl::Status status = text(flag->value(), "flags.value", value);
          !status.ok())
        return status;
      if (name.empty())
        return diag.invalid("provenance.flags has an entry without a name");
      out.flags.emplace_back(std::move(name), std::move(value));
    }
  }
  return absl::OkStatus();
}

absl::Status validateProgram(const Diag &diag, const Layout &layout,
                             Plan::Impl &impl) {
  const fb::Program &program = *layout.program;
  impl.producer = std::string(str(program.producer()));
  if (absl::Status status = readProvenance(diag, program, impl.provenance);
      !status.ok())
    return status;
  if (const auto *symbols = program.symbols()) {
    std::set<std::string> names;
    for (size_t i = 0; i < symbols->size(); ++i) {
      const fb::Symbol *symbol = symbols->Get(i);
      absl::string_view name = str(symbol->name());
      if (name.empty() || !names.insert(std::string(name)).second)
        return diag.invalid("symbol ", i, " has an empty or repeated name '",
                            name, "'");
      if (symbol->min() < 0 || symbol->min() > symbol->max() ||
          static_cast<uint64_t>(symbol->max()) > kMaxDimBound)
        return diag.invalid("symbol '", name, "' has range [", symbol->min(),
                            ", ", symbol->max(), "]");
      impl.symbols.push_back({std::string(name), symbol->min(), symbol->max()});
    }
  }
  const auto *schedules = program.schedules();
  size_t count = schedules ? schedules->size() : 0;
  if (count != impl.target.deviceCount)
    return diag.invalid("program has ", count, " schedules but the header ",
                        "declares ", impl.target.deviceCount, " devices");
  impl.schedules.resize(count);
  for (size_t i = 0; i < count; ++i)
    MOERT_RETURN_IF_ERROR(
        validateSchedule(diag.nested(absl::StrCat("schedule ", i)), impl,
                         layout, *schedules->Get(i), impl.schedules[i]));
  const fb::Generation *generation = program.generation();
  if (!generation)
    return absl::OkStatus();
  if (impl.versionMinor < detail::kFormatVersionMinorGeneration)
    return diag.invalid("the program has a generation table, which needs "
                        "format ",
                        kFormatVersionMajor, ".",
                        detail::kFormatVersionMinorGeneration,
                        ", but the file is version ", impl.versionMajor, ".",
                        impl.versionMinor);
  const auto *prefill = generation->prefill_schedules();
  size_t prefillCount = prefill ? prefill->size() : 0;
  if (prefillCount != 0 && prefillCount != count)
    return diag.invalid("generation: ", prefillCount, " prefill schedules for ",
                        count, " devices");
  impl.prefillSchedules.resize(prefillCount);
  for (size_t i = 0; i < prefillCount; ++i) {
    MOERT_RETURN_IF_ERROR(validateSchedule(
        diag.nested(absl::StrCat("prefill schedule ", i)), impl, layout,
        *prefill->Get(i), impl.prefillSchedules[i], &impl.schedules[i]));
    countSharedResidents(impl.schedules[i], impl.prefillSchedules[i]);
  }
  return detail::validateGeneration(impl.source, *generation, impl);
}

/// Every schedule of `impl`: the devices', then the prefill ones.
std::vector<const ScheduleInfo *> allSchedules(const Plan::Impl &impl) {
  std::vector<const ScheduleInfo *> all;
  for (const ScheduleInfo &s : impl.schedules)
    all.push_back(&s);
  for (const ScheduleInfo &s : impl.prefillSchedules)
    all.push_back(&s);
  return all;
}

/// Checks how schedules share weights: two weight tensors (of any
/// schedules) whose bytes overlap name exactly the same bytes, as a dense
/// weight shared by every device does; a partial overlap is corruption.
absl::Status validateWeightSharing(const Diag &diag, const Plan::Impl &impl) {
  struct Range {
    uint32_t section;
    uint64_t offset, size;
    size_t schedule;
    absl::string_view name;
  };
  std::vector<Range> ranges;
  std::vector<const ScheduleInfo *> schedules = allSchedules(impl);
  for (size_t d = 0; d < schedules.size(); ++d) {
    for (const TensorInfo &t : schedules[d]->tensors)
      if (t.isWeight && t.size)
        ranges.push_back({t.section, t.offset, t.size, d, t.name});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range &a, const Range &b) {
    return std::tie(a.section, a.offset, a.size) <
           std::tie(b.section, b.offset, b.size);
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range &a = ranges[i - 1], &b = ranges[i];
    if (a.section == b.section && b.offset < a.offset + a.size &&
        (a.offset != b.offset || a.size != b.size))
      return diag.invalid("weights '", a.name, "' (schedule ", a.schedule,
                          ") and '", b.name, "' (schedule ", b.schedule,
                          ") partly overlap in section ", a.section,
                          " (bytes [", a.offset, ", +", a.size, ") and [",
                          b.offset, ", +", b.size, "))");
  }
  return absl::OkStatus();
}

/// Checksums the weight sections that the schedules run here reference.
absl::Status verifyWeightSections(const Diag &diag, const Layout &layout,
                                  const Plan::Impl &impl,
                                  const LoadOptions &options) {
  if (!options.verifyWeightChecksums)
    return absl::OkStatus();
  std::vector<char> used(layout.sections.size(), 0);
  std::vector<const ScheduleInfo *> schedules = allSchedules(impl);
  size_t devices = impl.schedules.size();
  for (size_t d = 0; d < schedules.size(); ++d) {
    if (options.device >= 0 &&
        d % devices != static_cast<size_t>(options.device))
      continue;
    for (const TensorInfo &t : schedules[d]->tensors)
      if (t.isWeight)
        used[t.section] = 1;
  }
  // Without a device every section is checked, referenced or not.
  for (size_t i = 0; i < layout.sections.size(); ++i) {
    const detail::SectionEntry &entry = layout.sections[i];
    // A paged section is never read whole: each expert's checksum is
    // checked when the runtime first reads it (docs/tiered-experts.md).
    if (entry.kind != static_cast<uint32_t>(SectionKind::Weights) ||
        (entry.flags & kSectionFlagPaged) || (options.device >= 0 && !used[i]))
      continue;
    uint32_t sum = detail::crc32(0, impl.data + entry.offset, entry.size);
    if (sum != entry.checksum)
      return diag.nested(absl::StrCat("section ", i))
          .dataLoss("weights checksum mismatch (stored ", hex32(entry.checksum),
                    ", computed ", hex32(sum), ")");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Plan::Impl>>
validate(std::unique_ptr<Plan::Impl> impl, const LoadOptions &options) {
  Diag diag(impl->source);
  Layout layout;
  MOERT_RETURN_IF_ERROR(
      validateHeader(diag, impl->data, impl->size, *impl, layout));
  if (options.device >= static_cast<int>(impl->target.deviceCount))
    return diag.invalid("device ", options.device,
                        " is requested but the plan has ",
                        impl->target.deviceCount,
                        impl->target.deviceCount == 1 ? " device schedule"
                                                      : " device schedules");
  MOERT_RETURN_IF_ERROR(validateProgram(diag, layout, *impl));
  MOERT_RETURN_IF_ERROR(validateWeightSharing(diag, *impl));
  MOERT_RETURN_IF_ERROR(verifyWeightSections(diag, layout, *impl, options));
  return impl;
}

} // namespace

std::string detail::describeDims(const TensorInfo &info) {
  std::string out = "[";
  for (int d = 0; d < info.rank; ++d)
    absl::StrAppend(&out, d ? ", " : "",
                    info.dims[d].kind == fb::DimKind::Static ? "" : "<=",
                    info.dims[d].bound);
  return out + "]";
}

namespace {

/// How much of the file `impl` (its fd and size set) Plan::load maps: up to
/// the first paged weight section (a tiered plan's cold experts, never
/// mapped, so that they take no address space), else all of it. Read from
/// the raw section table; a malformed one maps the whole file, whose
/// validation then reports the problem.
size_t mappedPrefix(const Plan::Impl &impl) {
  uint8_t header[kFileHeaderSize];
  if (impl.size < kFileHeaderSize ||
      !impl.readBytes(0, header, sizeof header).ok())
    return impl.size;
  detail::FileHeader decoded = detail::decodeHeader(header);
  if (decoded.sectionCount == 0 || decoded.sectionCount > kMaxSections ||
      kFileHeaderSize + uint64_t{decoded.sectionCount} * kSectionEntrySize >
          impl.size)
    return impl.size;
  std::vector<uint8_t> table(decoded.sectionCount * kSectionEntrySize);
  if (!impl.readBytes(kFileHeaderSize, table.data(), table.size()).ok())
    return impl.size;
  uint64_t prefix = impl.size;
  for (uint32_t i = 0; i < decoded.sectionCount; ++i) {
    detail::SectionEntry entry =
        detail::decodeSection(table.data() + i * kSectionEntrySize);
    if (entry.kind == static_cast<uint32_t>(SectionKind::Weights) &&
        entry.flags == kSectionFlagPaged &&
        entry.offset % kWeightSectionAlignment == 0)
      prefix = std::min(prefix, entry.offset);
  }
  // The header and table are always mapped (a paged section overlapping
  // them is refused by the validation).
  if (prefix < kFileHeaderSize + table.size())
    return impl.size;
  return static_cast<size_t>(prefix);
}

} // namespace

Plan::Plan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Plan::~Plan() = default;

absl::StatusOr<std::unique_ptr<Plan>> Plan::load(const std::string &path,
                                                 const LoadOptions &options) {
  auto impl = std::make_unique<Impl>();
  impl->source = path;
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok())
    return absl::Status(file.status().code(),
                        absl::StrCat(path, ": ", file.status().message()));
  size_t size = static_cast<size_t>(file->size());
  impl->fd = ::dup(file->fd());
  if (impl->fd < 0)
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot keep open: ", std::strerror(errno)));
  impl->size = size;
  size_t mapped = mappedPrefix(*impl);
  if (mapped > 0) {
    void *mapping =
        ::mmap(nullptr, mapped, PROT_READ, MAP_PRIVATE, file->fd(), 0);
    if (mapping == MAP_FAILED)
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot map: ", std::strerror(errno)));
    impl->mapping = mapping;
    impl->mappingSize = mapped;
    impl->data = static_cast<const uint8_t *>(mapping);
  }
  impl->mappedSize = mapped;
  MOERT_ASSIGN_OR_RETURN(impl, validate(std::move(impl), options));
  return std::unique_ptr<Plan>(new Plan(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Plan>>
Plan::loadFromMemory(const void *data, size_t size,
                     const LoadOptions &options) {
  auto impl = std::make_unique<Impl>();
  impl->source = "<memory>";
  // The copy keeps weight sections at their 4096-byte alignment.
  size_t rounded =
      detail::alignTo(std::max<size_t>(size, 1), kWeightSectionAlignment);
  impl->ownedCopy = static_cast<uint8_t *>(
      std::aligned_alloc(kWeightSectionAlignment, rounded));
  if (!impl->ownedCopy)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for a plan copy"));
  if (size)
    std::memcpy(impl->ownedCopy, data, size);
  impl->data = impl->ownedCopy;
  impl->size = size;
  impl->mappedSize = size;
  MOERT_ASSIGN_OR_RETURN(impl, validate(std::move(impl), options));
  return std::unique_ptr<Plan>(new Plan(std::move(impl)));
}

const TargetRequirements &Plan::target() const { return impl_->target; }
uint16_t Plan::versionMajor() const { return impl_->versionMajor; }
uint16_t Plan::versionMinor() const { return impl_->versionMinor; }
const std::string &Plan::producer() const { return impl_->producer; }
const std::vector<SymbolDesc> &Plan::symbols() const { return impl_->symbols; }
int Plan::numDevices() const {
  return static_cast<int>(impl_->schedules.size());
}
const std::vector<TensorDesc> &Plan::inputs(int device) const {
  return impl_->schedules.at(device).inputDescs;
}
const std::vector<TensorDesc> &Plan::outputs(int device) const {
  return impl_->schedules.at(device).outputDescs;
}
size_t Plan::numSteps(int device) const {
  return impl_->schedules.at(device).steps.size();
}
uint64_t Plan::arenaSize(int device) const {
  return impl_->schedules.at(device).arenaSize;
}
const ProvenanceDesc &Plan::provenance() const { return impl_->provenance; }
const GenerationDesc *Plan::generation() const {
  return impl_->isGeneration ? &impl_->generation : nullptr;
}
const std::vector<TensorDesc> &Plan::prefillInputs(int device) const {
  return impl_->prefillSchedules.at(device).inputDescs;
}
const std::vector<TensorDesc> &Plan::prefillOutputs(int device) const {
  return impl_->prefillSchedules.at(device).outputDescs;
}
size_t Plan::numPrefillSteps(int device) const {
  return impl_->prefillSchedules.at(device).steps.size();
}
uint64_t Plan::prefillArenaSize(int device) const {
  return impl_->prefillSchedules.at(device).arenaSize;
}

} // namespace moert
