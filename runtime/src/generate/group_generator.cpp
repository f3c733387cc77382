//===- group_generator.cpp - Expert-parallel token generation ------------===//

#include "moert/group_generator.h"
#include "format/byte_image.h"

#include "generate/generation_loop.h"
#include "loader/plan_impl.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

namespace moert {

namespace {

/// FNV-1a over `bytes` bytes at `data`, continuing `hash`.
uint64_t fnv1a(uint64_t hash, const void *data, size_t bytes) {
  const auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < bytes; ++i)
    hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

/// A digest of what the ranks must agree on for one call.
uint64_t digest(const std::vector<int64_t> &ids,
                const GenerateOptions *options) {
  uint64_t hash = 0xcbf29ce484222325ull;
  uint64_t count = ids.size();
  hash = fnv1a(hash, &count, sizeof(count));
  hash = fnv1a(hash, ids.data(), ids.size() * sizeof(int64_t));
  if (options) {
    const SamplingOptions &s = options->sampling;
    hash = fnv1a(hash, &options->maxNewTokens, sizeof(int64_t));
    count = options->stopIds.size();
    hash = fnv1a(hash, &count, sizeof(count));
    hash = fnv1a(hash, options->stopIds.data(),
                 options->stopIds.size() * sizeof(int64_t));
    for (const void *field : {static_cast<const void *>(&s.temperature),
                              static_cast<const void *>(&s.topK),
                              static_cast<const void *>(&s.topP),
                              static_cast<const void *>(&s.seed)})
      hash = fnv1a(hash, field, 8);
    // Whether rank 0 broadcasts a stop answer each step.
    bool asksStop = static_cast<bool>(options->stopRequested);
    hash = fnv1a(hash, &asksStop, sizeof(asksStop));
  }
  return hash;
}

/// `hash` continued over the names, types, shapes and bytes of `vision`.
uint64_t digestVision(uint64_t hash, const VisionInputs &vision) {
  for (const auto &[name, tensor] : vision) {
    hash = fnv1a(hash, name.data(), name.size() + 1);
    hash = fnv1a(hash, &tensor.dtype, sizeof(tensor.dtype));
    uint64_t rank = tensor.shape.size();
    hash = fnv1a(hash, &rank, sizeof(rank));
    hash = fnv1a(hash, tensor.shape.data(), rank * sizeof(int64_t));
    hash = fnv1a(hash, tensor.data, tensor.bytes);
  }
  return hash;
}

void addDeviceStats(DeviceStats &into, const DeviceStats &more) {
  into.comm.exchanges += more.comm.exchanges;
  into.comm.rowsSent += more.comm.rowsSent;
  into.comm.rowsReceived += more.comm.rowsReceived;
  into.comm.rowsKept += more.comm.rowsKept;
  into.comm.bytesSent += more.comm.bytesSent;
  into.comm.bytesReceived += more.comm.bytesReceived;
  into.comm.commSeconds += more.comm.commSeconds;
  into.comm.computeSeconds += more.comm.computeSeconds;
  into.expertRows += more.expertRows;
}

} // namespace

struct GroupGenerator::Impl {
  const Plan &plan;
  const GenerationDesc &gen;
  bool mpi = false;
  double timeoutSeconds = 60;
  /// The devices this process runs, their endpoints and generators.
  std::vector<int> devices;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Generator>> members;

  Impl(const Plan &plan, const GenerationDesc &gen) : plan(plan), gen(gen) {}

  absl::Status createMembers(const GroupGeneratorOptions &options) {
    int threads = options.threadsPerDevice;
    // The cores are shared by all devices, in this process or as ranks on
    // one host.
    if (threads <= 0)
      threads = std::max<int>(1, std::thread::hardware_concurrency() /
                                     plan.numDevices());
    timeoutSeconds = options.comm.timeoutSeconds;
    for (size_t i = 0; i < devices.size(); ++i) {
      SessionOptions session;
      session.threads = threads;
      session.device = devices[i];
      session.collectStats = options.collectStats;
      session.kvCacheInPlace = options.kvCacheInPlace;
      session.deviceMemory = options.deviceMemory;
      session.expertRead = options.expertRead;
      session.expertPrefetch = options.expertPrefetch;
      session.expertCache = options.expertCache;
      // The device's prefill and decode sessions take turns on one
      // endpoint: every device runs the same steps in the same order.
      session.communicator = comms[i].get();
      MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Generator> member,
                             Generator::create(plan, session));
      members.push_back(std::move(member));
    }
    return absl::OkStatus();
  }

  /// Runs `step` on every local device, device 0 on this thread. A device
  /// that fails aborts its endpoint so that the others fail promptly rather
  /// than wait for it; the error lists each failed device, first failure
  /// first.
  absl::Status forEach(const std::function<absl::Status(Generator &)> &step) {
    if (mpi)
      return step(*members[0]);
    std::mutex mutex;
    std::vector<std::string> errors;
    auto runDevice = [&](size_t i) {
      absl::Status status = step(*members[i]);
      if (status.ok())
        return;
      // An injected exit (MOERT_FAULT_INJECT) stops silently, as a dead
      // device would: the others must notice through their timeouts.
      if (!status.GetPayload(kFaultExitPayload))
        comms[i]->abort(status);
      std::lock_guard<std::mutex> lock(mutex);
      errors.push_back(
          absl::StrCat("device ", devices[i], ": ", status.message()));
    };
    std::vector<std::thread> threads;
    for (size_t i = 1; i < members.size(); ++i)
      threads.emplace_back(runDevice, i);
    runDevice(0);
    for (std::thread &thread : threads)
      thread.join();
    if (errors.empty())
      return absl::OkStatus();
    return absl::AbortedError(absl::StrJoin(errors, "\n  "));
  }

  /// Under MPI, checks that every rank passed what rank 0 did (`what`
  /// names it): rank 0 gathers the digests and broadcasts the first rank
  /// that differs, so that all ranks fail alike instead of waiting for each
  /// other in different steps.
  absl::Status agree(uint64_t mine, absl::string_view what) {
    if (!mpi)
      return absl::OkStatus();
    std::vector<uint8_t> bytes(sizeof(mine));
    std::memcpy(bytes.data(), &mine, sizeof(mine));
    std::vector<std::vector<uint8_t>> all;
    MOERT_RETURN_IF_ERROR(comms[0]->gather(
        bytes, all, absl::StrCat("gather of the ranks' ", what)));
    int64_t differs = -1;
    for (size_t r = 1; r < all.size() && differs < 0; ++r)
      if (all[r] != all[0])
        differs = static_cast<int64_t>(r);
    MOERT_RETURN_IF_ERROR(mpiBroadcast(
        &differs, sizeof(differs), timeoutSeconds,
        absl::StrCat("broadcast of the ranks' agreement on ", what)));
    if (differs >= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", differs, " was given other ", what,
          " than rank 0; every rank of an expert-parallel generation must "
          "generate the same"));
    return absl::OkStatus();
  }

  absl::Status prefill(const std::vector<int64_t> &prompt,
                       const VisionInputs &vision) {
    // Checked once before any device runs, so that a bad prompt or image
    // leaves the group usable (a device failing in a step aborts it).
    MOERT_RETURN_IF_ERROR(members[0]->checkPrompt(prompt, vision));
    return forEach([&](Generator &g) {
      return plan.multimodal() ? g.prefill(prompt, vision) : g.prefill(prompt);
    });
  }

  absl::Status decode(int64_t token) {
    const Generator &first = *members[0];
    if (first.length() == 0)
      return absl::FailedPreconditionError("decode before prefill");
    if (first.length() >= gen.maxSeq)
      return absl::OutOfRangeError(
          absl::StrCat("the sequence holds the plan's max_seq of ", gen.maxSeq,
                       " tokens (moec compile --max-seq)"));
    MOERT_RETURN_IF_ERROR(detail::checkIds({token}, gen.vocabSize));
    return forEach([&](Generator &g) { return g.decode(token); });
  }

  /// Under MPI, steps.stop: rank 0 asks options.stopRequested and
  /// broadcasts its answer, which every rank returns.
  std::function<absl::StatusOr<bool>()>
  sharedStop(const GenerateOptions &options) {
    if (!options.stopRequested)
      return {};
    return [this, &options]() -> absl::StatusOr<bool> {
      int64_t stop = devices[0] == 0 && options.stopRequested();
      MOERT_RETURN_IF_ERROR(mpiBroadcast(&stop, sizeof(stop), timeoutSeconds,
                                         "broadcast of rank 0's stop"));
      return stop != 0;
    };
  }

  /// The next token: drawn from device 0's logits, and under MPI broadcast
  /// from rank 0 to the other ranks.
  absl::StatusOr<int64_t> next(Sampler &sampler) {
    int64_t token = -1;
    if (devices[0] == 0)
      token = sampler.sample(members[0]->logits().data(), gen.vocabSize);
    if (mpi)
      MOERT_RETURN_IF_ERROR(mpiBroadcast(&token, sizeof(token), timeoutSeconds,
                                         "broadcast of the next token"));
    return token;
  }
};

GroupGenerator::GroupGenerator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
GroupGenerator::~GroupGenerator() = default;

/// The generation table of `plan`, or why it cannot generate in a group.
static absl::StatusOr<const GenerationDesc *>
groupGeneration(const Plan &plan) {
  const GenerationDesc *gen = plan.generation();
  if (!gen)
    return absl::FailedPreconditionError(absl::StrCat(
        plan.impl().source,
        ": not a generation plan (compile one with moec compile DECODE.onnx "
        "[--prefill PREFILL.onnx] --max-seq S --devices N)"));
  return gen;
}

absl::StatusOr<std::unique_ptr<GroupGenerator>>
GroupGenerator::create(const Plan &plan, const GroupGeneratorOptions &options) {
  return createGroup(plan, options, /*mpi=*/false);
}

absl::StatusOr<std::unique_ptr<GroupGenerator>>
GroupGenerator::createMpi(const Plan &plan,
                          const GroupGeneratorOptions &options) {
  return createGroup(plan, options, /*mpi=*/true);
}

absl::StatusOr<std::unique_ptr<GroupGenerator>>
GroupGenerator::createGroup(const Plan &plan,
                            const GroupGeneratorOptions &options, bool mpi) {
  MOERT_ASSIGN_OR_RETURN(const GenerationDesc *gen, groupGeneration(plan));
  auto impl = std::make_unique<Impl>(plan, *gen);
  impl->mpi = mpi;
  MOERT_ASSIGN_OR_RETURN(GroupEndpoints endpoints,
                         createGroupEndpoints(plan, mpi, options.comm));
  impl->devices = std::move(endpoints.devices);
  impl->comms = std::move(endpoints.comms);
  MOERT_RETURN_IF_ERROR(impl->createMembers(options));
  return std::unique_ptr<GroupGenerator>(new GroupGenerator(std::move(impl)));
}

absl::StatusOr<std::vector<int64_t>>
GroupGenerator::generate(const std::vector<int64_t> &prompt,
                         const GenerateOptions &options,
                         const std::function<void(int64_t)> &onToken) {
  return generate(prompt, {}, options, onToken);
}

absl::StatusOr<std::vector<int64_t>>
GroupGenerator::generate(const std::vector<int64_t> &prompt,
                         const VisionInputs &vision,
                         const GenerateOptions &options,
                         const std::function<void(int64_t)> &onToken) {
  Impl &g = *impl_;
  MOERT_RETURN_IF_ERROR(detail::checkGenerateOptions(prompt, options, g.gen));
  MOERT_RETURN_IF_ERROR(
      g.agree(digestVision(digest(prompt, &options), vision),
              vision.empty() ? "prompt or generation options"
                             : "prompt, vision inputs or generation options"));
  detail::GenerationSteps steps;
  steps.prefill = [&g, &vision](const std::vector<int64_t> &ids) {
    return g.prefill(ids, vision);
  };
  steps.decode = [&g](int64_t token) { return g.decode(token); };
  steps.next = [&g](Sampler &sampler) { return g.next(sampler); };
  steps.stop = g.mpi ? g.sharedStop(options) : detail::localStop(options);
  absl::StatusOr<std::vector<int64_t>> tokens =
      detail::runGenerationLoop(prompt, options, steps, onToken, times_);
  times_.visionSeconds = g.members[0]->times().visionSeconds;
  return tokens;
}

absl::Status GroupGenerator::prefill(const std::vector<int64_t> &prompt) {
  return prefill(prompt, {});
}

absl::Status GroupGenerator::prefill(const std::vector<int64_t> &prompt,
                                     const VisionInputs &vision) {
  MOERT_RETURN_IF_ERROR(
      impl_->agree(digestVision(digest(prompt, nullptr), vision),
                   vision.empty() ? "prompt" : "prompt or vision inputs"));
  return impl_->prefill(prompt, vision);
}

absl::Status GroupGenerator::decode(int64_t token) {
  MOERT_RETURN_IF_ERROR(impl_->agree(digest({token}, nullptr), "token"));
  return impl_->decode(token);
}

const std::vector<float> &GroupGenerator::logits() const {
  return impl_->members[0]->logits();
}
int64_t GroupGenerator::length() const { return impl_->members[0]->length(); }
int64_t GroupGenerator::vocabSize() const { return impl_->gen.vocabSize; }
int64_t GroupGenerator::maxSeq() const { return impl_->gen.maxSeq; }
uint64_t GroupGenerator::cacheBytes() const {
  return impl_->members[0]->cacheBytes();
}
int GroupGenerator::numDevices() const { return impl_->plan.numDevices(); }
bool GroupGenerator::isRoot() const { return impl_->devices[0] == 0; }
const std::vector<int> &GroupGenerator::localDevices() const {
  return impl_->devices;
}

std::vector<Generator *> GroupGenerator::localGenerators() const {
  std::vector<Generator *> out;
  for (const std::unique_ptr<Generator> &member : impl_->members)
    out.push_back(member.get());
  return out;
}

absl::StatusOr<std::vector<std::vector<uint8_t>>>
GroupGenerator::gather(std::vector<std::vector<uint8_t>> mine,
                       std::string_view what) {
  Impl &g = *impl_;
  if (!g.mpi)
    return mine;
  // A rank's images travel as one: their count, then each with its size.
  detail::ByteWriter writer;
  writer.word(mine.size());
  for (const std::vector<uint8_t> &image : mine)
    writer.text(std::string(image.begin(), image.end()));
  std::vector<std::vector<uint8_t>> ranks;
  absl::string_view name(what.data(), what.size());
  MOERT_RETURN_IF_ERROR(g.comms[0]->gather(writer.take(), ranks, name));
  std::vector<std::vector<uint8_t>> all;
  for (const std::vector<uint8_t> &packed : ranks) {
    detail::ByteReader reader(packed.data(), packed.size());
    uint64_t count = reader.word();
    for (uint64_t i = 0; reader.ok() && i < count; ++i) {
      std::string image = reader.text();
      all.emplace_back(image.begin(), image.end());
    }
    if (!reader.ok() || !reader.done())
      return absl::DataLossError(absl::StrCat(name, ": malformed images"));
  }
  return all;
}

absl::StatusOr<std::vector<DeviceStats>> GroupGenerator::deviceStats() {
  Impl &g = *impl_;
  std::vector<std::vector<uint8_t>> mine;
  for (size_t i = 0; i < g.members.size(); ++i) {
    Generator &member = *g.members[i];
    // The device's traffic and expert rows are its two sessions'; the MoE
    // layers are grouped over the decode schedule only.
    Session &decode = member.decodeSession();
    DeviceStats stats =
        getDeviceStats(g.plan, decode, decode.commStats(), g.devices[i]);
    Session &prefill = member.prefillSession();
    if (&prefill != &decode)
      addDeviceStats(stats, getDeviceStats(g.plan, prefill, prefill.commStats(),
                                           g.devices[i]));
    mine.push_back(serializeDeviceStats(stats));
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> all,
                         gather(std::move(mine), "gather of device stats"));
  std::vector<DeviceStats> out;
  for (const std::vector<uint8_t> &blob : all) {
    MOERT_ASSIGN_OR_RETURN(DeviceStats stats, deserializeDeviceStats(blob));
    out.push_back(std::move(stats));
  }
  return out;
}

void GroupGenerator::resetStats() {
  for (const std::unique_ptr<Generator> &member : impl_->members) {
    member->decodeSession().resetStats();
    member->prefillSession().resetStats();
  }
}

} // namespace moert
