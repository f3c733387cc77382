//===- device_group.cpp - Running a multi-device plan ---------------------===//

#include "moert/device_group.h"
#include "moert/cuda.h"
#include "moert/nccl.h"

#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

namespace moert {

namespace {

const TensorDesc *findDesc(const std::vector<TensorDesc> &descs,
                           std::string_view name) {
  for (const TensorDesc &desc : descs)
    if (desc.name == name)
      return &desc;
  return nullptr;
}

/// Checks that every schedule has the signature of schedule 0.
absl::Status checkSignatures(const Plan &plan) {
  auto same = [](const std::vector<TensorDesc> &a,
                 const std::vector<TensorDesc> &b) {
    if (a.size() != b.size())
      return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].name != b[i].name || a[i].dtype != b[i].dtype ||
          a[i].dims.size() != b[i].dims.size() ||
          (!a[i].dims.empty() && a[i].dims[0].kind != b[i].dims[0].kind))
        return false;
    return true;
  };
  for (int d = 1; d < plan.numDevices(); ++d)
    if (!same(plan.inputs(d), plan.inputs(0)) ||
        !same(plan.outputs(d), plan.outputs(0)))
      return absl::InvalidArgumentError(
          absl::StrCat("schedule ", d,
                       " has other graph inputs or outputs than schedule 0; "
                       "the devices of a plan share one signature"));
  return absl::OkStatus();
}

/// A tensor as bytes: dtype, rank, dims, data (for the gather to rank 0).
std::vector<uint8_t> serialize(const TensorData &t) {
  std::vector<uint8_t> out(2 + 8 * t.shape.size() + t.bytes);
  out[0] = static_cast<uint8_t>(t.dtype);
  out[1] = static_cast<uint8_t>(t.shape.size());
  if (!t.shape.empty())
    std::memcpy(out.data() + 2, t.shape.data(), 8 * t.shape.size());
  if (t.bytes)
    std::memcpy(out.data() + 2 + 8 * t.shape.size(), t.data, t.bytes);
  return out;
}

absl::StatusOr<TensorData> deserialize(const std::vector<uint8_t> &in,
                                       std::vector<int64_t> &shapeStorage) {
  if (in.size() < 2 || in.size() < 2 + 8 * size_t(in[1]))
    return absl::DataLossError("a gathered output is truncated");
  TensorData t;
  t.dtype = static_cast<DType>(in[0]);
  shapeStorage.resize(in[1]);
  if (in[1])
    std::memcpy(shapeStorage.data(), in.data() + 2, 8 * size_t(in[1]));
  t.shape = shapeStorage;
  t.data = in.data() + 2 + 8 * size_t(in[1]);
  t.bytes = in.size() - 2 - 8 * size_t(in[1]);
  return t;
}

/// The output `desc` from each device's part, in device order; the parts of
/// `padded` devices (a padding row, DeviceGroup::setInput) are left out of
/// outputs split across the devices.
absl::StatusOr<HostTensor> assemble(const TensorDesc &desc,
                                    std::vector<TensorData> parts,
                                    const std::vector<bool> &padded) {
  if (splitsAcrossDevices(desc))
    for (size_t d = 0; d < parts.size() && d < padded.size(); ++d)
      if (padded[d] && !parts[d].shape.empty()) {
        parts[d].shape[0] = 0;
        parts[d].bytes = 0;
      }
  HostTensor out;
  const TensorData &first = parts[0];
  out.dtype = first.dtype;
  out.shape = first.shape;
  if (!splitsAcrossDevices(desc)) {
    auto *p = static_cast<const uint8_t *>(first.data);
    out.bytes.assign(p, p + first.bytes);
    return out;
  }
  for (size_t d = 0; d < parts.size(); ++d)
    if (parts[d].shape.empty())
      return absl::InternalError(absl::StrCat("output '", desc.name,
                                              "' of device ", d,
                                              " is a scalar; expected rows"));
  // A device without rows contributes nothing, whatever sizes its other
  // dims got from 0-element arithmetic: the trailing shape is the first
  // non-empty part's.
  size_t model = 0;
  while (model + 1 < parts.size() && parts[model].shape[0] == 0)
    ++model;
  const TensorData &shaped = parts[model];
  out.shape = shaped.shape;
  out.shape[0] = 0;
  for (size_t d = 0; d < parts.size(); ++d) {
    const TensorData &part = parts[d];
    if (part.dtype != first.dtype || part.shape.size() != first.shape.size() ||
        (part.shape[0] != 0 &&
         !std::equal(part.shape.begin() + 1, part.shape.end(),
                     shaped.shape.begin() + 1)))
      return absl::InternalError(absl::StrCat(
          "output '", desc.name, "' of device ", d, " is ",
          dtypeName(part.dtype), " [", absl::StrJoin(part.shape, ", "),
          "], which does not stack with device ", model, "'s ",
          dtypeName(shaped.dtype), " [", absl::StrJoin(shaped.shape, ", "),
          "]"));
    out.shape[0] += part.shape[0];
    auto *p = static_cast<const uint8_t *>(part.data);
    out.bytes.insert(out.bytes.end(), p, p + part.bytes);
  }
  return out;
}

/// The stats that travel to rank 0, as 8-byte words.
constexpr size_t kStatWords = 10;

} // namespace

std::vector<uint8_t> serializeDeviceStats(const DeviceStats &s) {
  uint64_t words[kStatWords] = {uint64_t(s.device),
                                s.comm.exchanges,
                                s.comm.rowsSent,
                                s.comm.rowsReceived,
                                s.comm.rowsKept,
                                s.comm.bytesSent,
                                s.comm.bytesReceived,
                                0,
                                0,
                                s.expertRows};
  std::memcpy(&words[7], &s.comm.commSeconds, 8);
  std::memcpy(&words[8], &s.comm.computeSeconds, 8);
  std::vector<uint8_t> out(sizeof(words));
  std::memcpy(out.data(), words, sizeof(words));
  std::vector<uint8_t> layers = serializeLayerStats(s.moeLayers);
  out.insert(out.end(), layers.begin(), layers.end());
  return out;
}

absl::StatusOr<DeviceStats>
deserializeDeviceStats(const std::vector<uint8_t> &in) {
  uint64_t words[kStatWords];
  if (in.size() < sizeof(words))
    return absl::DataLossError("gathered device stats are malformed");
  std::memcpy(words, in.data(), sizeof(words));
  DeviceStats s;
  s.device = static_cast<int>(words[0]);
  s.comm.exchanges = words[1];
  s.comm.rowsSent = words[2];
  s.comm.rowsReceived = words[3];
  s.comm.rowsKept = words[4];
  s.comm.bytesSent = words[5];
  s.comm.bytesReceived = words[6];
  std::memcpy(&s.comm.commSeconds, &words[7], 8);
  std::memcpy(&s.comm.computeSeconds, &words[8], 8);
  s.expertRows = words[9];
  MOERT_ASSIGN_OR_RETURN(s.moeLayers,
                         deserializeLayerStats(in.data() + sizeof(words),
                                               in.size() - sizeof(words)));
  return s;
}

DeviceStats getDeviceStats(const Plan &plan, const SessionBase &session,
                           const CommStats &comm, int device) {
  DeviceStats stats;
  stats.device = device;
  stats.comm = comm;
  std::vector<StepStats> steps = session.stepStats();
  for (const StepStats &step : steps)
    // The CUDA backend suffixes the op with where the step ran.
    if (std::string_view(step.op).substr(0, step.op.find('@')) == "Experts")
      for (uint64_t load : step.expertLoad)
        stats.expertRows += load;
  stats.moeLayers = moeLayerStats(plan, steps, device);
  return stats;
}

absl::StatusOr<std::unique_ptr<Communicator>>
createPlanMpiCommunicator(const Plan &plan, const CommOptions &options) {
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         createMpiCommunicator(options));
  if (comm->size() != plan.numDevices())
    return absl::InvalidArgumentError(absl::StrCat(
        "mpirun started ", comm->size(), comm->size() == 1 ? " rank" : " ranks",
        " but the plan has ", plan.numDevices(),
        plan.numDevices() == 1 ? " device schedule" : " device schedules",
        "; run it with mpirun -np ", plan.numDevices()));
  return comm;
}

int groupGpu(int device, int localRank, int visibleGpus) {
  if (visibleGpus <= 0)
    return 0;
  return (localRank >= 0 ? localRank : device) % visibleGpus;
}

bool splitsAcrossDevices(const TensorDesc &desc) {
  return !desc.dims.empty() && desc.dims[0].kind == DimDesc::Kind::Symbolic &&
         !desc.replicated;
}

/// Whether the split dim 0 of `desc` is a batch: another dim is symbolic too
/// (e.g. [batch, seq]). Models reshape such inputs with -1 over the batch
/// ([batch, -1, H]), which 0 rows cannot answer, so an empty share is
/// padded; a split over tokens alone ([T, H]) runs 0 rows as they are.
bool splitsABatch(const TensorDesc &desc) {
  return splitsAcrossDevices(desc) &&
         std::any_of(desc.dims.begin() + 1, desc.dims.end(),
                     [](const DimDesc &dim) {
                       return dim.kind == DimDesc::Kind::Symbolic;
                     });
}

namespace {
/// One device's session, on whichever backend runs it.
struct Member {
  std::unique_ptr<Session> cpu;
  std::unique_ptr<CudaSession> cuda;
  /// The CUDA device ordinal (cuda only).
  int gpu = -1;

  SessionBase &session() const {
    return cpu ? static_cast<SessionBase &>(*cpu) : *cuda;
  }
  absl::Status run() { return cpu ? cpu->run() : cuda->run(); }
  CommStats commStats() const {
    return cpu ? cpu->commStats() : cuda->commStats();
  }
};
} // namespace

struct DeviceGroup::Impl {
  const Plan &plan;
  bool mpi = false;
  /// The devices this process runs, with their endpoints and sessions.
  std::vector<int> devices;
  /// The host communicators (in-process or MPI): they gather the outputs
  /// and stats, and bootstrap NCCL.
  std::vector<std::unique_ptr<Communicator>> comms;
  /// With CommKind::Nccl, the NCCL endpoints the sessions exchange through.
  std::vector<std::unique_ptr<NcclCommunicator>> ncclComms;
  std::vector<Member> members;
  /// The rows of the last input split across the devices as a batch (whose
  /// empty shares are padded); -1 before one.
  int64_t batchRows = -1;

  explicit Impl(const Plan &plan) : plan(plan) {}

  absl::Status createSessions(const DeviceGroupOptions &options) {
    int threads = options.threadsPerDevice;
    if (threads <= 0)
      threads = std::max<int>(1, std::thread::hardware_concurrency() /
                                     plan.numDevices());
    int gpus = 0;
    if (options.backend == Backend::Cuda) {
      MOERT_ASSIGN_OR_RETURN(gpus, cudaDeviceCount());
    }
    // An MPI rank takes its host's GPU by local rank; threads of one
    // process spread over the visible GPUs.
    std::vector<int> gpuOf;
    for (int device : devices)
      gpuOf.push_back(groupGpu(device, mpi ? mpiLocalRank() : -1, gpus));
    MOERT_RETURN_IF_ERROR(createNccl(options, gpuOf));
    for (size_t i = 0; i < devices.size(); ++i) {
      Member member;
      if (options.backend == Backend::Cuda) {
        CudaSessionOptions cudaOptions;
        cudaOptions.threads = threads;
        cudaOptions.device = devices[i];
        cudaOptions.collectStats = options.collectStats;
        cudaOptions.communicator = sessionComm(i);
        cudaOptions.deviceMemory = options.deviceMemory;
        cudaOptions.expertPrefetch = options.expertPrefetch;
        member.gpu = gpuOf[i];
        cudaOptions.gpu = member.gpu;
        MOERT_ASSIGN_OR_RETURN(member.cuda,
                               CudaSession::create(plan, cudaOptions));
      } else {
        SessionOptions sessionOptions;
        sessionOptions.threads = threads;
        sessionOptions.device = devices[i];
        sessionOptions.collectStats = options.collectStats;
        sessionOptions.communicator = sessionComm(i);
        sessionOptions.deviceMemory = options.deviceMemory;
        sessionOptions.expertRead = options.expertRead;
        sessionOptions.expertPrefetch = options.expertPrefetch;
        sessionOptions.expertCache = options.expertCache;
        MOERT_ASSIGN_OR_RETURN(member.cpu,
                               Session::create(plan, sessionOptions));
      }
      members.push_back(std::move(member));
    }
    return absl::OkStatus();
  }

  /// The communicator the session of local device `i` exchanges through.
  Communicator *sessionComm(size_t i) const {
    return ncclComms.empty() ? comms[i].get() : ncclComms[i].get();
  }

  /// Creates the NCCL endpoints over the host communicators when the group
  /// exchanges through NCCL.
  absl::Status createNccl(const DeviceGroupOptions &options,
                          const std::vector<int> &gpuOf) {
    if (options.commKind != CommKind::Nccl)
      return absl::OkStatus();
    if (options.backend != Backend::Cuda)
      return absl::InvalidArgumentError(
          "the NCCL communicator runs between GPUs; it needs the cuda backend");
    NcclOptions ncclOptions;
    ncclOptions.timeoutSeconds = options.comm.timeoutSeconds;
    if (mpi) {
      MOERT_ASSIGN_OR_RETURN(
          std::unique_ptr<NcclCommunicator> endpoint,
          createNcclCommunicatorMpi(*comms[0], gpuOf[0], ncclOptions));
      ncclComms.push_back(std::move(endpoint));
      return absl::OkStatus();
    }
    std::vector<Communicator *> hosts;
    for (const auto &comm : comms)
      hosts.push_back(comm.get());
    MOERT_ASSIGN_OR_RETURN(ncclComms,
                           createNcclGroup(gpuOf, hosts, ncclOptions));
    return absl::OkStatus();
  }

  /// Rank 0's view of every device's `mine` (all of them in-process).
  absl::StatusOr<std::vector<std::vector<uint8_t>>>
  collect(std::vector<std::vector<uint8_t>> mine, absl::string_view what) {
    if (!mpi)
      return mine;
    std::vector<std::vector<uint8_t>> all;
    MOERT_RETURN_IF_ERROR(comms[0]->gather(mine[0], all, what));
    return all;
  }
};

DeviceGroup::DeviceGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceGroup::~DeviceGroup() = default;

absl::StatusOr<GroupEndpoints>
createGroupEndpoints(const Plan &plan, bool mpi, const CommOptions &options) {
  GroupEndpoints group;
  if (mpi) {
    MOERT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                           createPlanMpiCommunicator(plan, options));
    group.devices.push_back(comm->rank());
    group.comms.push_back(std::move(comm));
    return group;
  }
  group.comms = createInProcessGroup(plan.numDevices(), options);
  for (int d = 0; d < plan.numDevices(); ++d)
    group.devices.push_back(d);
  return group;
}

absl::StatusOr<std::unique_ptr<DeviceGroup>>
DeviceGroup::create(const Plan &plan, const DeviceGroupOptions &options) {
  return createGroup(plan, options, /*mpi=*/false);
}

absl::StatusOr<std::unique_ptr<DeviceGroup>>
DeviceGroup::createMpi(const Plan &plan, const DeviceGroupOptions &options) {
  return createGroup(plan, options, /*mpi=*/true);
}

absl::StatusOr<std::unique_ptr<DeviceGroup>>
DeviceGroup::createGroup(const Plan &plan, const DeviceGroupOptions &options,
                         bool mpi) {
  MOERT_RETURN_IF_ERROR(checkSignatures(plan));
  auto impl = std::make_unique<Impl>(plan);
  impl->mpi = mpi;
  MOERT_ASSIGN_OR_RETURN(GroupEndpoints endpoints,
                         createGroupEndpoints(plan, mpi, options.comm));
  impl->devices = std::move(endpoints.devices);
  impl->comms = std::move(endpoints.comms);
  MOERT_RETURN_IF_ERROR(impl->createSessions(options));
  return std::unique_ptr<DeviceGroup>(new DeviceGroup(std::move(impl)));
}

int DeviceGroup::numDevices() const { return impl_->plan.numDevices(); }

bool DeviceGroup::isRoot() const { return impl_->devices[0] == 0; }

std::vector<SessionBase *> DeviceGroup::localSessions() const {
  std::vector<SessionBase *> out;
  for (const Member &member : impl_->members)
    out.push_back(&member.session());
  return out;
}

std::vector<std::string> DeviceGroup::localDescriptions() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < impl_->members.size(); ++i) {
    const Member &member = impl_->members[i];
    out.push_back(member.cuda
                      ? absl::StrCat("device ", impl_->devices[i],
                                     ": CUDA device ", member.gpu, ", ",
                                     member.cuda->deviceDescription())
                      : absl::StrCat("device ", impl_->devices[i], ": cpu"));
  }
  return out;
}

absl::Status DeviceGroup::setInput(std::string_view name, DType dtype,
                                   const std::vector<int64_t> &shape,
                                   const void *data, size_t bytes) {
  Impl &g = *impl_;
  const TensorDesc *desc = findDesc(g.plan.inputs(0), name);
  if (!desc || !splitsAcrossDevices(*desc) || shape.empty()) {
    for (Member &member : g.members)
      MOERT_RETURN_IF_ERROR(
          member.session().setInput(name, dtype, shape, data, bytes));
    return absl::OkStatus();
  }
  // The whole batch must fit the symbol, which the shares alone cannot show.
  int64_t rows = shape[0];
  for (const SymbolDesc &symbol : g.plan.symbols())
    if (symbol.name == desc->dims[0].symbol &&
        (rows < symbol.min || rows > symbol.max))
      return absl::InvalidArgumentError(
          absl::StrCat("input '", absl::string_view(name.data(), name.size()),
                       "': dim 0 is ", rows, "; symbol '", symbol.name,
                       "' allows [", symbol.min, ", ", symbol.max, "]"));
  size_t rowBytes = rows ? bytes / static_cast<size_t>(rows) : 0;
  if (rowBytes * static_cast<size_t>(rows) != bytes)
    return absl::InvalidArgumentError(
        absl::StrCat("input '", absl::string_view(name.data(), name.size()),
                     "': ", bytes, " bytes do not split into ", rows, " rows"));
  // Every input split over the same symbol is padded alike (else a
  // padded [batch, seq] input would meet a 0-row [batch] one), and only
  // such inputs set the rows whose padded shares the outputs leave out, so
  // that the order of the setInput calls does not matter.
  bool pad = false;
  for (const TensorDesc &other : g.plan.inputs(0))
    pad |= splitsABatch(other) && other.dims[0].symbol == desc->dims[0].symbol;
  if (pad)
    g.batchRows = rows;
  for (size_t i = 0; i < g.members.size(); ++i) {
    auto [begin, end] = deviceRows(rows, g.devices[i], numDevices());
    // A device whose share of a batch is empty (fewer rows than devices)
    // still runs every step, collectives included: it gets a copy of row 0
    // as padding, so that its dense steps see the shapes a real row gives
    // (a reshape to [batch, -1, H] cannot infer -1 from 0 elements), and its
    // outputs are left out when the outputs are joined.
    if (pad && begin == end && rows > 0) {
      begin = 0;
      end = 1;
    }
    std::vector<int64_t> part = shape;
    part[0] = end - begin;
    MOERT_RETURN_IF_ERROR(g.members[i].session().setInput(
        name, dtype, part,
        static_cast<const uint8_t *>(data) + begin * rowBytes,
        (end - begin) * rowBytes));
  }
  return absl::OkStatus();
}

absl::Status DeviceGroup::run() {
  Impl &g = *impl_;
  if (g.mpi)
    return g.members[0].run();
  std::mutex mutex;
  std::vector<std::string> errors;
  auto runDevice = [&](size_t i) {
    absl::Status status = g.members[i].run();
    if (status.ok())
      return;
    if (!status.GetPayload(kFaultExitPayload))
      g.sessionComm(i)->abort(status);
    std::lock_guard<std::mutex> lock(mutex);
    errors.push_back(
        absl::StrCat("device ", g.devices[i], ": ", status.message()));
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < g.members.size(); ++i)
    threads.emplace_back(runDevice, i);
  runDevice(0);
  for (std::thread &thread : threads)
    thread.join();
  if (errors.empty())
    return absl::OkStatus();
  return absl::AbortedError(absl::StrJoin(errors, "\n  "));
}

int DeviceGroup::paddingRows() const {
  int padded = 0;
  if (impl_->batchRows > 0)
    for (int d = 0; d < numDevices(); ++d) {
      auto [begin, end] = deviceRows(impl_->batchRows, d, numDevices());
      padded += begin == end;
    }
  return padded;
}

absl::StatusOr<HostTensor> DeviceGroup::output(std::string_view name) {
  Impl &g = *impl_;
  const TensorDesc *desc = findDesc(g.plan.outputs(0), name);
  if (!desc)
    return absl::NotFoundError(absl::StrCat(
        "unknown output '", absl::string_view(name.data(), name.size()), "'"));
  std::vector<std::vector<uint8_t>> mine;
  for (Member &member : g.members) {
    MOERT_ASSIGN_OR_RETURN(TensorData data, member.session().output(name));
    mine.push_back(serialize(data));
  }
  MOERT_ASSIGN_OR_RETURN(
      std::vector<std::vector<uint8_t>> all,
      g.collect(std::move(mine),
                absl::StrCat("gather of output '",
                             absl::string_view(name.data(), name.size()),
                             "'")));
  if (!isRoot())
    return HostTensor();
  std::vector<std::vector<int64_t>> shapes(all.size());
  std::vector<TensorData> parts;
  for (size_t d = 0; d < all.size(); ++d) {
    MOERT_ASSIGN_OR_RETURN(TensorData part, deserialize(all[d], shapes[d]));
    parts.push_back(part);
  }
  std::vector<bool> padded(all.size(), false);
  if (g.batchRows > 0)
    for (size_t d = 0; d < all.size(); ++d) {
      auto [begin, end] = deviceRows(g.batchRows, int(d), numDevices());
      padded[d] = begin == end;
    }
  return assemble(*desc, std::move(parts), padded);
}

absl::StatusOr<std::vector<DeviceStats>> DeviceGroup::deviceStats() {
  Impl &g = *impl_;
  std::vector<std::vector<uint8_t>> mine;
  for (size_t i = 0; i < g.members.size(); ++i)
    mine.push_back(serializeDeviceStats(
        getDeviceStats(g.plan, g.members[i].session(), g.members[i].commStats(),
                       g.devices[i])));
  MOERT_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> all,
                         g.collect(std::move(mine), "gather of device stats"));
  std::vector<DeviceStats> out;
  for (const std::vector<uint8_t> &blob : all) {
    MOERT_ASSIGN_OR_RETURN(DeviceStats stats, deserializeDeviceStats(blob));
    out.push_back(stats);
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<uint8_t>>>
DeviceGroup::gather(std::vector<std::vector<uint8_t>> mine,
                    std::string_view what) {
  if (mine.size() != impl_->members.size())
    return absl::InvalidArgumentError(
        absl::StrCat("gather of ", mine.size(), " images from ",
                     impl_->members.size(), " local devices"));
  MOERT_ASSIGN_OR_RETURN(
      std::vector<std::vector<uint8_t>> all,
      impl_->collect(std::move(mine),
                     absl::string_view(what.data(), what.size())));
  if (!isRoot())
    all.clear();
  return all;
}

void DeviceGroup::resetStats() {
  for (Member &member : impl_->members)
    member.session().resetStats();
}

} // namespace moert
