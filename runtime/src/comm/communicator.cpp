//===- communicator.cpp - Backend-independent parts of the interface ------===//

#include "moert/comm.h"

#include <cstdlib>

namespace moert {

Communicator::~Communicator() = default;

bool launchedByMpi() {
  // Open MPI's mpirun, and PMI/PMIx launchers (MPICH, Slurm).
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

} // namespace moert
