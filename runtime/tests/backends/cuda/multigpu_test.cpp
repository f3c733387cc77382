//===- multigpu_test.cpp - Multi-GPU groups and the NCCL communicator -----===//
//
// What of the multi-GPU path runs without a GPU: the NCCL loader (the
// toolkit's libnccl loads and reports its version; a missing or foreign
// library fails with one message), NCCL error and version text, --comm
// parsing, the GPU of each group member, and the checks a CUDA session and
// a cuda device group make before they look for a GPU.
//
//===----------------------------------------------------------------------===//

#include "ep_plans.h"
#include "moert/cuda.h"
#include "moert/device_group.h"
#include "moert/nccl.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace moert {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(Nccl, VersionString) {
  EXPECT_EQ(ncclVersionString(22809), "2.28.9");
  EXPECT_EQ(ncclVersionString(21903), "2.19.3");
  EXPECT_EQ(ncclVersionString(20906), "2.9.6");
  // Before 2.9 the minor field had one digit.
  EXPECT_EQ(ncclVersionString(2708), "2.7.8");
}

TEST(Nccl, ErrorNamesTheCallTheResultAndTheDetail) {
  absl::Status error =
      ncclError("dispatch exchange of layer 0", "ncclGroupEnd", 6,
                "remote process exited or there was a network error",
                "peer 3 closed the connection");
  EXPECT_EQ(error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(error.message(),
            "dispatch exchange of layer 0: ncclGroupEnd failed: "
            "ncclRemoteError: remote process exited or there was a network "
            "error (peer 3 closed the connection)");
  // Without NCCL's last error, and for a code this version does not know.
  EXPECT_EQ(
      ncclError("counts", "ncclSend", 1, "unhandled cuda error", "").message(),
      "counts: ncclSend failed: ncclUnhandledCudaError: unhandled cuda "
      "error");
  EXPECT_EQ(ncclError("x", "ncclRecv", 42, nullptr, nullptr).message(),
            "x: ncclRecv failed: ncclResult 42: (no description)");
}

TEST(Nccl, ParseCommKind) {
  EXPECT_EQ(*parseCommKind("host"), CommKind::Host);
  EXPECT_EQ(*parseCommKind("nccl"), CommKind::Nccl);
  absl::StatusOr<CommKind> bad = parseCommKind("gloo");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--comm must be host or nccl, not 'gloo'");
}

TEST(Nccl, MissingLibraryIsOneClearError) {
  absl::StatusOr<NcclLibraryInfo> info =
      loadNccl("/nonexistent/dir/libnccl.so.2");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  if (!cudaBackendBuilt()) {
    EXPECT_THAT(std::string(info.status().message()),
                HasSubstr("MOERT_CUDA=OFF"));
    return;
  }
  EXPECT_THAT(std::string(info.status().message()),
              StartsWith("cannot load NCCL; "));
  EXPECT_THAT(std::string(info.status().message()),
              HasSubstr("/nonexistent/dir/libnccl.so.2"));
}

TEST(Nccl, ForeignLibraryNamesTheMissingEntryPoints) {
  if (!cudaBackendBuilt())
    GTEST_SKIP() << "built without CUDA";
  // libm loads everywhere and has none of NCCL's symbols.
  absl::StatusOr<NcclLibraryInfo> info = loadNccl("libm.so.6");
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(std::string(info.status().message()),
              StartsWith("libm.so.6 lacks ncclGetVersion, ncclGetUniqueId, "));
  EXPECT_THAT(std::string(info.status().message()),
              HasSubstr("needs NCCL >= 2.14"));
}

/// The toolkit's libnccl (present on this CI) loads without a GPU and
/// reports the version its header was made for.
TEST(Nccl, LoadsTheToolkitLibraryAndReadsItsVersion) {
  if (!cudaBackendBuilt())
    GTEST_SKIP() << "built without CUDA";
  absl::StatusOr<NcclLibraryInfo> info = loadNccl();
  if (!info.ok() &&
      !std::filesystem::exists("/usr/local/cuda/lib64/libnccl.so.2"))
    GTEST_SKIP() << "no libnccl here: " << info.status();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GE(info->versionCode, 21400);
  EXPECT_EQ(info->version, ncclVersionString(info->versionCode));
  EXPECT_FALSE(info->path.empty());
  // The same library by its path is the same version.
  if (std::filesystem::exists("/usr/local/cuda/lib64/libnccl.so.2")) {
    absl::StatusOr<NcclLibraryInfo> byPath =
        loadNccl("/usr/local/cuda/lib64/libnccl.so.2");
    ASSERT_TRUE(byPath.ok()) << byPath.status();
    EXPECT_EQ(byPath->versionCode, info->versionCode);
  }
}

/// NCCL runs one rank per GPU: a group whose devices share a GPU is refused
/// before any CUDA call (so this runs without a GPU).
TEST(Nccl, GroupNeedsDistinctGpus) {
  absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> group =
      createNcclGroup({0, 1, 0}, {nullptr, nullptr, nullptr});
  ASSERT_FALSE(group.ok());
  if (!cudaBackendBuilt() || !loadNccl().ok())
    return;
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr("the 3 devices map to CUDA devices 0, 1, 0"));
}

/// Sets or clears environment variables for one test, restoring them after.
class ScopedEnv {
public:
  void set(const char *name, const char *value) {
    const char *old = std::getenv(name);
    saved_.emplace_back(name,
                        old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }

private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(MultiGpu, LocalRankFromTheLauncher) {
  ScopedEnv env;
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
        "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMIX_LOCAL_RANK"})
    env.set(name, nullptr);
  EXPECT_EQ(mpiLocalRank(), -1);
  env.set("SLURM_LOCALID", "2");
  EXPECT_EQ(mpiLocalRank(), 2);
  // Open MPI's variable comes first; a malformed one is skipped.
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "5");
  EXPECT_EQ(mpiLocalRank(), 5);
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "five");
  EXPECT_EQ(mpiLocalRank(), 2);
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "-1");
  EXPECT_EQ(mpiLocalRank(), 2);
}

TEST(MultiGpu, GroupGpu) {
  // Threads of one process: device modulo the visible GPUs.
  EXPECT_EQ(groupGpu(0, -1, 8), 0);
  EXPECT_EQ(groupGpu(5, -1, 4), 1);
  // MPI ranks: the local rank picks, whatever the global device.
  EXPECT_EQ(groupGpu(13, 1, 8), 1);
  EXPECT_EQ(groupGpu(13, 9, 8), 1);
  EXPECT_EQ(groupGpu(3, -1, 0), 0);
}

/// A 2-device cuda plan whose schedules exchange rows (AllToAll).
absl::StatusOr<std::unique_ptr<Plan>> twoDeviceCudaPlan() {
  PlanWriter writer({Backend::Cuda, 2, 90});
  for (int d = 0; d < 2; ++d) {
    ScheduleBuilder &s = writer.schedule(d);
    int32_t x = s.addTensor("x", DType::F32, {4, 2});
    int32_t counts = s.addTensor("counts", DType::I64, {2});
    int32_t y = s.addTensor("y", DType::F32, {8, 2});
    int32_t received = s.addTensor("received", DType::I64, {2});
    s.addInput(x);
    s.addInput(counts);
    s.addStep(fb::OpKind::AllToAll, "exchange", {x, counts}, {y, received},
              testing::collectiveAttrs(2));
    s.addOutput(y);
  }
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.serialize());
  return Plan::loadFromMemory(bytes.data(), bytes.size());
}

TEST(MultiGpu, CudaSessionChecksItsCommunicatorBeforeTheGpu) {
  if (!cudaBackendBuilt())
    GTEST_SKIP() << "built without CUDA";
  absl::StatusOr<std::unique_ptr<Plan>> plan = twoDeviceCudaPlan();
  ASSERT_TRUE(plan.ok()) << plan.status();

  CudaSessionOptions options;
  options.device = 1;
  absl::StatusOr<std::unique_ptr<CudaSession>> session =
      CudaSession::create(**plan, options);
  ASSERT_FALSE(session.ok());
  EXPECT_THAT(std::string(session.status().message()),
              HasSubstr("schedule 1 step 0 'exchange' (AllToAll) exchanges "
                        "rows between devices; the session needs a "
                        "communicator"));

  std::vector<std::unique_ptr<Communicator>> comms = createInProcessGroup(2);
  options.communicator = comms[0].get();
  session = CudaSession::create(**plan, options);
  ASSERT_FALSE(session.ok());
  EXPECT_THAT(std::string(session.status().message()),
              HasSubstr("communicator is device 0 of 2 but the session runs "
                        "device 1"));

  // With its endpoint, the schedule is accepted; only the GPU is missing.
  options.communicator = comms[1].get();
  session = CudaSession::create(**plan, options);
  if (cudaDeviceCount().ok())
    GTEST_SKIP() << "a CUDA device is present";
  ASSERT_FALSE(session.ok());
  EXPECT_THAT(std::string(session.status().message()),
              StartsWith("no CUDA device: "));
}

TEST(MultiGpu, CudaDeviceGroupWithoutGpuIsOneClearError) {
  absl::StatusOr<std::unique_ptr<Plan>> plan = twoDeviceCudaPlan();
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (cudaDeviceCount().ok())
    GTEST_SKIP() << "a CUDA device is present";
  DeviceGroupOptions options;
  options.backend = Backend::Cuda;
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
      DeviceGroup::create(**plan, options);
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(std::string(group.status().message()),
              StartsWith("no CUDA device: "));
  // The cpu backend refuses the cuda plan as before.
  options.backend = Backend::Cpu;
  group = DeviceGroup::create(**plan, options);
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr("the plan targets the cuda backend"));
}

} // namespace
} // namespace moert
