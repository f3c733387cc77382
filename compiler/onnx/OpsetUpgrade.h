//===- OpsetUpgrade.h - Older ONNX opsets upgraded on import ----*- C++ -*-===//
//
// Models of default-domain opsets 7 to 12 (exported before opset 13) are
// brought to opset 13 with onnx's own version converter before moec reads
// them: its adapters rewrite each op whose semantics changed (attributes that
// became inputs, Softmax's 2-D coercion) into the newer ops that compute the
// same, and refuse an op they cannot carry over.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ONNX_OPSETUPGRADE_H
#define MOEC_COMPILER_ONNX_OPSETUPGRADE_H

#include <cstdint>
#include <string>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace moec::onnx_import {

/// The oldest default-domain opset moec upgrades on import.
constexpr int64_t kMinUpgradableOpset = 7;

/// Upgrades `model` in place to the default-domain opset `target` with onnx's
/// checker and version converter. The weights (initializers) do not go
/// through the converter: all but small ones are set aside, declared to it as
/// inputs of their type, and put back, so that the upgrade holds no second
/// copy of them. Returns "" on success, else why the model cannot be upgraded (the
/// checker's or the converter's message); `model` is then unchanged.
std::string upgradeOpset(onnx::ModelProto &model, int64_t target);

} // namespace moec::onnx_import

#endif // MOEC_COMPILER_ONNX_OPSETUPGRADE_H
