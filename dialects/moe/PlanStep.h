//===- PlanStep.h - the runtime step of an op -------------------*- C++ -*-===//
//
// The C++ side of dialects/moe/MoePlanStep.td: PlanStepOpInterface and the
// helpers the ODS families' `getPlanStepAttrs` call. The plan schema's types
// are only declared here; dialects/moe/PlanStepAttrs.cpp and the plan
// emitter include the schema (format/plan_generated.h) itself.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECTS_MOE_PLANSTEP_H
#define MOEC_DIALECTS_MOE_PLANSTEP_H

#include "mlir/IR/OpDefinition.h"

#include <cstdint>
#include <optional>

namespace moert::fb {
struct AttrsUnion;
enum class DType : uint8_t;
} // namespace moert::fb

namespace moec::moe {

/// The plan's element type of `type` (f32, f16, bf16, i64, i32, i1), if the
/// runtime has one.
std::optional<moert::fb::DType> getPlanDType(mlir::Type type);

/// Sets an AxisAttrs table of `axis` as the step's attributes.
mlir::LogicalResult setAxisStepAttrs(moert::fb::AttrsUnion &attrs,
                                     int64_t axis);

/// Sets a ReduceAttrs table as the step's attributes.
mlir::LogicalResult setReduceStepAttrs(moert::fb::AttrsUnion &attrs,
                                       bool keepdims, bool noopWithEmptyAxes);

} // namespace moec::moe

#include "dialects/moe/MoePlanStep.h.inc"

#endif // MOEC_DIALECTS_MOE_PLANSTEP_H
