//===- Passes.td - moec pass definitions -------------------*- tablegen -*-===//

#ifndef MOEC_PASSES_TD
#define MOEC_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeRefineShapes : Pass<"moe-refine-shapes", "mlir::func::FuncOp"> {
  let summary = "Re-infer graph op result types after folding";
  let description = [{
    Walks the function in order and re-runs type inference on every op that
    implements `InferTypeOpInterface`. Where canonicalisation has folded shape
    arithmetic into constants (a Reshape's target shape, an Expand's shape),
    inference now yields more static dimensions; the pass writes them into the
    result types and updates the function's result types to match. Run it after
    `canonicalize`; it never makes a type less precise.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

#endif // MOEC_PASSES_TD
