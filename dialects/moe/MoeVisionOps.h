//===- MoeVisionOps.h - vision encoder ops of the moe dialect ---*- C++ -*-===//
//
// MoeVisionOps.td's ops (moe.conv), generated apart from
// MoeOps.h; the dialect registers them with the others.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECTS_MOE_MOEVISIONOPS_H
#define MOEC_DIALECTS_MOE_MOEVISIONOPS_H

#include "dialects/moe/MoeOps.h"

#define GET_OP_CLASSES
#include "dialects/moe/MoeVisionOps.h.inc"

#endif // MOEC_DIALECTS_MOE_MOEVISIONOPS_H
