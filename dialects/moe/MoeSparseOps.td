//===- MoeSparseOps.td - sparse Mixture-of-Experts ops -----*- tablegen -*-===//
//
// The ops a detected Mixture-of-Experts layer is rewritten into.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SPARSE_OPS_TD
#define MOE_SPARSE_OPS_TD

include "dialects/moe/MoeBase.td"

#endif // MOE_SPARSE_OPS_TD
