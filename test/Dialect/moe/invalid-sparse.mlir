// RUN: moec-opt %s -verify-diagnostics --split-input-file

// Tests that router logits are [T, E] or [B, S, E]: the expert dimension is
// the last one and only tokens lead it.
func.func @router_rank(%logits: tensor<8xf32>) {
  // expected-error @+1 {{'moe.router' op expects logits of rank 2 ([tokens, experts]) or 3 ([batch, sequence, experts]), got 'tensor<8xf32>'}}
  %w, %i = moe.router %logits top 2 softmax : tensor<8xf32>
  return
}

// -----

// Tests that the expert count is static: top_k and the groups are checked
// against it, and dispatch sizes its offsets by it.
func.func @router_dynamic_experts(%logits: tensor<4x?xf32>) {
  // expected-error @+1 {{expects a static number of experts (the last logits dimension), got 'tensor<4x?xf32>'}}
  %w, %i = moe.router %logits top 2 softmax : tensor<4x?xf32>
  return
}

// -----

// Tests that a token chooses at least one expert.
func.func @router_top_k_zero(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects top_k in [1, 8] (the number of experts), got 0}}
  %w, %i = moe.router %logits top 0 softmax : tensor<?x8xf32>
  return
}

// -----

// Tests that a token cannot choose more experts than there are.
func.func @router_top_k_too_large(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects top_k in [1, 8] (the number of experts), got 9}}
  %w, %i = moe.router %logits top 9 softmax : tensor<?x8xf32>
  return
}

// -----

// Tests that the selection bias has one entry per expert.
func.func @router_bias_shape(%logits: tensor<?x8xf32>, %bias: tensor<4xf32>) {
  // expected-error @+1 {{expects bias of shape [8] ([E]), got 'tensor<4xf32>'}}
  %w, %i = moe.router %logits bias %bias top 2 sigmoid : tensor<?x8xf32>, tensor<4xf32>
  return
}

// -----

// Tests that the selection bias is added to scores of the logits' type.
func.func @router_bias_type(%logits: tensor<?x8xf32>, %bias: tensor<8xf16>) {
  // expected-error @+1 {{expects bias to have the element type of the logits ('f32'), got 'f16'}}
  %w, %i = moe.router %logits bias %bias top 2 sigmoid : tensor<?x8xf32>, tensor<8xf16>
  return
}

// -----

// Tests that groups partition the experts evenly.
func.func @router_groups_divide(%logits: tensor<?x10xf32>) {
  // expected-error @+1 {{expects the group count to divide the 10 experts, got 4}}
  %w, %i = moe.router %logits top 2 sigmoid groups 4 keep 2 : tensor<?x10xf32>
  return
}

// -----

// Tests that no more groups are kept than exist (keeping groups needs
// groups).
func.func @router_keep_too_many(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects the kept group count in [1, 1] (the group count), got 2}}
  %w, %i = moe.router %logits top 2 sigmoid groups 1 keep 2 : tensor<?x8xf32>
  return
}

// -----

// Tests that a group holds the two experts its score is summed from.
func.func @router_group_size(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects groups of at least 2 experts (a group scores by its top two), got 8 groups of 1}}
  %w, %i = moe.router %logits top 2 sigmoid groups 8 keep 4 : tensor<?x8xf32>
  return
}

// -----

// Tests that the kept groups hold enough experts to choose top_k from.
func.func @router_kept_too_few(%logits: tensor<?x16xf32>) {
  // expected-error @+1 {{expects the 1 kept groups of 4 experts to hold at least top_k = 6 experts}}
  %w, %i = moe.router %logits top 6 sigmoid groups 4 keep 1 : tensor<?x16xf32>
  return
}

// -----

// Tests that softmax-after-top-k is not combined with elementwise sigmoid
// scores, where the order would not matter.
func.func @router_after_topk_sigmoid(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{`after_topk` needs softmax scores}}
  %w, %i = moe.router %logits top 2 sigmoid after_topk : tensor<?x8xf32>
  return
}

// -----

// Tests that softmax-after-top-k is not renormalised a second time.
func.func @router_after_topk_normalize(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{`normalize` is redundant with `after_topk`}}
  %w, %i = moe.router %logits top 2 softmax after_topk normalize : tensor<?x8xf32>
  return
}

// -----

// Tests that the routed scaling factor keeps weights positive and finite.
func.func @router_scale(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects a positive finite routed_scaling_factor, got -1}}
  %w, %i = moe.router %logits top 2 softmax scale -1.0 : tensor<?x8xf32>
  return
}

// -----

// Tests that an expert capacity admits at least one token.
func.func @router_capacity(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects a positive capacity, got 0}}
  %w, %i = moe.router %logits top 1 softmax capacity 0 : tensor<?x8xf32>
  return
}

// -----

// Tests that the renormalisation over the kept choices needs a capacity
// (it renormalises over what capacity kept).
func.func @router_normalize_kept_without_capacity(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{`normalize_kept` needs a `capacity`}}
  %w, %i = moe.router %logits top 2 softmax normalize_kept 1.0e-7 : tensor<?x8xf32>
  return
}

// -----

// Tests that normalize_kept's epsilon is positive: the clamp keeps a token
// whose kept weights underflowed finite.
func.func @router_normalize_kept_epsilon(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{expects a positive finite normalize_kept epsilon, got 0}}
  %w, %i = moe.router %logits top 2 softmax capacity 4 normalize_kept 0.0 : tensor<?x8xf32>
  return
}

// -----

// Tests that normalize and normalize_kept do not both divide the weights.
func.func @router_normalize_twice(%logits: tensor<?x8xf32>) {
  // expected-error @+1 {{`normalize` and `normalize_kept` would divide the weights twice}}
  %w, %i = moe.router %logits top 2 softmax normalize capacity 4 normalize_kept 1.0e-7 : tensor<?x8xf32>
  return
}

// -----

// Tests that declared result types must be the inferred ones: the custom
// form prints none, so anything else would not survive a round trip.
func.func @router_result_type(%logits: tensor<?x8xf32>) {
  // expected-error @+2 {{'moe.router' op inferred type(s) 'tensor<?x2xf32>', 'tensor<?x2xi64>' are incompatible with return type(s) of operation 'tensor<4x2xf32>', 'tensor<4x2xi64>'}}
  // expected-error @+1 {{'moe.router' op failed to infer returned types}}
  %w, %i = "moe.router"(%logits) <{score_function = #moe<score_function softmax>, top_k = 2 : i64}> : (tensor<?x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
  return
}

// -----

// Tests that dispatch takes token rows [T, H].
func.func @dispatch_tokens_rank(%x: tensor<?x4x16xf32>, %i: tensor<?x2xi64>) {
  // expected-error @+1 {{'moe.dispatch' op expects tokens of rank 2 ([T, H]), got 'tensor<?x4x16xf32>'}}
  %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x4x16xf32>, tensor<?x2xi64>
  return
}

// -----

// Tests that dispatch gets one row of expert indices per token.
func.func @dispatch_token_count(%x: tensor<4x16xf32>, %i: tensor<5x2xi64>) {
  // expected-error @+1 {{expects indices of shape [4, 2] ([T, k], T from the tokens), got 'tensor<5x2xi64>'}}
  %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<4x16xf32>, tensor<5x2xi64>
  return
}

// -----

// Tests that dispatch groups rows into at least one expert.
func.func @dispatch_no_experts(%x: tensor<?x16xf32>, %i: tensor<?x2xi64>) {
  // expected-error @+1 {{expects at least one expert, got num_experts = 0}}
  %rows, %offsets, %source = moe.dispatch %x, %i experts 0 : tensor<?x16xf32>, tensor<?x2xi64>
  return
}

// -----

// Tests that the expert rows are a matrix [N, H].
func.func @experts_tokens_rank(%rows: tensor<16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'moe.experts' op expects tokens of rank 2 ([N, H]), got 'tensor<16xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that the clamped SwiGLU gets its alpha and beta.
func.func @experts_clamped_needs_alpha(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{activation clamped_swiglu needs `alpha` and `beta`}}
  %y = moe.experts clamped_swiglu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> w2 %w2 : tensor<4x8x16xf32>
         layout in_out glu interleaved beta 1.0
  return
}

// -----

// Tests that the SwiGLU clamp limit is positive.
func.func @experts_clamped_limit(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects a positive `limit`, got 0}}
  %y = moe.experts clamped_swiglu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> w2 %w2 : tensor<4x8x16xf32>
         layout in_out glu interleaved alpha 1.702 beta 1.0 limit 0.0
  return
}

// -----

// Tests that activation parameters appear only with the activation that
// uses them.
func.func @experts_alpha_without_clamp(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{`alpha` applies only to activation clamped_swiglu, not silu_glu}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> w2 %w2 : tensor<4x8x16xf32>
         layout in_out glu interleaved alpha 1.702
  return
}

// -----

// Tests that a separate up projection needs a gated activation to multiply
// it into.
func.func @experts_w3_ungated(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{w3 (a separate up projection) needs a gated activation, not relu}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w3 %w3 : tensor<4x16x8xf32>
         w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that an up-projection bias comes with the up projection.
func.func @experts_b3_without_w3(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %b3: tensor<4x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{b3 needs w3}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> b3 %b3 : tensor<4x8xf32>
         w2 %w2 : tensor<4x8x16xf32> layout in_out glu concatenated
  return
}

// -----

// Tests that a fused gate/up projection says how the halves are packed.
func.func @experts_fused_needs_glu(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{a fused gate/up projection (a gated activation without w3) needs `glu concatenated` or `glu interleaved`}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that a packing is not given for separate projections.
func.func @experts_glu_with_w3(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w3: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{`glu` applies only to a fused gate/up projection (a gated activation without w3)}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w3 %w3 : tensor<4x16x8xf32>
         w2 %w2 : tensor<4x8x16xf32> layout in_out glu interleaved
  return
}

// -----

// Tests that a packing is not given for a non-gated activation.
func.func @experts_glu_ungated(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{`glu` applies only to a fused gate/up projection}}
  %y = moe.experts gelu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w2 %w2 : tensor<4x8x16xf32>
         layout in_out glu concatenated
  return
}

// -----

// Tests that routed weights carry a leading expert dimension.
func.func @experts_weight_rank(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects w1 of rank 3 (an expert dimension and a matrix), got 'tensor<16x8xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<16x8xf32> w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that routed biases carry a leading expert dimension.
func.func @experts_bias_rank(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %b1: tensor<8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects b1 of rank 2 (an expert dimension and a vector), got 'tensor<8xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> b1 %b1 : tensor<8xf32>
         w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that weights have the tokens' element type (quantised or mixed
// precision weights are not this op's form).
func.func @experts_weight_type(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xbf16>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects w1 to have the element type of the tokens ('f32'), got 'bf16'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xbf16> w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that the first projection reads rows of size H.
func.func @experts_w1_hidden(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x8x12xf32>, %w2: tensor<4x12x16xf32>) {
  // expected-error @+1 {{expects w1 of shape [4, 16, 12] ([E, H, F] with layout in_out), got 'tensor<4x8x12xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x8x12xf32> w2 %w2 : tensor<4x12x16xf32> layout in_out
  return
}

// -----

// Tests that the layout decides which weight dimension is the input one.
func.func @experts_w1_layout(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x12xf32>, %w2: tensor<4x16x12xf32>) {
  // expected-error @+1 {{expects w1 of shape [4, 16, 16] ([E, F, H] with layout out_in), got 'tensor<4x16x12xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x12xf32> w2 %w2 : tensor<4x16x12xf32> layout out_in
  return
}

// -----

// Tests that a fused gate/up projection splits into two halves of size F.
func.func @experts_fused_odd(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x15xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects the fused gate/up projection w1 to have an even output size (2F), got 15}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x15xf32> w2 %w2 : tensor<4x8x16xf32>
         layout in_out glu concatenated
  return
}

// -----

// Tests that the up projection has the gate's size.
func.func @experts_w3_shape(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w3: tensor<4x16x6xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects w3 of shape [4, 16, 8] ([E, H, F] with layout in_out), got 'tensor<4x16x6xf32>'}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w3 %w3 : tensor<4x16x6xf32>
         w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that the down projection maps F (half of a fused projection) back
// to H.
func.func @experts_w2_shape(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %w2: tensor<4x16x16xf32>) {
  // expected-error @+1 {{expects w2 of shape [4, 8, 16] ([E, F, H] with layout in_out), got 'tensor<4x16x16xf32>'}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> w2 %w2 : tensor<4x16x16xf32>
         layout in_out glu interleaved
  return
}

// -----

// Tests that every weight has the same expert count.
func.func @experts_expert_count(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w2: tensor<2x8x16xf32>) {
  // expected-error @+1 {{expects w2 of shape [4, 8, 16] ([E, F, H] with layout in_out), got 'tensor<2x8x16xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w2 %w2 : tensor<2x8x16xf32> layout in_out
  return
}

// -----

// Tests that a fused projection's bias covers both halves.
func.func @experts_b1_shape(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x16xf32>, %b1: tensor<4x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects b1 of shape [4, 16] ([E, 2F]), got 'tensor<4x8xf32>'}}
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x16xf32> b1 %b1 : tensor<4x8xf32>
         w2 %w2 : tensor<4x8x16xf32> layout in_out glu interleaved
  return
}

// -----

// Tests that the down-projection bias has size H.
func.func @experts_b2_shape(%rows: tensor<?x16xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>, %b2: tensor<4x8xf32>) {
  // expected-error @+1 {{expects b2 of shape [4, 16] ([E, H]), got 'tensor<4x8xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x16x8xf32> w2 %w2 : tensor<4x8x16xf32>
         b2 %b2 : tensor<4x8xf32> layout in_out
  return
}

// -----

// Tests that there is one offset per expert plus the end.
func.func @experts_offsets(%rows: tensor<?x16xf32>, %offsets: tensor<4xi64>, %w1: tensor<4x16x8xf32>, %w2: tensor<4x8x16xf32>) {
  // expected-error @+1 {{expects offsets of shape [5] ([E + 1], E from the weights), got 'tensor<4xi64>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<4xi64>
         w1 %w1 : tensor<4x16x8xf32> w2 %w2 : tensor<4x8x16xf32> layout in_out
  return
}

// -----

// Tests that there is at least one expert.
func.func @experts_none(%rows: tensor<?x16xf32>, %offsets: tensor<1xi64>, %w1: tensor<0x16x8xf32>, %w2: tensor<0x8x16xf32>) {
  // expected-error @+1 {{expects at least one expert, got w1 of type 'tensor<0x16x8xf32>'}}
  %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<1xi64>
         w1 %w1 : tensor<0x16x8xf32> w2 %w2 : tensor<0x8x16xf32> layout in_out
  return
}

// -----

// Tests that combine gets one source per expert output row.
func.func @combine_source(%out: tensor<8x16xf32>, %source: tensor<6xi64>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{expects source of shape [8] ([N], N from the expert outputs), got 'tensor<6xi64>'}}
  %y = moe.combine %out, %source, %w : tensor<8x16xf32>, tensor<6xi64>, tensor<4x2xf32>
  return
}

// -----

// Tests that combine's router weights are [T, k].
func.func @combine_weights_rank(%out: tensor<?x16xf32>, %source: tensor<?xi64>, %w: tensor<?xf32>) {
  // expected-error @+1 {{expects weights of rank 2 ([T, k]), got 'tensor<?xf32>'}}
  %y = moe.combine %out, %source, %w : tensor<?x16xf32>, tensor<?xi64>, tensor<?xf32>
  return
}

// -----

// Tests that a pass-through input comes with the indices that say which
// assignments were dropped.
func.func @combine_passthrough_alone(%out: tensor<?x16xf32>, %source: tensor<?xi64>, %w: tensor<?x1xf32>, %x: tensor<?x16xf32>) {
  // expected-error @+1 {{expects `passthrough` and `indices` together}}
  %y = "moe.combine"(%out, %source, %w, %x) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>}> : (tensor<?x16xf32>, tensor<?xi64>, tensor<?x1xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

// Tests that the pass-through holds the tokens [T, H].
func.func @combine_passthrough_shape(%out: tensor<?x16xf32>, %source: tensor<?xi64>, %w: tensor<4x1xf32>, %x: tensor<4x8xf32>, %i: tensor<4x1xi64>) {
  // expected-error @+1 {{expects passthrough of shape [4, 16] ([T, H], T from the weights, H from the expert outputs), got 'tensor<4x8xf32>'}}
  %y = moe.combine %out, %source, %w passthrough %x, %i
         : tensor<?x16xf32>, tensor<?xi64>, tensor<4x1xf32>, tensor<4x8xf32>, tensor<4x1xi64>
  return
}

// -----

// Tests that the pass-through has the expert outputs' element type.
func.func @combine_passthrough_type(%out: tensor<?x16xf32>, %source: tensor<?xi64>, %w: tensor<?x1xf32>, %x: tensor<?x16xbf16>, %i: tensor<?x1xi64>) {
  // expected-error @+1 {{expects passthrough to have the element type of the expert outputs ('f32'), got 'bf16'}}
  %y = moe.combine %out, %source, %w passthrough %x, %i
         : tensor<?x16xf32>, tensor<?xi64>, tensor<?x1xf32>, tensor<?x16xbf16>, tensor<?x1xi64>
  return
}

// -----

// Tests that the dropped-assignment indices match the weights.
func.func @combine_indices_shape(%out: tensor<?x16xf32>, %source: tensor<?xi64>, %w: tensor<?x2xf32>, %x: tensor<?x16xf32>, %i: tensor<?x1xi64>) {
  // expected-error @+1 {{expects indices of shape [?, 2] ([T, k], as the weights), got 'tensor<?x1xi64>'}}
  %y = moe.combine %out, %source, %w passthrough %x, %i
         : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>, tensor<?x16xf32>, tensor<?x1xi64>
  return
}

// -----

// Tests that a shared expert's weights have no expert dimension.
func.func @shared_expert_rank(%x: tensor<?x16xf32>, %w1: tensor<1x16x8xf32>, %w2: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.shared_expert' op expects w1 of rank 2 (a matrix), got 'tensor<1x16x8xf32>'}}
  %y = moe.shared_expert relu %x : tensor<?x16xf32>
         w1 %w1 : tensor<1x16x8xf32> w2 %w2 : tensor<8x16xf32> layout in_out
  return
}

// -----

// Tests that a shared expert's down projection maps F back to H.
func.func @shared_expert_w2(%x: tensor<?x16xf32>, %w1: tensor<16x8xf32>, %w2: tensor<16x8xf32>) {
  // expected-error @+1 {{expects w2 of shape [8, 16] ([F, H] with layout in_out), got 'tensor<16x8xf32>'}}
  %y = moe.shared_expert relu %x : tensor<?x16xf32>
         w1 %w1 : tensor<16x8xf32> w2 %w2 : tensor<16x8xf32> layout in_out
  return
}

// -----

// Tests that the shared-expert gate is one vector of size H.
func.func @shared_expert_gate_shape(%x: tensor<?x16xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %g: tensor<2x16xf32>) {
  // expected-error @+1 {{expects gate of shape [H], [H, 1] or [1, H] with H = 16, got 'tensor<2x16xf32>'}}
  %y = moe.shared_expert relu %x : tensor<?x16xf32>
         w1 %w1 : tensor<16x8xf32> w2 %w2 : tensor<8x16xf32>
         gate %g : tensor<2x16xf32> layout in_out
  return
}

// -----

// Tests that the shared-expert gate has the tokens' element type.
func.func @shared_expert_gate_type(%x: tensor<?x16xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>, %g: tensor<16xf16>) {
  // expected-error @+1 {{expects gate to have the element type of the tokens ('f32'), got 'f16'}}
  %y = moe.shared_expert relu %x : tensor<?x16xf32>
         w1 %w1 : tensor<16x8xf32> w2 %w2 : tensor<8x16xf32>
         gate %g : tensor<16xf16> layout in_out
  return
}

// -----

// Tests that all_to_all exchanges rows, so its data has a row dimension.
func.func @all_to_all_scalar(%x: tensor<f32>, %send: tensor<4xi64>) {
  // expected-error @+1 {{expects data with a leading row dimension, got 'tensor<f32>'}}
  %recv, %counts = moe.all_to_all %x, %send group "ep" devices 4 : tensor<f32>, tensor<4xi64>
  return
}

// -----

// Tests that all_to_all runs over at least one device.
func.func @all_to_all_no_devices(%x: tensor<?x16xf32>, %send: tensor<0xi64>) {
  // expected-error @+1 {{expects at least one device, got num_devices = 0}}
  %recv, %counts = moe.all_to_all %x, %send group "ep" devices 0 : tensor<?x16xf32>, tensor<0xi64>
  return
}

// -----

// Tests that all_to_all names the device group it communicates in.
func.func @all_to_all_group(%x: tensor<?x16xf32>, %send: tensor<4xi64>) {
  // expected-error @+1 {{expects a non-empty device group name}}
  %recv, %counts = moe.all_to_all %x, %send group "" devices 4 : tensor<?x16xf32>, tensor<4xi64>
  return
}

// -----

// Tests that there is one send count per device.
func.func @all_to_all_send_counts(%x: tensor<?x16xf32>, %send: tensor<2xi64>) {
  // expected-error @+1 {{expects send_counts of shape [4] ([num_devices]), got 'tensor<2xi64>'}}
  %recv, %counts = moe.all_to_all %x, %send group "ep" devices 4 : tensor<?x16xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a split exchange is completed exactly once: a start without a
// wait would leave the exchange in flight.
func.func @all_to_all_start_no_wait(%x: tensor<?x16xf32>, %send: tensor<2xi64>) -> tensor<?x16xf32> {
  // expected-error @+1 {{expects exactly one moe.all_to_all_wait on its received rows, found 0}}
  %recv, %counts = moe.all_to_all_start %x, %send group "ep" devices 2 : tensor<?x16xf32>, tensor<2xi64>
  return %recv : tensor<?x16xf32>
}

// -----

// Tests that a wait names the tensors of the start it completes, so that the
// memory plan keeps exactly those alive.
func.func @all_to_all_wait_mismatch(%x: tensor<?x16xf32>, %y: tensor<?x16xf32>, %send: tensor<2xi64>) {
  %recv, %counts = moe.all_to_all_start %x, %send group "ep" devices 2 : tensor<?x16xf32>, tensor<2xi64>
  // expected-error @+1 {{expects `data`, `send_counts` and `like` to be the operands of the moe.all_to_all_start it completes}}
  moe.all_to_all_wait %y, %send, %recv, %counts : tensor<?x16xf32>, tensor<2xi64>, tensor<?x16xf32>, tensor<2xi64>
  return
}

// -----

// Tests that a wait completes a start, not any received tensor.
func.func @all_to_all_wait_no_start(%x: tensor<?x16xf32>, %send: tensor<2xi64>) {
  %recv, %counts = moe.all_to_all %x, %send group "ep" devices 2 : tensor<?x16xf32>, tensor<2xi64>
  // expected-error @+1 {{expects `received` and `recv_counts` to be the results of one moe.all_to_all_start}}
  moe.all_to_all_wait %x, %send, %recv, %counts : tensor<?x16xf32>, tensor<2xi64>, tensor<?x16xf32>, tensor<2xi64>
  return
}

// -----

// Tests that every expert has a slot: tokens routed to a slotless expert
// would have nowhere to go.
func.func @assign_slots_empty_expert(%i: tensor<?x2xi64>) {
  // expected-error @+1 {{expects every expert to have a slot, but expert 1 has 0}}
  %s = moe.assign_slots %i offsets [0, 1, 1, 2] slots [0, 1] : tensor<?x2xi64>
  return
}

// -----

// Tests that the offsets cover exactly the slot list.
func.func @assign_slots_offsets_end(%i: tensor<?x2xi64>) {
  // expected-error @+1 {{expects expert_slot_offsets to end at the number of slots (3), got 2}}
  %s = moe.assign_slots %i offsets [0, 1, 2] slots [0, 1, 2] : tensor<?x2xi64>
  return
}

// -----

// Tests that a slot holds one expert: a slot listed twice would receive two
// experts' tokens.
func.func @assign_slots_duplicate(%i: tensor<?x2xi64>) {
  // expected-error @+1 {{expects distinct expert_slots, got 0 twice}}
  %s = moe.assign_slots %i offsets [0, 1, 2] slots [0, 0] : tensor<?x2xi64>
  return
}

// -----

// Tests that regroup's counts hold one entry per source and local slot.
func.func @regroup_counts(%recv: tensor<?x16xf32>, %counts: tensor<3xi64>) {
  // expected-error @+1 {{expects slot_counts of shape [4] ([num_sources * num_slots]), got 'tensor<3xi64>'}}
  %g, %off, %perm = moe.regroup %recv, %counts sources 2 slots 2 : tensor<?x16xf32>, tensor<3xi64>
  return
}

// -----

// Tests that ungroup's permutation has one entry per row.
func.func @ungroup_perm(%y: tensor<8x16xf32>, %perm: tensor<4xi64>) {
  // expected-error @+1 {{expects perm of shape [8] ([R], R from grouped_out), got 'tensor<4xi64>'}}
  %out = moe.ungroup %y, %perm : tensor<8x16xf32>, tensor<4xi64>
  return
}

// -----

// Tests that a shard selects rows of a constant weight: shards are byte
// ranges of the plan's weights, not computed tensors.
func.func @shard_not_weight(%w: tensor<4x8xf32>) {
  // expected-error @+1 {{expects a constant weight (moe.constant or a moe.stack of constants)}}
  %s = moe.shard %w rows [0] : tensor<4x8xf32>
  return
}

// -----

// Tests that shard rows exist in the weight.
func.func @shard_rows(%x: tensor<f32>) {
  %w = moe.constant dense<1.0> : tensor<4x8xf32>
  // expected-error @+1 {{expects rows in [0, 4), got 4}}
  %s = moe.shard %w rows [1, 4] : tensor<4x8xf32>
  return
}

// -----

// Tests that a segment is taken from a vector of sorted ids.
func.func @segment_ids_rank(%ids: tensor<?x2xi64>, %range: tensor<?xi64>) {
  // expected-error @+1 {{expects ids of rank 1 ([N] sorted expert ids), got 'tensor<?x2xi64>'}}
  %rows = moe.segment %ids expert 0 fallback %range : tensor<?x2xi64>, tensor<?xi64>
  return
}

// -----

// Tests that a segment's fallback is a vector of positions.
func.func @segment_fallback_rank(%ids: tensor<?xi64>, %range: tensor<?x1xi64>) {
  // expected-error @+1 {{expects fallback of rank 1 (the segment's positions), got 'tensor<?x1xi64>'}}
  %rows = moe.segment %ids expert 0 fallback %range : tensor<?xi64>, tensor<?x1xi64>
  return
}

// -----

// Tests that a segment belongs to an expert index, which is never negative.
func.func @segment_negative_expert(%ids: tensor<?xi64>, %range: tensor<?xi64>) {
  // expected-error @+1 {{expects a non-negative expert, got -1}}
  %rows = moe.segment %ids expert -1 fallback %range : tensor<?xi64>, tensor<?xi64>
  return
}

// -----

// Tests that a segment holds at most the sorted rows: its length is bounded
// by their count (T*k), never by a data-dependent size.
func.func @segment_too_long(%ids: tensor<4xi64>, %range: tensor<5xi64>) {
  // expected-error @+1 {{expects a segment of at most the 4 sorted rows, got 5 positions}}
  %rows = moe.segment %ids expert 1 fallback %range : tensor<4xi64>, tensor<5xi64>
  return
}
