//===- mpi_bindings.cpp - moert's MPI functions for Python ----------------===//
//
// What a Python program needs to run an expert-parallel plan under mpirun
// (one device per rank, moert::GroupGenerator::createMpi): initialise MPI,
// agree on work by broadcasting bytes from rank 0, finalise. moe-serve uses
// them: rank 0 serves HTTP and broadcasts each request, the other ranks
// follow (docs/serving.md). MPI is initialised MPI_THREAD_FUNNELED, so the
// thread that calls mpi_init() must make every later MPI call, generations
// included.
//
//===----------------------------------------------------------------------===//

#include "mpi_bindings.h"

#include "moert/comm.h"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace py = pybind11;

void bindMpi(py::module_ &m, void (*check)(const absl::Status &)) {
  m.def(
      "mpi_init",
      [check]() {
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = moert::mpiInit(nullptr, nullptr);
        }
        check(status);
        return py::make_tuple(moert::mpiRank(), moert::mpiWorldSize());
      },
      "Initialises MPI (once; under mpirun) and returns (rank, world size). "
      "Every later MPI call, generate() of an mpi=True Generator included, "
      "must come from this thread.");
  m.def(
      "mpi_broadcast",
      [check](py::object data, double timeoutSeconds) {
        const bool root = moert::mpiRank() == 0;
        if (root == data.is_none())
          throw py::value_error(
              root ? "rank 0 broadcasts: pass the bytes"
                   : "only rank 0 passes bytes; the other ranks pass None");
        std::string bytes = root ? std::string(py::bytes(data)) : "";
        uint64_t size = bytes.size();
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = moert::mpiBroadcast(&size, sizeof(size), timeoutSeconds,
                                       "broadcast of a message's size");
          if (status.ok()) {
            bytes.resize(size);
            if (size > 0)
              status = moert::mpiBroadcast(bytes.data(), size, timeoutSeconds,
                                           "broadcast of a message");
          }
        }
        check(status);
        return py::bytes(bytes);
      },
      py::arg("data"), py::arg("timeout_seconds") = 1e9,
      "Rank 0's bytes on every rank: rank 0 passes them, the others None. "
      "Waits up to timeout_seconds for every rank (the default: no limit "
      "that matters).");
  m.def(
      "mpi_finalize", [] { moert::mpiFinalize(); },
      "Finalises MPI if mpi_init() initialised it (from that thread).");
}
