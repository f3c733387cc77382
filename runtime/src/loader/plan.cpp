//===- plan.cpp - Plan loading and validation -----------------------------===//
//
// Loading never trusts the file: the header, the section table, every section
// checksum, the FlatBuffer (its Verifier) and then every id, offset, size,
// dtype, rank, arity and attribute of the program are checked before anything
// is used, so that a corrupt or hostile plan gives an error, not a crash.
// This file checks the file's structure and the program; each schedule's
// checks are schedule_validation.cpp's.
//
//===----------------------------------------------------------------------===//

#include "format/file_io.h"
#include "format/plan_file.h"
#include "loader/diag.h"
#include "loader/generation_plan.h"
#include "loader/multimodal_plan.h"
#include "loader/validation.h"

#include "absl/strings/str_cat.h"
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
using detail::Layout;
using detail::overflowsAdd;
using detail::ScheduleInfo;
using detail::StepInfo;
using detail::str;
using detail::TensorInfo;
using detail::validateSchedule;

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
  const fb::Multimodal *multimodal = program.multimodal();
  if (multimodal && !generation)
    return diag.invalid("multimodal: the program has no generation table");
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
  if (multimodal) {
    MOERT_RETURN_IF_ERROR(detail::loadStages(diag, layout, *multimodal, impl));
    for (size_t d = 0; d < count; ++d)
      countSharedResidents(
          impl.schedules[d],
          d ? impl.prefillStageSchedules[d - 1]
            : impl.stageSchedules[impl.multimodal.prefillStage]);
    if (prefillCount)
      return diag.invalid("multimodal: the plan has prefill schedules; its "
                          "prompt runs through its stages");
  }
  MOERT_RETURN_IF_ERROR(
      detail::validateGeneration(impl.source, *generation, impl, multimodal));
  return multimodal ? detail::validateMultimodal(diag, *multimodal, impl)
                    : absl::OkStatus();
}

/// Every schedule of `impl`: the devices', then the prefill ones.
std::vector<const ScheduleInfo *> allSchedules(const Plan::Impl &impl) {
  std::vector<const ScheduleInfo *> all;
  for (const ScheduleInfo &s : impl.schedules)
    all.push_back(&s);
  for (const ScheduleInfo &s : impl.prefillSchedules)
    all.push_back(&s);
  for (const ScheduleInfo &s : impl.stageSchedules)
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

constexpr size_t kHugePage = size_t{2} << 20;

/// Whether the kernel gives transparent huge pages to a region that asks
/// for them (its mode is "always" or "madvise", not "never").
bool hasTransparentHugePages() {
  std::FILE *file =
      std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!file)
    return false;
  char text[64] = {};
  size_t n = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  return n > 0 && !std::strstr(text, "[never]");
}

/// Whether LoadOptions::weightPages copies `bytes` of a plan into huge pages.
bool copiesToHugePages(const LoadOptions &options, size_t bytes) {
  switch (options.weightPages) {
  case LoadOptions::WeightPages::Mapped:
    return false;
  case LoadOptions::WeightPages::Huge:
    return true;
  case LoadOptions::WeightPages::Auto:
    break;
  }
  // A rank of an expert-parallel job maps the file: a copy would hold
  // every device's shards, where the mapping pages in its own. A small
  // plan misses the TLB little.
  if (options.device >= 0 || bytes < (size_t{64} << 20) ||
      !hasTransparentHugePages())
    return false;
  uint64_t available = processMemoryAvailable();
  return available && bytes <= available / 2;
}

/// Reads [0, bytes) of `fd` into anonymous memory aligned to a huge page,
/// which asks the kernel for huge pages (MADV_HUGEPAGE), into `impl`.
absl::Status copyToHugePages(Plan::Impl &impl, int fd, size_t bytes) {
  size_t rounded = detail::alignTo(bytes, kHugePage);
  // One huge page more, to align the start.
  size_t length = rounded + kHugePage;
  void *region = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED)
    return absl::ResourceExhaustedError(absl::StrCat(
        impl.source, ": cannot allocate ", length,
        " bytes for the plan in huge pages: ", std::strerror(errno)));
  auto *start = reinterpret_cast<uint8_t *>(
      detail::alignTo(reinterpret_cast<uintptr_t>(region), kHugePage));
  ::madvise(start, rounded, MADV_HUGEPAGE);
  impl.mapping = region;
  impl.mappingSize = length;
  for (size_t done = 0; done < bytes;) {
    ssize_t n = ::pread(fd, start + done, bytes - done, done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return absl::DataLossError(
          absl::StrCat(impl.source, ": cannot read at byte ", done, ": ",
                       n < 0 ? std::strerror(errno) : "the file ended"));
    done += static_cast<size_t>(n);
  }
  // Read only from here on, as the mapping is.
  ::mprotect(start, rounded, PROT_READ);
  impl.data = start;
  impl.onHugePages = true;
  return absl::OkStatus();
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
  if (mapped > 0 && copiesToHugePages(options, mapped)) {
    absl::Status copied = copyToHugePages(*impl, file->fd(), mapped);
    // Auto falls back to the mapping.
    if (!copied.ok() && options.weightPages == LoadOptions::WeightPages::Huge)
      return copied;
    if (!copied.ok() && impl->mapping) {
      ::munmap(impl->mapping, impl->mappingSize);
      impl->mapping = nullptr;
    }
  }
  if (mapped > 0 && !impl->onHugePages) {
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
bool Plan::onHugePages() const { return impl_->onHugePages; }
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
const MultimodalDesc *Plan::multimodal() const {
  return impl_->isMultimodal ? &impl_->multimodal : nullptr;
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
