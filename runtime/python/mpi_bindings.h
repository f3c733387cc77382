//===- mpi_bindings.h - moert's MPI functions for Python --------*- C++ -*-===//

#ifndef MOERT_PYTHON_MPI_BINDINGS_H
#define MOERT_PYTHON_MPI_BINDINGS_H

#include "absl/status/status.h"

#include <pybind11/pybind11.h>

/// Adds mpi_init, mpi_broadcast and mpi_finalize to the module; `check`
/// raises the Python form of a failed status.
void bindMpi(pybind11::module_ &m, void (*check)(const absl::Status &));

#endif // MOERT_PYTHON_MPI_BINDINGS_H
