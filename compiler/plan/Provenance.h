//===- Provenance.h - What a plan records about its compilation -*- C++ -*-===//
//
// moec records in every plan the compiler's release and commit, the model
// files with their SHA-256 digests and the options that shaped the plan, so
// that `moec inspect` can say where a plan came from (docs/plan-format.md,
// "Provenance").
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PLAN_PROVENANCE_H
#define MOEC_PLAN_PROVENANCE_H

#include "moert/moert.h"

#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <utility>

namespace moec::plan {

/// The provenance of a plan compiled from `modelPath` (and, for generation
/// plans with a prefill graph, `prefillPath`, else empty) with `flags`:
/// this build's version and commit and each file's SHA-256. Fails, with
/// one error on `errs` naming the file, when a model file cannot be read.
mlir::FailureOr<moert::ProvenanceDesc>
buildProvenance(llvm::StringRef modelPath, llvm::StringRef prefillPath,
                llvm::ArrayRef<std::pair<std::string, std::string>> flags,
                llvm::raw_ostream &errs);

} // namespace moec::plan

#endif // MOEC_PLAN_PROVENANCE_H
