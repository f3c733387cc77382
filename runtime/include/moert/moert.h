//===- moert.h - The moec runtime: load and run plans -----------*- C++ -*-===//
//
// Umbrella header of the moec runtime (library `moert`). It has no LLVM/MLIR
// dependency. Typical use:
//
//   MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Plan> plan,
//                          moert::Plan::load("plan.bin"));
//   MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Session> session,
//                          moert::Session::create(*plan, {/*threads=*/4}));
//   MOERT_RETURN_IF_ERROR(session->setInput("input_ids", moert::DType::I64,
//                                          {1, 16}, ids.data(), ids.size() *
//                                          8));
//   MOERT_RETURN_IF_ERROR(session->run());
//   MOERT_ASSIGN_OR_RETURN(moert::TensorData logits,
//   session->output("logits"));
//
// Errors are absl::Status values; the caller owns what `load`/`create` return.
// A plan is immutable once loaded and may be shared by several sessions; a
// session must not outlive its plan and is not thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_MOERT_H
#define MOERT_MOERT_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// Returns the status of `expr` from the enclosing function unless it is OK.
#define MOERT_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    ::absl::Status moert_status_ = (expr);                                     \
    if (!moert_status_.ok())                                                   \
      return moert_status_;                                                    \
  } while (false)

#define MOERT_CONCAT_IMPL_(a, b) a##b
#define MOERT_CONCAT_(a, b) MOERT_CONCAT_IMPL_(a, b)

/// Evaluates `expr` (an absl::StatusOr); returns its status on error, else
/// moves its value into `lhs` (a declaration or an lvalue).
#define MOERT_ASSIGN_OR_RETURN(lhs, expr)                                      \
  MOERT_ASSIGN_OR_RETURN_IMPL_(MOERT_CONCAT_(moert_statusor_, __LINE__), lhs,  \
                               expr)
#define MOERT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                           \
  auto tmp = (expr);                                                           \
  if (!tmp.ok())                                                               \
    return tmp.status();                                                       \
  lhs = std::move(tmp).value()

namespace moert {

/// The backend a plan was compiled for.
enum class Backend : uint32_t {
  Cpu = 1,
  Cuda = 2,
};

/// Target requirements recorded in the file header.
struct TargetRequirements {
  Backend backend = Backend::Cpu;
  /// Number of device schedules in the program; at least 1.
  uint32_t deviceCount = 1;
  /// Minimum CUDA compute capability times ten (90 for sm_90); 0 when none.
  uint32_t cudaArch = 0;
};

/// Returns "cpu", "cuda" or "unknown".
const char *backendName(Backend backend);

/// Parses a byte count such as `--device-memory` takes: digits with an
/// optional binary suffix K, M, G or T (also KiB, MiB, GiB, TiB, or KB...;
/// all powers of 1024). Returns false when malformed, zero or past 2^63.
bool parseByteSize(const char *text, uint64_t &bytes);

class Communicator;
class TraceRecorder;

/// Element types; the values match `moert.fb.DType` in the plan schema.
enum class DType : uint8_t {
  F32 = 1,
  F16 = 2,
  BF16 = 3,
  I64 = 4,
  I32 = 5,
  Bool = 6, ///< One byte per element, 0 or 1.
  I8 = 7,   ///< int8 weights only (`moec compile --weight-dtype int8`).
};

/// "f32", "f16", "bf16", "i64", "i32", "bool", "i8" ("invalid" otherwise).
const char *dtypeName(DType dtype);
/// Bytes per element (0 for an invalid value).
size_t dtypeSize(DType dtype);

/// One dimension of a declared tensor.
struct DimDesc {
  enum class Kind : uint8_t { Static, Symbolic, Dynamic };
  Kind kind = Kind::Static;
  /// The size (Static) or the largest allowed size (Symbolic, Dynamic).
  int64_t bound = 0;
  /// The symbol's name (Symbolic only).
  std::string symbol;
};

/// A graph input or output as declared by the plan.
struct TensorDesc {
  std::string name;
  DType dtype = DType::F32;
  std::vector<DimDesc> dims;
  /// For integer inputs: the compiler's advice for generated values, [lo, hi).
  bool hasValueRange = false;
  int64_t valueLo = 0;
  int64_t valueHi = 0;
  /// A graph input every device of a multi-device plan gets whole.
  bool replicated = false;
};

/// A symbolic dimension size (the token count, typically).
struct SymbolDesc {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;
};

/// One key/value cache of a generation plan: the decode schedule's graph
/// input `input` (the past) grows along `axis` into its graph output
/// `output` (the present); the prefill schedule's `prefillOutput` starts it.
struct CachePairDesc {
  std::string input;
  std::string output;
  std::string prefillOutput;
  int layer = 0;
  int axis = 0;
  /// A fixed-size state the output replaces each step (zeros at the start
  /// of a sequence), not a cache growing along `axis`.
  bool state = false;
};

/// What makes a plan a generation plan (docs/plan-format.md, "Generation
/// plans"): the decode schedule runs one token per step, the prefill
/// schedule (or, without one, the decode schedule with an empty past) the
/// prompt.
struct GenerationDesc {
  /// Past plus new tokens a sequence may hold.
  int64_t maxSeq = 0;
  std::string inputIds;
  /// The positions input, i64 [1, n]; empty when the graph has none.
  std::string positionIds;
  /// 0 for [1, n] positions; r for [r, 1, n] (M-RoPE: r rows, each the
  /// same positions for text).
  int positionRows = 0;
  /// The attention mask input, i64 [1, past + n] of ones; empty when the
  /// graph has none.
  std::string attentionMask;
  /// The model's end-of-sequence ids, which generation stops after (moe-run
  /// adds them to its stop ids unless --ignore-eos); empty when unknown.
  std::vector<int64_t> eosIds;
  std::string logits;
  std::vector<CachePairDesc> cache;
  /// Whether the plan has prefill schedules.
  bool hasPrefill = false;
  /// Whether the prefill schedules take the attention mask: a first prompt
  /// whose attention masks causally by itself has none (format 1.23).
  bool prefillMask = true;
  /// The logits' last dimension.
  int64_t vocabSize = 0;
  /// Bytes of every cache at maxSeq positions (one copy; a Generator holds
  /// two, Generator::cacheBytes).
  uint64_t cacheBytes = 0;
  /// The compiler's batching verdict (format 1.13): whether a step may run
  /// the token rows of several sequences through the prefill schedule
  /// (moert::BatchGenerator), else why not (empty: not analysed).
  bool batchable = false;
  std::string batchBlocker;
  /// With batchable: each prefill Attention step's window (0: none), in
  /// schedule order; empty when none has one.
  std::vector<int64_t> batchWindows;
};

/// Where an input of a multimodal plan's stage gets its value (format 1.17,
/// docs/plan-format.md "Multimodal plans"; plan.fbs `FeedKind`).
enum class FeedKind : uint8_t {
  Given,
  TokenIds,
  StageOutput,
  MergedEmbeddings,
  Positions,
  ImageTokenMask,
  TokenTypes,
  LastPosition,
  GridSegments,
  GridPatchPositions,
  GridInterpIndices,
  GridInterpWeights,
};
/// What a multimodal stage is (plan.fbs `StageRole`).
enum class StageRole : uint8_t { Vision, Embed, Prefill, Head };
/// What a row of M-RoPE positions holds (plan.fbs `PositionRow`).
enum class PositionRow : uint8_t { Sequence, Time, Height, Width };

/// One feed: graph input `input` gets its value by `kind`, from output
/// `output` of stage `stage` where the kind reads one.
struct FeedDesc {
  std::string input;
  FeedKind kind = FeedKind::Given;
  int stage = -1;
  std::string output;
  /// The fed input's dtype (the Grid* feeds write it).
  DType dtype = DType::F32;
};

/// The grid rule's parameters (format 1.22, plan.fbs `GridRule`).
struct GridRuleDesc {
  /// The position table's side; 0: no interpolation taps.
  int64_t tableSide = 0;
  bool bicubic = false;
  bool alignCorners = false;
};

/// The image processor's rule (format 1.22, plan.fbs `ImageProcessor`).
struct ImageProcessorDesc {
  std::string pixelInput;
  int64_t patchSize = 0, temporalPatchSize = 0;
  int64_t minPixels = 0, maxPixels = 0;
  bool doResize = false, doRescale = false, doNormalize = false;
  double rescaleFactor = 1;
  std::vector<double> imageMean, imageStd;
  /// (1.24) GLM-4V's smart resize: a side under patch * merge is first
  /// scaled up to it, and the pixel bounds count temporalPatchSize frames.
  bool glm4vResize = false;
  /// (1.25) Llama 4's tiles: patchSize is the tile's side; an image is
  /// resized into a canvas of at most maxTiles tiles (the largest that fits
  /// without distortion where resizeToMaxCanvas), padded, and split into
  /// tiles plus a global tile (docs/multimodal.md, "Llama 4's tiles").
  bool llama4Tiles = false;
  int64_t maxTiles = 0;
  bool resizeToMaxCanvas = false;
};

/// One stage of a multimodal plan (its schedule stays in the plan).
struct StageDesc {
  std::string name;
  StageRole role = StageRole::Vision;
  std::vector<FeedDesc> feeds;
};

/// A multimodal generation plan's stages, feeds and position rule (format
/// 1.17): the prompt runs through the stages, the decode schedule as in any
/// generation plan.
struct MultimodalDesc {
  std::vector<StageDesc> stages;
  int64_t imageTokenId = 0;
  int imageFeaturesStage = -1;
  std::string imageFeatures;
  int logitsStage = -1;
  std::string logits;
  std::vector<PositionRow> positionRows;
  int64_t spatialMergeSize = 1;
  /// The vision input holding each image's (t, h, w) grid, i64 [images, 3].
  std::string imageGrid;
  /// The most images a prompt may hold; 0: no bound.
  int64_t maxImages = 0;
  std::vector<FeedDesc> decodeFeeds;
  /// Indexes into `stages`.
  int embedStage = -1;
  int prefillStage = -1;
  /// The vision inputs a caller gives (every Given feed, then the grid when
  /// no stage takes it).
  std::vector<std::string> givenInputs;
  /// Whether a prompt without images runs through the decode schedule, a
  /// token at a time: a later stage reads a Vision stage's output (the
  /// Prefill's deepstack features, which an export traced with an image
  /// cannot take empty; onnxruntime-genai's embedding's image features).
  bool textThroughDecode = false;
  /// With Grid* feeds (format 1.22).
  GridRuleDesc gridRule;
  /// Images as files (format 1.22); absent: only --vision-input.
  bool hasImageProcessor = false;
  ImageProcessorDesc imageProcessor;
};

/// Where a plan came from (the plan's provenance table, written by moec):
/// empty strings and no flags for plans written without one.
struct ProvenanceDesc {
  std::string compilerVersion;
  std::string gitCommit;
  std::string modelFile;
  /// Hex SHA-256 of the model file's bytes.
  std::string modelSha256;
  /// Generation plans compiled with --prefill.
  std::string prefillFile;
  std::string prefillSha256;
  /// The compile options, (name, value) in the order moec wrote them.
  std::vector<std::pair<std::string, std::string>> flags;
};

struct LoadOptions {
  /// Verify the CRC-32 of every section (weights included). The header, the
  /// section table and the program are always checked.
  bool verifyWeightChecksums = true;
  /// The device whose schedule this process runs (an MPI rank), or -1 for
  /// all. With a device, only the weight sections its schedule references
  /// are checksummed, so that a device never reads another's weight shards
  /// (the file is mapped, not read). Every schedule is still validated.
  int device = -1;
  /// How the plan's bytes are held (docs/cli.md, `moe-run --weight-pages`).
  /// Mapped: the file mapped in 4 KiB pages, shared with other processes and
  /// the page cache. Huge: copied into anonymous memory in 2 MiB pages
  /// where the kernel gives them: a decode step that streams every weight
  /// misses the TLB once per 2 MiB instead of per 4 KiB. Auto: Huge where
  /// the copy fits in half the memory this process may use and the kernel
  /// has transparent huge pages, for a whole plan (not one MPI rank's
  /// device) of at least 64 MiB; else Mapped.
  enum class WeightPages { Auto, Mapped, Huge };
  WeightPages weightPages = WeightPages::Auto;
};

/// One tiered MoE layer of a schedule (docs/tiered-experts.md): an Experts
/// step whose weights the runtime reads per expert from the plan file.
struct TierLayerDesc {
  /// The Experts step's name and index in the schedule.
  std::string step;
  int stepIndex = -1;
  uint32_t experts = 0;
  /// Bytes of one expert's paged weights (matrices, biases, scales).
  uint64_t expertBytes = 0;
  /// Per expert: hot (loaded when a session starts, pinned) or cold.
  std::vector<bool> hot;
};

/// A schedule's expert tiers for a memory budget of weights (the activation
/// arena comes on top): resident weights first, then the experts in the plan's
/// rank order (routing profile or index) while they leave the cold experts'
/// cache its least size.
struct ExpertTiersDesc {
  uint64_t budget = 0;
  /// Weights outside the paged sections (router, norms, embeddings,
  /// attention, dense and shared experts), and the activation arena (not
  /// part of the budget).
  uint64_t residentBytes = 0;
  uint64_t arenaBytes = 0;
  uint32_t hotExperts = 0;
  uint32_t coldExperts = 0;
  uint64_t hotBytes = 0;
  uint64_t coldBytes = 0;
  /// budget - resident: what the hot experts and the cold experts'
  /// cache hold together, and the least the cache needs (one token's
  /// experts of the largest layer).
  uint64_t cacheBytes = 0;
  uint64_t windowBytes = 0;
  std::vector<TierLayerDesc> layers;
  /// The plan's read-ahead policy (SessionOptions::expertPrefetch's
  /// default): "none", "next-layer" or "next-micro-batch"; and how many of
  /// the layers it can read ahead (pre-gating needs a router of a known
  /// form and the next layer's hidden size; the next micro-batch's
  /// experts need its offsets computed before this one's step runs).
  std::string prefetch = "none";
  uint32_t layersReadAhead = 0;
};

/// A loaded and fully validated plan. Immutable.
class Plan {
public:
  /// Maps the file read-only and validates it (docs/plan-format.md lists the
  /// checks). Errors name the file and the offending field.
  static absl::StatusOr<std::unique_ptr<Plan>>
  load(const std::string &path, const LoadOptions &options = {});
  /// Like `load`, from a copy of `size` bytes at `data`.
  static absl::StatusOr<std::unique_ptr<Plan>>
  loadFromMemory(const void *data, size_t size,
                 const LoadOptions &options = {});

  ~Plan();
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;

  /// Accessors; `device` must be in [0, numDevices()).
  const TargetRequirements &target() const;
  uint16_t versionMajor() const;
  uint16_t versionMinor() const;
  const std::string &producer() const;
  const std::vector<SymbolDesc> &symbols() const;
  int numDevices() const;
  /// Whether the plan's bytes were copied into huge pages
  /// (LoadOptions::weightPages), not mapped from the file.
  bool onHugePages() const;
  const std::vector<TensorDesc> &inputs(int device = 0) const;
  const std::vector<TensorDesc> &outputs(int device = 0) const;
  size_t numSteps(int device = 0) const;
  uint64_t arenaSize(int device = 0) const;
  /// Generation plans (format 1.3): the cache pairs and names; null for a
  /// plan of one forward pass.
  const GenerationDesc *generation() const;
  /// Multimodal generation plans (format 1.17): the stages that run the
  /// prompt; null otherwise.
  const MultimodalDesc *multimodal() const;
  /// What compiled the plan, from which model, with which options.
  const ProvenanceDesc &provenance() const;
  /// The prefill schedule's inputs, outputs and steps (generation plans with
  /// a prefill schedule only).
  const std::vector<TensorDesc> &prefillInputs(int device = 0) const;
  const std::vector<TensorDesc> &prefillOutputs(int device = 0) const;
  size_t numPrefillSteps(int device = 0) const;
  uint64_t prefillArenaSize(int device = 0) const;
  /// Whether schedule `device` is tiered (`moec compile --device-memory`,
  /// format 1.5).
  bool tiered(int device = 0) const;
  /// The tiers of schedule `device` (tiered) for `budget` bytes, 0 for the
  /// budget it was compiled for, by the rule the compiler used (so 0 gives
  /// the plan's own tiers). Fails when the schedule is not tiered or the
  /// budget is too small.
  absl::StatusOr<ExpertTiersDesc> expertTiers(int device = 0,
                                              uint64_t budget = 0) const;

  struct Impl;
  const Impl &impl() const { return *impl_; }

private:
  explicit Plan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct SessionOptions {
  /// Worker threads for kernels and BLAS; 0 picks the hardware concurrency.
  int threads = 0;
  /// The device schedule to execute.
  int device = 0;
  /// Record per-step times (a clock read per step).
  bool collectStats = true;
  /// Tiered plans: the memory budget in bytes that overrides the plan's
  /// tiers (0: the plan's own), and how cold experts are read.
  uint64_t deviceMemory = 0;
  /// "pread" (default), "direct" (O_DIRECT), "mmap", or "auto": direct
  /// when the cold experts and the budget do not fit in the memory the
  /// process may use (its memory cgroup's limit included), else pread.
  std::string expertRead = "pread";
  /// "none", "next-layer" (while a tiered layer computes, read the experts
  /// the next layer's router picks for this layer's tokens) or
  /// "next-micro-batch" (while a micro-batch of a tiered layer computes,
  /// read the experts the layer's next micro-batch routes to;
  /// docs/tiered-experts.md); empty (default): the plan's own (moec compile
  /// --prefetch, ExpertTiersDesc::prefetch). Outputs do not depend on it.
  std::string expertPrefetch = "";
  /// How the experts' budget is spent (docs/tiered-experts.md, "The
  /// cache's policy"): "static" (default: the plan's hot experts pinned,
  /// the least cache for the rest), "lru[:F]", "lfu[:F]" or
  /// "adaptive[:F]" (a share F of the hot experts pinned, 0 when left out,
  /// the rest of the budget a cache evicting the least recently used
  /// experts, the least used by a count that decays, or adaptive: the
  /// victim of whichever of those two, or of a slowly decaying count, has
  /// hit most lately in shadow directories). cpu sessions. Outputs do not
  /// depend on it.
  std::string expertCache = "static";
  /// Generators: keep each KV cache in one buffer of max_seq positions that
  /// the decode step appends to in place, where its schedule allows it (the
  /// cache is read only by its Concat, fused attention and shape queries).
  /// false keeps two buffers per cache, between which the exported Concat
  /// copies the whole past every step. Outputs do not depend on it.
  bool kvCacheInPlace = true;
  /// This device's endpoint of the device group, needed by multi-device
  /// plans (their collective steps); its rank must be `device` and its size
  /// the plan's device count. Not owned; must outlive the session.
  Communicator *communicator = nullptr;
};

/// Traffic of one device's collective steps over the runs since the last
/// reset. Rows are the token rows of the dispatch and combine exchanges (the
/// rows of exchanged matrices) that crossed to or from other devices; rows a
/// device sends to itself are `rowsKept`. Bytes count every exchange with
/// other devices, the per-slot counts included.
struct CommStats {
  uint64_t exchanges = 0;
  uint64_t rowsSent = 0;
  uint64_t rowsReceived = 0;
  uint64_t rowsKept = 0;
  uint64_t bytesSent = 0;
  uint64_t bytesReceived = 0;
  /// Time in collective steps (communication, including waiting for slower
  /// devices) and in all other steps (compute); needs collectStats.
  double commSeconds = 0;
  double computeSeconds = 0;
};

/// Reads ahead of a tiered layer's experts (SessionOptions::expertPrefetch)
/// since the last reset: the experts read ahead, those a step then used,
/// and those it used while they were still queued or being read (late); the
/// bytes read ahead and their read seconds (on the prefetch thread,
/// overlapped with compute); the seconds steps waited for reads ahead in
/// flight (part of their wait).
struct PrefetchStats {
  uint64_t issued = 0;
  uint64_t used = 0;
  uint64_t late = 0;
  uint64_t bytes = 0;
  double readSeconds = 0;
  double waitSeconds = 0;
  /// Adds `o`'s counts; the seconds too, or (merging devices that read at
  /// the same time) keeps the larger.
  void add(const PrefetchStats &o, bool maxSeconds = false);
};

/// The expert cache's counters of a tiered Experts step, or of a MoE layer's
/// (docs/tiered-experts.md): its hits and misses, the bytes read for the
/// misses, the wall seconds of those reads (several experts in parallel)
/// and of the whole acquisition (what the compute waited for its weights),
/// the rounds it took (more than one per call when the missing experts
/// exceed the free cache), and the reads ahead of its experts.
struct ExpertCacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytesPagedIn = 0;
  double readSeconds = 0;
  double waitSeconds = 0;
  uint64_t rounds = 0;
  PrefetchStats prefetch;
  /// Adds `o`'s counts; the seconds too, or (merging devices that ran at
  /// the same time) keeps the larger.
  void add(const ExpertCacheCounters &o, bool maxSeconds = false);
};

/// Accumulated timing of one step over the runs since the last reset.
struct StepStats {
  std::string name;
  std::string op;
  uint64_t calls = 0;
  double totalSeconds = 0;
  /// MoE routing of Router and Experts steps (empty for other steps): the
  /// assignments (token, expert) each expert received, summed over the runs.
  /// Their imbalance is the largest entry over the mean.
  std::vector<uint64_t> expertLoad;
  /// Router steps with a capacity: assignments dropped because their expert
  /// was full, summed over the runs.
  uint64_t droppedAssignments = 0;
  /// Experts steps of a tiered plan: the expert cache's counters.
  bool tiered = false;
  ExpertCacheCounters cache;
};

/// The expert cache of a session on a tiered plan.
struct ExpertCacheStats {
  bool tiered = false;
  /// The budget the tiers follow, the cache's capacity (hot experts and
  /// cold ones together), the bytes it holds now and the hot experts'.
  uint64_t budget = 0;
  uint64_t capacityBytes = 0;
  uint64_t usedBytes = 0;
  uint32_t hotExperts = 0;
  uint64_t hotBytes = 0;
  /// Resident weights and the activation arena.
  uint64_t residentBytes = 0;
  uint64_t arenaBytes = 0;
  /// "pread", "direct" or "mmap".
  std::string readMode;
  /// "none", "next-layer" or "next-micro-batch" (none when no layer can be
  /// read ahead).
  std::string prefetch;
  /// SessionOptions::expertCache's policy: "static", "lru", "lfu:0.5", ...
  std::string policy;
};

/// A view of a tensor inside a session; valid until the next `run`.
struct TensorData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void *data = nullptr;
  size_t bytes = 0;
};

namespace detail {
struct SessionState;
struct ScheduleInfo;
} // namespace detail

class Generator;

/// What the sessions of every backend share: one device schedule's inputs,
/// outputs and per-step statistics. A session is not thread-safe and must
/// not outlive its plan.
class SessionBase {
public:
  SessionBase(const SessionBase &) = delete;
  SessionBase &operator=(const SessionBase &) = delete;

  /// Copies the value of graph input `name`. Checks dtype, rank, static sizes,
  /// bounds and that `bytes` matches the shape. Symbolic sizes are checked for
  /// agreement across inputs by `run`.
  absl::Status setInput(std::string_view name, DType dtype,
                        const std::vector<int64_t> &shape, const void *data,
                        size_t bytes);
  /// Like setInput, without a copy: the runs read graph input `name` from
  /// `data` until the next setInput or bindInput of it. `data` must stay
  /// valid and unchanged while a run that reads it executes.
  absl::Status bindInput(std::string_view name, DType dtype,
                         const std::vector<int64_t> &shape, const void *data,
                         size_t bytes);
  /// Makes the runs write graph output `name` into `data` (at least
  /// outputCapacity(name) bytes) instead of the session's arena; null
  /// restores the arena. `output` then views `data`. Fails for an output no
  /// step computes (a graph input or a weight passed through).
  absl::Status bindOutput(std::string_view name, void *data, size_t capacity);
  /// The bytes a buffer bound to graph output `name` needs (its planned size
  /// at the bounds); 0 for an output that cannot be bound.
  absl::StatusOr<size_t> outputCapacity(std::string_view name) const;
  /// The value of graph output `name` after a successful `run`, in host
  /// memory.
  absl::StatusOr<TensorData> output(std::string_view name) const;

  /// Per-step timings, one entry per step in schedule order.
  std::vector<StepStats> stepStats() const;
  /// Clears the statistics, and the attached trace recorder's runs.
  void resetStats();
  /// Records every later run into `recorder` (moert/trace.h; not owned, must
  /// outlive the session or be detached with null): a span per executed step
  /// from the clock reads of stepStats(), its outputs' shapes and, for MoE
  /// steps, the run's assignments per expert. Needs
  /// SessionOptions::collectStats (else nothing is recorded); costs nothing
  /// while no recorder is attached.
  void setTrace(TraceRecorder *recorder);
  /// Worker threads of the steps that run on the host.
  int threads() const;
  /// The expert cache of a tiered plan (`tiered` false otherwise).
  ExpertCacheStats expertCacheStats() const;
  /// Reads up to `maxBytes` of a tiered plan's paged experts the way the
  /// cache reads a miss (without caching them) and returns the bytes per
  /// second; 0 for a plan that is not tiered.
  absl::StatusOr<double> measureExpertReadBandwidth(uint64_t maxBytes);

protected:
  explicit SessionBase(detail::SessionState &state) : state_(state) {}
  ~SessionBase() = default;

private:
  // Binds the cache inputs and outputs of its sessions to its buffers.
  friend class Generator;
  detail::SessionState &state_;
};

/// Executes one device schedule of a plan on the CPU backend.
class Session : public SessionBase {
public:
  /// Allocates the activation arena and the thread pool. Fails when the plan
  /// needs a backend other than the CPU.
  static absl::StatusOr<std::unique_ptr<Session>>
  create(const Plan &plan, const SessionOptions &options = {});

  ~Session();

  /// Runs every step. Needs every input set; inputs stay set across runs.
  absl::Status run();
  /// Traffic and communication time of the collective steps.
  CommStats commStats() const;

  struct Impl;

private:
  friend class Generator;
  /// Like create, over `schedule` of `plan` (a prefill schedule).
  /// With `sharesExperts` (a generation plan's decode session), a tiered
  /// `schedule` pages its experts through that session's expert cache.
  static absl::StatusOr<std::unique_ptr<Session>>
  create(const Plan &plan, const SessionOptions &options,
         const detail::ScheduleInfo &schedule,
         const Session *sharesExperts = nullptr);
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace moert

#endif // MOERT_MOERT_H
