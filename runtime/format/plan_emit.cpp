//===- plan_emit.cpp - Writing a plan file --------------------------------===//
//
// PlanWriter::write and serialize: the header, the section table, the
// program FlatBuffer and the 4096-aligned weight sections, streamed to a
// file or a buffer with every checksum computed on the way. Weights are
// read from their sources while a thread reads the next ones ahead
// (plan_stream.h), narrowed, quantized or transposed straight into the
// sink's buffers as they are written, and their mapped pages released.
//
//===----------------------------------------------------------------------===//

#include "format/plan_writer_impl.h"

#include "format/float16.h"
#include "format/plan_file.h"
#include "format/plan_stream.h"
#include "format/tier_assignment.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#if defined(__linux__)
#include <unistd.h>
#endif

namespace moert {

using detail::Sink;

namespace {

/// Reads the f32 values of a weight's pieces in order (a piece without data
/// reads as zeros), telling `readAhead` what it has read, and releases each
/// piece's pages once its values have been used (at the next read, or when
/// the reader goes), so that writing a weight never holds all of its mapped
/// source.
class PieceReader {
public:
  PieceReader(const std::vector<WeightPiece> &pieces,
              detail::SourceReadAhead &readAhead)
      : pieces_(pieces), readAhead_(readAhead) {}
  ~PieceReader() { releaseUsed(); }
  /// The next `count` values: where they are when one piece holds them
  /// aligned, else copied into `scratch`; null when the pieces end first.
  /// Valid until the next call.
  const float *next(size_t count, float *scratch) {
    releaseUsed();
    if (piece_ < pieces_.size()) {
      const WeightPiece &piece = pieces_[piece_];
      const auto *values = static_cast<const float *>(piece.data);
      if (values && piece.bytes / sizeof(float) - offset_ >= count &&
          reinterpret_cast<uintptr_t>(values) % alignof(float) == 0) {
        const float *at = values + offset_;
        skip(count);
        return at;
      }
    }
    return read(scratch, count) ? scratch : nullptr;
  }

private:
  /// Moves past `count` values of the current piece (which has them).
  void skip(size_t count) {
    offset_ += count;
    readAhead_.advance(count * sizeof(float));
    if (offset_ * sizeof(float) == pieces_[piece_].bytes) {
      ++piece_;
      offset_ = 0;
    }
  }
  /// Releases the pieces before the current one.
  void releaseUsed() {
    for (; released_ < piece_; ++released_)
      if (pieces_[released_].data)
        detail::releasePages(pieces_[released_].data, pieces_[released_].bytes);
  }
  /// The next `count` values into `out`; false when the pieces end first.
  bool read(float *out, size_t count) {
    while (count) {
      if (piece_ == pieces_.size())
        return false;
      const WeightPiece &piece = pieces_[piece_];
      size_t n = std::min(piece.bytes / sizeof(float) - offset_, count);
      if (piece.data)
        std::memcpy(out,
                    static_cast<const uint8_t *>(piece.data) +
                        offset_ * sizeof(float),
                    n * sizeof(float));
      else
        std::fill(out, out + n, 0.0f);
      out += n;
      count -= n;
      skip(n);
    }
    return true;
  }

  const std::vector<WeightPiece> &pieces_;
  detail::SourceReadAhead &readAhead_;
  size_t piece_ = 0, offset_ = 0, released_ = 0;
};

/// out[c * rows + r] = in[r * cols + c] for the 8 x 8 block at `in`. Each
/// row of `out` gets its 8 values by two adjacent stores.
void transposeBlock(const float *in, int64_t cols, float *out, int64_t rows) {
#if defined(__SSE2__)
  // Two 4 x 4 transposes through registers per 4 columns (SSE is part of
  // x86-64).
  for (int64_t c = 0; c < 8; c += 4) {
    const float *from = in + c;
    __m128 top0 = _mm_loadu_ps(from), top1 = _mm_loadu_ps(from + cols),
           top2 = _mm_loadu_ps(from + 2 * cols),
           top3 = _mm_loadu_ps(from + 3 * cols);
    __m128 low0 = _mm_loadu_ps(from + 4 * cols),
           low1 = _mm_loadu_ps(from + 5 * cols),
           low2 = _mm_loadu_ps(from + 6 * cols),
           low3 = _mm_loadu_ps(from + 7 * cols);
    _MM_TRANSPOSE4_PS(top0, top1, top2, top3);
    _MM_TRANSPOSE4_PS(low0, low1, low2, low3);
    float *to = out + c * rows;
    _mm_storeu_ps(to, top0);
    _mm_storeu_ps(to + 4, low0);
    _mm_storeu_ps(to + rows, top1);
    _mm_storeu_ps(to + rows + 4, low1);
    _mm_storeu_ps(to + 2 * rows, top2);
    _mm_storeu_ps(to + 2 * rows + 4, low2);
    _mm_storeu_ps(to + 3 * rows, top3);
    _mm_storeu_ps(to + 3 * rows + 4, low3);
  }
#else
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 8; ++c)
      out[c * rows + r] = in[r * cols + c];
#endif
}

/// out[c * rows + r] = in[r * cols + c]: 8 x 8 blocks through registers,
/// 16 columns by 64 rows of `in` at a time, so that the 16 rows of `out`
/// being written and the rows of `in` being read stay in the cache whatever
/// the shape (bench/README.md, "The rewrite validator's plans").
void transposeMatrix(const float *in, int64_t rows, int64_t cols, float *out) {
  constexpr int64_t kBlock = 8, kStripCols = 16, kStripRows = 64;
  int64_t fullRows = rows / kBlock * kBlock, fullCols = cols / kBlock * kBlock;
  for (int64_t strip = 0; strip < fullCols; strip += kStripCols)
    for (int64_t band = 0; band < fullRows; band += kStripRows)
      for (int64_t r0 = band; r0 < std::min(fullRows, band + kStripRows);
           r0 += kBlock)
        for (int64_t c0 = strip; c0 < std::min(fullCols, strip + kStripCols);
             c0 += kBlock)
          transposeBlock(in + r0 * cols + c0, cols, out + c0 * rows + r0, rows);
  // The edges: the columns past the last block, and the rows below it.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < fullRows ? fullCols : 0; c < cols; ++c)
      out[c * rows + r] = in[r * cols + c];
}

/// The checksums that a weight's bytes feed as they are written: its
/// section's and, for a paged expert weight, each expert's (its slice of
/// `expertBytes` bytes, checksum at experts[e * stride]). A paged weight's
/// bytes are checksummed once, per expert, and each expert's checksum is
/// combined into the section's.
struct Checksums {
  uint32_t section = 0;
  uint32_t *experts = nullptr;
  size_t stride = 0;
  uint64_t expertBytes = 0;
  /// Bytes of the current weight added so far.
  uint64_t at = 0;

  /// Starts a weight: split into experts when `expertCrcs` is not null.
  void beginWeight(uint32_t *expertCrcs, size_t crcStride, uint64_t bytes) {
    endWeight();
    experts = expertCrcs;
    stride = crcStride;
    expertBytes = bytes;
    at = 0;
  }
  /// Bytes between weights: the section's alone.
  void addPadding(const void *data, size_t n) {
    endWeight();
    section = detail::crc32(section, data, n);
  }
  void add(const void *data, size_t n) {
    if (!experts || !expertBytes) {
      section = detail::crc32(section, data, n);
      return;
    }
    const auto *p = static_cast<const uint8_t *>(data);
    while (n) {
      uint64_t e = at / expertBytes;
      size_t take = static_cast<size_t>(
          std::min<uint64_t>(n, (e + 1) * expertBytes - at));
      experts[e * stride] = detail::crc32(experts[e * stride], p, take);
      p += take;
      n -= take;
      at += take;
      if (at % expertBytes == 0)
        section =
            detail::crc32Combine(section, experts[e * stride], expertBytes);
    }
  }
  /// Combines a paged weight's last expert if its slice was cut short.
  void endWeight() {
    if (experts && expertBytes && at % expertBytes)
      section = detail::crc32Combine(
          section, experts[at / expertBytes * stride], at % expertBytes);
    experts = nullptr;
    expertBytes = at = 0;
  }
};

/// Appends the f32 values of `piece` converted to `Out` by
/// `convert(values, count, first, out)` (`first`: the index of values[0] in
/// the piece) straight into the sink's room, and adds them to `crc`. With
/// `readAhead`, the piece is a weight's source, whose reading it is told.
template <typename Out, typename Convert>
absl::Status appendConverted(Sink &sink, const WeightPiece &piece,
                             uint64_t &position, Checksums &crc,
                             detail::SourceReadAhead *readAhead,
                             Convert convert) {
  constexpr size_t kChunk = 8192;
  float values[kChunk];
  const auto *bytes = static_cast<const uint8_t *>(piece.data);
  bool aligned = reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0;
  size_t count = piece.bytes / sizeof(float);
  for (size_t i = 0; i < count;) {
    MOERT_ASSIGN_OR_RETURN(auto room, sink.room());
    size_t n = std::min({kChunk, count - i, room.second / sizeof(Out)});
    const float *in = reinterpret_cast<const float *>(bytes) + i;
    if (!aligned) {
      // The source may be unaligned (a model's external data): copy it out.
      std::memcpy(values, bytes + i * sizeof(float), n * sizeof(float));
      in = values;
    }
    convert(in, n, i, reinterpret_cast<Out *>(room.first));
    crc.add(room.first, n * sizeof(Out));
    MOERT_RETURN_IF_ERROR(sink.commit(n * sizeof(Out)));
    position += n * sizeof(Out);
    if (readAhead)
      readAhead->advance(n * sizeof(float));
    i += n;
  }
  return absl::OkStatus();
}

/// Appends `piece` as it is, as appendConverted does.
absl::Status appendRaw(Sink &sink, const WeightPiece &piece, uint64_t &position,
                       Checksums &crc, detail::SourceReadAhead *readAhead) {
  constexpr size_t kChunk = size_t{256} << 10;
  const auto *bytes = static_cast<const uint8_t *>(piece.data);
  for (size_t i = 0; i < piece.bytes;) {
    MOERT_ASSIGN_OR_RETURN(auto room, sink.room());
    size_t n = std::min({kChunk, piece.bytes - i, room.second});
    std::memcpy(room.first, bytes + i, n);
    crc.add(room.first, n);
    MOERT_RETURN_IF_ERROR(sink.commit(n));
    position += n;
    if (readAhead)
      readAhead->advance(n);
    i += n;
  }
  return absl::OkStatus();
}

/// Appends the f32 values of `piece` narrowed to `dtype` (F16 or BF16).
absl::Status appendNarrowed(Sink &sink, DType dtype, const WeightPiece &piece,
                            uint64_t &position, Checksums &crc,
                            detail::SourceReadAhead *readAhead) {
  return appendConverted<uint16_t>(
      sink, piece, position, crc, readAhead,
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
                             uint64_t &position, Checksums &crc,
                             detail::SourceReadAhead *readAhead) {
  return appendConverted<int8_t>(
      sink, piece, position, crc, readAhead,
      [&](const float *values, size_t n, size_t at, int8_t *out) {
        Quantization::Walk walk(quantization, first + static_cast<int64_t>(at));
        for (size_t j = 0; j < n; ++j, walk.next())
          out[j] =
              quantizeValue(values[j], quantization.scales[walk.channel()]);
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
  // The weights' sources, in the order they are read: read ahead of the
  // conversions and writes by a thread of their own.
  std::vector<WeightPiece> sourceRanges;
  for (size_t k : order)
    for (const WeightSection::Placement &weight : sections[k].weights) {
      const WeightSource &source = sources[weight.device].at(weight.tensor);
      sourceRanges.insert(sourceRanges.end(), source.pieces.begin(),
                          source.pieces.end());
    }
  detail::SourceReadAhead readAhead(std::move(sourceRanges));
  // An expert's matrix as read (when its pieces split it) and transposed.
  std::vector<float> matrix, transposed;
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
      // converted to its stored type; `ahead`: the read-ahead when the
      // piece is one of the weight's sources.
      auto appendPiece = [&](const WeightPiece &piece, int64_t first,
                             detail::SourceReadAhead *ahead) -> absl::Status {
        if (source.narrowTo == DType::I8)
          return appendQuantized(sink, source.quantization, piece, first,
                                 position, crc, ahead);
        if (source.narrowTo != DType::F32)
          return appendNarrowed(sink, source.narrowTo, piece, position, crc,
                                ahead);
        return appendRaw(sink, piece, position, crc, ahead);
      };
      if (source.transposeRows) {
        // One expert's matrix at a time, transposed.
        int64_t rows = source.transposeRows, cols = source.transposeCols;
        int64_t per = rows * cols;
        int64_t total = 0;
        for (const WeightPiece &piece : source.pieces)
          total += piece.bytes / sizeof(float);
        transposed.resize(per);
        PieceReader reader(source.pieces, readAhead);
        for (int64_t first = 0; per && first < total; first += per) {
          if (matrix.size() < static_cast<size_t>(per))
            matrix.resize(per);
          const float *values = reader.next(per, matrix.data());
          if (!values)
            return absl::InternalError("a transposed weight's pieces end "
                                       "inside an expert's matrix");
          transposeMatrix(values, rows, cols, transposed.data());
          MOERT_RETURN_IF_ERROR(appendPiece(
              {transposed.data(), static_cast<size_t>(per) * sizeof(float)},
              first, nullptr));
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
          readAhead.advance(piece.bytes);
          continue;
        }
        MOERT_RETURN_IF_ERROR(
            appendPiece(piece, element - pieceElements, &readAhead));
        detail::releasePages(piece.data, piece.bytes);
      }
    }
    crc.endWeight();
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
  bool imageTiles = program.multimodal && program.multimodal->image_processor &&
                    program.multimodal->image_processor->resize ==
                        fb::ImageResize::Llama4Tiles;
  // A multimodal plan whose Prefill stage starts state pairs, or whose
  // Embed (or Head) stage reads a Vision stage's output, which 1.25
  // readers refuse or run wrong.
  bool genaiStages = false;
  if (program.multimodal && program.generation) {
    const auto &stages = program.multimodal->stages;
    genaiStages = std::any_of(program.generation->cache.begin(),
                              program.generation->cache.end(),
                              [](const auto &pair) { return pair->state; });
    for (const auto &stage : stages)
      for (const auto &feed : stage->feeds)
        genaiStages |= stage->role != fb::StageRole::Vision &&
                       stage->role != fb::StageRole::Prefill &&
                       feed->kind == fb::FeedKind::StageOutput &&
                       feed->stage >= 0 &&
                       feed->stage < static_cast<int>(stages.size()) &&
                       stages[feed->stage]->role == fb::StageRole::Vision;
  }
  // A multimodal plan on several devices, or paging tiered experts, which
  // 1.26 readers refuse.
  bool multimodalExperts = program.multimodal && tiered;
  if (program.multimodal)
    for (const auto &stage : program.multimodal->stages)
      multimodalExperts |= !stage->other_device_schedules.empty();
  header.versionMinor =
      multimodalExperts    ? detail::kFormatVersionMinorMultimodalExperts
      : genaiStages        ? detail::kFormatVersionMinorGenaiStages
      : imageTiles         ? detail::kFormatVersionMinorImageTiles
      : imageResize        ? detail::kFormatVersionMinorImageResize
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

/// Plans with at least this many bytes of weights are written with direct
/// I/O where the file system allows.
constexpr uint64_t kDirectWriteBytes = uint64_t{256} << 20;

absl::Status PlanWriter::write(const std::string &path) {
  // A large plan is written around the page cache: it would hold the
  // plan's bytes twice over (the copy, then the write-back), and a plan
  // larger than memory would evict everything else on its way to the disk.
  uint64_t weightBytes = 0;
  for (const WeightSection &section : impl_->sections)
    weightBytes += section.size;
  bool direct = weightBytes >= kDirectWriteBytes;
  bool inPlace = impl_->overwriteInPlace;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<detail::FileSink> sink,
                         detail::FileSink::create(path, direct, !inPlace));
  absl::Status status = impl_->emit(*sink);
  if (status.ok())
    status = sink->close();
  // A plan that could not be written whole is removed, unless the path is
  // no regular file (/dev/full, a FIFO) or a scratch file written in place:
  // nothing half-written stays behind.
  if (!status.ok() && sink->regular() && !inPlace)
    ::unlink(path.c_str());
  return status;
}

void PlanWriter::setOverwriteInPlace(bool inPlace) {
  impl_->overwriteInPlace = inPlace;
}

absl::StatusOr<std::vector<uint8_t>> PlanWriter::serialize() {
  detail::VectorSink sink;
  MOERT_RETURN_IF_ERROR(impl_->emit(sink));
  return std::move(sink.bytes);
}

} // namespace moert
