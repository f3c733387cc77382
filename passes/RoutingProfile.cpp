//===- RoutingProfile.cpp - expected expert loads from moe-run --stats ----===//

#include "passes/RoutingProfile.h"

#include "format/file_io.h"

#include "llvm/Support/JSON.h"

#include <cmath>
#include <string>

using namespace mlir;

namespace moec {
/// Reads `path`: {"moe_layers": [{"tokens_per_expert": [n, ...]}, ...]}.
/// Every error names the file and the field.
FailureOr<RoutingProfile> readRoutingProfile(ModuleOp module, StringRef path) {
  auto fail = [&](const Twine &message) {
    module.emitError("routing profile '") << path << "': " << message;
    return failure();
  };
  // Only a regular file is read (a FIFO would block, /dev/zero never end).
  absl::StatusOr<moert::InputFile> file = moert::InputFile::open(path.str());
  if (!file.ok())
    return fail(std::string(file.status().message()));
  absl::StatusOr<std::vector<uint8_t>> bytes = file->readAll();
  if (!bytes.ok())
    return fail(std::string(bytes.status().message()));
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(
      StringRef(reinterpret_cast<const char *>(bytes->data()), bytes->size()));
  if (!json)
    return fail("not valid JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root)
    return fail("expected a JSON object at the top level");
  const llvm::json::Array *layers = root->getArray("moe_layers");
  if (!layers)
    return fail("field 'moe_layers' is missing or not an array");
  RoutingProfile profile;
  for (auto [index, layer] : llvm::enumerate(*layers)) {
    std::string field = "moe_layers[" + std::to_string(index) + "]";
    const llvm::json::Object *object = layer.getAsObject();
    if (!object)
      return fail("field '" + field + "' is not an object");
    const llvm::json::Array *counts = object->getArray("tokens_per_expert");
    if (!counts)
      return fail("field '" + field +
                  ".tokens_per_expert' is missing or not an array");
    SmallVector<double> &loads = profile.emplace_back();
    for (auto [e, count] : llvm::enumerate(*counts)) {
      std::optional<double> value = count.getAsNumber();
      if (!value || *value < 0 || !std::isfinite(*value))
        return fail("field '" + field + ".tokens_per_expert[" +
                    std::to_string(e) + "]' is not a non-negative number");
      loads.push_back(*value);
    }
  }
  return profile;
}

} // namespace moec
