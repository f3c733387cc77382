//===- plan_writer.cpp - Building moec plan files -------------------------===//

#include "format/plan_writer.h"

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

namespace {

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

/// How an int8 weight [E, rows, cols] maps its elements to the scales of
/// its output channels: the rows (channelDim 1) or the columns (2) of each
/// expert's matrix.
struct Quantization {
  int64_t rows = 0, cols = 0;
  int channelDim = 1;
  /// [E, channels], computed when the weight is added.
  std::vector<float> scales;

  int64_t channels() const { return channelDim == 1 ? rows : cols; }
  /// The scale index of flat element `i`.
  int64_t channelOf(int64_t i) const {
    int64_t expert = i / (rows * cols), within = i % (rows * cols);
    return expert * channels() +
           (channelDim == 1 ? within / cols : within % cols);
  }
};

/// Where a weight's bytes come from until the plan is written: `copy`, or
/// the referenced `pieces` in order; f32 pieces narrowed to `narrowTo` (F16
/// or BF16, or I8 quantized by `quantization`) when it is not F32.
struct WeightSource {
  std::vector<WeightPiece> pieces;
  std::vector<uint8_t> copy;
  size_t bytes = 0;
  DType narrowTo = DType::F32;
  Quantization quantization;
  /// The pieces hold f32 [E, transposeRows, transposeCols] matrices that
  /// are written transposed, [E, transposeCols, transposeRows]
  /// (transposeExpertMatrices); 0: as they are.
  int64_t transposeRows = 0, transposeCols = 0;
};

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

struct WeightSection {
  /// Read per expert by the runtime, never mapped (kSectionFlagPaged).
  bool paged = false;
  struct Placement {
    int device;
    int32_t tensor;
    uint64_t offset;
  };
  /// Each weight and where its bytes go, in placement order.
  std::vector<Placement> weights;
  uint64_t size = 0;
};

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

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  return n;
}

} // namespace

struct PlanWriter::Impl {
  TargetRequirements target;
  fb::ProgramT program;
  /// The device schedules first, then the prefill schedules of a generation
  /// plan (builder `devices + d` is device d's prefill), with their tables.
  std::vector<std::unique_ptr<ScheduleBuilder>> builders;
  std::vector<fb::ScheduleT *> scheduleTables;
  uint32_t devices = 1;
  std::vector<WeightSection> sections;
  /// Per schedule, per weight tensor id: its bytes.
  std::vector<std::map<int32_t, WeightSource>> sources;
  int defaultSection = -1;
  /// Per schedule: the tiers setExpertTiers asked for (none: budget 0 and
  /// no layers).
  struct TierRequest {
    bool set = false;
    uint64_t budget = 0;
    std::vector<ScheduleBuilder::TierLayer> layers;
    fb::TierPrefetch prefetch = fb::TierPrefetch::None;
  };
  std::vector<TierRequest> tierRequests;
  /// The first misuse of the builder API, reported by write/serialize.
  absl::Status firstError;

  /// A paged expert weight of a tiered layer: where its experts' checksums
  /// go (crcs of tiered layer `layer` of its schedule, paged input `input`
  /// of `inputs`) and its bytes per expert.
  struct PagedWeight {
    size_t layer;
    size_t input, inputs;
    uint64_t expertBytes;
  };
  /// Per schedule: the tiered layers' checksums (expert-major) and the
  /// paged weights by tensor id.
  std::vector<std::vector<std::vector<uint32_t>>> tierCrcs;
  std::vector<std::map<int32_t, PagedWeight>> pagedWeights;

  /// Fills `Schedule.tiers` of every schedule setExpertTiers was called on.
  absl::Status assignTiers();

  void fail(absl::Status status) {
    if (firstError.ok())
      firstError = std::move(status);
  }
  absl::Status emit(Sink &sink);
};

PlanWriter::PlanWriter(TargetRequirements target, std::string producer)
    : impl_(std::make_unique<Impl>()) {
  impl_->target = target;
  impl_->program.producer = std::move(producer);
  uint32_t devices = target.deviceCount ? target.deviceCount : 1;
  impl_->devices = devices;
  impl_->sources.resize(devices);
  for (uint32_t d = 0; d < devices; ++d) {
    impl_->program.schedules.push_back(std::make_unique<fb::ScheduleT>());
    impl_->scheduleTables.push_back(impl_->program.schedules.back().get());
    impl_->builders.push_back(std::unique_ptr<ScheduleBuilder>(
        new ScheduleBuilder(*this, *impl_->program.schedules.back())));
  }
  if (target.deviceCount == 0)
    impl_->fail(absl::InvalidArgumentError("device count must be at least 1"));
}

PlanWriter::~PlanWriter() = default;

int PlanWriter::addSymbol(std::string name, int64_t min, int64_t max) {
  if (min < 0 || min > max)
    impl_->fail(absl::InvalidArgumentError(absl::StrCat(
        "symbol '", name, "' has an invalid range [", min, ", ", max, "]")));
  auto symbol = std::make_unique<fb::SymbolT>();
  symbol->name = std::move(name);
  symbol->min = min;
  symbol->max = max;
  impl_->program.symbols.push_back(std::move(symbol));
  return static_cast<int>(impl_->program.symbols.size()) - 1;
}

int PlanWriter::addWeightSection(bool paged) {
  impl_->sections.emplace_back();
  impl_->sections.back().paged = paged;
  return static_cast<int>(impl_->sections.size()) - 1;
}

ScheduleBuilder &PlanWriter::schedule(int device) {
  if (device < 0 || static_cast<size_t>(device) >= impl_->builders.size()) {
    impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("schedule ", device, " does not exist")));
    device = 0;
  }
  return *impl_->builders[device];
}

int PlanWriter::numSchedules() const {
  return static_cast<int>(impl_->devices);
}

fb::GenerationT &PlanWriter::generation() {
  if (!impl_->program.generation)
    impl_->program.generation = std::make_unique<fb::GenerationT>();
  return *impl_->program.generation;
}

void PlanWriter::setProvenance(const ProvenanceDesc &provenance) {
  auto table = std::make_unique<fb::ProvenanceT>();
  table->compiler_version = provenance.compilerVersion;
  table->git_commit = provenance.gitCommit;
  table->model_file = provenance.modelFile;
  table->model_sha256 = provenance.modelSha256;
  table->prefill_file = provenance.prefillFile;
  table->prefill_sha256 = provenance.prefillSha256;
  for (const auto &[name, value] : provenance.flags) {
    auto flag = std::make_unique<fb::CompileFlagT>();
    flag->name = name;
    flag->value = value;
    table->flags.push_back(std::move(flag));
  }
  impl_->program.provenance = std::move(table);
}

ScheduleBuilder &PlanWriter::prefillSchedule(int device) {
  if (device < 0 || static_cast<uint32_t>(device) >= impl_->devices) {
    impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("prefill schedule ", device, " does not exist")));
    device = 0;
  }
  fb::GenerationT &gen = generation();
  // Created in device order on first use; every device gets one.
  while (gen.prefill_schedules.size() <= static_cast<size_t>(device)) {
    gen.prefill_schedules.push_back(std::make_unique<fb::ScheduleT>());
    impl_->scheduleTables.push_back(gen.prefill_schedules.back().get());
    impl_->sources.emplace_back();
    impl_->builders.push_back(std::unique_ptr<ScheduleBuilder>(
        new ScheduleBuilder(*this, *gen.prefill_schedules.back())));
  }
  return *impl_->builders[impl_->devices + device];
}

int ScheduleBuilder::index() const {
  const std::vector<std::unique_ptr<ScheduleBuilder>> &all =
      writer_.impl_->builders;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].get() == this)
      return static_cast<int>(i);
  return -1;
}

int32_t ScheduleBuilder::addTensor(std::string name, DType dtype,
                                   std::vector<PlanDim> dims, uint64_t offset,
                                   uint64_t size) {
  PlanWriter::Impl &w = *writer_.impl_;
  auto tensor = std::make_unique<fb::TensorT>();
  int64_t elements = 1;
  bool overflow = false;
  for (const PlanDim &dim : dims) {
    fb::Dim out;
    switch (dim.kind) {
    case DimDesc::Kind::Static:
      out = fb::Dim(dim.bound, -1, fb::DimKind::Static);
      break;
    case DimDesc::Kind::Dynamic:
      out = fb::Dim(dim.bound, -1, fb::DimKind::Dynamic);
      break;
    case DimDesc::Kind::Symbolic: {
      if (dim.symbolIndex < 0 ||
          static_cast<size_t>(dim.symbolIndex) >= w.program.symbols.size()) {
        w.fail(absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "' names unknown symbol ", dim.symbolIndex)));
        break;
      }
      out = fb::Dim(w.program.symbols[dim.symbolIndex]->max, dim.symbolIndex,
                    fb::DimKind::Symbolic);
      break;
    }
    }
    overflow |= out.bound() < 0 ||
                __builtin_mul_overflow(elements, out.bound(), &elements);
    tensor->dims.push_back(out);
  }
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(static_cast<uint64_t>(elements),
                                     dtypeSize(dtype), &bytes);
  if (overflow)
    w.fail(absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has an invalid or huge shape")));
  if (size == kAuto)
    size = bytes;
  if (offset == kAuto) {
    offset = detail::alignTo(autoEnd_, kTensorAlignment);
    autoEnd_ = offset + size;
  } else {
    autoEnd_ = std::max(autoEnd_, offset + size);
  }
  tensor->name = std::move(name);
  tensor->dtype = static_cast<fb::DType>(dtype);
  tensor->storage = fb::Storage::Arena;
  tensor->offset = offset;
  tensor->size = size;
  schedule_.tensors.push_back(std::move(tensor));
  return static_cast<int32_t>(schedule_.tensors.size()) - 1;
}

int32_t ScheduleBuilder::addWeightImpl(std::string name, DType dtype,
                                       std::vector<int64_t> shape,
                                       const void *data, size_t bytes,
                                       int section, bool copy) {
  PlanWriter::Impl &w = *writer_.impl_;
  int64_t elements = elementCount(shape);
  if (elements < 0 || static_cast<uint64_t>(elements) * dtypeSize(dtype) !=
                          static_cast<uint64_t>(bytes))
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", name, "' has ", bytes, " bytes, which does not match its ",
        dtypeName(dtype), " shape")));
  if (section < 0) {
    if (w.defaultSection < 0)
      w.defaultSection = writer_.addWeightSection();
    section = w.defaultSection;
  }
  if (static_cast<size_t>(section) >= w.sections.size()) {
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", name, "' names unknown weight section ", section)));
    section = 0;
    if (w.sections.empty())
      writer_.addWeightSection();
  }
  auto tensor = std::make_unique<fb::TensorT>();
  for (int64_t d : shape)
    tensor->dims.push_back(fb::Dim(d, -1, fb::DimKind::Static));
  tensor->name = std::move(name);
  tensor->dtype = static_cast<fb::DType>(dtype);
  tensor->storage = fb::Storage::Weight;
  WeightSection &target = w.sections[section];
  uint64_t offset = detail::alignTo(target.size, kTensorAlignment);
  tensor->offset = offset;
  tensor->size = bytes;
  // Section indices in the file count the program section first.
  tensor->section = static_cast<uint32_t>(section) + 1;
  target.size = offset + bytes;
  schedule_.tensors.push_back(std::move(tensor));
  int32_t id = static_cast<int32_t>(schedule_.tensors.size()) - 1;
  int device = index();
  target.weights.push_back({device, id, offset});
  WeightSource &source = w.sources[device][id];
  source.bytes = bytes;
  if (copy) {
    const auto *p = static_cast<const uint8_t *>(data);
    source.copy.assign(p, p + bytes);
  } else {
    source.pieces.push_back({data, bytes});
  }
  return id;
}

int32_t ScheduleBuilder::addWeightPieces(std::string name, DType dtype,
                                         std::vector<int64_t> shape,
                                         std::vector<WeightPiece> pieces,
                                         int section) {
  size_t bytes = 0;
  for (const WeightPiece &piece : pieces)
    bytes += piece.bytes;
  int32_t id = addWeightImpl(std::move(name), dtype, std::move(shape), nullptr,
                             bytes, section, /*copy=*/false);
  int device = index();
  writer_.impl_->sources[device][id].pieces = std::move(pieces);
  return id;
}

int32_t ScheduleBuilder::addNarrowedWeightPieces(
    std::string name, DType dtype, std::vector<int64_t> shape,
    std::vector<WeightPiece> pieces, int section) {
  PlanWriter::Impl &w = *writer_.impl_;
  if (dtype != DType::F16 && dtype != DType::BF16)
    w.fail(absl::InvalidArgumentError(
        absl::StrCat("weight '", name, "' can be narrowed to f16 or bf16, not ",
                     dtypeName(dtype))));
  size_t bytes = 0;
  for (const WeightPiece &piece : pieces) {
    if (piece.bytes % sizeof(float) != 0)
      w.fail(absl::InvalidArgumentError(
          absl::StrCat("weight '", name, "' has a piece of ", piece.bytes,
                       " bytes, which are not f32 values")));
    bytes += piece.bytes / sizeof(float) * sizeof(uint16_t);
  }
  int32_t id = addWeightImpl(std::move(name), dtype, std::move(shape), nullptr,
                             bytes, section, /*copy=*/false);
  int device = index();
  WeightSource &source = w.sources[device][id];
  source.pieces = std::move(pieces);
  source.narrowTo = dtype;
  return id;
}

int32_t ScheduleBuilder::addQuantizedWeightPieces(
    std::string name, std::vector<int64_t> shape,
    std::vector<WeightPiece> pieces, int channelDim, int32_t &scales,
    int section) {
  PlanWriter::Impl &w = *writer_.impl_;
  scales = -1;
  auto refuse = [&](std::string why) {
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", name, "' cannot be quantized to int8: ", why)));
    return -1;
  };
  if (shape.size() != 3 || (channelDim != 1 && channelDim != 2))
    return refuse("int8 weights are [E, rows, cols] with channels along "
                  "dimension 1 or 2");
  Quantization quantization;
  quantization.rows = shape[1];
  quantization.cols = shape[2];
  quantization.channelDim = channelDim;
  int64_t total = elementCount(shape);
  if (total <= 0)
    return refuse("it has no elements");
  int64_t experts = shape[0];
  std::vector<float> maxAbs(experts * quantization.channels(), 0.0f);
  int64_t element = 0;
  for (const WeightPiece &piece : pieces) {
    if (piece.bytes % sizeof(float) != 0)
      return refuse(absl::StrCat("a piece of ", piece.bytes,
                                 " bytes does not hold f32 values"));
    int64_t count = piece.bytes / sizeof(float);
    if (element + count > total)
      return refuse("its pieces hold more values than its shape");
    const auto *bytes = static_cast<const uint8_t *>(piece.data);
    for (int64_t i = 0; piece.data && i < count; ++i) {
      float value;
      std::memcpy(&value, bytes + i * sizeof(float), sizeof value);
      if (!std::isfinite(value))
        return refuse(absl::StrCat("element ", element + i, " is ", value));
      float &m = maxAbs[quantization.channelOf(element + i)];
      m = std::max(m, std::fabs(value));
    }
    element += count;
  }
  if (element != total)
    return refuse("its pieces hold fewer values than its shape");
  quantization.scales.resize(maxAbs.size());
  for (size_t c = 0; c < maxAbs.size(); ++c)
    quantization.scales[c] = maxAbs[c] / 127.0f;
  int32_t id = addWeightImpl(name, DType::I8, shape, nullptr, total, section,
                             /*copy=*/false);
  int device = 0;
  while (w.builders[device].get() != this)
    ++device;
  WeightSource &source = w.sources[device][id];
  source.pieces = std::move(pieces);
  source.narrowTo = DType::I8;
  std::vector<int64_t> scaleShape = {experts, quantization.channels()};
  scales = addWeight(name + ".scales", DType::F32, scaleShape,
                     quantization.scales.data(),
                     quantization.scales.size() * sizeof(float), section);
  w.sources[device][id].quantization = std::move(quantization);
  return id;
}

void ScheduleBuilder::transposeExpertMatrices(int32_t id) {
  PlanWriter::Impl &w = *writer_.impl_;
  int device = index();
  auto it = w.sources[device].find(id);
  fb::TensorT &t = tensor(id);
  auto refuse = [&](const char *why) {
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "weight '", t.name, "' cannot be written transposed: ", why)));
  };
  if (it == w.sources[device].end() || it->second.pieces.empty())
    return refuse("it is not a weight of f32 pieces");
  WeightSource &source = it->second;
  if (t.dims.size() != 3 || source.transposeRows)
    return refuse("it is not [E, rows, cols], or is transposed already");
  for (const WeightPiece &piece : source.pieces)
    if (piece.bytes % sizeof(float))
      return refuse("a piece does not hold f32 values");
  source.transposeRows = t.dims[1].bound();
  source.transposeCols = t.dims[2].bound();
  std::swap(t.dims[1], t.dims[2]);
  // int8: the scales, [E, channels], stay; the channels move to the other
  // dimension of the written matrices.
  if (source.narrowTo == DType::I8) {
    std::swap(source.quantization.rows, source.quantization.cols);
    source.quantization.channelDim = 3 - source.quantization.channelDim;
  }
}

int32_t ScheduleBuilder::addWeight(std::string name, DType dtype,
                                   std::vector<int64_t> shape, const void *data,
                                   size_t bytes, int section) {
  return addWeightImpl(std::move(name), dtype, std::move(shape), data, bytes,
                       section, /*copy=*/true);
}

int32_t ScheduleBuilder::addWeightRef(std::string name, DType dtype,
                                      std::vector<int64_t> shape,
                                      const void *data, size_t bytes,
                                      int section) {
  return addWeightImpl(std::move(name), dtype, std::move(shape), data, bytes,
                       section, /*copy=*/false);
}

int32_t ScheduleBuilder::addSharedWeight(std::string name, int ownerDevice,
                                         int32_t ownerTensor) {
  PlanWriter::Impl &w = *writer_.impl_;
  auto tensor = std::make_unique<fb::TensorT>();
  tensor->name = std::move(name);
  if (ownerDevice < 0 || static_cast<size_t>(ownerDevice) >= w.builders.size())
    w.fail(absl::InvalidArgumentError(
        absl::StrCat("shared weight '", tensor->name, "' names schedule ",
                     ownerDevice, ", which does not exist")));
  else if (!w.sources[ownerDevice].count(ownerTensor))
    w.fail(absl::InvalidArgumentError(absl::StrCat(
        "shared weight '", tensor->name, "' names tensor ", ownerTensor,
        " of schedule ", ownerDevice, ", which is not a weight")));
  else {
    // Only the entry is copied; the section placement stays the owner's, so
    // the bytes are written once.
    const fb::TensorT &owner =
        *w.scheduleTables[ownerDevice]->tensors[ownerTensor];
    tensor->dtype = owner.dtype;
    tensor->dims = owner.dims;
    tensor->storage = fb::Storage::Weight;
    tensor->offset = owner.offset;
    tensor->size = owner.size;
    tensor->section = owner.section;
  }
  schedule_.tensors.push_back(std::move(tensor));
  return static_cast<int32_t>(schedule_.tensors.size()) - 1;
}

fb::TensorT &ScheduleBuilder::tensor(int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= schedule_.tensors.size()) {
    writer_.impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("tensor id ", id, " does not exist")));
    static fb::TensorT scratch;
    scratch = fb::TensorT();
    return scratch;
  }
  return *schedule_.tensors[id];
}

size_t ScheduleBuilder::numTensors() const { return schedule_.tensors.size(); }

void ScheduleBuilder::addInput(int32_t id) {
  tensor(id);
  schedule_.inputs.push_back(static_cast<uint32_t>(id));
}

void ScheduleBuilder::addOutput(int32_t id) {
  tensor(id);
  schedule_.outputs.push_back(static_cast<uint32_t>(id));
}

void ScheduleBuilder::setValueRange(int32_t id, int64_t lo, int64_t hi) {
  tensor(id).value_range = std::make_unique<fb::ValueRange>(lo, hi);
}

int ScheduleBuilder::addStep(fb::OpKind op, std::string name,
                             std::vector<int32_t> inputs,
                             std::vector<int32_t> outputs,
                             fb::AttrsUnion attrs) {
  auto step = std::make_unique<fb::StepT>();
  step->op = op;
  step->name = std::move(name);
  step->inputs = std::move(inputs);
  step->outputs = std::move(outputs);
  step->attrs = std::move(attrs);
  schedule_.steps.push_back(std::move(step));
  return static_cast<int>(schedule_.steps.size()) - 1;
}

fb::StepT &ScheduleBuilder::step(int index) {
  if (index < 0 || static_cast<size_t>(index) >= schedule_.steps.size()) {
    writer_.impl_->fail(absl::InvalidArgumentError(
        absl::StrCat("step ", index, " does not exist")));
    // A placeholder keeps the caller's reference valid until `write` fails.
    static fb::StepT scratch;
    scratch = fb::StepT();
    return scratch;
  }
  return *schedule_.steps[index];
}

size_t ScheduleBuilder::numSteps() const { return schedule_.steps.size(); }

void PlanWriter::setCudaModule(uint32_t arch, std::string ptx,
                               std::vector<std::string> kernels) {
  if (ptx.empty() || ptx.find('\0') != std::string::npos)
    impl_->fail(absl::InvalidArgumentError(
        "the CUDA module's PTX must be non-empty text without NUL bytes"));
  impl_->target.backend = Backend::Cuda;
  impl_->target.cudaArch = arch;
  auto module = std::make_unique<fb::CudaModuleT>();
  module->arch = arch;
  module->ptx = std::move(ptx);
  module->kernels = std::move(kernels);
  impl_->program.cuda_module = std::move(module);
}

void ScheduleBuilder::setExpertTiers(uint64_t budget,
                                     std::vector<TierLayer> layers,
                                     fb::TierPrefetch prefetch) {
  PlanWriter::Impl &w = *writer_.impl_;
  size_t at = static_cast<size_t>(index());
  if (w.tierRequests.size() <= at)
    w.tierRequests.resize(at + 1);
  w.tierRequests[at] = {true, budget, std::move(layers), prefetch};
}

absl::Status PlanWriter::Impl::assignTiers() {
  tierCrcs.assign(builders.size(), {});
  pagedWeights.assign(builders.size(), {});
  for (size_t b = 0; b < tierRequests.size(); ++b) {
    const TierRequest &request = tierRequests[b];
    if (!request.set)
      continue;
    fb::ScheduleT &table = *scheduleTables[b];
    auto fail = [&](const auto &...args) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule ", b, ": expert tiers: ", args...));
    };
    if (b >= devices)
      return fail("only device schedules are tiered");
    if (request.layers.empty())
      return fail("no layers to tier");
    auto isPaged = [&](const fb::TensorT &t) {
      return t.storage == fb::Storage::Weight && t.section >= 1 &&
             t.section - 1 < sections.size() && sections[t.section - 1].paged;
    };
    std::vector<detail::TierLayerShape> shapes;
    std::vector<std::vector<double>> loads;
    std::vector<std::vector<uint32_t>> &crcs = tierCrcs[b];
    std::set<int> steps;
    for (size_t l = 0; l < request.layers.size(); ++l) {
      const ScheduleBuilder::TierLayer &layer = request.layers[l];
      if (layer.step < 0 ||
          static_cast<size_t>(layer.step) >= table.steps.size() ||
          table.steps[layer.step]->op != fb::OpKind::Experts ||
          !steps.insert(layer.step).second)
        return fail("layer ", l, " names step ", layer.step,
                    ", which is no Experts step (or is named twice)");
      const fb::StepT &step = *table.steps[layer.step];
      if (step.inputs.size() < 3 || step.inputs[2] < 0 ||
          static_cast<size_t>(step.inputs[2]) >= table.tensors.size())
        return fail("step ", layer.step, " has no w1");
      const fb::TensorT &w1 = *table.tensors[step.inputs[2]];
      if (w1.dims.empty() || w1.dims[0].bound() <= 0)
        return fail("step ", layer.step, "'s w1 has no experts");
      uint64_t experts = static_cast<uint64_t>(w1.dims[0].bound());
      std::vector<size_t> paged;
      for (size_t i = 2; i < step.inputs.size(); ++i) {
        int32_t id = step.inputs[i];
        if (id >= 0 && static_cast<size_t>(id) < table.tensors.size() &&
            isPaged(*table.tensors[id]))
          paged.push_back(i);
      }
      if (paged.empty())
        return fail("step ", layer.step, " has no weights in a paged section");
      // A later micro-batch's step reads the same paged weights, at the
      // same inputs, and no others.
      for (int more : layer.moreSteps) {
        if (more < 0 || static_cast<size_t>(more) >= table.steps.size() ||
            table.steps[more]->op != fb::OpKind::Experts ||
            !steps.insert(more).second)
          return fail("layer ", l, " names step ", more,
                      ", which is no Experts step (or is named twice)");
        const fb::StepT &other = *table.steps[more];
        for (size_t i = 2;
             i < std::max(step.inputs.size(), other.inputs.size()); ++i) {
          int32_t a = i < step.inputs.size() ? step.inputs[i] : -1;
          int32_t b = i < other.inputs.size() ? other.inputs[i] : -1;
          bool aPaged = std::find(paged.begin(), paged.end(), i) != paged.end();
          bool bPaged = b >= 0 &&
                        static_cast<size_t>(b) < table.tensors.size() &&
                        isPaged(*table.tensors[b]);
          if ((aPaged || bPaged) && a != b)
            return fail("step ", more, " of layer ", l, " does not read step ",
                        layer.step, "'s paged weights at the same inputs");
        }
      }
      uint64_t expertBytes = 0;
      for (size_t p = 0; p < paged.size(); ++p) {
        int32_t id = step.inputs[paged[p]];
        const fb::TensorT &t = *table.tensors[id];
        if (t.dims.empty() ||
            t.dims[0].bound() != static_cast<int64_t>(experts) ||
            t.size % experts)
          return fail("paged weight '", t.name, "' of step ", layer.step,
                      " does not have the step's ", experts, " experts first");
        if (!sources[b].count(id) || pagedWeights[b].count(id))
          return fail("paged weight '", t.name,
                      "' is shared with another step or schedule");
        pagedWeights[b][id] = {l, p, paged.size(), t.size / experts};
        expertBytes += t.size / experts;
      }
      if (layer.loads.size() && layer.loads.size() != experts)
        return fail("layer ", l, " has ", layer.loads.size(), " loads for its ",
                    experts, " experts");
      shapes.push_back({static_cast<uint32_t>(experts), expertBytes});
      loads.push_back(layer.loads);
      crcs.emplace_back(experts * paged.size(), 0);
    }
    // Resident: the schedule's weights outside paged sections, each range
    // of bytes once; a generation plan's device holds its prefill
    // schedule's too, which pages the same experts.
    std::set<std::pair<uint32_t, uint64_t>> seen;
    uint64_t resident = 0;
    uint32_t topK = 0;
    std::vector<const fb::ScheduleT *> holders{&table};
    if (program.generation && b < program.generation->prefill_schedules.size())
      holders.push_back(program.generation->prefill_schedules[b].get());
    for (const fb::ScheduleT *holder : holders)
      for (const auto &t : holder->tensors)
        if (t->storage == fb::Storage::Weight && !isPaged(*t) &&
            seen.insert({t->section, t->offset}).second)
          resident += t->size;
    for (const auto &step : table.steps)
      if (const fb::RouterAttrsT *router = step->attrs.AsRouterAttrs())
        topK = std::max<uint32_t>(topK, static_cast<uint32_t>(router->top_k));
    std::vector<std::vector<uint32_t>> ranks =
        detail::rankExperts(shapes, loads);
    uint64_t window = detail::coldWindow(shapes, topK ? topK : 2);
    // Reading a layer ahead wants room for a second layer's experts beside
    // the computing one's: fewer hot experts where the budget allows it, as
    // the runtime re-tiers a plan read ahead that was not tiered for it.
    absl::StatusOr<detail::TierAssignment> assignment =
        request.prefetch != fb::TierPrefetch::None
            ? detail::assignTiers(request.budget, resident, shapes, ranks,
                                  2 * window)
            : absl::StatusOr<detail::TierAssignment>(absl::UnknownError(""));
    if (!assignment.ok())
      assignment =
          detail::assignTiers(request.budget, resident, shapes, ranks, window);
    if (!assignment.ok())
      return fail(assignment.status().message());
    if (static_cast<uint8_t>(request.prefetch) >
        static_cast<uint8_t>(fb::TierPrefetch::MAX))
      return fail("prefetch ", static_cast<int>(request.prefetch),
                  " is no TierPrefetch");
    auto tiers = std::make_unique<fb::ExpertTiersT>();
    tiers->budget = request.budget;
    tiers->hot_count = assignment->hotCount;
    tiers->prefetch = request.prefetch;
    for (size_t l = 0; l < request.layers.size(); ++l) {
      auto layer = std::make_unique<fb::TierLayerT>();
      layer->step = static_cast<uint32_t>(request.layers[l].step);
      for (int more : request.layers[l].moreSteps)
        layer->more_steps.push_back(static_cast<uint32_t>(more));
      layer->rank = ranks[l];
      layer->crc = crcs[l]; // Zeros until the weights are written.
      tiers->layers.push_back(std::move(layer));
    }
    table.tiers = std::move(tiers);
  }
  return absl::OkStatus();
}

void ScheduleBuilder::setArenaSize(uint64_t bytes) {
  arenaSize_ = bytes;
  arenaSizeSet_ = true;
}

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
       blockQuant = false, int8Activations = false, vision = false;
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
  header.versionMinor =
      vision               ? detail::kFormatVersionMinorVision
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
