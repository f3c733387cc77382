//===- MoeSparseOps.td - sparse Mixture-of-Experts ops -----*- tablegen -*-===//
//
// The ops a detected Mixture-of-Experts layer is rewritten into. A routed layer
// is the chain
//
//   moe.router -> moe.dispatch -> moe.experts -> moe.combine
//
// (plus `moe.shared_expert` for always-active experts, and, under expert
// parallelism, `moe.assign_slots` before the dispatch and `moe.all_to_all`,
// `moe.regroup` and `moe.ungroup` around `moe.experts`). The ops speak in
// these sizes, which their verifiers keep consistent across operands:
//
//   T  tokens (the leading dimension; dynamic `?` and bounded at compile time)
//   E  routed experts          k  experts chosen per token
//   H  hidden (model) size     F  expert intermediate size
//   N  rows of the expert-grouped token matrix (T * k, or its bound)
//
// Routing never needs a host-device sync: every data-dependent size (how many
// rows an expert gets, how many rows arrive from another device) is a value
// bounded by a static or symbolic dimension, never a shape.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SPARSE_OPS_TD
#define MOE_SPARSE_OPS_TD

include "dialects/moe/MoeBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

/// The activation of an expert's feed-forward network. The `*_glu` cases and
/// `clamped_swiglu` are gated: the first projection yields a gate `g` and an
/// up projection `u`, and the activation combines both into one vector of
/// size F.
def Moe_Activation : I32EnumAttr<"Activation", "expert activation function", [
    I32EnumAttrCase<"Relu", 0, "relu">,
    I32EnumAttrCase<"Gelu", 1, "gelu">,
    I32EnumAttrCase<"GeluTanh", 2, "gelu_tanh">,
    I32EnumAttrCase<"Silu", 3, "silu">,
    I32EnumAttrCase<"Identity", 4, "identity">,
    I32EnumAttrCase<"SiluGlu", 5, "silu_glu">,
    I32EnumAttrCase<"GeluGlu", 6, "gelu_glu">,
    I32EnumAttrCase<"GeluTanhGlu", 7, "gelu_tanh_glu">,
    I32EnumAttrCase<"ClampedSwiglu", 8, "clamped_swiglu">,
    I32EnumAttrCase<"ReluSquared", 9, "relu_squared">
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::moec::moe";
}
def Moe_ActivationAttr : EnumAttr<Moe_Dialect, Moe_Activation, "activation">;

/// How a fused first projection of a gated activation packs the gate and the
/// up projection along its output dimension of size 2F.
def Moe_GluLayout : I32EnumAttr<"GluLayout", "gate/up packing of a fused projection", [
    I32EnumAttrCase<"Concatenated", 0, "concatenated">,
    I32EnumAttrCase<"Interleaved", 1, "interleaved">
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::moec::moe";
}
def Moe_GluLayoutAttr : EnumAttr<Moe_Dialect, Moe_GluLayout, "glu_layout">;

/// The order of the two matrix dimensions of an expert weight.
def Moe_WeightLayout : I32EnumAttr<"WeightLayout", "expert weight matrix layout", [
    I32EnumAttrCase<"InOut", 0, "in_out">,
    I32EnumAttrCase<"OutIn", 1, "out_in">
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::moec::moe";
}
def Moe_WeightLayoutAttr : EnumAttr<Moe_Dialect, Moe_WeightLayout, "weight_layout">;

//===----------------------------------------------------------------------===//
// Base class and shared pieces
//===----------------------------------------------------------------------===//

/// A sparse op whose result types follow exactly from its operands and
/// attributes: the custom assembly prints no result types, so a refined
/// result type is obtained by refining the operands.
class Moe_SparseOp<string mnemonic, list<Trait> traits = []>
    : Moe_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])> {
  let hasVerifier = 1;
}

/// Class members parsing and printing enum attributes as bare keywords
/// (`softmax`, `in_out`) for the `custom<KeywordEnum>` directive.
defvar Moe_KeywordEnumDecl = [{
    template <typename AttrT>
    static ::mlir::ParseResult parseKeywordEnum(::mlir::OpAsmParser &parser,
                                                AttrT &attr) {
      using EnumT = decltype(attr.getValue());
      ::llvm::SMLoc loc = parser.getCurrentLocation();
      ::llvm::StringRef keyword;
      if (parser.parseKeyword(&keyword))
        return ::mlir::failure();
      std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword);
      if (!value)
        return parser.emitError(loc)
               << "unknown " << AttrT::getMnemonic() << " '" << keyword << "'";
      attr = AttrT::get(parser.getContext(), *value);
      return ::mlir::success();
    }
    template <typename AttrT>
    static void printKeywordEnum(::mlir::OpAsmPrinter &printer,
                                 ::mlir::Operation *, AttrT attr) {
      printer << stringifyEnum(attr.getValue());
    }
}];

/// The attributes describing an expert feed-forward network, shared by
/// `moe.experts` and `moe.shared_expert`.
defvar Moe_FfnAttrs = (ins
  Moe_ActivationAttr:$activation,
  Moe_WeightLayoutAttr:$weight_layout,
  OptionalAttr<Moe_GluLayoutAttr>:$glu_layout,
  OptionalAttr<F32Attr>:$alpha,
  OptionalAttr<F32Attr>:$beta,
  OptionalAttr<F32Attr>:$limit
);

/// The weight operands of an expert feed-forward network; the routed form has
/// a leading expert dimension on each.
defvar Moe_FfnWeights = (ins
  Moe_FloatTensor:$w1, Optional<Moe_FloatTensor>:$b1,
  Optional<Moe_FloatTensor>:$w3, Optional<Moe_FloatTensor>:$b3,
  Moe_FloatTensor:$w2, Optional<Moe_FloatTensor>:$b2
);

/// The assembly of the weights of an expert network.
defvar Moe_FfnWeightAssembly = [{
  `w1` $w1 `:` type($w1) (`b1` $b1^ `:` type($b1))?
  (`w3` $w3^ `:` type($w3))? (`b3` $b3^ `:` type($b3))?
  `w2` $w2 `:` type($w2) (`b2` $b2^ `:` type($b2))?
}];

/// The assembly of the attributes of an expert network.
defvar Moe_FfnAttrAssembly = [{
  `layout` custom<KeywordEnum>($weight_layout)
  oilist(`glu` custom<KeywordEnum>($glu_layout)
       | `alpha` $alpha | `beta` $beta | `limit` $limit)
  attr-dict
}];

/// The description of the expert network computation, shared by both ops.
defvar Moe_FfnDescription = [{
    **The expert network.** For a row `x` of size H, with `@` a matrix
    product over the weight's `in` dimension:

    ```
    h   = x @ w1 + b1                      (size F, or 2F for a fused gate)
    a   = act(h)                           (non-gated activations)
        | act(g) * u                       (gated activations)
    out = a @ w2 + b2                      (size H)
    ```

    Non-gated activations: `relu`, `relu_squared` (`relu(x)^2`, Primer's
    ReLU²), `gelu` (exact, erf-based), `gelu_tanh` (the tanh
    approximation), `silu` (`x * sigmoid(x)`), `identity`. Gated
    ones take a gate `g` and an up projection `u` of size F each:
    `silu_glu` (SwiGLU: `silu(g) * u`), `gelu_glu` (`gelu(g) * u`),
    `gelu_tanh_glu`, and `clamped_swiglu` (GPT-OSS, onnxruntime's `swiglu`):

    ```
    g' = min(g, limit);  u' = clamp(u, -limit, limit)
    a  = g' * sigmoid(alpha * g') * (u' + beta)
    ```

    `alpha` and `beta` are required for `clamped_swiglu` (GPT-OSS uses
    alpha = 1.702, beta = 1.0, limit = 7.0); without `limit` nothing is
    clamped. They are rejected for every other activation.

    A gated activation takes `g` and `u` either from two projections, `w1`
    (gate, with bias `b1`) and `w3` (up, with bias `b3`), or from a fused
    `w1` of output size 2F, whose packing `glu` gives: `concatenated` (gate
    is outputs `[0, F)`, up is `[F, 2F)`) or `interleaved` (gate is the even
    outputs `0, 2, ...`, up the odd ones). `glu` is required for a fused
    projection and rejected otherwise; `w3`/`b3` only appear with a gated
    activation.

    **Weight layout.** Weights are used in the layout they were exported in,
    so that memory-mapped weights are never transposed or copied: `layout
    in_out` stores each weight matrix as `[in, out]` (the `x @ W` form:
    transformers' fused `gate_up_proj`, GPT-OSS), `layout out_in` as `[out,
    in]` (the `x @ W^T` form: `nn.Linear.weight`, onnxruntime's MoE). A
    kernel implements the choice as the transpose flag of its GEMM. Biases are
    always `[out]`. The element types of all weights and biases equal the
    token element type.
}];

//===----------------------------------------------------------------------===//
// moe.router
//===----------------------------------------------------------------------===//

def Moe_RouterOp : Moe_SparseOp<"router", [Moe_PlanStepWithAttrs<"Router">]> {
  let summary = "Chooses the top-k experts of each token and their weights";
  let description = [{
    Turns router logits `[T, E]` into, per token, the indices of its `top_k`
    chosen experts (`indices`, `[T, k]` i64, best first) and the weights
    their outputs are combined with (`weights`, `[T, k]`, the logits'
    element type). Logits may also be `[B, S, E]`; results are then
    `[B, S, k]` and capacity is counted per sequence (see below).

    For each token, with `l` its logits:

    1. Scores: `s = softmax(l)` over the E experts, or `s = sigmoid(l)`
       elementwise (`score_function`). With `after_topk`, `s = l`: the
       softmax is taken over the k chosen logits in step 5 (GPT-OSS).
    2. Selection scores: `c = s + bias` when the optional selection bias
       `[E]` is given (DeepSeek-V3's `e_score_correction_bias`); the bias
       decides which experts are chosen but never enters the weights.
    3. Grouped selection (`groups n keep m`, DeepSeek-V3): the experts form
       `n` groups of E/n consecutive experts; a group's score is the sum of
       its two largest `c`; only the experts of the `m` best groups stay
       eligible.
    4. `indices` = the `top_k` eligible experts with the largest `c`, in
       descending order of `c`; ties go to the lower expert index.
    5. `w = s[indices]`; with `after_topk`, `w = softmax(w)` over the k.
    6. With `normalize`, `w = w / (sum(w) + 1e-20)` (the epsilon only keeps
       underflowed sigmoid scores finite; it is below float precision of any
       softmax sum).
    7. `w = w * scale` (`routed_scaling_factor`, default 1).
    8. With `capacity C`, each expert accepts at most C assignments per
       sequence (the whole `[T, E]` input, or each row of B). Assignments
       are accepted in priority order: all first choices in token order, then
       all second choices, and so on (for k = 1 this is Switch Transformers'
       cumulative-sum rule). A rejected assignment keeps its weight but its
       index becomes -1: `moe.dispatch` skips it, and `moe.combine` passes
       the token through scaled by that weight when given a pass-through
       input (Switch Transformers' dropped tokens).
    9. With `normalize_kept eps` (needs `capacity`), after capacity the
       weights are renormalised over each token's kept assignments
       (GShard / DeepSpeed top-2 gating): with `sum` the f32 sum of the
       kept weights in choice order, a kept `w_j` becomes
       `w_j / max(sum, eps)` and a rejected one 0 (DeepSpeed's
       `g / clamp(g1 * kept1 + g2 * kept2, min = eps)`). Unlike
       `normalize`, which divides before capacity, a token with one kept
       assignment gets weight 1 for it.

    The verifier checks `1 <= top_k <= E`, that `n` divides E into groups of
    at least 2 experts, `1 <= m <= n`, that the kept groups hold at least
    `top_k` experts, a positive finite scale, a positive capacity, and that
    `after_topk` is used only with softmax scores and without `normalize`
    (the softmax over the k already sums to one), and that `normalize_kept`
    has a positive finite epsilon, `capacity`, no `normalize` (the weights
    would be divided twice) and scale 1.

    Examples (the gate variants of real models):
    ```mlir
    // Mixtral: softmax, top-2, renormalised.
    %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x8xf32>
    // Qwen2-MoE: softmax, top-4, not renormalised.
    %w, %i = moe.router %logits top 4 softmax : tensor<?x60xf32>
    // DeepSeek-V3: sigmoid scores, selection bias, 8 groups keep 4, scaled.
    %w, %i = moe.router %logits bias %b top 8 sigmoid groups 8 keep 4
               normalize scale 2.5 : tensor<?x256xf32>, tensor<256xf32>
    // GPT-OSS: top-4 on the logits, softmax over the four.
    %w, %i = moe.router %logits top 4 softmax after_topk : tensor<?x32xf32>
    // Switch Transformers: top-1 with 64 slots per expert and sequence.
    %w, %i = moe.router %logits top 1 softmax capacity 64 : tensor<?x?x8xf32>
    // GShard (DeepSpeed): top-2, 24 slots per expert, renormalised over
    // the kept assignments.
    %w, %i = moe.router %logits top 2 softmax capacity 24
               normalize_kept 1.1920929E-7 : tensor<?x4xf32>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$logits,
    Optional<Moe_FloatTensor>:$bias,
    Moe_ScoreFunctionAttr:$score_function,
    I64Attr:$top_k,
    UnitAttr:$score_after_topk,
    UnitAttr:$normalize,
    DefaultValuedAttr<F32Attr, "1.0f">:$routed_scaling_factor,
    DefaultValuedAttr<I64Attr, "1">:$n_group,
    DefaultValuedAttr<I64Attr, "1">:$topk_group,
    OptionalAttr<I64Attr>:$capacity,
    OptionalAttr<F32Attr>:$normalize_kept
  );
  let results = (outs Moe_FloatTensor:$weights, Moe_I64Tensor:$indices);
  let assemblyFormat = [{
    $logits (`bias` $bias^)? `top` $top_k custom<KeywordEnum>($score_function)
    oilist(`after_topk` $score_after_topk
         | `groups` $n_group `keep` $topk_group
         | `normalize` $normalize
         | `scale` $routed_scaling_factor
         | `capacity` $capacity
         | `normalize_kept` $normalize_kept)
    attr-dict `:` type($logits) (`,` type($bias)^)?
  }];
  let extraClassDeclaration = Moe_KeywordEnumDecl;
}

//===----------------------------------------------------------------------===//
// moe.dispatch
//===----------------------------------------------------------------------===//

def Moe_DispatchOp : Moe_SparseOp<"dispatch",
    [Moe_PlanStepWithAttrs<"Dispatch">]> {
  let summary = "Groups token rows by the expert they are routed to";
  let description = [{
    Copies each token row once per routed assignment into a matrix whose rows
    are grouped by expert. `tokens` is `[T, H]`, `indices` the router's
    `[T, k]` expert indices (-1 marks an assignment dropped for capacity).
    Results:

    - `rows` `[T*k, H]`: the assignments `(t, j)` with `indices[t, j] >= 0`,
      grouped by expert in increasing order, each group in increasing `t`
      (then `j`). Rows past `offsets[E]` are padding whose contents are
      unspecified.
    - `offsets` `[E+1]` i64: expert `e` owns rows `[offsets[e],
      offsets[e+1])`; `offsets[0] = 0` and `offsets[E]` is the number of
      kept assignments (at most T*k: the row count is a bound, never a
      data-dependent shape).
    - `source` `[T*k]` i64: for each row, the flat assignment index
      `t * k + j` it came from (so its token is `source / k`), and -1 for
      padding rows. `moe.combine` uses it to scatter results back.

    An index outside `[-1, num_experts)` is a run-time error.

    Example:
    ```mlir
    %rows, %offsets, %source = moe.dispatch %x, %indices experts 8
        : tensor<?x16xf32>, tensor<?x2xi64>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$tokens,
    Moe_I64Tensor:$indices,
    I64Attr:$num_experts
  );
  let results = (outs
    Moe_FloatTensor:$rows,
    Moe_I64Tensor:$offsets,
    Moe_I64Tensor:$source
  );
  let assemblyFormat = [{
    $tokens `,` $indices `experts` $num_experts attr-dict
    `:` type($tokens) `,` type($indices)
  }];
}

//===----------------------------------------------------------------------===//
// moe.experts
//===----------------------------------------------------------------------===//

def Moe_ExpertsOp : Moe_SparseOp<"experts",
    [Moe_PlanStepWithAttrs<"Experts">,
    AttrSizedOperandSegments, Moe_InPlaceable]> {
  let summary = "Runs each expert's feed-forward network on its group of rows";
  let description = !strconcat([{
    A grouped expert FFN over stacked weights. `tokens` `[N, H]` holds rows
    grouped by expert as `moe.dispatch` produces them; `offsets` `[E+1]`
    gives expert `e` the rows `[offsets[e], offsets[e+1])`, and each such row
    goes through expert `e`'s network. The result `[N, H]` has the tokens'
    type; rows at and past `offsets[E]` are unspecified.

    Every weight has a leading expert dimension E: with `layout in_out`,
    `w1 : [E, H, F]` (`[E, H, 2F]` fused), `w3 : [E, H, F]`,
    `w2 : [E, F, H]`; with `layout out_in` the last two dimensions of each
    are swapped. Biases: `b1 : [E, F]` (`[E, 2F]` fused), `b3 : [E, F]`,
    `b2 : [E, H]`.
  }], Moe_FfnDescription, [{

    Examples:
    ```mlir
    // Mixtral: SwiGLU with separate gate (w1) and up (w3) projections.
    %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
           w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
           w2 %w2 : tensor<8x16x32xf32> layout out_in
    // GPT-OSS: interleaved fused gate/up, biases, clamped SwiGLU.
    %y = moe.experts clamped_swiglu %rows, %offsets
           : tensor<?x16xf32>, tensor<33xi64>
           w1 %w13 : tensor<32x16x64xf32> b1 %b13 : tensor<32x64xf32>
           w2 %w2 : tensor<32x32x16xf32> b2 %b2 : tensor<32x16xf32>
           layout in_out glu interleaved alpha 1.702 beta 1.0 limit 7.0
    ```
  }]);
  let arguments = !con((ins Moe_FloatTensor:$tokens, Moe_I64Tensor:$offsets),
                       Moe_FfnWeights, Moe_FfnAttrs);
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = !strconcat([{
    custom<KeywordEnum>($activation) $tokens `,` $offsets
    `:` type($tokens) `,` type($offsets)
  }], Moe_FfnWeightAssembly, Moe_FfnAttrAssembly);
  let extraClassDeclaration = !strconcat(Moe_KeywordEnumDecl, [{
    /// Whether `activation` combines a gate and an up projection.
    static bool isGated(::moec::moe::Activation activation);
    /// F, the intermediate size of each expert (dynamic when unknown).
    int64_t getInterSize();
  }]);
}

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

def Moe_CombineOp : Moe_SparseOp<"combine", [Moe_PlanStep<"Combine">,
    AttrSizedOperandSegments]> {
  let summary = "Weighted sum of each token's expert outputs, in token order";
  let description = [{
    Undoes `moe.dispatch`: `expert_outputs` `[N, H]` are the rows of
    `moe.experts`, `source` `[N]` the dispatch's row sources, `weights` the
    router's `[T, k]` weights. The result `[T, H]` (the expert outputs'
    element type) is

    ```
    out[t] = sum over rows r with source[r] = t*k + j  of  weights[t, j] * expert_outputs[r]
           + sum over j with indices[t, j] = -1        of  weights[t, j] * passthrough[t]
    ```

    Rows with `source[r] = -1` (padding) are ignored. The second term is
    present only with the optional `passthrough` `[T, H]` and `indices`
    `[T, k]` operands (always given together): a token whose assignment was
    dropped for capacity then passes through scaled by its router weight, as
    in Switch Transformers. Without them, dropped assignments contribute
    nothing. `weights` may have a different float type than the outputs
    (routers often run in f32).

    Examples:
    ```mlir
    %y = moe.combine %out, %source, %w
           : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    %y = moe.combine %out, %source, %w passthrough %x, %i
           : tensor<?x16xf32>, tensor<?xi64>, tensor<?x1xf32>,
             tensor<?x16xf32>, tensor<?x1xi64>
    ```
  }];
  let arguments = (ins
    Moe_FloatTensor:$expert_outputs,
    Moe_I64Tensor:$source,
    Moe_FloatTensor:$weights,
    Optional<Moe_FloatTensor>:$passthrough,
    Optional<Moe_I64Tensor>:$indices
  );
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = [{
    $expert_outputs `,` $source `,` $weights
    (`passthrough` $passthrough^ `,` $indices)? attr-dict
    `:` type($expert_outputs) `,` type($source) `,` type($weights)
    (`,` type($passthrough)^ `,` type($indices))?
  }];
}

//===----------------------------------------------------------------------===//
// moe.shared_expert
//===----------------------------------------------------------------------===//

def Moe_SharedExpertOp : Moe_SparseOp<"shared_expert",
    [Moe_PlanStepWithAttrs<"SharedExpert">, AttrSizedOperandSegments]> {
  let summary = "An expert every token goes through, optionally gated";
  let description = !strconcat([{
    A dense expert FFN on all tokens `[T, H]` (DeepSeek's shared experts,
    Qwen2-MoE's shared expert); the result `[T, H]` has the tokens' type and
    is added to the routed experts' combined output by the surrounding
    graph. The weights are those of one expert of `moe.experts`, without the
    leading expert dimension: with `layout in_out`, `w1 : [H, F]` (`[H, 2F]`
    fused), `w3 : [H, F]`, `w2 : [F, H]`, swapped for `out_in`; biases
    `b1 : [F]` (`[2F]`), `b3 : [F]`, `b2 : [H]`.

    With the optional `gate` (`[H]`, `[H, 1]` or `[1, H]`, all the same
    vector), each token's output is scaled by `sigmoid(x . gate)`, as
    Qwen2-MoE's `shared_expert_gate` does.
  }], Moe_FfnDescription, [{

    Examples:
    ```mlir
    // Qwen2-MoE: SwiGLU shared expert with a sigmoid gate.
    %s = moe.shared_expert silu_glu %x : tensor<?x16xf32>
           w1 %wg : tensor<64x16xf32> w3 %wu : tensor<64x16xf32>
           w2 %wd : tensor<16x64xf32> gate %g : tensor<1x16xf32> layout out_in
    // DeepSeek-V3: a plain shared expert with a fused concatenated gate/up.
    %s = moe.shared_expert silu_glu %x : tensor<?x16xf32>
           w1 %w13 : tensor<16x128xf32> w2 %w2 : tensor<64x16xf32>
           layout in_out glu concatenated
    ```
  }]);
  let arguments = !con((ins Moe_FloatTensor:$tokens), Moe_FfnWeights,
                       (ins Optional<Moe_FloatTensor>:$gate), Moe_FfnAttrs);
  let results = (outs Moe_FloatTensor:$output);
  let assemblyFormat = !strconcat(
    "custom<KeywordEnum>($activation) $tokens `:` type($tokens)",
    Moe_FfnWeightAssembly, "(`gate` $gate^ `:` type($gate))?",
    Moe_FfnAttrAssembly);
  let extraClassDeclaration = !strconcat(Moe_KeywordEnumDecl, [{
    /// F, the intermediate size of the expert (dynamic when unknown).
    int64_t getInterSize();
  }]);
}

//===----------------------------------------------------------------------===//
// moe.segment
//===----------------------------------------------------------------------===//

def Moe_SegmentOp : Moe_SparseOp<"segment"> {
  let summary = "The positions of one expert's rows among rows sorted by expert";
  let description = [{
    The segment form of grouped experts (transformers' `grouped_mm`): `ids`
    `[N]` i64 are expert indices sorted ascending (the values of a stable
    argsort of the flattened top-k ids), and the result is the ascending
    positions `i` with `ids[i] == expert`: for sorted ids the contiguous
    range `[#(ids < expert), #(ids <= expert))`, whose length is bounded by
    N (the T*k assignments), never by a data-dependent size.

    `fallback` is the exporter's own computation of the same vector (a
    `range(ends[e-1], ends[e])` over the cum_sum of a histogram of `ids`),
    and the op evaluates to it: `moe-canonicalize-segments` builds a
    moe.segment only where it proves the two equal, and
    `moe-detect-segment-experts` replaces every moe.segment it does not
    absorb into moe.dispatch by its `fallback`, so that no plan holds one.

    Example:
    ```mlir
    %rows1 = moe.segment %sorted expert 1 fallback %range1
        : tensor<?xi64>, tensor<?xi64>
    ```
  }];
  let arguments = (ins Moe_I64Tensor:$ids, Moe_I64Tensor:$fallback,
                       I64Attr:$expert);
  let results = (outs Moe_I64Tensor:$rows);
  let assemblyFormat = [{
    $ids `expert` $expert `fallback` $fallback attr-dict
    `:` type($ids) `,` type($fallback)
  }];
}

//===----------------------------------------------------------------------===//
// Expert parallelism: moe.all_to_all and the ops around it
//===----------------------------------------------------------------------===//

/// The operands, attributes and results of an all-to-all exchange, shared by
/// `moe.all_to_all` and `moe.all_to_all_start`.
defvar Moe_AllToAllArguments = (ins
  Moe_Tensor:$data,
  Moe_I64Tensor:$send_counts,
  Optional<Moe_Tensor>:$rows_like,
  StrAttr:$group,
  I64Attr:$num_devices
);
defvar Moe_AllToAllResults = (outs Moe_Tensor:$received,
                                   Moe_I64Tensor:$recv_counts);
defvar Moe_AllToAllAssembly = [{
  $data `,` $send_counts `group` $group `devices` $num_devices
  (`like` $rows_like^)? attr-dict
  `:` type($data) `,` type($send_counts) (`,` type($rows_like)^)?
}];
defvar Moe_AllToAllSemantics = [{
    On each of the `num_devices` devices of the device group `group` (a mesh
    axis name), `data` `[R, ...]` holds rows grouped by destination: the
    first `send_counts[0]` rows go to device 0, the next `send_counts[1]` to
    device 1, and so on (`send_counts` is `[num_devices]` i64; rows past
    their sum are not sent). Every device receives into `received` the rows
    sent to it, grouped by source device in device order, and in
    `recv_counts` `[num_devices]` i64 how many came from each device. Rows
    past the sum of `recv_counts` are unspecified.

    `received` keeps the trailing dimensions and element type of `data`. Its
    first dimension is the bound `num_devices * R` (every device may send all
    its rows to one device), or `?` when R is dynamic, bounded by
    `num_devices` times R's bound. With `like %t`, it is instead the leading
    size of `%t`: the return exchange of expert parallelism sends every row
    back to the device it came from, so a device receives exactly as many
    rows as it dispatched (`%t` is its dispatched rows). Fewer rows than the
    counts announce is a run-time error. Counts are exchanged with the data,
    so no size is ever read back to the host.
}];

def Moe_AllToAllOp : Moe_SparseOp<"all_to_all",
    [Moe_PlanStepWithAttrs<"AllToAll">]> {
  let summary = "Exchanges row blocks between the devices of a group";
  let description = !strconcat([{
    The collective of expert parallelism.
  }], Moe_AllToAllSemantics, [{

    Examples:
    ```mlir
    // Dispatch: rows grouped by destination device.
    %recv, %counts = moe.all_to_all %rows, %send group "ep" devices 4
                       : tensor<?x16xf32>, tensor<4xi64>
    // Combine: every row goes back to the device that sent it.
    %back, %n = moe.all_to_all %out, %counts group "ep" devices 4 like %rows
                  : tensor<?x16xf32>, tensor<4xi64>, tensor<?x16xf32>
    ```
  }]);
  let arguments = Moe_AllToAllArguments;
  let results = Moe_AllToAllResults;
  let assemblyFormat = Moe_AllToAllAssembly;
}

def Moe_AllToAllStartOp : Moe_Op<"all_to_all_start",
    [Moe_PlanStepWithAttrs<"AllToAllStart">,
    InferTypeOpAdaptor]> {
  let summary = "Begins an all-to-all exchange that a later op completes";
  let description = !strconcat([{
    The first half of `moe.all_to_all`, for overlapping communication with
    computation (micro-batches): it exchanges the counts (a small blocking
    exchange) and begins the exchange of the rows; the
    `moe.all_to_all_wait` that names the same four tensors completes it.
    `received` must not be read, and `data` not written, before that wait.
    The op has side effects: program order between a start, its wait and the
    readers of `received` is part of the semantics, and passes must not move
    them across each other. The exchange itself:
  }], Moe_AllToAllSemantics, [{

    Example:
    ```mlir
    %recv, %counts = moe.all_to_all_start %rows, %send group "ep" devices 2
                       : tensor<?x16xf32>, tensor<2xi64>
    // ... steps that do not touch %rows, %send, %recv or %counts ...
    moe.all_to_all_wait %rows, %send, %recv, %counts
        : tensor<?x16xf32>, tensor<2xi64>, tensor<?x16xf32>, tensor<2xi64>
    ```
  }]);
  let arguments = Moe_AllToAllArguments;
  let results = Moe_AllToAllResults;
  let assemblyFormat = Moe_AllToAllAssembly;
  let hasVerifier = 1;
}

def Moe_AllToAllWaitOp : Moe_Op<"all_to_all_wait",
    [Moe_PlanStep<"AllToAllWait">]> {
  let summary = "Completes the exchange of a moe.all_to_all_start";
  let description = [{
    Waits until the exchange begun by the `moe.all_to_all_start` that
    produced `received` and `recv_counts` from `data`, `send_counts` (and
    `like`, when the start has it) has completed; afterwards `received`
    holds the rows. Naming all of the start's tensors keeps them alive (and
    unwritten) until the exchange is done. Each start has exactly one wait,
    after it in the same block.

    Example:
    ```mlir
    moe.all_to_all_wait %rows, %send, %recv, %counts
        : tensor<?x16xf32>, tensor<2xi64>, tensor<?x16xf32>, tensor<2xi64>
    ```
  }];
  let arguments = (ins
    Moe_Tensor:$data,
    Moe_I64Tensor:$send_counts,
    Optional<Moe_Tensor>:$rows_like,
    Moe_Tensor:$received,
    Moe_I64Tensor:$recv_counts
  );
  let assemblyFormat = [{
    $data `,` $send_counts `,` $received `,` $recv_counts
    (`like` $rows_like^)? attr-dict
    `:` type($data) `,` type($send_counts) `,` type($received) `,`
        type($recv_counts) (`,` type($rows_like)^)?
  }];
  let hasVerifier = 1;
}

def Moe_AssignSlotsOp : Moe_SparseOp<"assign_slots",
    [Moe_PlanStepWithAttrs<"AssignSlots">]> {
  let summary = "Maps each routed expert to one of the expert's slots";
  let description = [{
    Under expert parallelism an expert lives in one or more slots (a replica
    per slot); slots are numbered globally and each device owns a contiguous
    range of them. Expert `e`'s slots are `expert_slots[expert_slot_offsets[e]
    .. expert_slot_offsets[e + 1])`. For router indices `indices` `[T, k]`,
    the result `[T, k]` i64 is

    ```
    slots[t, j] = expert_slots[expert_slot_offsets[e] + t mod n_e]
                  with e = indices[t, j], n_e = the number of e's slots
    ```

    so the tokens of a replicated expert are split between its replicas
    round-robin by token row. -1 (a dropped assignment) stays -1; an index
    outside `[-1, E)` is a run-time error. The verifier checks that the
    offsets start at 0, never decrease, give every expert at least one slot
    and end at the number of slots, and that slot numbers are non-negative
    and each used once.

    Example:
    ```mlir
    // 4 experts on 2 devices, expert 0 replicated: slots 0, 1 on device 0,
    // slots 2, 3, 4 on device 1.
    %slots = moe.assign_slots %indices offsets [0, 2, 3, 4, 5]
               slots [0, 3, 1, 2, 4] : tensor<?x2xi64>
    ```
  }];
  let arguments = (ins
    Moe_I64Tensor:$indices,
    DenseI64ArrayAttr:$expert_slot_offsets,
    DenseI64ArrayAttr:$expert_slots
  );
  let results = (outs Moe_I64Tensor:$slots);
  let assemblyFormat = [{
    $indices `offsets` $expert_slot_offsets `slots` $expert_slots attr-dict
    `:` type($indices)
  }];
}

def Moe_RegroupOp : Moe_SparseOp<"regroup",
    [Moe_PlanStepWithAttrs<"Regroup">]> {
  let summary = "Reorders received rows from source-major to slot-major";
  let description = [{
    After the dispatch exchange a device holds `received` `[R, H]`: the rows
    from source device 0, then from device 1, ...; within each source block
    the rows are ordered by local slot. `slot_counts` `[num_sources *
    num_slots]` i64 says how many: entry `s * num_slots + j` is the number
    of rows source `s` sent for local slot `j`. Results:

    - `grouped` `[R, H]`: the same rows slot-major (all rows of local slot 0
      from source 0, then from source 1, ..., then slot 1, ...), so that
      `moe.experts` runs each slot's rows as one group;
    - `offsets` `[num_slots + 1]` i64: slot `j` owns rows `[offsets[j],
      offsets[j + 1])` (the `moe.experts` offsets);
    - `perm` `[R]` i64: grouped row `r` is received row `perm[r]`; -1 past
      the total, for `moe.ungroup`.

    Counts that are negative or add up to more than R are a run-time error.

    Example:
    ```mlir
    %g, %off, %perm = moe.regroup %recv, %counts sources 2 slots 4
                        : tensor<?x16xf32>, tensor<8xi64>
    ```
  }];
  let arguments = (ins
    Moe_Tensor:$received,
    Moe_I64Tensor:$slot_counts,
    I64Attr:$num_sources,
    I64Attr:$num_slots
  );
  let results = (outs
    Moe_Tensor:$grouped,
    Moe_I64Tensor:$offsets,
    Moe_I64Tensor:$perm
  );
  let assemblyFormat = [{
    $received `,` $slot_counts `sources` $num_sources `slots` $num_slots
    attr-dict `:` type($received) `,` type($slot_counts)
  }];
}

def Moe_UngroupOp : Moe_SparseOp<"ungroup", [Moe_PlanStep<"Ungroup">]> {
  let summary = "Undoes moe.regroup on the expert outputs";
  let description = [{
    Puts the rows of `grouped_out` `[R, H]` (the expert outputs of regrouped
    rows) back into the received order: `out[perm[r]] = grouped_out[r]` for
    every `r` with `perm[r] >= 0`, `perm` `[R]` being `moe.regroup`'s. The
    rows of `out` that no `r` maps to are unspecified. The result has
    `grouped_out`'s type.

    Example:
    ```mlir
    %back = moe.ungroup %y, %perm : tensor<?x16xf32>, tensor<?xi64>
    ```
  }];
  let arguments = (ins Moe_Tensor:$grouped_out, Moe_I64Tensor:$perm);
  let results = (outs Moe_Tensor:$out);
  let assemblyFormat = [{
    $grouped_out `,` $perm attr-dict `:` type($grouped_out) `,` type($perm)
  }];
}

def Moe_ShardOp : Moe_SparseOp<"shard"> {
  let summary = "The rows of a stacked weight that one device holds";
  let description = [{
    Selects rows `rows` of `weight` along its leading dimension, in that
    order: `result[i] = weight[rows[i]]`. The operand is a weight (a
    `moe.constant` or a `moe.stack` of constants) whose leading dimension
    counts experts; the result is the stacked weight of the experts placed
    on one device, one row per local slot. The op is a view for the plan
    writer, not a computation: each selected row is a contiguous byte range
    of the weight (or one input of the stack), and the plan stores the
    device's shard as those ranges, without copying the model in memory.

    Example:
    ```mlir
    // Experts 4..7 of 8 on the second of two devices.
    %w1_local = moe.shard %w1 rows [4, 5, 6, 7] : tensor<8x32x16xf32>
    ```
  }];
  let arguments = (ins Moe_Tensor:$weight, DenseI64ArrayAttr:$rows);
  let results = (outs Moe_Tensor:$result);
  let assemblyFormat = "$weight `rows` $rows attr-dict `:` type($weight)";
}

#endif // MOE_SPARSE_OPS_TD
