//===- QuantOps.h - Helpers of moe.block_quantized_constant -----*- C++ -*-===//

#ifndef MOEC_DIALECTS_MOE_QUANTOPS_H
#define MOEC_DIALECTS_MOE_QUANTOPS_H

#include "mlir/IR/BuiltinAttributeInterfaces.h"

#include <optional>
#include <vector>

namespace moec::moe {

/// The little-endian bytes of `attr`'s elements in row-major order: a
/// resource blob or dense data as they are, a splat expanded into `storage`;
/// none when the data is missing or its size does not match the type.
std::optional<llvm::ArrayRef<char>> getElementBytes(mlir::ElementsAttr attr,
                                                    std::vector<char> &storage);

} // namespace moec::moe

#endif // MOEC_DIALECTS_MOE_QUANTOPS_H
