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

def MoeDetectExperts : Pass<"moe-detect-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the per-expert loop form of a MoE layer into sparse ops";
  let description = [{
    Recognises the MoE layer form that TorchScript exports for Mixtral-style
    blocks: router `MatMul -> Softmax -> TopK [-> ReduceSum, Div]`, the
    expert mask `OneHot -> Transpose`, and per expert `e` a block
    `NonZero(mask[e]) -> Gather(tokens) -> expert network -> Mul(weight) ->
    ScatterElements` whose results are accumulated into a zero `[T, H]`
    tensor. The expert network is `act(x @ w1 + b1) [* (x @ w3 + b3)] @ w2
    + b2` with any activation the runtime's experts have (SwiGLU, GeGLU,
    GELU, ReLU, SiLU; biases optional), the same for every expert; the gate
    may also be `softmax(top_k(logits))` (Mistral's reference code;
    moe-canonicalize-experts brings its `ids == e` rows and `out[idx] += u`
    to this form). The final accumulator is replaced by

    ```
    moe.router (softmax, top-k, normalize iff the export renormalised)
      -> moe.dispatch -> moe.experts silu_glu (stacked [E, ...] weights)
      -> moe.combine
    ```

    which computes exactly the same sums. The gate variants of other loop-form
    exports map onto router attributes: sigmoid scores, the selection-only
    correction bias, grouped top-k with routed scaling (DeepSeek-V3), and no
    renormalisation (Qwen2-MoE); an expert network (`SharedExperts.h`: any
    activation, biases, a fused gate/up projection) on the rows of the same
    tokens (or a reshape of them) added to the combined output (or a
    reshape of it), optionally sigmoid-gated, becomes
    `moe.shared_expert`. Experts pruned from the export get zero weights, as
    they contributed nothing. Every `moe.top_k` that does not
    head such a loop gets a remark naming the first condition that failed;
    the graph then stays generic (correct, only slower).

    The per-expert weights are copied into stacked constants, which is only
    done for layers up to 64 MiB of expert weights (a remark says so above).
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeDetectCapacityExperts
    : Pass<"moe-detect-capacity-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite experts on capacity slots (Switch as t5x writes it, "
                "GShard as DeepSpeed does) into sparse ops";
  let description = [{
    Recognises MoE layers that run every expert on C slots: a `[T, E, C]`
    dispatch mask gathers the tokens into `[E, C, H]` slots
    (`einsum("th,tec->ech")`, any letters or operand order), the experts
    run on their slots (stacked `[E, H, F]` / `[E, F, H]` weights in
    einsums around a ReLU, or each expert's network, `act(x @ w1 + b1) [*
    (x @ w3 + b3)] @ w2 + b2`, on its `[1, C, H]` chunk of a Slice or
    Split, concatenated), and a `[T, E, C]` combine tensor sums them back
    (`einsum("ech,tec->th")`). The gate must be one of two forms, proven
    op by op to decide exactly what `moe.router ... capacity C` decides:

    - Switch (t5x, flaxformer): `mask = one_hot(argmax(softmax(l)))`,
      `priority = reduce_max(cumsum(mask, 0) * mask - 1)`, dispatch =
      `(priority == arange(C)) * mask`, combine = `scores * dispatch`:
      `top 1 softmax capacity C`.
    - GShard top-2 (DeepSpeed): first choice `argmax(softmax(l))`, second
      `argmax(where(mask1, -inf, l))`, slots `cumsum(mask1, 0) - 1` and
      `cumsum(mask2, 0) - 1 + sum(mask1, 0)` (every first choice before any
      second), kept where the slot is below C, weights renormalised over
      the kept choices (`g / clip(g1 + g2, min = eps)`), combine = the
      weights at the one-hot slots, dispatch = `combine != 0`: `top 2
      softmax capacity C normalize_kept eps`.

    The layer becomes

    ```
    moe.router -> moe.dispatch -> moe.experts -> moe.combine
    ```

    without pass-through (a dropped assignment contributes 0, as its empty
    combine weights do). Each token goes through its kept experts only; an
    empty slot's expert output, which every combine weight multiplies by 0,
    is not computed (equal for finite tokens and expert outputs: the
    einsums multiply them by the zeros of the other slots). The capacity
    stays the graph's constant C, counted over all T tokens (the `[T, E]`
    logits). A candidate (such a gathering einsum whose mask is computed
    from an arg-max) that does not match gets one remark on the gate's last
    arg-max naming the first condition that failed; the graph then stays
    generic.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeDetectDenseExperts
    : Pass<"moe-detect-dense-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the dense-masked MoE forms into sparse ops";
  let description = [{
    Recognises the dense MoE forms, where every expert runs on every token
    and a `[T, E]` routing matrix, zero outside each token's top-k experts,
    weights the expert outputs in a sum over the experts. The routing matrix
    is the top-k's `[T, k]` weights scattered into zeros at its indices
    (distinct per row, so the scatter is exactly the k terms). Two ways of
    writing the experts and the sum are matched:
    - GPT-OSS's export: the tokens tiled to `[E, T, H]`, batched products
      with `[E, in, out]` weights plus `[E, 1, out]` biases, and
      `reduce_sum(Y * unsqueeze(transpose(R)), axes = [0])`, the token
      dimension optionally split alike on both sides;
    - Tutel- and fairseq-style einsums on `[T, E, N]`: `th,ehf->tef` (or
      the `[E, out, in]` weights of `th,efh->tef`) plus `[1, E, out]` or
      `[E, out]` biases, then `einsum("te,teh->th", R, Y)`.
    Between the projections, any activation the runtime's experts have:
    ReLU, GELU, SiLU, SwiGLU and GeGLU on two projections or the halves or
    even/odd columns of a fused one, GPT-OSS's clamped SwiGLU. The sum is
    replaced by
    ```
    [moe.router ->] moe.dispatch -> moe.experts -> moe.combine
      [-> moe.reshape to the layer's output shape]
    ```
    which runs each token through only its k experts. A softmax gate
    becomes moe.router; any other weights (a sigmoid of the top-k logits)
    stay generic ops feeding moe.dispatch and moe.combine. Skipping the
    experts of zero weight is exact for finite expert outputs; an infinite
    or NaN output at a zero weight makes the dense sum NaN, which the sparse
    layer does not reproduce (as in every sparse engine). The 3-D weights
    are used as exported (no copies); the biases are reshaped to `[E, N]`.
    A top-k whose indices are scattered into such a routing matrix but
    whose layer does not match gets a remark naming the first condition
    that failed; the graph then stays generic (correct, only slower).
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}
def MoeDetectInputScaledExperts
    : Pass<"moe-detect-input-scaled-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the input-scaled (Llama4) MoE form into sparse ops";
  let description = [{
    Recognises the MoE form transformers v5 exports for Llama4: the router
    keeps the top-1 logit of each token and scatters it into `-inf`
    everywhere else (`s = sigmoid(scatter_elements(-inf, i, v))`, zero for
    the experts not chosen); every token, tiled E times, is scaled by its
    score for each expert *before* the expert (`tile(x, [E, 1]) *
    reshape(transpose(s), [-1, 1])`); the experts run as batched products
    with stacked `[E, H, 2F]` / `[E, F, H]` weights and a gated activation
    (SwiGLU or the clamped SwiGLU, no biases), and the outputs are summed
    over the experts. Since such an expert maps a zero input to zero, only
    the chosen expert contributes, and the sum is replaced by

    ```
    moe.dispatch (x * s[t, i_t]) -> moe.experts -> moe.combine (weights 1)
    ```

    with the gate kept as generic ops (`score: generic` in the report). An
    expert network on the rows of the same tokens added to the result (or a
    reshape of it) becomes `moe.shared_expert`. A sum over the experts of
    products with stacked weights that does not match gets a remark naming
    the first condition that failed.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeCanonicalizeExperts
    : Pass<"moe-canonicalize-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the idioms of expert code into the detected forms";
  let description = [{
    MoE code outside transformers computes what the detectors know in other
    ops. This pass, before the detectors, rewrites each idiom into the form
    they match, only where the two are equal element for element:

    - `ids == e` (Mistral's reference code, DeepSeek's inference code and
      most research code find an expert's rows with `torch.where(ids ==
      e)`), with `ids` the `[T, k]` indices of a top-k over `[T, E]` scores
      and e a constant in [0, E), becomes
      `cast<i1>(transpose(one_hot(ids, E), [2, 0, 1])[e])`, the slice of the
      `[E, T, k]` expert mask that transformers' loops take; the one-hot is
      made once per top-k and shared by every expert.
    - GELU written out, `0.5 * x * (1 + erf(x / sqrt(2)))` or the tanh
      approximation `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 *
      x^3)))` (opset 18 exports of `F.gelu`), its factors in any order,
      becomes `moe.gelu` (approximate "none" or "tanh").
    - A loop over the columns of a `[T, E]` routing matrix R, the top-k's
      weights scattered into zeros (V-MoE's torch port: expert e's rows
      `nonzero(R[:, e])`, its weights `R[rows, e]`), becomes the token column
      of the (token, slot) pairs of `nonzero(mask[e])` and `w[token, slot]`
      (passes/RoutingMatrix.cpp). The pairs also hold the tokens whose
      weight is exactly zero, which then add `0 * y`: the same sums for
      finite expert outputs, the one condition of this rewrite.
    - makeMoE's gate, `softmax(scatter_elements(full(-inf), ids, v))` along
      the experts, with `ids` a top-k's indices and k <= 2, becomes
      `scatter_elements(zeros, ids, softmax(v))`, the routing matrix above
      (passes/MaskedSoftmaxGate.cpp): equal for logits without +inf or NaN
      (the -inf entries' exponentials are exactly zero, and a sum of two
      terms and zeros is the same in any order); a top-3 is refused.
    - makeMoE's rows, the tokens of `(ids == e).any(-1)` (`reduce_sum` of the
      i64 mask over k `> 0`, or dynamo's `reduce_max` cast to bool), become
      the token column of the (token, slot) pairs of `nonzero(ids == e)`,
      and its weights, a routing matrix's column e read at those rows,
      become `w[token, slot]` (passes/CanonicalizeMasks.cpp): with distinct
      top-k indices a token has at most one pair per expert, so both list
      the same tokens in the same order.
    - Gate code (passes/CanonicalizeGates.cpp): a reshape to `concat(rows,
      c..., -1)` whose first size is proven to be the data's row count
      (`x.view(x.size(0), n, -1)` of a projection of x, or dynamo's `B * S`
      of the `[B, S, H]` tokens viewed as `[B * S, H]`) becomes a reshape to
      the constant `[-1, c..., r]`, and result types are inferred again,
      so that DeepSeek-V3's own gate has a static E; its group masking,
      `masked_fill(-inf)` of `[T, n, E / n]` choice scores by ones with
      zeros scattered at the kept groups (of the tokens' rows), flattened
      back to `[T, E]`, becomes transformers' form (ones scattered at the
      kept groups into zeros, repeated over each group's experts, negated,
      selecting the fill over `[T, E]`), which the gate matchers prove.

    ```mlir
    %hit = moe.equal %indices, %e3 : (tensor<?x2xi64>, tensor<i64>)
        -> tensor<?x2xi1>
    // becomes
    %onehot = moe.one_hot %indices, %E, %off_on {axis = -1 : i64} ...
    %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} ...
    %row = moe.gather %mask, %c3 {axis = 0 : i64} ...
    %hit = moe.cast %row {to = i1} ...
    ```
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeCanonicalizeIdioms
    : Pass<"moe-canonicalize-idioms", "mlir::func::FuncOp"> {
  let summary = "Rewrite exporter idioms of one computation into one form";
  let description = [{
    Different exporters write the same computation with different ops; this
    pass rewrites each idiom into the form the MoE detectors match, only
    where the two are equal element for element:

    - `gather_nd(data, indices)` with `batch_dims = 0` and a trailing index
      dimension of size 1 (torch dynamo's `W[ids]`) becomes
      `gather(data, squeeze(indices, -1), axis = 0)`; an index that was
      `unsqueeze(x, -1)` is `x`.
    - `expand(x, shape)` with a constant `shape` of x's rank that only
      broadcasts static size-1 dimensions (torch dynamo's
      `repeat_interleave` as Unsqueeze + Expand + Reshape) becomes
      `tile(x, repeats)`. A dynamic dimension is kept only where the shape
      says 1, since its run-time size would decide between keeping and
      broadcasting.
    - `squeeze(unsqueeze(x, axes), axes)` (dynamo's pairs around batched
      products) becomes `x`.
    - `reshape(y, [T, k, H]) * unsqueeze(w, 2)`, routing weights applied
      after the `[T*k, H]` expert rows are viewed per token (research code
      gathering weights per assignment), becomes `reshape(y *
      unsqueeze(reshape(w, [-1]), 1), [T, k, H])`, the weights applied per
      row as the stacked form does.

    The pipeline runs it after the detectors that match the dynamo forms
    themselves and before `moe-detect-stacked-experts`.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeDetectStackedExperts
    : Pass<"moe-detect-stacked-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the stacked-weight (transformers v5 batched_mm) MoE "
                "form into sparse ops";
  let description = [{
    Recognises the MoE form transformers v5 exports for experts with stacked
    weights (`gate_up_proj [E, 2F, H]`, `down_proj [E, H, F]`, or the
    transposed `[E, H, 2F]` / `[E, F, H]`) and `experts_implementation =
    "batched_mm"`, in the canonical form of `moe-canonicalize-idioms`:
    each token repeated k times (`unsqueeze -> tile [1, k, 1] -> flatten`);
    per repeated row `r = t * k + j` the weights (and `[E, out]` biases) of
    expert `ids[t, j]` gathered from the stacked tensors (`gather(W,
    reshape(ids, [-1]))`) and applied as a batched matrix-vector product;
    `silu(gate) * up` or GPT-OSS's clamped SwiGLU on the two halves or the
    even/odd columns of the fused projection, or ReLU, ReLU² (`relu(h) *
    relu(h)`), GELU or SiLU of one projection; the rows scaled by the
    flattened weights `w`, reshaped to `[T, k, H]` and summed over k. The
    sum is replaced by

    ```
    [moe.router ->] moe.dispatch -> moe.experts -> moe.combine
    ```

    which computes the same sums. Only the expert side is proven: `ids` and
    `w` may be any `[T, k]` values, the indices provably in `[0, E)` (top-k
    or arg-max positions over the E experts). A softmax router becomes
    `moe.router`; any other gate stays as generic ops feeding moe.dispatch
    and moe.combine. An expert network on the rows of the same tokens (any
    activation, biases or a fused gate/up projection, optionally
    sigmoid-gated, on them or a reshape of them) added to the result or a
    reshape of it, before or after it, becomes `moe.shared_expert`. The
    stacked weights are used as exported (`W[e] @ x` is `layout out_in`,
    `x @ W[e]` is `layout in_out`); nothing is copied. Every sum over k of
    rows weighted per choice whose values are products with weights
    gathered at flattened indices, and that does not match, gets a remark
    (on the indices' top-k, else the down projection's gather) naming the
    first condition that failed; the graph then stays generic (correct,
    only slower).
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeCanonicalizeSegments
    : Pass<"moe-canonicalize-segments", "mlir::func::FuncOp"> {
  let summary = "Bring the indexing idioms around expert row segments to one "
                "form";
  let description = [{
    Rewrites the indexing ops exporters write around per-expert row segments
    (transformers' `grouped_mm` experts) into one form, so that
    `moe-detect-segment-experts` matches the computation once:
    `gather_nd(data, indices[..., 1])` (no batch dimensions) becomes
    `gather(data, indices[...], axis 0)`; `scatter_nd` into a vector with
    one-element index tuples becomes `scatter_elements(..., axis 0)` with the
    same reduction; and each per-expert `range(ends[e-1], ends[e])` over
    `ends = cum_sum` of a histogram (torch.histc's scatter-add of ones, whose
    bin mapping is checked on every expert id, or bincount's
    `reduce_sum(one_hot)`) of the ids that a stable sort of the flattened
    expert ids gives becomes `moe.segment %sorted expert e fallback %range`:
    the positions of expert e's rows among the sorted rows, bounded by their
    count T*k. That needs the ids to be provably expert indices in [0, E)
    (the indices of a top-k or an arg-max over E, or their concatenation).
    The same histograms include the `[T, E]` routing map of a top-k's
    indices (`scatter(zeros, ids, 1)`) summed over the tokens (Megatron-Core,
    JetMoE). The idioms of MoE code outside transformers are brought onto
    the same form (`SegmentIdioms.cpp`): per-expert slices
    `rows[ends[e-1]:ends[e]]` and a `split(rows, counts)` of the N sorted
    rows become gathers of the ranges; `nonzero(sorted == e)` becomes
    moe.segment; index_put with a boolean row mask becomes a row scatter, and
    the writes of every expert's segment into zeros the concatenation of the
    experts' rows; a scatter-add of the sorted rows at the permutation into
    zeros of their shape (Megatron's unpermute) becomes their gather by the
    inverse permutation, the `[T, k]` weights applied after it are moved
    before it, and a scatter-add at `perm / k` into zeros of the `[T, H]`
    tokens (JetMoE's index_add) becomes the sum over k of that gather.
    Code that never sorts (DeepSeek-MoE's training path: tokens repeated k
    times, `y[flat_ids == e] = expert(xs[flat_ids == e])`) gets a stable sort
    of the flattened ids: `nonzero(flat_ids == e)` becomes `perm` at expert
    e's moe.segment, the repeated tokens read there the tokens at `perm / k`,
    the writes of every expert at those positions the concatenation put back
    by the inverse permutation, and a `[T, k, -1]` view of it the `[T, k,
    H]` one (`SegmentAssignments.cpp`).
    All are exact; the first two yield ops every backend runs, and
    `moe-detect-segment-experts` turns every segment it does not absorb back
    into its fallback, so a graph no detector takes runs as before.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeDetectSegmentExperts
    : Pass<"moe-detect-segment-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the per-expert segments (transformers grouped_mm) MoE "
                "form into sparse ops";
  let description = [{
    Recognises the MoE form transformers' ONNX exporter writes for the
    default `grouped_mm` experts, after `moe-canonicalize-segments`: the
    flattened top-k expert ids sorted stably (`top_k(ids, all, largest 0)`,
    an argsort), the tokens gathered in that order (`perm // k`), per expert
    the `moe.segment` rows of the sorted tokens through `x @ W[e] (+ b[e])`,
    concatenated in expert order, a gated activation (SwiGLU on the halves,
    or GPT-OSS's clamped SwiGLU on the even / odd columns), the down
    projection the same way, the
    rows scaled by the routing weights in sorted order, put back in
    assignment order by the inverse permutation
    (`gather(y, scatter_elements(_, perm, arange))`) and summed over k. That
    is `out[t] = sum_j w[t, j] * FFN_{ids[t, j]}(x[t])`. The projections
    are `x @ W` or a gemm with `[out, in]` matrices (layout out_in), and each
    expert may instead run its whole network on its segment, the outputs
    concatenated once (Megatron-Core's SequentialMLP; SwiGLU on the halves of
    a fused projection or with separate gate and up matrices). That sum is
    what

    ```
    [moe.router ->] moe.dispatch -> moe.experts -> moe.combine
    ```

    computes: the dispatch's rows are exactly the sorted rows (grouped by
    expert, each group in assignment order). The gate is whatever computes
    `ids` and `w`: a softmax gate `matchSoftmaxGate` knows becomes
    `moe.router`; any other gate whose ids are provably expert indices
    (a top-k or arg-max over E, or their concatenation) feeds them to the
    dispatch and the weights the graph computes to the combine. Every
    moe.segment becomes its fallback range again before the rewrites are
    validated by `commitLayerRewrite`. A candidate (a stable sort of
    flattened expert ids) that fails gets one remark naming the first
    condition that failed; the graph then stays generic.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeDetectParallelExperts
    : Pass<"moe-detect-parallel-experts", "mlir::func::FuncOp"> {
  let summary = "Rewrite the parallel-experts (Granite) MoE form into sparse "
                "ops";
  let description = [{
    Recognises the "parallel experts" MoE form (GraniteMoE, JetMoE) as the
    dynamo exporter writes it: a softmax router; the flattened top-k expert
    ids sorted stably (`top_k(ids, k = len, largest = 0)`); each sorted
    assignment's token (`perm / k`, also as the float floor/sign form) and
    routing weight gathered; the gathered tokens split by the per-expert
    assignment counts (`reduce_sum` of the one-hot routing mask, computed in
    the graph); per expert a projection with its own `[2F, H]` (or `[H, 2F]`)
    weight; the results concatenated, `silu(gate) * up` on their halves,
    split alike for the per-expert output projections, concatenated, scaled
    by the gathered weights and added into zeros at the tokens
    (`scatter_nd` add). The result is replaced by

    ```
    moe.router -> moe.dispatch
      -> moe.experts silu_glu (glu concatenated, weights moe.stack-ed)
      -> moe.combine
    ```

    The per-expert weights are presented as one `[E, ...]` tensor with
    `moe.stack`, which the plan stores without copying. A split whose sizes
    are constants is a TorchScript trace that froze the trace input's
    per-expert counts (wrong for any other input); it stays generic with a
    remark saying so. Every other `moe.top_k` that does not head such a layer
    gets a remark naming the first condition that failed.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeReportNearMisses
    : Pass<"moe-report-near-misses", "mlir::func::FuncOp"> {
  let summary = "Remark once on each MoE candidate layer that stayed generic";
  let description = [{
    The detectors record why they rejected a candidate layer on its anchor op
    (a `moe.near_misses` array on its top-k, arg-max or sum) instead of
    remarking at once, since a later detector may still take the layer in
    another form. Run after every detector, this pass removes the records
    and gives one remark per anchor whose layer stayed generic, naming the
    first reason ("MoE per-expert loop not detected: ..."). An anchor whose
    values reach the routing of a detected layer (a `moe.dispatch`'s indices
    or a `moe.combine`'s weights: a generic gate the detectors kept) gets no
    remark, and neither does one another detector erased with its layer.
    A layer that no detector considered still gets one remark when it looks
    like MoE: a top-k of fewer than E, or an arg-max, over a static axis of
    E >= 2 whose indices select rows or weights (a one-hot, an equality with
    an expert index, a gather or scatter at them, a nonzero) and that feeds
    no detected layer: "MoE layer not detected: ... no detector knows this
    form".

    ```mlir
    // Before: the loop detector rejected this top-k; no other detector
    // took it.
    %v, %i = moe.top_k %scores {moe.near_misses = ["MoE per-expert loop
        not detected: ..."]} ...
    // After: the attribute is gone; remark: MoE per-expert loop not
    // detected: ...
    ```
  }];
  let options = [
    Option<"allReasons", "all-reasons", "bool", /*default=*/"false",
           "Remark every detector's reason, not only the first">,
  ];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeFuseAttention : Pass<"moe-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Recognise decomposed scaled dot-product attention";
  let description = [{
    Exporters write attention as `mat_mul(softmax(mat_mul(Q, transpose(K,
    [0, 1, 3, 2])) * c + mask), V)` on float32 `[B, H, S, D]` tensors, with
    the scalar factors on the scores, on Q or on K (`mul` or `div` by
    single-element constants, any number of them) and the additive mask
    optional. This pass replaces each such chain by one `moe.attention` (the
    factors multiplied into `scale`, the mask kept as the graph computes it),
    which the runtime computes per head and block of queries without
    materialising the `[B, H, Sq, Skv]` scores or the transposed keys.

    Grouped-query attention: when K and V are both `repeat_kv` copies,
    `reshape(expand(unsqueeze(x, 2), [b, kvh, rep, s, d]), [b, kvh * rep, s,
    d])` with the same constant `rep`, and every size of the expand and the
    reshape is proven (by following the graph's own shape arithmetic: dims,
    concats, transposes, reshapes, broadcasting) to be the one repeat_kv
    needs, the op reads x directly and maps query head h to key/value head
    h / rep. Otherwise it reads the copies. Every matched intermediate but
    K's transpose must have no other use; a softmax that is not over the
    last axis, a mask of another rank, or a non-constant factor is left
    alone.

    Example: `%s = mat_mul %q, transpose(%k)`, `%t = mul %s, 0.125`, `%u =
    add %t, %m`, `%p = softmax %u`, `%o = mat_mul %p, %v` becomes
    `%o = moe.attention %q, %k, %v mask %m scale 0.125`.
  }];
}

def MoeFuseNorms : Pass<"moe-fuse-norms", "mlir::func::FuncOp"> {
  let summary = "Recognise decomposed RMSNorm and fuse it into one op";
  let description = [{
    Exporters decompose RMSNorm into a reduction and its elementwise producer
    and consumers: `x * (1 / sqrt(mean(x^2, -1) + eps)) [* w]` (also with
    `reciprocal` or a division by the square root). This pass matches those
    forms on float32 tensors and replaces them with one
    `moe.simplified_layer_normalization` (ONNX `SimplifiedLayerNormalization`
    semantics: `x / sqrt(mean(x^2) + eps) * scale` over the last axis), which
    the runtime computes in one pass per row instead of six steps and five
    buffers. Without a trailing weight the scale is a splat of ones. Every
    matched intermediate must have no other use.

    Example: the six ops above with `eps = 1e-6` become
    `moe.simplified_layer_normalization %x, %w {axis = -1, epsilon = 1e-6}`.
  }];
}

def MoeFuseElementwise : Pass<"moe-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Group chains of float32 elementwise ops into fused regions";
  let description = [{
    Moves maximal chains of float32 elementwise ops (arithmetic, exp, tanh,
    erf, sigmoid, relu, gelu, ...) into `moe.fused_elementwise` regions that
    the runtime executes as one step, without materialising the values
    between them. A group holds ops of one result shape (operands may
    broadcast); a value used outside the group becomes a result of the fused
    op. Scalar float constants used by the group move into its body. A group
    ends where a value of it is used by an op outside it, so that the fused
    op, placed at the group's last member, dominates every use.
  }];
}

def MoeBoundShapes : Pass<"moe-bound-shapes", "mlir::func::FuncOp"> {
  let summary = "Compute the largest shape of every value for memory planning";
  let description = [{
    Shapes are bounded-dynamic: the token count is dynamic (`?`) in the IR and
    bounded at compile time by `max-tokens` (or, for a named dimension such
    as `batch`, by its `dim-bounds` entry); data-dependent sizes (NonZero,
    TopK with a run-time k, reshapes to run-time shapes) are bounded by their
    inputs. The pass records the bounded shape of every op result as
    `moe.bounds` (one `array<i64>` per result) and of every argument as the
    argument attribute `moe.bound`, without changing any type or folding any
    value: the plan keeps the `?` dimensions dynamic and the runtime computes
    actual sizes, while memory is planned for these bounds.

    Where neither inference nor an op's rule sees a bound, a value-range
    analysis of the integer tensors (ValueRanges.h: an interval per tensor
    and, for non-negative ones, a bound of their sum) gives one: a histogram
    of T*k routed ids (ReduceSum of a OneHot, ScatterElements-add of ones,
    in integers or integral floats) sums to at most T*k, its CumSum never
    exceeds that, so Range(ends[e-1], ends[e]) (transformers' grouped_mm
    segments) has at most T*k elements; Clip, Min/Max, constants and
    dimensions bound the rest. Each such bound is reported in a remark at the
    op, naming the ranges it came from. A dimension that nothing bounds (a
    Range up to a value read from a graph input, say) is an error naming
    the op.

    Example: with `max-tokens=256`, `moe.mat_mul %x, %w : (tensor<?x16xf32>,
    tensor<16x32xf32>) -> tensor<?x32xf32>` gets `moe.bounds = [array<i64:
    256, 32>]`.
  }];
  let options = [
    Option<"maxTokens", "max-tokens", "int64_t", /*default=*/"256",
           "Upper bound of every dynamic graph input dimension">,
    ListOption<"dimBounds", "dim-bounds", "std::string",
               "NAME=N: bound of the dynamic input dimensions named NAME "
               "(ONNX dim_param), overriding max-tokens">,
  ];
}

def MoePlanMemory : Pass<"moe-plan-memory", "mlir::func::FuncOp"> {
  let summary = "Assign arena offsets to activations by liveness";
  let description = [{
    Plans the activation arena of a function whose values carry bounds
    (`moe-bound-shapes`). Ops run in block order; a value is live from its
    definition to its last use (graph inputs from the start, graph outputs to
    the end). Buffers are placed greedily, largest first, at the lowest
    64-byte-aligned offset that overlaps no buffer live at the same time.
    Output 0 of an op that the runtime may run in place (elementwise ops,
    softmax and norms over their first operand, views such as reshape) takes
    the buffer of an operand that dies at the op when the two match element
    for element. Constants are weights and take no arena space.

    Results: every op gets `moe.offsets` (one arena offset per result, -1 for
    a constant), every argument `moe.offset`, and the function
    `moe.arena_size` (the planned peak) and `moe.naive_size` (the sum of all
    buffers without reuse), so that the saving is visible.
  }];
}

def MoePlaceExperts : Pass<"moe-place-experts", "mlir::ModuleOp"> {
  let summary = "Place the routed experts of every MoE layer on devices";
  let description = [{
    Expert parallelism, step 1 (docs/expert-parallelism.md). For every
    `moe.experts` op of `@main` (a MoE layer; layers are numbered in program
    order), assigns its E experts to `devices` devices as slots: each slot
    holds one expert's weights, device d owns the contiguous slot range
    `[slot_begin[d], slot_begin[d + 1])`, and an expert may have several
    slots (replicas). The result is the op's `moe.placement` attribute,
    `{slot_begin = array<i64: ...>, slot_experts = array<i64: ...>}` (the
    expert of each slot), and the module's `moe.devices`; the dense parts
    stay replicated. `moe-insert-all-to-all` rewrites the layers from it.

    - Default: balanced by parameter bytes. The experts of one layer are
      equally large, so device d gets the contiguous block
      `[E * d / N, E * (d + 1) / N)`.
    - `routing-profile=FILE.json` (the JSON `moe-run --stats` writes): each
      layer's `moe_layers[i].tokens_per_expert` is its expected load, and
      experts are assigned greedily by decreasing load to the device with the
      least load so far (longest processing time first); each device's slots
      list its experts in increasing order.
    - `replicate-hot=K` (needs a profile): the K most loaded experts of each
      layer get a second slot on the least loaded device that does not hold
      them; the load counted for the expert is split between its slots.

    More devices than experts is allowed: the devices left without a slot
    run no experts but still take part in every exchange. `devices=1`
    changes nothing. Errors: `devices < 1`, an unreadable or malformed
    profile (the message names the file and the field), `replicate-hot`
    without a profile.
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"1",
           "Number of devices (the expert-parallel degree)">,
    Option<"routingProfile", "routing-profile", "std::string",
           /*default=*/"\"\"",
           "A `moe-run --stats` JSON whose per-layer tokens_per_expert "
           "balance the expected load">,
    Option<"replicateHot", "replicate-hot", "int64_t", /*default=*/"0",
           "Give the K most loaded experts of each layer a second slot">,
  ];
}

def MoeAnalyzeRowIndependence
    : Pass<"moe-analyze-row-independence", "mlir::ModuleOp"> {
  let summary = "Prove which input rows the dense part keeps apart";
  let description = [{
    Expert parallelism may run the dense part of `@main` data-parallel (each
    device on a share of dimension 0 of the inputs whose dimension 0 is
    dynamic, as the runtime splits them) only if no op outside the MoE
    layers makes one row depend on another. The pass proves it with a
    forward dataflow over every op: a value is replicated (the same on
    every device), carries the rows on one axis (each device holds exactly
    its slice of the rows), is a small shape vector some of whose elements
    are a device's row count, or is a MoE layer's internals (dispatch to
    combine, which keep tokens apart). Elementwise ops broadcast rows;
    MatMul keeps them on A's M, B's N or a batch axis and kills them when it
    contracts them (A's last axis, B's second to last); Softmax, the
    reductions, ArgMax, TopK, CumSum, the normalisations, Gather, Concat,
    Slice, Split, Trilu and the element gathers/scatters kill them when they
    act along the rows' axis; Reshape, Flatten and Expand keep them only
    when the rows provably stay whole (the same static blocks before them,
    the row count or the -1 at one position and, for -1, result slabs that
    divide a static tail of a row); a row count may only size such a
    reshape or expand (Range over it, positions, kills). Every other op
    kills them. Outputs must carry the rows on dimension 0 under the split
    symbol (the runtime joins those) or be replicated.

    The result is the module's `moe.row_split`: `{axis = 0, inputs =
    [...], outputs = [...], symbol = "batch"}` when the split is proven
    (`outputs`: those with the rows on dimension 0, which the plan emitter
    alone declares joined over the devices), else `{op, loc, reason}`
    naming the first op (in program order) that mixes rows.
    `moe-insert-all-to-all` splits only a proven axis; otherwise it
    replicates the dense part and partitions the MoE layers' tokens.
  }];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeAnalyzeBatchRows : Pass<"moe-analyze-batch-rows", "mlir::ModuleOp"> {
  let summary = "Prove that only causal attention and recurrences mix a generation graph's token rows";
  let description = [{
    Continuous batching (docs/serving.md) runs the tokens of several
    sequences as the rows of one step: each row carries its sequence's slot
    and position, and the runtime replaces each attention by the row's
    attention over its own sequence's KV cache. That is exact only when no
    other op makes one row depend on another. The pass runs the dataflow of
    `moe-analyze-row-independence` seeded with the `row-inputs` (the token
    ids and positions) along their last axis, with two changes: values
    computed from the row count alone (a Range over it, masks made from
    it) may be read only by an attention's mask; and `moe.attention` may
    mix rows when its query, keys and values carry them on axis 2 and its
    mask is the causal `where(keys <= queries, 0, -inf)` of `range(0, n, 1)`
    on the last two axes (so its keys and values are the rows themselves,
    the cache writes), or that condition and-ed with `keys > queries - W`
    for a constant window W. `moe.causal_conv` and `moe.gated_delta_rule`
    may mix rows too when their row operands carry them on the token axis
    (2 and 1), their weights are the same for every row and their state
    starts from zeros (a first prompt): the runtime runs them per sequence
    from that sequence's own state, and their new state may only be an
    output (a state pair's present). Every other input (a past cache, an
    attention mask input) refuses. Every other output must carry the rows
    on its dimension named like the inputs' (the logits, the caches).

    The result is the module's `moe.batch_rows`: `{inputs, outputs, states?,
    symbol, windows}` when proven (`windows`: each attention's W in program
    order, 0 for none; `states`: the outputs that are a recurrence's state,
    when there are any), else `{op, loc, reason}` naming the first op that mixes
    rows.

    Example: `moec-opt --moe-analyze-batch-rows="row-inputs=input_ids,position_ids"`.
  }];
  let options = [
    ListOption<"rowInputs", "row-inputs", "std::string",
               "The graph inputs that carry one token per row">,
  ];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def MoeInsertAllToAll : Pass<"moe-insert-all-to-all", "mlir::ModuleOp"> {
  let summary = "Clone @main per device and exchange tokens around the experts";
  let description = [{
    Expert parallelism, step 2 (docs/expert-parallelism.md). Given a module
    whose layers carry `moe.placement` (`moe-place-experts`) and
    `moe.devices = N > 1`, replaces `@main` by N functions `@main_d0` ..
    `@main_dN-1`, each carrying `moe.device = d`: device d's schedule. When
    `moe-analyze-row-independence` proved the rows of dim 0 independent
    (`moe.row_split` has an `axis`), each runs the whole graph on its share
    of the batch; otherwise (no proof, or no `moe.row_split`) each runs the
    dense part on all rows (`moe.replicated`), each layer slices the
    device's share `[T * d / N, T * (d + 1) / N)` of its tokens (re-running a
    per-token router on the share of its logits) and all-gathers the
    combined rows with an all_to_all of N copies `like` the layer's tokens.
    In every placed MoE layer the device exchanges token rows with the
    others:

    ```
    slots          = moe.assign_slots(indices)         (experts -> slots)
    rows, off, src = moe.dispatch(x, slots) experts S  (rows by slot)
    send           = per-device sums of the slot counts
    cnt_recv, _    = moe.all_to_all(slot counts, [S_0, ..., S_N-1])
    recv, rcnt     = moe.all_to_all(rows, send)
    g, loff, perm  = moe.regroup(recv, cnt_recv[0 : N * S_d])
    y              = moe.experts(g, loff, moe.shard(w, my slots) ...)
    back           = moe.ungroup(y, perm)
    out_rows, _    = moe.all_to_all(back, rcnt) like rows
    out            = moe.combine(out_rows, src, ...)
    ```

    A device without slots skips regroup, experts and ungroup (it receives
    no rows). With `micro-batches=M > 1` each layer's local tokens are split
    into M contiguous chunks whose exchanges use `moe.all_to_all_start` /
    `moe.all_to_all_wait`, software-pipelined so that chunk i + 1's dispatch
    exchange is in flight while chunk i's experts run, and chunk i's return
    exchange while chunk i + 1's experts run; the results are concatenated
    and equal for every M. Without placement or with one device the module
    is unchanged.
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Chunks per layer whose exchanges overlap the experts">,
  ];
}

#endif // MOEC_PASSES_TD
