// RUN: moec-opt %s --split-input-file | moec-opt --split-input-file | FileCheck %s
// RUN: moec-opt %s --split-input-file --mlir-print-op-generic | moec-opt --split-input-file | FileCheck %s

// Tests that the Mixtral gate (softmax, top-2, renormalised) round-trips and
// infers [T, k] weights and indices.
// CHECK-LABEL: func.func @router_mixtral
func.func @router_mixtral(%logits: tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>) {
  // CHECK: moe.router %{{.*}} top 2 softmax normalize : tensor<?x8xf32>
  %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x8xf32>
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi64>
}

// -----

// Tests that the Qwen2-MoE gate (softmax, top-4, no renormalisation) prints
// no optional clauses.
// CHECK-LABEL: func.func @router_qwen2
func.func @router_qwen2(%logits: tensor<?x60xbf16>) -> (tensor<?x4xbf16>, tensor<?x4xi64>) {
  // CHECK: moe.router %{{.*}} top 4 softmax : tensor<?x60xbf16>
  %w, %i = moe.router %logits top 4 softmax : tensor<?x60xbf16>
  return %w, %i : tensor<?x4xbf16>, tensor<?x4xi64>
}

// -----

// Tests that the DeepSeek-V3 gate (sigmoid scores, selection-only bias,
// grouped top-k, renormalisation, routed scaling) round-trips with the
// clauses in any order.
// CHECK-LABEL: func.func @router_deepseek_v3
func.func @router_deepseek_v3(%logits: tensor<?x256xf32>, %bias: tensor<256xf32>) -> (tensor<?x8xf32>, tensor<?x8xi64>) {
  // CHECK: moe.router %{{.*}} bias %{{.*}} top 8 sigmoid groups 8 keep 4 normalize scale 2.500000e+00 : tensor<?x256xf32>, tensor<256xf32>
  %w, %i = moe.router %logits bias %bias top 8 sigmoid normalize scale 2.5 groups 8 keep 4 : tensor<?x256xf32>, tensor<256xf32>
  return %w, %i : tensor<?x8xf32>, tensor<?x8xi64>
}

// -----

// Tests that the GPT-OSS gate (top-k on the logits, softmax over the k)
// round-trips.
// CHECK-LABEL: func.func @router_gpt_oss
func.func @router_gpt_oss(%logits: tensor<?x32xf32>) -> (tensor<?x4xf32>, tensor<?x4xi64>) {
  // CHECK: moe.router %{{.*}} top 4 softmax after_topk : tensor<?x32xf32>
  %w, %i = moe.router %logits top 4 softmax after_topk : tensor<?x32xf32>
  return %w, %i : tensor<?x4xf32>, tensor<?x4xi64>
}

// -----

// Tests that the Switch Transformers gate (top-1 with a per-sequence expert
// capacity) accepts [B, S, E] logits and infers [B, S, 1] results.
// CHECK-LABEL: func.func @router_switch
func.func @router_switch(%logits: tensor<?x?x8xf32>) -> (tensor<?x?x1xf32>, tensor<?x?x1xi64>) {
  // CHECK: moe.router %{{.*}} top 1 softmax capacity 64 : tensor<?x?x8xf32>
  %w, %i = moe.router %logits top 1 softmax capacity 64 : tensor<?x?x8xf32>
  return %w, %i : tensor<?x?x1xf32>, tensor<?x?x1xi64>
}

// -----

// Tests that GShard's gate (top-2 with a capacity, renormalised over the
// kept choices) round-trips its epsilon.
// CHECK-LABEL: func.func @router_gshard
func.func @router_gshard(%logits: tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>) {
  // CHECK: moe.router %{{.*}} top 2 softmax capacity 24 normalize_kept 1.1920929E-7 : tensor<?x4xf32>
  %w, %i = moe.router %logits top 2 softmax capacity 24 normalize_kept 1.1920929E-7 : tensor<?x4xf32>
  return %w, %i : tensor<?x2xf32>, tensor<?x2xi64>
}

// -----

// Tests that a routing scale of 1 and a single group (the defaults) are not
// printed.
// CHECK-LABEL: func.func @router_defaults
func.func @router_defaults(%logits: tensor<4x8xf32>) -> tensor<4x2xi64> {
  // CHECK: moe.router %{{.*}} top 2 sigmoid : tensor<4x8xf32>
  %w, %i = moe.router %logits top 2 sigmoid scale 1.0 groups 1 keep 1 : tensor<4x8xf32>
  return %i : tensor<4x2xi64>
}

// -----

// Tests that dispatch infers T*k rows, E+1 offsets and T*k sources, both for
// a dynamic and for a static token count.
// CHECK-LABEL: func.func @dispatch
func.func @dispatch(%x: tensor<?x16xf32>, %i: tensor<?x2xi64>, %xs: tensor<4x16xbf16>, %is: tensor<4x2xi64>) -> (tensor<?x16xf32>, tensor<9xi64>, tensor<?xi64>, tensor<8x16xbf16>, tensor<8xi64>) {
  // CHECK: moe.dispatch %{{.*}}, %{{.*}} experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
  %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
  // CHECK: moe.dispatch %{{.*}}, %{{.*}} experts 8 : tensor<4x16xbf16>, tensor<4x2xi64>
  %srows, %soffsets, %ssource = moe.dispatch %xs, %is experts 8 : tensor<4x16xbf16>, tensor<4x2xi64>
  return %rows, %offsets, %source, %srows, %ssource : tensor<?x16xf32>, tensor<9xi64>, tensor<?xi64>, tensor<8x16xbf16>, tensor<8xi64>
}

// -----

// Tests Mixtral's experts: SwiGLU with separate gate (w1) and up (w3)
// projections in nn.Linear's [out, in] layout.
// CHECK-LABEL: func.func @experts_mixtral
func.func @experts_mixtral(%rows: tensor<?x16xf32>, %offsets: tensor<9xi64>, %w1: tensor<8x32x16xf32>, %w3: tensor<8x32x16xf32>, %w2: tensor<8x16x32xf32>) -> tensor<?x16xf32> {
  // CHECK: moe.experts silu_glu %{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<9xi64> w1 %{{.*}} : tensor<8x32x16xf32> w3 %{{.*}} : tensor<8x32x16xf32> w2 %{{.*}} : tensor<8x16x32xf32> layout out_in
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
         w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
         w2 %w2 : tensor<8x16x32xf32> layout out_in
  return %y : tensor<?x16xf32>
}

// -----

// Tests GPT-OSS's experts: an interleaved fused gate/up projection with
// biases, [in, out] layout, and the clamped SwiGLU.
// CHECK-LABEL: func.func @experts_gpt_oss
func.func @experts_gpt_oss(%rows: tensor<?x16xbf16>, %offsets: tensor<33xi64>, %w13: tensor<32x16x64xbf16>, %b13: tensor<32x64xbf16>, %w2: tensor<32x32x16xbf16>, %b2: tensor<32x16xbf16>) -> tensor<?x16xbf16> {
  // CHECK: moe.experts clamped_swiglu %{{.*}}, %{{.*}} : tensor<?x16xbf16>, tensor<33xi64> w1 %{{.*}} : tensor<32x16x64xbf16> b1 %{{.*}} : tensor<32x64xbf16> w2 %{{.*}} : tensor<32x32x16xbf16> b2 %{{.*}} : tensor<32x16xbf16> layout in_out glu interleaved alpha 1.702000e+00 beta 1.000000e+00 limit 7.000000e+00
  %y = moe.experts clamped_swiglu %rows, %offsets : tensor<?x16xbf16>, tensor<33xi64>
         w1 %w13 : tensor<32x16x64xbf16> b1 %b13 : tensor<32x64xbf16>
         w2 %w2 : tensor<32x32x16xbf16> b2 %b2 : tensor<32x16xbf16>
         layout in_out glu interleaved alpha 1.702 beta 1.0 limit 7.0
  return %y : tensor<?x16xbf16>
}

// -----

// Tests a clamped SwiGLU without a limit (onnxruntime's swiglu with alpha and
// beta only) over separate projections with every bias.
// CHECK-LABEL: func.func @experts_clamped_swiglu_unlimited
func.func @experts_clamped_swiglu_unlimited(%rows: tensor<?x8xf32>, %offsets: tensor<5xi64>, %w1: tensor<4x6x8xf32>, %b1: tensor<4x6xf32>, %w3: tensor<4x6x8xf32>, %b3: tensor<4x6xf32>, %w2: tensor<4x8x6xf32>, %b2: tensor<4x8xf32>) -> tensor<?x8xf32> {
  // CHECK: moe.experts clamped_swiglu %{{.*}}, %{{.*}} : tensor<?x8xf32>, tensor<5xi64> w1 %{{.*}} : tensor<4x6x8xf32> b1 %{{.*}} : tensor<4x6xf32> w3 %{{.*}} : tensor<4x6x8xf32> b3 %{{.*}} : tensor<4x6xf32> w2 %{{.*}} : tensor<4x8x6xf32> b2 %{{.*}} : tensor<4x8xf32> layout out_in alpha 1.702000e+00 beta 0.000000e+00{{$}}
  %y = moe.experts clamped_swiglu %rows, %offsets : tensor<?x8xf32>, tensor<5xi64>
         w1 %w1 : tensor<4x6x8xf32> b1 %b1 : tensor<4x6xf32>
         w3 %w3 : tensor<4x6x8xf32> b3 %b3 : tensor<4x6xf32>
         w2 %w2 : tensor<4x8x6xf32> b2 %b2 : tensor<4x8xf32>
         layout out_in beta 0.0 alpha 1.702
  return %y : tensor<?x8xf32>
}

// -----

// Tests the fused concatenated gate/up projection of transformers' batched
// experts, and the gated GELU variants.
// CHECK-LABEL: func.func @experts_fused_concatenated
func.func @experts_fused_concatenated(%rows: tensor<?x16xf32>, %offsets: tensor<9xi64>, %w13: tensor<8x16x64xf32>, %w2: tensor<8x32x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) {
  // CHECK: moe.experts silu_glu {{.*}} layout in_out glu concatenated
  %a = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
         w1 %w13 : tensor<8x16x64xf32> w2 %w2 : tensor<8x32x16xf32>
         layout in_out glu concatenated
  // CHECK: moe.experts gelu_glu {{.*}} layout in_out glu concatenated
  %b = moe.experts gelu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
         w1 %w13 : tensor<8x16x64xf32> w2 %w2 : tensor<8x32x16xf32>
         layout in_out glu concatenated
  // CHECK: moe.experts gelu_tanh_glu {{.*}} layout in_out glu interleaved
  %c = moe.experts gelu_tanh_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
         w1 %w13 : tensor<8x16x64xf32> w2 %w2 : tensor<8x32x16xf32>
         layout in_out glu interleaved
  return %a, %b, %c : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// Tests every non-gated activation, with biases and static rows.
// CHECK-LABEL: func.func @experts_plain
func.func @experts_plain(%rows: tensor<12x8xf16>, %offsets: tensor<5xi64>, %w1: tensor<4x8x6xf16>, %b1: tensor<4x6xf16>, %w2: tensor<4x6x8xf16>, %b2: tensor<4x8xf16>) -> tensor<12x8xf16> {
  // CHECK: moe.experts relu {{.*}} layout in_out{{$}}
  %a = moe.experts relu %rows, %offsets : tensor<12x8xf16>, tensor<5xi64>
         w1 %w1 : tensor<4x8x6xf16> b1 %b1 : tensor<4x6xf16>
         w2 %w2 : tensor<4x6x8xf16> b2 %b2 : tensor<4x8xf16> layout in_out
  // CHECK: moe.experts gelu {{.*}} layout in_out{{$}}
  %b = moe.experts gelu %a, %offsets : tensor<12x8xf16>, tensor<5xi64>
         w1 %w1 : tensor<4x8x6xf16> w2 %w2 : tensor<4x6x8xf16> layout in_out
  // CHECK: moe.experts gelu_tanh {{.*}} layout in_out{{$}}
  %c = moe.experts gelu_tanh %b, %offsets : tensor<12x8xf16>, tensor<5xi64>
         w1 %w1 : tensor<4x8x6xf16> w2 %w2 : tensor<4x6x8xf16> layout in_out
  // CHECK: moe.experts silu {{.*}} layout in_out{{$}}
  %d = moe.experts silu %c, %offsets : tensor<12x8xf16>, tensor<5xi64>
         w1 %w1 : tensor<4x8x6xf16> w2 %w2 : tensor<4x6x8xf16> layout in_out
  // CHECK: moe.experts identity {{.*}} layout in_out{{$}}
  %e = moe.experts identity %d, %offsets : tensor<12x8xf16>, tensor<5xi64>
         w1 %w1 : tensor<4x8x6xf16> w2 %w2 : tensor<4x6x8xf16> layout in_out
  return %e : tensor<12x8xf16>
}

// -----

// Tests combine with and without the pass-through of dropped tokens, with
// f32 router weights for bf16 expert outputs.
// CHECK-LABEL: func.func @combine
func.func @combine(%out: tensor<?x16xbf16>, %source: tensor<?xi64>, %w: tensor<?x2xf32>, %x: tensor<?x16xbf16>, %i: tensor<?x2xi64>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  // CHECK: moe.combine %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x16xbf16>, tensor<?xi64>, tensor<?x2xf32>
  %a = moe.combine %out, %source, %w : tensor<?x16xbf16>, tensor<?xi64>, tensor<?x2xf32>
  // CHECK: moe.combine %{{.*}}, %{{.*}}, %{{.*}} passthrough %{{.*}}, %{{.*}} : tensor<?x16xbf16>, tensor<?xi64>, tensor<?x2xf32>, tensor<?x16xbf16>, tensor<?x2xi64>
  %b = moe.combine %out, %source, %w passthrough %x, %i
         : tensor<?x16xbf16>, tensor<?xi64>, tensor<?x2xf32>, tensor<?x16xbf16>, tensor<?x2xi64>
  return %a, %b : tensor<?x16xbf16>, tensor<?x16xbf16>
}

// -----

// Tests Qwen2-MoE's sigmoid-gated shared expert (every gate vector shape)
// and DeepSeek's plain one with a fused projection.
// CHECK-LABEL: func.func @shared_expert
func.func @shared_expert(%x: tensor<?x16xf32>, %wg: tensor<64x16xf32>, %wu: tensor<64x16xf32>, %wd: tensor<16x64xf32>, %g: tensor<1x16xf32>, %gv: tensor<16xf32>, %gc: tensor<16x1xf32>, %w13: tensor<16x128xf32>, %w2: tensor<64x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) {
  // CHECK: moe.shared_expert silu_glu %{{.*}} : tensor<?x16xf32> w1 %{{.*}} : tensor<64x16xf32> w3 %{{.*}} : tensor<64x16xf32> w2 %{{.*}} : tensor<16x64xf32> gate %{{.*}} : tensor<1x16xf32> layout out_in
  %a = moe.shared_expert silu_glu %x : tensor<?x16xf32>
         w1 %wg : tensor<64x16xf32> w3 %wu : tensor<64x16xf32>
         w2 %wd : tensor<16x64xf32> gate %g : tensor<1x16xf32> layout out_in
  // CHECK: gate %{{.*}} : tensor<16xf32> layout out_in
  %b = moe.shared_expert silu_glu %x : tensor<?x16xf32>
         w1 %wg : tensor<64x16xf32> w3 %wu : tensor<64x16xf32>
         w2 %wd : tensor<16x64xf32> gate %gv : tensor<16xf32> layout out_in
  // CHECK: gate %{{.*}} : tensor<16x1xf32> layout out_in
  %c = moe.shared_expert silu_glu %x : tensor<?x16xf32>
         w1 %wg : tensor<64x16xf32> w3 %wu : tensor<64x16xf32>
         w2 %wd : tensor<16x64xf32> gate %gc : tensor<16x1xf32> layout out_in
  // CHECK: moe.shared_expert silu_glu %{{.*}} : tensor<?x16xf32> w1 %{{.*}} : tensor<16x128xf32> w2 %{{.*}} : tensor<64x16xf32> layout in_out glu concatenated
  %d = moe.shared_expert silu_glu %x : tensor<?x16xf32>
         w1 %w13 : tensor<16x128xf32> w2 %w2 : tensor<64x16xf32>
         layout in_out glu concatenated
  return %a, %b, %c, %d : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// Tests that all_to_all bounds the received rows by num_devices times the
// sent rows, and keeps them dynamic for a dynamic row count.
// CHECK-LABEL: func.func @all_to_all
func.func @all_to_all(%rows: tensor<?x16xf32>, %static: tensor<8x16xf32>, %send: tensor<4xi64>) -> (tensor<?x16xf32>, tensor<32x16xf32>, tensor<4xi64>) {
  // CHECK: moe.all_to_all %{{.*}}, %{{.*}} group "ep" devices 4 : tensor<?x16xf32>, tensor<4xi64>
  %recv, %counts = moe.all_to_all %rows, %send group "ep" devices 4 : tensor<?x16xf32>, tensor<4xi64>
  // CHECK: moe.all_to_all %{{.*}}, %{{.*}} group "ep" devices 4 : tensor<8x16xf32>, tensor<4xi64>
  %srecv, %scounts = moe.all_to_all %static, %send group "ep" devices 4 : tensor<8x16xf32>, tensor<4xi64>
  return %recv, %srecv, %counts : tensor<?x16xf32>, tensor<32x16xf32>, tensor<4xi64>
}

// -----

// Tests a whole Mixtral layer: router, dispatch, experts and combine chain
// through their inferred types.
// CHECK-LABEL: func.func @mixtral_layer
func.func @mixtral_layer(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>, %w1: tensor<8x32x16xf32>, %w3: tensor<8x32x16xf32>, %w2: tensor<8x16x32xf32>) -> tensor<?x16xf32> {
  // CHECK: moe.router
  // CHECK-NEXT: moe.dispatch
  // CHECK-NEXT: moe.experts
  // CHECK-NEXT: moe.combine
  %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x8xf32>
  %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
         w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
         w2 %w2 : tensor<8x16x32xf32> layout out_in
  %out = moe.combine %y, %source, %w : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
  return %out : tensor<?x16xf32>
}

// -----

// Tests that the return exchange takes its received row count from `like`
// (the rows the device dispatched) instead of N times the sent rows.
// CHECK-LABEL: func.func @all_to_all_like
func.func @all_to_all_like(%back: tensor<?x16xf32>, %counts: tensor<2xi64>, %rows: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: moe.all_to_all %{{.*}}, %{{.*}} group "ep" devices 2 like %{{.*}} : tensor<?x16xf32>, tensor<2xi64>, tensor<8x16xf32>
  %out, %n = moe.all_to_all %back, %counts group "ep" devices 2 like %rows : tensor<?x16xf32>, tensor<2xi64>, tensor<8x16xf32>
  return %out : tensor<8x16xf32>
}

// -----

// Tests that a split exchange round-trips: the start infers the types of
// moe.all_to_all and the wait names the start's operands and results.
// CHECK-LABEL: func.func @all_to_all_start_wait
func.func @all_to_all_start_wait(%rows: tensor<?x16xf32>, %send: tensor<2xi64>) -> tensor<?x16xf32> {
  // CHECK: %[[R:.*]], %[[C:.*]] = moe.all_to_all_start %[[D:.*]], %[[S:.*]] group "ep" devices 2 : tensor<?x16xf32>, tensor<2xi64>
  // CHECK-NEXT: moe.all_to_all_wait %[[D]], %[[S]], %[[R]], %[[C]] : tensor<?x16xf32>, tensor<2xi64>, tensor<?x16xf32>, tensor<2xi64>
  %recv, %counts = moe.all_to_all_start %rows, %send group "ep" devices 2 : tensor<?x16xf32>, tensor<2xi64>
  moe.all_to_all_wait %rows, %send, %recv, %counts : tensor<?x16xf32>, tensor<2xi64>, tensor<?x16xf32>, tensor<2xi64>
  return %recv : tensor<?x16xf32>
}

// -----

// Tests a device's side of an expert-parallel layer: slots, dispatch over
// them, regroup of the received rows, experts on the device's shards and
// ungroup, through their inferred types.
// CHECK-LABEL: func.func @expert_parallel_layer
func.func @expert_parallel_layer(%x: tensor<?x16xf32>, %i: tensor<?x2xi64>, %recv: tensor<?x16xf32>, %counts: tensor<4xi64>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %w1 = moe.constant dense<1.0> : tensor<4x32x16xf32>
  %w2 = moe.constant dense<1.0> : tensor<4x16x32xf32>
  // CHECK: moe.assign_slots %{{.*}} offsets [0, 2, 3, 4, 5] slots [0, 3, 1, 2, 4] : tensor<?x2xi64>
  %slots = moe.assign_slots %i offsets [0, 2, 3, 4, 5] slots [0, 3, 1, 2, 4] : tensor<?x2xi64>
  // CHECK: moe.dispatch %{{.*}}, %{{.*}} experts 5
  %rows, %offsets, %source = moe.dispatch %x, %slots experts 5 : tensor<?x16xf32>, tensor<?x2xi64>
  // CHECK: moe.regroup %{{.*}}, %{{.*}} sources 2 slots 2 : tensor<?x16xf32>, tensor<4xi64>
  %g, %loff, %perm = moe.regroup %recv, %counts sources 2 slots 2 : tensor<?x16xf32>, tensor<4xi64>
  // CHECK: moe.shard %{{.*}} rows [0, 1] : tensor<4x32x16xf32>
  %w1_local = moe.shard %w1 rows [0, 1] : tensor<4x32x16xf32>
  %w2_local = moe.shard %w2 rows [0, 1] : tensor<4x16x32xf32>
  %y = moe.experts silu %g, %loff : tensor<?x16xf32>, tensor<3xi64>
         w1 %w1_local : tensor<2x32x16xf32> w2 %w2_local : tensor<2x16x32xf32> layout out_in
  // CHECK: moe.ungroup %{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<?xi64>
  %back = moe.ungroup %y, %perm : tensor<?x16xf32>, tensor<?xi64>
  return %rows, %back : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// Tests that moe.segment round-trips and takes its fallback's type.
// CHECK-LABEL: func.func @segment
// CHECK: moe.segment %{{.*}} expert 3 fallback %{{.*}} : tensor<?xi64>, tensor<?xi64>
func.func @segment(%sorted: tensor<?xi64>, %range: tensor<?xi64>) -> tensor<?xi64> {
  %rows = moe.segment %sorted expert 3 fallback %range : tensor<?xi64>, tensor<?xi64>
  return %rows : tensor<?xi64>
}
