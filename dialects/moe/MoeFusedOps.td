//===- MoeFusedOps.td - fused regions ----------------------*- tablegen -*-===//
//
// Ops that group graph ops so that they execute as one step.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FUSED_OPS_TD
#define MOE_FUSED_OPS_TD

include "dialects/moe/MoeBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Moe_FusedElementwiseOp : Moe_Op<"fused_elementwise",
    [Moe_PlanStepWithAttrs<"FusedElementwise">,
    IsolatedFromAbove, Pure, SingleBlock, Moe_Elementwise, Moe_InPlaceable]> {
  let summary = "A chain of elementwise ops executed as one step";
  let description = [{
    Groups float32 elementwise graph ops so that the runtime computes them in
    one pass over the data instead of one pass (and one intermediate buffer)
    per op. The body's block arguments are the operands; the body holds the
    original graph ops and `moe.yield`s the values used outside the group.
    Operands broadcast (numpy rules) to one iteration shape, which every
    result has. Produced by `moe-fuse-elementwise`.

    Example:
    ```mlir
    %y = moe.fused_elementwise ins(%x, %b : tensor<?x16xf32>, tensor<16xf32>)
        -> tensor<?x16xf32> {
    ^bb0(%a: tensor<?x16xf32>, %c: tensor<16xf32>):
      %0 = moe.add %a, %c : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
      %1 = moe.sigmoid %0 : (tensor<?x16xf32>) -> tensor<?x16xf32>
      moe.yield %1 : tensor<?x16xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Moe_Tensor>:$inputs);
  let results = (outs Variadic<Moe_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `ins` `(` $inputs `:` type($inputs) `)` (`->` type($outputs)^)? $body
    attr-dict
  }];
  let hasVerifier = 1;
}

def Moe_YieldOp : Moe_Op<"yield",
    [Pure, Terminator, HasParent<"FusedElementwiseOp">]> {
  let summary = "Returns the values of a fused region";
  let description = [{
    Terminates the body of `moe.fused_elementwise`; its operands become the
    fused op's results, in order.

    Example:
    ```mlir
    moe.yield %1, %2 : tensor<?x16xf32>, tensor<?x16xf32>
    ```
  }];
  let arguments = (ins Variadic<Moe_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def Moe_AttentionOp : Moe_Op<"attention",
    [Moe_PlanStepWithAttrs<"Attention">,
    Pure, InferTypeOpAdaptorWithIsCompatible, AttrSizedOperandSegments]> {
  let summary = "Scaled dot-product attention, softmax(Q K^T scale + mask) V";
  let description = [{
    Computes, for every batch b, query head h and query row i,

        t[j]   = scale * dot(query[b, h, i, :], key[b', g, j, :])
        s[j]   = softcap * tanh(t[j] / softcap)     (softcap > 0; else t[j])
                 + mask[b, h, i, j]                 (mask optional)
        m      = max(max_j s[j], sinks[h])          (sinks optional)
        p[j]   = exp(s[j] - m) / (sum_k exp(s[k] - m) + exp(sinks[h] - m))
        out[b, h, i, :] = sum_j p[j] * value[b', g, j, :]

    with `g = h / (H / Hkv)` (grouped-query attention: `H / Hkv` query heads
    share one key/value head, the index mapping that replaces the exporters'
    `repeat_kv` copies) and `b' = b`, or 0 when the keys have batch 1.
    Without sinks the sink's term is absent (a plain softmax over j).

    A sink (gpt-oss's attention sinks, onnxruntime GroupQueryAttention's
    `head_sink`) is one extra logit per query head that takes probability
    mass but has no value, so a row may attend to "nothing"; a row whose
    keys are all masked with -inf then gives zeros. The soft cap (Gemma 2,
    GroupQueryAttention's `softcap`) bounds the scaled scores before the mask
    is added, in onnxruntime's order, so that -inf mask entries stay -inf.

    Shapes: `query [B, H, Sq, D]`, `key [Bkv, Hkv, Skv, D]`,
    `value [Bkv, Hkv, Skv, Dv]` with `Bkv` in {1, B} and `Hkv` dividing `H`;
    the additive `mask` has rank 4 and each of its dimensions is 1 or the
    corresponding one of `[B, H, Sq, Skv]` (numpy broadcasting into the
    scores, never beyond them); `sinks` is `[H]`; the result is
    `[B, H, Sq, Dv]`. The mask is whatever the graph computed (causal,
    padding, or both): causality is never assumed. `softcap` is finite and
    non-negative, 0 meaning no cap. float32 only. Produced by
    `moe-fuse-attention` and the GroupQueryAttention importer.

    Example:
    ```mlir
    %o = moe.attention %q, %k, %v mask %m scale 0.125
        : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>,
          tensor<1x1x?x?xf32> -> tensor<1x8x?x16xf32>
    %p = moe.attention %q, %k, %v mask %m sinks %s scale 0.125 softcap 30.0
        : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>,
          tensor<1x1x?x?xf32>, tensor<8xf32> -> tensor<1x8x?x16xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$query,
                       RankedTensorOf<[F32]>:$key,
                       RankedTensorOf<[F32]>:$value,
                       Optional<RankedTensorOf<[F32]>>:$mask,
                       Optional<RankedTensorOf<[F32]>>:$sinks,
                       F32Attr:$scale,
                       DefaultValuedAttr<F32Attr, "0.0f">:$softcap);
  let results = (outs RankedTensorOf<[F32]>:$output);
  // The optional operands' types follow the value's in operand order; a
  // custom directive tells a lone sink's type from a lone mask's by the
  // operands parsed before (two optional `, type` groups would be ambiguous).
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)? (`sinks` $sinks^)?
    `scale` $scale (`softcap` $softcap^)? attr-dict `:`
    type($query) `,` type($key) `,`
    custom<ValueAndOptionalTypes>(type($value), ref($mask), type($mask),
                                  ref($sinks), type($sinks))
    `->` type($output)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Parses the value's type, then `, type` for each of the optional
    /// operands `mask` and `sinks` that is present, in that order.
    static ::mlir::ParseResult parseValueAndOptionalTypes(
        ::mlir::OpAsmParser &parser, ::mlir::Type &valueType,
        const std::optional<::mlir::OpAsmParser::UnresolvedOperand> &mask,
        ::mlir::Type &maskType,
        const std::optional<::mlir::OpAsmParser::UnresolvedOperand> &sinks,
        ::mlir::Type &sinksType);
    /// Prints the value's type and `, type` for each present optional
    /// operand.
    static void printValueAndOptionalTypes(::mlir::OpAsmPrinter &printer,
                                           ::mlir::Operation *,
                                           ::mlir::Type valueType,
                                           ::mlir::Value mask,
                                           ::mlir::Type maskType,
                                           ::mlir::Value sinks,
                                           ::mlir::Type sinksType);
  }];
  let extraClassDefinition = [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange lhs,
                                            ::mlir::TypeRange rhs) {
      return ::moec::moe::areCompatibleTypes(lhs, rhs);
    }
  }];
}

def Moe_GatedDeltaRuleOp : Moe_Op<"gated_delta_rule",
    [Moe_PlanStepWithAttrs<"GatedDeltaRule">,
    Pure, InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "The gated delta rule of linear attention (Gated DeltaNet)";
  let description = [{
    Runs the recurrence of onnxruntime's com.microsoft LinearAttention with
    `update_rule = "gated_delta"` (Qwen3.5's Gated DeltaNet layers). For
    every batch b and value head h, with the state S = state[b, h] (a
    [Dk, Dv] matrix), for t = 0 .. S - 1 in order:

        S       = exp(decay[b, t, h]) * S
        kv      = S^T k_t                          ([Dv])
        delta   = beta[b, t, h] * (v_t - kv)
        S       = S + k_t delta^T                  (outer product)
        out[b, t, h, :] = scale * S^T q_t

    where `q_t = query[b, t, h / (Hv / Hq), :]`,
    `k_t = key[b, t, h / (Hv / Hk), :]` and `v_t = value[b, t, h, :]`: the
    query and key heads are shared by `Hv / Hq` (`Hv / Hk`) consecutive value
    heads. `new_state[b, h]` is S after the last token (the state itself
    when S = 0). The decay is the log of the factor (onnxruntime's
    LinearAttentionGate gives `-exp(A_log) * softplus(a + dt_bias)`); the
    readout uses the updated state.

    Shapes: `query [B, S, Hq, Dk]`, `key [B, S, Hk, Dk]`,
    `value [B, S, Hv, Dv]`, `state [B, Hv, Dk, Dv]`, `decay [B, S, Hv]`,
    `beta [B, S, Hv]`, with Hq and Hk dividing Hv; `output [B, S, Hv, Dv]`
    and `new_state [B, Hv, Dk, Dv]`. float32 only. Produced by the
    LinearAttention importer (which reshapes onnxruntime's packed
    `[B, S, H * D]` operands).

    Example:
    ```mlir
    %o, %s = moe.gated_delta_rule %q, %k, %v, %st, %g, %beta scale 0.25
        : tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x4x16xf32>,
          tensor<1x4x16x16xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32>
        -> tensor<1x?x4x16xf32>, tensor<1x4x16x16xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$query,
                       RankedTensorOf<[F32]>:$key,
                       RankedTensorOf<[F32]>:$value,
                       RankedTensorOf<[F32]>:$state,
                       RankedTensorOf<[F32]>:$decay,
                       RankedTensorOf<[F32]>:$beta,
                       F32Attr:$scale);
  let results = (outs RankedTensorOf<[F32]>:$output,
                      RankedTensorOf<[F32]>:$new_state);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $state `,` $decay `,` $beta
    `scale` $scale attr-dict `:` type($query) `,` type($key) `,`
    type($value) `,` type($state) `,` type($decay) `,` type($beta)
    `->` type($output) `,` type($new_state)
  }];
  let hasVerifier = 1;
  let extraClassDefinition = [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange lhs,
                                            ::mlir::TypeRange rhs) {
      return ::moec::moe::areCompatibleTypes(lhs, rhs);
    }
  }];
}

def Moe_CausalConvOp : Moe_Op<"causal_conv",
    [Moe_PlanStepWithAttrs<"CausalConv">,
    Pure, InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "A causal depthwise 1-D convolution that carries its state";
  let description = [{
    Runs onnxruntime's com.microsoft CausalConvWithState (LFM2's and
    Qwen3.5's short convolutions). For every batch b and channel c, with
    `x` the concatenation of `state[b, c, :]` (the K - 1 inputs before
    this call) and `input[b, c, :]` along the length:

        y[t]      = sum_{k=0}^{K-1} weight[c, k] * x[t + k] (+ bias[c])
        output[b, c, t] = silu ? y[t] * sigmoid(y[t]) : y[t]
        new_state[b, c, :] = the last K - 1 elements of x

    summing over k in ascending order, then the bias. Shapes:
    `input [B, C, L]`, `weight [C, K]`, `state [B, C, K - 1]`, `bias? [C]`;
    `output [B, C, L]` and `new_state [B, C, K - 1]`. float32 only.
    Produced by the CausalConvWithState importer (a first prompt's state is
    a zero constant). A token's output depends on the state and the tokens
    before it only, so continuous batching runs it per sequence from that
    sequence's state (docs/serving.md).

    Example:
    ```mlir
    %y, %s = moe.causal_conv %x, %w, %st, bias %b silu true
        : tensor<1x64x?xf32>, tensor<64x3xf32>, tensor<1x64x2xf32>,
          tensor<64xf32> -> tensor<1x64x?xf32>, tensor<1x64x2xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$input,
                       RankedTensorOf<[F32]>:$weight,
                       RankedTensorOf<[F32]>:$state,
                       Optional<RankedTensorOf<[F32]>>:$bias,
                       BoolAttr:$silu);
  let results = (outs RankedTensorOf<[F32]>:$output,
                      RankedTensorOf<[F32]>:$new_state);
  let assemblyFormat = [{
    $input `,` $weight `,` $state (`,` `bias` $bias^)? `silu` $silu attr-dict
    `:` type($input) `,` type($weight) `,` type($state) (`,` type($bias)^)?
    `->` type($output) `,` type($new_state)
  }];
  let hasVerifier = 1;
  let extraClassDefinition = [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange lhs,
                                            ::mlir::TypeRange rhs) {
      return ::moec::moe::areCompatibleTypes(lhs, rhs);
    }
  }];
}

#endif // MOE_FUSED_OPS_TD
