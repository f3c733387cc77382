//===- group_generator.h - Expert-parallel token generation -----*- C++ -*-===//
//
// A GroupGenerator runs an expert-parallel generation plan (`moec compile
// DECODE.onnx --prefill PREFILL.onnx --max-seq S --devices N`,
// docs/expert-parallelism.md "Generation"): every device runs its own
// prefill and decode schedules through a moert::Generator of its own, all
// devices in lockstep (their schedules exchange the MoE layers' rows), each
// holding the caches of the rows it computes. Device 0 draws each next token
// from its logits and every device decodes it: in one process the devices
// share it in memory; under MPI (one device per rank) rank 0 broadcasts it.
//
//   MOERT_ASSIGN_OR_RETURN(auto gen, moert::GroupGenerator::create(*plan));
//   MOERT_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
//                          gen->generate({3, 14, 15}, options, onToken));
//
// Under MPI (after mpiInit) every rank calls createMpi and then the same
// calls with the same arguments; generate checks that the ranks agree on
// the prompt and the options first, and every rank gets the new tokens. A
// multimodal plan (docs/multimodal.md) takes the prompt's vision inputs as
// Generator does.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_GROUP_GENERATOR_H
#define MOERT_GROUP_GENERATOR_H

#include "moert/comm.h"
#include "moert/device_group.h"
#include "moert/generator.h"

namespace moert {

struct GroupGeneratorOptions {
  /// Kernel threads of each device's sessions (0: the cores divided by the
  /// plan's devices, as DeviceGroup does).
  int threadsPerDevice = 0;
  bool collectStats = true;
  /// SessionOptions::kvCacheInPlace of every device's generator.
  bool kvCacheInPlace = true;
  /// The timeout of every exchange and of the token broadcast.
  CommOptions comm;
  /// A tiered plan: each device's budget (0: the plan's tiers), how its
  /// cold experts are read and whether ahead (SessionOptions).
  uint64_t deviceMemory = 0;
  std::string expertRead = "pread";
  std::string expertPrefetch = "";
  /// SessionOptions::expertCache.
  std::string expertCache = "static";
};

/// Generates tokens with every device schedule of an expert-parallel
/// generation plan on the CPU backend. Not thread-safe; must not outlive its
/// plan. Arguments are checked before any device runs (a bad prompt leaves
/// the group usable); a device that fails during a step aborts its
/// endpoint, so that the others fail promptly, and the group cannot run
/// again.
class GroupGenerator {
public:
  /// Runs all `plan.numDevices()` devices in this process.
  static absl::StatusOr<std::unique_ptr<GroupGenerator>>
  create(const Plan &plan, const GroupGeneratorOptions &options = {});
  /// Runs this MPI rank's device (after mpiInit); the world size must be
  /// the plan's device count. Every call below is collective over the ranks.
  static absl::StatusOr<std::unique_ptr<GroupGenerator>>
  createMpi(const Plan &plan, const GroupGeneratorOptions &options = {});
  ~GroupGenerator();
  GroupGenerator(const GroupGenerator &) = delete;
  GroupGenerator &operator=(const GroupGenerator &) = delete;

  /// Generator::generate over the group: prefill, then up to maxNewTokens
  /// tokens drawn by device 0, `onToken` called with each (on every rank).
  absl::StatusOr<std::vector<int64_t>>
  generate(const std::vector<int64_t> &prompt, const GenerateOptions &options,
           const std::function<void(int64_t)> &onToken = {});
  /// The same with a multimodal plan's vision inputs (Generator::prefill):
  /// every device encodes the images itself and runs its own language
  /// model schedule. Under MPI every rank passes the same inputs (checked).
  absl::StatusOr<std::vector<int64_t>>
  generate(const std::vector<int64_t> &prompt, const VisionInputs &vision,
           const GenerateOptions &options,
           const std::function<void(int64_t)> &onToken = {});
  /// One lockstep step of every device: the prompt from a clear cache, or
  /// `token` at the next position. Under MPI the ranks must pass the same
  /// prompt and token (checked).
  absl::Status prefill(const std::vector<int64_t> &prompt);
  /// A multimodal prompt with its vision inputs.
  absl::Status prefill(const std::vector<int64_t> &prompt,
                       const VisionInputs &vision);
  absl::Status decode(int64_t token);
  /// Device 0's logits of the last position of the last step (the model's;
  /// under MPI on rank 0, other ranks hold their own device's).
  const std::vector<float> &logits() const;
  const GenerationTimes &times() const { return times_; }
  int64_t length() const;
  int64_t vocabSize() const;
  int64_t maxSeq() const;
  /// Bytes of one device's cache buffers (every device holds its own).
  uint64_t cacheBytes() const;

  int numDevices() const;
  /// Whether this process reports results: always in-process, rank 0 under
  /// MPI.
  bool isRoot() const;
  /// The devices this process runs (all, or this rank's one) and their
  /// generators, for the sessions' step statistics.
  const std::vector<int> &localDevices() const;
  std::vector<Generator *> localGenerators() const;
  /// Every device's stats over its prefill and decode sessions, in device
  /// order (rank 0 only under MPI; the MoE layers are the decode
  /// schedule's). Collective under MPI.
  absl::StatusOr<std::vector<DeviceStats>> deviceStats();
  void resetStats();
  /// Rank 0's view of the byte images of every process, in rank order:
  /// `mine` as given in-process, under MPI gathered from every rank (any
  /// number per rank; other ranks get an empty vector). Collective under
  /// MPI; `what` names it in errors.
  absl::StatusOr<std::vector<std::vector<uint8_t>>>
  gather(std::vector<std::vector<uint8_t>> mine, std::string_view what);

  struct Impl;

private:
  explicit GroupGenerator(std::unique_ptr<Impl> impl);
  /// create (mpi false) and createMpi.
  static absl::StatusOr<std::unique_ptr<GroupGenerator>>
  createGroup(const Plan &plan, const GroupGeneratorOptions &options, bool mpi);
  std::unique_ptr<Impl> impl_;
  GenerationTimes times_;
};

} // namespace moert

#endif // MOERT_GROUP_GENERATOR_H
