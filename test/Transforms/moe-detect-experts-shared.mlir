// RUN: moec-opt %s --split-input-file --moe-detect-stacked-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Shared experts in the forms transformers' afmoe, aria and granitemoeshared
// write them (rewriteSharedExperts, passes/SharedExperts.cpp), detected here
// next to a batched_mm layer (moe-detect-stacked-experts; every detector of
// routed experts shares the rewrite): on the flattened tokens or on any
// view of their rows, added before or after the routed output or a view of
// it, of any expert network moe.shared_expert runs.
// Tests that a shared expert computed on the flattened tokens, reshaped to
// the [B, S, H] input and added before the routed output reshaped the same
// way (AFMoE: `shared_output + routed_output`, both `.view(B, S, H)`),
// becomes moe.shared_expert on the tokens, reshaped as the export did.
// CHECK-LABEL: func.func @afmoe_flat_shared_added_first
// CHECK-SAME: (%[[X3:.*]]: tensor<?x?x8xf32>)
// CHECK: %[[X:.*]] = moe.reshape %[[X3]]
// CHECK: %[[C:.*]] = moe.combine
// CHECK: %[[R3:.*]] = moe.reshape %[[C]]
// CHECK: %[[S:.*]] = moe.shared_expert silu_glu %[[X]] : tensor<?x8xf32> w1 %{{.*}} : tensor<8x6xf32> w3 %{{.*}} : tensor<8x6xf32> w2 %{{.*}} : tensor<6x8xf32> layout in_out
// CHECK: %[[S3:.*]] = moe.reshape %[[S]], %{{.*}} : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
// CHECK: %[[SUM:.*]] = moe.add %[[S3]], %[[R3]]
// CHECK: return %[[SUM]]

func.func @afmoe_flat_shared_added_first(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<8x6xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<8x6xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %shs = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %shs : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %sa = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x6xf32>, tensor<6x8xf32>) -> tensor<?x8xf32>
  %sy3 = moe.reshape %sy, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %out = moe.add %sy3, %routed3 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a shared expert on the tokens reshaped back to [B, S, H]
// (Aria: `shared_experts(hidden_states.view(original_shape))`, the flat
// tokens viewed again), added after the routed output, becomes
// moe.shared_expert on the tokens reshaped to that view's shape.
// CHECK-LABEL: func.func @aria_shared_on_reshaped_tokens
// CHECK-SAME: (%[[X3:.*]]: tensor<?x?x8xf32>)
// CHECK: %[[X:.*]] = moe.reshape %[[X3]]
// CHECK: %[[R3:.*]] = moe.reshape %{{.*}}, %[[SH:.*]] :
// CHECK: %[[V:.*]] = moe.reshape %[[X]], %[[SH]]
// CHECK: %[[S:.*]] = moe.shared_expert silu_glu %[[X]] : tensor<?x8xf32> w1 %{{.*}} : tensor<8x6xf32> w3 %{{.*}} : tensor<8x6xf32> w2 %{{.*}} : tensor<6x8xf32> layout in_out
// CHECK: %[[VS:.*]] = moe.shape %[[V]]
// CHECK: %[[S3:.*]] = moe.reshape %[[S]], %[[VS]] : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
// CHECK: %[[SUM:.*]] = moe.add %[[R3]], %[[S3]]
// CHECK: return %[[SUM]]

func.func @aria_shared_on_reshaped_tokens(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %xv = moe.reshape %x, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<8x6xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<8x6xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %xv, %sw1 : (tensor<?x?x8xf32>, tensor<8x6xf32>) -> tensor<?x?x6xf32>
  %shs = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %shs : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %xv, %sw3 : (tensor<?x?x8xf32>, tensor<8x6xf32>) -> tensor<?x?x6xf32>
  %sa = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x?x6xf32>, tensor<6x8xf32>) -> tensor<?x?x8xf32>
  %out = moe.add %routed3, %sy : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a shared expert with one fused gate/up projection of another
// width, split into its halves, on the [B, S, H] input (GraniteMoeShared's
// `input_linear` and `chunk(2)`, added to the routed output by its decoder
// layer) becomes moe.shared_expert with the fused weight, `glu
// concatenated`.
// CHECK-LABEL: func.func @granite_fused_shared
// CHECK-SAME: (%[[X3:.*]]: tensor<?x?x8xf32>)
// CHECK: %[[X:.*]] = moe.reshape %[[X3]]
// CHECK: %[[S:.*]] = moe.shared_expert silu_glu %[[X]] : tensor<?x8xf32> w1 %{{.*}} : tensor<8x12xf32> w2 %{{.*}} : tensor<6x8xf32> layout in_out glu concatenated
// CHECK: %[[XS:.*]] = moe.shape %[[X3]]
// CHECK: %[[S3:.*]] = moe.reshape %[[S]], %[[XS]]
// CHECK: moe.add %{{.*}}, %[[S3]]
// CHECK-NOT: moe.split

func.func @granite_fused_shared(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw13 = moe.constant dense<1.0e-01> : tensor<8x12xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %x3, %sw13 : (tensor<?x?x8xf32>, tensor<8x12xf32>) -> tensor<?x?x12xf32>
  %sparts:2 = moe.split %sh {axis = -1 : i64, num_outputs = 2 : i64} : (tensor<?x?x12xf32>) -> (tensor<?x?x6xf32>, tensor<?x?x6xf32>)
  %shs = moe.sigmoid %sparts#0 : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sparts#0, %shs : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sa = moe.mul %ssilu, %sparts#1 : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x?x6xf32>, tensor<6x8xf32>) -> tensor<?x?x8xf32>
  %out = moe.add %routed3, %sy : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a shared expert of another activation, with biases and
// [out, in] weights (GeGLU, tanh approximation: Aria's shared experts follow
// `hidden_act` while its routed ones are SwiGLU), becomes moe.shared_expert
// with that activation and the biases.
// CHECK-LABEL: func.func @geglu_biased_shared
// CHECK: moe.shared_expert gelu_tanh_glu %{{.*}} : tensor<?x8xf32> w1 %{{.*}} : tensor<5x8xf32> b1 %{{.*}} : tensor<5xf32> w3 %{{.*}} : tensor<5x8xf32> b3 %{{.*}} : tensor<5xf32> w2 %{{.*}} : tensor<8x5xf32> b2 %{{.*}} : tensor<8xf32> layout out_in
// CHECK-NOT: moe.gelu

func.func @geglu_biased_shared(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<5x8xf32>
  %sb1 = moe.constant dense<1.5e-01> : tensor<5xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<5x8xf32>
  %sb3 = moe.constant dense<2.5e-01> : tensor<5xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<8x5xf32>
  %sb2 = moe.constant dense<3.5e-01> : tensor<8xf32>
  %sh0 = moe.gemm %x, %sw1 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<5x8xf32>) -> tensor<?x5xf32>
  %sh = moe.add %sh0, %sb1 : (tensor<?x5xf32>, tensor<5xf32>) -> tensor<?x5xf32>
  %sgelu = moe.gelu %sh {approximate = "tanh"} : (tensor<?x5xf32>) -> tensor<?x5xf32>
  %sup0 = moe.gemm %x, %sw3 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<5x8xf32>) -> tensor<?x5xf32>
  %sup = moe.add %sb3, %sup0 : (tensor<5xf32>, tensor<?x5xf32>) -> tensor<?x5xf32>
  %sa = moe.mul %sup, %sgelu : (tensor<?x5xf32>, tensor<?x5xf32>) -> tensor<?x5xf32>
  %sy0 = moe.gemm %sa, %sw2 {transB = 1 : i64} : (tensor<?x5xf32>, tensor<8x5xf32>) -> tensor<?x8xf32>
  %sy = moe.add %sy0, %sb2 : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %sy3 = moe.reshape %sy, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %out = moe.add %routed3, %sy3 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that two shared experts added one after the other to the routed
// output (`routed + shared_1 + shared_2`, the second of another width and
// added first in its Add) both become moe.shared_expert.
// CHECK-LABEL: func.func @two_shared_chained
// CHECK: %[[C:.*]] = moe.combine
// CHECK: %[[S1:.*]] = moe.shared_expert silu_glu %{{.*}} w1 %{{.*}} : tensor<8x6xf32>
// CHECK: %[[SUM1:.*]] = moe.add %[[C]], %[[S1]]
// CHECK: %[[S2:.*]] = moe.shared_expert silu_glu %{{.*}} w1 %{{.*}} : tensor<8x3xf32>
// CHECK: %[[SUM2:.*]] = moe.add %[[S2]], %[[SUM1]]
// CHECK: %[[OUT:.*]] = moe.reshape %[[SUM2]]
// CHECK: return %[[OUT]]

func.func @two_shared_chained(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<8x6xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<8x6xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %shs = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %shs : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %sa = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x6xf32>, tensor<6x8xf32>) -> tensor<?x8xf32>
  %tw1 = moe.constant dense<1.0e-01> : tensor<8x3xf32>
  %tw3 = moe.constant dense<2.0e-01> : tensor<8x3xf32>
  %tw2 = moe.constant dense<3.0e-01> : tensor<3x8xf32>
  %th = moe.mat_mul %x, %tw1 : (tensor<?x8xf32>, tensor<8x3xf32>) -> tensor<?x3xf32>
  %ths = moe.sigmoid %th : (tensor<?x3xf32>) -> tensor<?x3xf32>
  %tsilu = moe.mul %th, %ths : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  %tup = moe.mat_mul %x, %tw3 : (tensor<?x8xf32>, tensor<8x3xf32>) -> tensor<?x3xf32>
  %ta = moe.mul %tsilu, %tup : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  %ty = moe.mat_mul %ta, %tw2 : (tensor<?x3xf32>, tensor<3x8xf32>) -> tensor<?x8xf32>
  %sum1 = moe.add %routed, %sy : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %sum2 = moe.add %ty, %sum1 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %out = moe.reshape %sum2, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a shared expert on a transpose of the [B, S, H] input (its
// rows are the tokens' in another order) is a near-miss: its output is not
// the tokens' rows, so it stays generic, with a remark.
// CHECK-LABEL: func.func @shared_on_reordered_rows
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK: moe.transpose

func.func @shared_on_reordered_rows(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %xT = moe.transpose %x3 {perm = array<i64: 1, 0, 2>} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<8x6xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<8x6xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %xT, %sw1 : (tensor<?x?x8xf32>, tensor<8x6xf32>) -> tensor<?x?x6xf32>
  %shs = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %shs : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %xT, %sw3 : (tensor<?x?x8xf32>, tensor<8x6xf32>) -> tensor<?x?x6xf32>
  %sa = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x?x6xf32>, tensor<6x8xf32>) -> tensor<?x?x8xf32>
  // expected-remark @+1 {{MoE shared expert not detected in the MLP added to the routed experts' output: it is not an f32 SwiGLU MLP on the router's tokens}}
  %out = moe.add %routed3, %sy : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a shared expert whose gate function has no gated form in the
// runtime (ReGLU: relu(x @ w1) * (x @ w3)) stays generic, with a remark
// naming the activation.
// CHECK-LABEL: func.func @reglu_shared
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK: moe.relu

func.func @reglu_shared(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<8x6xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<8x6xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.relu %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %sa = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x6xf32>, tensor<6x8xf32>) -> tensor<?x8xf32>
  %sy3 = moe.reshape %sy, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  // expected-remark @+1 {{MoE shared expert not detected in the MLP added to the routed experts' output: its gated activation moe.relu(x @ w1) * (x @ w3) has no moe.shared_expert form}}
  %out = moe.add %routed3, %sy3 : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a fused gate/up projection whose halves overlap (columns
// [0, 6) and [5, 11) of 12) is not a shared expert: it stays generic.
// CHECK-LABEL: func.func @fused_overlapping_halves
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK: moe.slice %{{.*}} -> tensor<?x?x6xf32>

func.func @fused_overlapping_halves(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw13 = moe.constant dense<1.0e-01> : tensor<8x12xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %x3, %sw13 : (tensor<?x?x8xf32>, tensor<8x12xf32>) -> tensor<?x?x12xf32>
  %s0 = moe.constant dense<0> : tensor<1xi64>
  %s5 = moe.constant dense<5> : tensor<1xi64>
  %s6 = moe.constant dense<6> : tensor<1xi64>
  %s11 = moe.constant dense<11> : tensor<1xi64>
  %sparts0 = moe.slice %sh, %s0, %s6 axes %m1 : (tensor<?x?x12xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x6xf32>
  %sparts1 = moe.slice %sh, %s5, %s11 axes %m1 : (tensor<?x?x12xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x6xf32>
  %shs = moe.sigmoid %sparts0 : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sparts0, %shs : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sa = moe.mul %ssilu, %sparts1 : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x?x6xf32>, tensor<6x8xf32>) -> tensor<?x?x8xf32>
  %out = moe.add %routed3, %sy : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that a shared expert on the tokens whose output is transposed
// before the add (no longer the tokens' rows in their order) is not
// absorbed: it stays generic.
// CHECK-LABEL: func.func @shared_output_reordered
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK: return

func.func @shared_output_reordered(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %routed = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %routed3 = moe.reshape %routed, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %sw1 = moe.constant dense<1.0e-01> : tensor<8x6xf32>
  %sw3 = moe.constant dense<2.0e-01> : tensor<8x6xf32>
  %sw2 = moe.constant dense<3.0e-01> : tensor<6x8xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %shs = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %shs : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x8xf32>, tensor<8x6xf32>) -> tensor<?x6xf32>
  %sa = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sa, %sw2 : (tensor<?x6xf32>, tensor<6x8xf32>) -> tensor<?x8xf32>
  %sy3 = moe.reshape %sy, %shape3 : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  %syT = moe.transpose %sy3 {perm = array<i64: 1, 0, 2>} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  %out = moe.add %routed3, %syT : (tensor<?x?x8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}
