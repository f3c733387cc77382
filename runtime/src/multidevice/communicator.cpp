//===- communicator.cpp - Backend-independent parts of the interface ------===//

#include "moert/comm.h"

#include "absl/strings/numbers.h"

#include <cstdlib>

namespace moert {

bool launchedByMpi() {
  // Open MPI's mpirun, and PMI/PMIx launchers (MPICH, Slurm).
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

int mpiLocalRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
        "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMIX_LOCAL_RANK"}) {
    const char *value = std::getenv(name);
    int rank = -1;
    // A malformed value is skipped rather than trusted: the next variable,
    // or the global rank, still picks a valid GPU.
    if (value && absl::SimpleAtoi(value, &rank) && rank >= 0)
      return rank;
  }
  return -1;
}

} // namespace moert
