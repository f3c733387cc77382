//===- MoeOps.td - moe dialect ops -------------------------*- tablegen -*-===//

#ifndef MOE_OPS_TD
#define MOE_OPS_TD

include "dialects/moe/MoeBase.td"
include "dialects/moe/MoeGraphOps.td"
include "dialects/moe/MoeSparseOps.td"
include "dialects/moe/MoeFusedOps.td"
include "dialects/moe/MoeQuantOps.td"

#endif // MOE_OPS_TD
