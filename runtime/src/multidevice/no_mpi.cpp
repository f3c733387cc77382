//===- no_mpi.cpp - The MPI entry points of a runtime built without MPI ---===//

#include "moert/comm.h"

#include <cstdlib>

namespace moert {

namespace {
absl::Status noMpi() {
  return absl::FailedPreconditionError(
      "this runtime was built without MPI (install libopenmpi-dev and "
      "reconfigure)");
}
} // namespace

bool mpiSupported() { return false; }
absl::Status mpiInit(int *, char ***) { return noMpi(); }
int mpiRank() { return -1; }
int mpiWorldSize() { return -1; }
void mpiFinalize() {}
void mpiAbort(int code) { std::_Exit(code); }
absl::Status mpiBroadcast(void *, size_t, double, absl::string_view) {
  return noMpi();
}
absl::StatusOr<std::unique_ptr<Communicator>>
createMpiCommunicator(const CommOptions &) {
  return noMpi();
}

} // namespace moert
