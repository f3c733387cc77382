//===- Provenance.cpp - What a plan records about its compilation ---------===//

#include "compiler/plan/Provenance.h"

#include "format/version.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace moec::plan {
namespace {

/// The hex SHA-256 of the file at `path`, hashed from a read-only mapping
/// in 64 MiB pieces so that a large model is never copied.
FailureOr<std::string> hashFile(llvm::StringRef path, llvm::raw_ostream &errs) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!buffer) {
    errs << "moec: error: " << path << ": cannot read the model to record "
         << "its SHA-256: " << buffer.getError().message() << "\n";
    return failure();
  }
  llvm::SHA256 hasher;
  llvm::ArrayRef<uint8_t> bytes(
      reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart()),
      (*buffer)->getBufferSize());
  constexpr size_t kPiece = size_t(64) << 20;
  for (size_t at = 0; at < bytes.size(); at += kPiece)
    hasher.update(bytes.slice(at, std::min(kPiece, bytes.size() - at)));
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

} // namespace

FailureOr<moert::ProvenanceDesc>
buildProvenance(llvm::StringRef modelPath, llvm::StringRef prefillPath,
                llvm::ArrayRef<std::pair<std::string, std::string>> flags,
                llvm::raw_ostream &errs) {
  moert::ProvenanceDesc provenance;
  provenance.compilerVersion = std::string("moec ") + moert::getVersion();
  provenance.gitCommit = moert::getGitCommit();
  provenance.modelFile = modelPath.str();
  FailureOr<std::string> digest = hashFile(modelPath, errs);
  if (failed(digest))
    return failure();
  provenance.modelSha256 = *digest;
  if (!prefillPath.empty()) {
    provenance.prefillFile = prefillPath.str();
    digest = hashFile(prefillPath, errs);
    if (failed(digest))
      return failure();
    provenance.prefillSha256 = *digest;
  }
  provenance.flags.assign(flags.begin(), flags.end());
  return provenance;
}

} // namespace moec::plan
