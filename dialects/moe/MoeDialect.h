//===- MoeDialect.h - moe dialect -------------------------------*- C++ -*-===//

#ifndef MOEC_DIALECTS_MOE_MOEDIALECT_H
#define MOEC_DIALECTS_MOE_MOEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Dialect.h"

#include "dialects/moe/MoeDialect.h.inc"

#endif // MOEC_DIALECTS_MOE_MOEDIALECT_H
