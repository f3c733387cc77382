//===- plan_emit.cpp - Writing a plan file --------------------------------===//
//
// PlanWriter::write and serialize: the header, the section table, the
// program FlatBuffer and the 4096-aligned weight sections, streamed to a
// file or a buffer with every checksum computed on the way. Weights are
// read from their sources a few kilobytes at a time, narrowed, quantized
// or transposed as they are written, and their mapped pages released.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer_impl.h"

#include "format/float16.h"
#include "format/plan_file.h"
#include "format/tier_assignment.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace moert {

namespace detail {

/// Receives the file's bytes in order; `patch` rewrites earlier bytes.
class Sink {
public:
  virtual ~Sink() = default;
  virtual absl::Status append(const void *data, size_t size) = 0;
  virtual absl::Status patch(uint64_t offset, const void *data,
                             size_t size) = 0;
  absl::Status pad(uint64_t &position, uint64_t target) {
    static const uint8_t zeros[4096] = {};
    while (position < target) {
      size_t n = static_cast<size_t>(
          std::min<uint64_t>(target - position, sizeof(zeros)));
      MOERT_RETURN_IF_ERROR(append(zeros, n));
      position += n;
    }
    return absl::OkStatus();
  }
};

} // namespace detail

using detail::Sink;

namespace {

class VectorSink : public Sink {
public:
  std::vector<uint8_t> bytes;
  absl::Status append(const void *data, size_t size) override {
    const auto *p = static_cast<const uint8_t *>(data);
    bytes.insert(bytes.end(), p, p + size);
    return absl::OkStatus();
  }
  absl::Status patch(uint64_t offset, const void *data, size_t size) override {
    std::memcpy(bytes.data() + offset, data, size);
    return absl::OkStatus();
  }
};

class FileSink : public Sink {
public:
  FileSink(std::string path, std::FILE *file)
      : path_(std::move(path)), file_(file) {}
  ~FileSink() override {
    if (file_)
      std::fclose(file_);
  }
  absl::Status append(const void *data, size_t size) override {
    if (std::fwrite(data, 1, size, file_) != size)
      return failure("write");
    return absl::OkStatus();
  }
  absl::Status patch(uint64_t offset, const void *data, size_t size) override {
    if (::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0)
      return failure("seek");
    MOERT_RETURN_IF_ERROR(append(data, size));
    if (std::fseek(file_, 0, SEEK_END) != 0)
      return failure("seek");
    return absl::OkStatus();
  }
  absl::Status close() {
    std::FILE *file = file_;
    file_ = nullptr;
    // A full disk often shows only when the buffered tail is flushed here.
    if (std::fclose(file) != 0)
      return failure("write");
    return absl::OkStatus();
  }

private:
  absl::Status failure(const char *what) {
    return absl::InternalError(
        absl::StrCat(path_, ": cannot ", what, ": ", std::strerror(errno)));
  }
  std::string path_;
  std::FILE *file_;
};

/// Advises the kernel that the whole pages inside [data, data + size), just
/// written to the plan, are not needed again: referenced weights are usually
/// a memory-mapped model, which writing would otherwise leave resident in
/// full. MADV_PAGEOUT never changes the memory's contents (anonymous pages
/// without swap just stay), so any referenced buffer may be advised; failure
/// is harmless. Small weights are not worth the call.
void releasePages(const void *data, size_t size) {
#if defined(__linux__) && defined(MADV_PAGEOUT)
  constexpr size_t kMinBytes = size_t{1} << 20;
  long page = sysconf(_SC_PAGESIZE);
  if (size < kMinBytes || page <= 0)
    return;
  auto address = reinterpret_cast<uintptr_t>(data);
  uintptr_t mask = static_cast<uintptr_t>(page) - 1;
  uintptr_t begin = (address + mask) & ~mask;
  uintptr_t end = (address + size) & ~mask;
  if (end > begin)
    (void)madvise(reinterpret_cast<void *>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)data;
  (void)size;
#endif
}

/// Reads the f32 values of a weight's pieces in order (a piece without data
/// reads as zeros), releasing each piece's pages once it is read (as the
/// untransposed writes do), so that writing a weight never holds all of
/// its mapped source.
class PieceReader {
public:
  explicit PieceReader(const std::vector<WeightPiece> &pieces)
      : pieces_(pieces) {}
  /// The next `count` values into `out`; false when the pieces end first.
  bool read(float *out, size_t count) {
    while (count) {
      if (piece_ == pieces_.size())
        return false;
      const WeightPiece &piece = pieces_[piece_];
      size_t left = piece.bytes / sizeof(float) - offset_;
      size_t n = std::min(left, count);
      if (piece.data)
        std::memcpy(out, static_cast<const float *>(piece.data) + offset_,
                    n * sizeof(float));
      else
        std::fill(out, out + n, 0.0f);
      out += n;
      count -= n;
      offset_ += n;
      if (offset_ * sizeof(float) == piece.bytes) {
        if (piece.data)
          releasePages(piece.data, piece.bytes);
        ++piece_;
        offset_ = 0;
      }
    }
    return true;
  }

private:
  const std::vector<WeightPiece> &pieces_;
  size_t piece_ = 0, offset_ = 0;
};

/// out[c * rows + r] = in[r * cols + c], in tiles that stay in cache.
void transposeMatrix(const float *in, int64_t rows, int64_t cols, float *out) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
          out[c * rows + r] = in[r * cols + c];
}

/// The checksums that a weight's bytes feed as they are written: its
/// section's and, for a paged expert weight, each expert's (its slice of
/// `expertBytes` bytes, checksum at experts[e * stride]).
struct Checksums {
  uint32_t section = 0;
  uint32_t *experts = nullptr;
  size_t stride = 0;
  uint64_t expertBytes = 0;
  /// Bytes of the current weight added so far.
  uint64_t at = 0;

  /// Starts a weight: split into experts when `expertCrcs` is not null.
  void beginWeight(uint32_t *expertCrcs, size_t crcStride, uint64_t bytes) {
    experts = expertCrcs;
    stride = crcStride;
    expertBytes = bytes;
    at = 0;
  }
  /// Bytes between weights: the section's alone.
  void addPadding(const void *data, size_t n) {
    section = detail::crc32(section, data, n);
  }
  void add(const void *data, size_t n) {
    section = detail::crc32(section, data, n);
    const auto *p = static_cast<const uint8_t *>(data);
    while (experts && expertBytes && n) {
      uint64_t e = at / expertBytes;
      size_t take = static_cast<size_t>(
          std::min<uint64_t>(n, (e + 1) * expertBytes - at));
      experts[e * stride] = detail::crc32(experts[e * stride], p, take);
      p += take;
      n -= take;
      at += take;
    }
  }
};

/// Appends the f32 values of `piece` converted to `Out` by
/// `convert(values, count, first, out)` (`first`: the index of values[0] in
/// the piece), through buffers of a few kilobytes, and adds them to `crc`.
template <typename Out, typename Convert>
absl::Status appendConverted(Sink &sink, const WeightPiece &piece,
                             uint64_t &position, Checksums &crc,
                             Convert convert) {
  constexpr size_t kChunk = 8192;
  float values[kChunk];
  Out converted[kChunk];
  const auto *bytes = static_cast<const uint8_t *>(piece.data);
  size_t count = piece.bytes / sizeof(float);
  for (size_t i = 0; i < count; i += kChunk) {
    size_t n = std::min(kChunk, count - i);
    // The source may be unaligned (a model's external data): copy it out.
    std::memcpy(values, bytes + i * sizeof(float), n * sizeof(float));
    convert(values, n, i, converted);
    MOERT_RETURN_IF_ERROR(sink.append(converted, n * sizeof(Out)));
    crc.add(converted, n * sizeof(Out));
    position += n * sizeof(Out);
  }
  return absl::OkStatus();
}

/// Appends the f32 values of `piece` narrowed to `dtype` (F16 or BF16).
absl::Status appendNarrowed(Sink &sink, DType dtype, const WeightPiece &piece,
                            uint64_t &position, Checksums &crc) {
  return appendConverted<uint16_t>(
      sink, piece, position, crc,
      [&](const float *values, size_t n, size_t, uint16_t *out) {
        detail::narrowFloats(dtype, values, static_cast<int64_t>(n), out);
      });
}

/// The int8 value of f32 `value` in a channel of scale `scale`: rounded to
/// nearest even and clamped to [-127, 127] (symmetric: -128 is never used);
/// 0 in an all-zero channel (scale 0).
int8_t quantizeValue(float value, float scale) {
  if (scale == 0)
    return 0;
  float q = std::nearbyint(value / scale);
  return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
}

/// Appends the f32 values of `piece`, elements [first, ...) of an int8
/// weight, quantized by their channels' scales.
absl::Status appendQuantized(Sink &sink, const Quantization &quantization,
                             const WeightPiece &piece, int64_t first,
                             uint64_t &position, Checksums &crc) {
  return appendConverted<int8_t>(
      sink, piece, position, crc,
      [&](const float *values, size_t n, size_t at, int8_t *out) {
        for (size_t j = 0; j < n; ++j)
          out[j] = quantizeValue(values[j],
                                 quantization.scales[quantization.channelOf(
                                     first + static_cast<int64_t>(at + j))]);
      });
}

} // namespace

absl::Status PlanWriter::Impl::emit(Sink &sink) {
  MOERT_RETURN_IF_ERROR(firstError);
  for (size_t d = 0; d < builders.size(); ++d) {
    const ScheduleBuilder &b = *builders[d];
    scheduleTables[d]->arena_size = b.arenaSizeSet_ ? b.arenaSize_ : b.autoEnd_;
  }
  MOERT_RETURN_IF_ERROR(assignTiers());
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(fb::Program::Pack(fbb, &program), fb::ProgramIdentifier());
  uint8_t *programBytes = fbb.GetBufferPointer();
  bool tiered = false;
  for (const auto &perSchedule : tierCrcs)
    tiered |= !perSchedule.empty();
  for (const WeightSection &section : sections)
    tiered |= section.paged;
  bool attention = false, genaiSteps = false, keptNormalize = false,
       blockQuant = false, int8Activations = false, vision = false,
       linear = false, gridSample = false, wideningGather = false,
       statePrefill = false;
  auto scanSteps = [&](const auto &schedules) {
    for (const auto &schedule : schedules)
      for (const auto &step : schedule->steps) {
        // A 1.9 reader would ignore the renormalisation over kept choices.
        if (const fb::RouterAttrsT *router = step->attrs.AsRouterAttrs())
          keptNormalize |= router->normalize_kept_epsilon != 0.0f;
        // An activation a 1.9 reader does not know.
        if (const fb::FfnAttrsT *ffn = step->attrs.AsFfnAttrs())
          keptNormalize |= ffn->activation == fb::Activation::ReluSquared;
        // Attention sinks or a softcap, or a step 1.8 runtimes lack.
        genaiSteps |= step->op == fb::OpKind::GatedDeltaRule;
        // Block-quantized weights, which a 1.10 reader lacks.
        if (const fb::FfnAttrsT *ffn = step->attrs.AsFfnAttrs())
          blockQuant |= ffn->block_quant != nullptr;
        blockQuant |= step->op == fb::OpKind::MatMulNBits;
        // Int8 activations, which a 1.11 reader would compute in f32.
        const fb::BlockQuantAttrsT *quant = step->attrs.AsBlockQuantAttrs();
        if (const fb::FfnAttrsT *ffn = step->attrs.AsFfnAttrs())
          quant = ffn->block_quant.get();
        int8Activations |= quant && quant->int8_activations;
        // A step 1.13 readers lack.
        vision |= step->op == fb::OpKind::Conv;
        // A step 1.17 readers lack.
        gridSample |= step->op == fb::OpKind::GridSample;
        // A step 1.22 readers lack.
        statePrefill |= step->op == fb::OpKind::CausalConv;
        // A step 1.15 readers lack, or a shared expert's int8 scales.
        linear |=
            step->op == fb::OpKind::Linear ||
            (step->op == fb::OpKind::SharedExpert && step->inputs.size() > 8);
        // A Gather of a narrowed table into f32, which a 1.17 reader
        // refuses.
        if (step->op == fb::OpKind::Gather && step->inputs.size() == 2 &&
            step->outputs.size() == 1) {
          auto dtypeOf = [&](int32_t id) {
            return id >= 0 && size_t(id) < schedule->tensors.size()
                       ? schedule->tensors[id]->dtype
                       : fb::DType::F32;
          };
          wideningGather |=
              dtypeOf(step->inputs[0]) != dtypeOf(step->outputs[0]);
        }
        if (step->op != fb::OpKind::Attention)
          continue;
        attention = true;
        // A sinks slot, even an omitted one, is past a 1.8 reader's arity.
        const fb::AttentionAttrsT *attrs = step->attrs.AsAttentionAttrs();
        genaiSteps |=
            step->inputs.size() > 4 || (attrs && attrs->softcap != 0.0f);
      }
  };
  scanSteps(program.schedules);
  if (program.generation)
    scanSteps(program.generation->prefill_schedules);
  if (program.multimodal)
    for (const auto &stage : program.multimodal->stages)
      if (stage->schedule)
        for (const auto &step : stage->schedule->steps) {
          vision |= step->op == fb::OpKind::Conv;
          gridSample |= step->op == fb::OpKind::GridSample;
        }

  // Layout: header, table, program, then each weight section page-aligned,
  // the paged ones last (the runtime maps the file up to the first).
  uint32_t sectionCount = 1 + static_cast<uint32_t>(sections.size());
  uint64_t tableEnd =
      kFileHeaderSize + uint64_t{sectionCount} * kSectionEntrySize;
  std::vector<detail::SectionEntry> entries(sectionCount);
  entries[0].kind = static_cast<uint32_t>(SectionKind::Program);
  entries[0].offset = detail::alignTo(tableEnd, kProgramSectionAlignment);
  entries[0].size = fbb.GetSize();
  uint64_t end = entries[0].offset + entries[0].size;
  std::vector<size_t> order;
  for (int paged = 0; paged < 2; ++paged)
    for (size_t k = 0; k < sections.size(); ++k)
      if (sections[k].paged == (paged == 1))
        order.push_back(k);
  for (size_t k : order) {
    detail::SectionEntry &entry = entries[k + 1];
    entry.kind = static_cast<uint32_t>(SectionKind::Weights);
    entry.flags = sections[k].paged ? kSectionFlagPaged : 0;
    entry.offset = detail::alignTo(end, kWeightSectionAlignment);
    entry.size = sections[k].size;
    end = entry.offset + entry.size;
  }

  // Header and table are written last, once the weight checksums are known;
  // so are the experts' checksums inside the program.
  uint64_t position = 0;
  MOERT_RETURN_IF_ERROR(sink.pad(position, entries[0].offset));
  MOERT_RETURN_IF_ERROR(sink.append(programBytes, fbb.GetSize()));
  position += fbb.GetSize();
  for (size_t k : order) {
    detail::SectionEntry &entry = entries[k + 1];
    MOERT_RETURN_IF_ERROR(sink.pad(position, entry.offset));
    Checksums crc;
    for (const WeightSection::Placement &weight : sections[k].weights) {
      uint64_t before = position;
      MOERT_RETURN_IF_ERROR(sink.pad(position, entry.offset + weight.offset));
      static const uint8_t zeros[kTensorAlignment] = {};
      crc.addPadding(zeros, position - before);
      crc.beginWeight(nullptr, 0, 0);
      if (static_cast<size_t>(weight.device) < pagedWeights.size())
        if (auto it = pagedWeights[weight.device].find(weight.tensor);
            it != pagedWeights[weight.device].end())
          crc.beginWeight(tierCrcs[weight.device][it->second.layer].data() +
                              it->second.input,
                          it->second.inputs, it->second.expertBytes);
      const WeightSource &source = sources[weight.device].at(weight.tensor);
      if (source.pieces.empty()) {
        MOERT_RETURN_IF_ERROR(sink.append(source.copy.data(), source.bytes));
        crc.add(source.copy.data(), source.bytes);
        position += source.bytes;
      }
      // Appends `piece`, elements [first, ...) of the weight as written,
      // converted to its stored type.
      auto appendPiece = [&](const WeightPiece &piece,
                             int64_t first) -> absl::Status {
        if (source.narrowTo == DType::I8)
          return appendQuantized(sink, source.quantization, piece, first,
                                 position, crc);
        if (source.narrowTo != DType::F32)
          return appendNarrowed(sink, source.narrowTo, piece, position, crc);
        MOERT_RETURN_IF_ERROR(sink.append(piece.data, piece.bytes));
        crc.add(piece.data, piece.bytes);
        position += piece.bytes;
        return absl::OkStatus();
      };
      if (source.transposeRows) {
        // One expert's matrix at a time, transposed.
        int64_t rows = source.transposeRows, cols = source.transposeCols;
        int64_t per = rows * cols;
        int64_t total = 0;
        for (const WeightPiece &piece : source.pieces)
          total += piece.bytes / sizeof(float);
        std::vector<float> matrix(per), transposed(per);
        PieceReader reader(source.pieces);
        for (int64_t first = 0; per && first < total; first += per) {
          if (!reader.read(matrix.data(), per))
            return absl::InternalError("a transposed weight's pieces end "
                                       "inside an expert's matrix");
          transposeMatrix(matrix.data(), rows, cols, transposed.data());
          MOERT_RETURN_IF_ERROR(appendPiece(
              {transposed.data(), static_cast<size_t>(per) * sizeof(float)},
              first));
        }
        continue;
      }
      int64_t element = 0; // Of the weight, at the piece's start.
      for (const WeightPiece &piece : source.pieces) {
        // A piece without data is zeros (an expert absent from the model).
        uint64_t before = position;
        int64_t pieceElements = piece.bytes / sizeof(float);
        element += pieceElements;
        if (!piece.data) {
          uint64_t zeroBytes = source.narrowTo == DType::F32
                                   ? piece.bytes
                                   : pieceElements * dtypeSize(source.narrowTo);
          MOERT_RETURN_IF_ERROR(sink.pad(position, position + zeroBytes));
          for (uint64_t at = before; at < position; at += kTensorAlignment)
            crc.add(zeros, std::min<uint64_t>(kTensorAlignment, position - at));
          continue;
        }
        MOERT_RETURN_IF_ERROR(appendPiece(piece, element - pieceElements));
        releasePages(piece.data, piece.bytes);
      }
    }
    entry.checksum = crc.section;
  }

  // The experts' checksums into their vectors of the program, which is then
  // checksummed as patched.
  if (tiered) {
    const fb::Program *written = fb::GetProgram(programBytes);
    for (size_t b = 0; b < tierCrcs.size(); ++b)
      for (size_t l = 0; l < tierCrcs[b].size(); ++l) {
        const auto *vector =
            written->schedules()->Get(b)->tiers()->layers()->Get(l)->crc();
        uint64_t at =
            reinterpret_cast<const uint8_t *>(vector->Data()) - programBytes;
        const std::vector<uint32_t> &values = tierCrcs[b][l];
        std::memcpy(programBytes + at, values.data(),
                    values.size() * sizeof(uint32_t));
        MOERT_RETURN_IF_ERROR(sink.patch(entries[0].offset + at, values.data(),
                                         values.size() * sizeof(uint32_t)));
      }
  }
  entries[0].checksum = detail::crc32(0, programBytes, fbb.GetSize());

  std::vector<uint8_t> table(tableEnd - kFileHeaderSize);
  for (uint32_t i = 0; i < sectionCount; ++i)
    detail::encodeSection(entries[i], table.data() + i * kSectionEntrySize);
  detail::FileHeader header{};
  std::memcpy(header.magic, kPlanMagic, sizeof(kPlanMagic));
  header.versionMajor = kFormatVersionMajor;
  bool multiStepTiers = false, tierPrefetch = false;
  for (const auto &schedule : program.schedules)
    if (schedule->tiers) {
      tierPrefetch |= schedule->tiers->prefetch != fb::TierPrefetch::None;
      for (const auto &layer : schedule->tiers->layers)
        multiStepTiers |= !layer->more_steps.empty();
    }
  bool genai = genaiSteps ||
               (program.generation &&
                (program.generation->position_ids.empty() ||
                 !program.generation->attention_mask.empty() ||
                 !program.generation->eos_ids.empty() ||
                 std::any_of(program.generation->cache.begin(),
                             program.generation->cache.end(),
                             [](const auto &pair) { return pair->state; })));
  bool batchRows =
      program.generation && (program.generation->batchable ||
                             !program.generation->batch_blocker.empty());
  bool batchWindows =
      program.generation && !program.generation->batch_windows.empty();
  bool indexPositions =
      program.multimodal && (program.multimodal->position_rows.empty() ||
                             program.multimodal->image_grid.empty());
  bool gridRule = program.multimodal && (program.multimodal->grid_rule ||
                                         program.multimodal->image_processor);
  // State pairs beside a prefill schedule, which 1.22 readers refuse.
  statePrefill |= program.generation &&
                  !program.generation->prefill_schedules.empty() &&
                  std::any_of(program.generation->cache.begin(),
                              program.generation->cache.end(),
                              [](const auto &pair) { return pair->state; });
  bool imageResize =
      program.multimodal && program.multimodal->image_processor &&
      program.multimodal->image_processor->resize != fb::ImageResize::Qwen2VL;
  header.versionMinor =
      imageResize          ? detail::kFormatVersionMinorImageResize
      : statePrefill       ? detail::kFormatVersionMinorStatePrefill
      : gridRule           ? detail::kFormatVersionMinorGridRule
      : indexPositions     ? detail::kFormatVersionMinorIndexPositions
      : wideningGather     ? detail::kFormatVersionMinorWideningGather
      : gridSample         ? detail::kFormatVersionMinorGridSample
      : program.multimodal ? detail::kFormatVersionMinorMultimodal
      : linear             ? detail::kFormatVersionMinorLinear
      : batchWindows       ? detail::kFormatVersionMinorBatchWindows
      : vision             ? detail::kFormatVersionMinorVision
      : batchRows          ? detail::kFormatVersionMinorBatchRows
      : int8Activations    ? detail::kFormatVersionMinorInt8Activations
      : blockQuant         ? detail::kFormatVersionMinorBlockQuant
      : keptNormalize      ? detail::kFormatVersionMinorKeptNormalize
      : genai              ? detail::kFormatVersionMinorGenai
      : tierPrefetch       ? detail::kFormatVersionMinorTierPrefetch
      : multiStepTiers     ? detail::kFormatVersionMinorMicroBatchTiers
      : attention          ? detail::kFormatVersionMinorAttention
      : tiered             ? detail::kFormatVersionMinorTiers
      : program.generation ? detail::kFormatVersionMinorGeneration
                           : kFormatVersionMinorBase;
  header.headerSize = kFileHeaderSize;
  header.fileSize = position;
  header.sectionCount = sectionCount;
  header.sectionTableOffset = kFileHeaderSize;
  header.backend = static_cast<uint32_t>(target.backend);
  header.deviceCount = target.deviceCount;
  header.cudaArch = target.cudaArch;
  uint8_t bytes[kFileHeaderSize];
  detail::encodeHeader(header, bytes);
  header.checksum = detail::headerChecksum(bytes, table.data(), table.size());
  detail::encodeHeader(header, bytes);
  MOERT_RETURN_IF_ERROR(sink.patch(0, bytes, sizeof(bytes)));
  return sink.patch(kFileHeaderSize, table.data(), table.size());
}

absl::Status PlanWriter::write(const std::string &path) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  // A plan that could not be written whole is removed, unless the path is
  // no regular file (/dev/full, a FIFO): nothing half-written stays behind.
  struct stat st;
  bool regular = ::fstat(::fileno(file), &st) == 0 && S_ISREG(st.st_mode);
  FileSink sink(path, file);
  absl::Status status = impl_->emit(sink);
  if (status.ok())
    status = sink.close();
  if (!status.ok() && regular)
    ::unlink(path.c_str());
  return status;
}

absl::StatusOr<std::vector<uint8_t>> PlanWriter::serialize() {
  VectorSink sink;
  MOERT_RETURN_IF_ERROR(impl_->emit(sink));
  return std::move(sink.bytes);
}

} // namespace moert
