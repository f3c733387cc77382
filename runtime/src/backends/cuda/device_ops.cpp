//===- device_ops.cpp - Which steps run on the GPU ------------------------===//

#include "backends/cuda/device_op.h"

namespace moert::cuda {

const DeviceOp *deviceOpFor(fb::OpKind op) {
  if (const DeviceOp *routing = routingDeviceOp(op))
    return routing;
  if (const DeviceOp *collective = collectiveDeviceOp(op))
    return collective;
  if (const DeviceOp *generic = genericDeviceOp(op))
    return generic;
  if (const DeviceOp *select = selectDeviceOp(op))
    return select;
  return expertDeviceOp(op);
}

} // namespace moert::cuda
