//===- SparseOps.cpp - sparse Mixture-of-Experts ops ----------------------===//
//
// Verifiers of the router, dispatch, experts, combine and all_to_all ops.
//
//===----------------------------------------------------------------------===//

#include "dialects/moe/MoeOps.h"

using namespace mlir;
using namespace moec::moe;
