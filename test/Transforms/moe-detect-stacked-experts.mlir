// RUN: moec-opt %s --split-input-file --moe-detect-stacked-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that the transformers v5 batched_mm form (softmax, top-2,
// renormalised; tokens repeated k times; stacked [E, 2F, H] gate/up and
// [E, H, F] down weights gathered per row and applied as W @ x) becomes
// router -> dispatch -> experts -> combine over the stacked weights in place
// (layout out_in, concatenated gate/up), and that the gathers are erased.
// CHECK-LABEL: func.func @batched_mm
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-DAG: %[[WR:.*]] = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
// CHECK-DAG: %[[W13:.*]] = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
// CHECK-DAG: %[[W2:.*]] = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]], %[[WR]]
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax normalize : tensor<?x4xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %[[W13]] : tensor<4x8x8xf32> w2 %[[W2]] : tensor<4x8x4xf32> layout out_in glu concatenated
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.gather
// CHECK-NOT: moe.top_k
// CHECK: return %[[OUT]]
func.func @batched_mm(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
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
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %w = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
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
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that the row form (x @ W[e] with [E, H, 2F] / [E, F, H] weights,
// layout in_out), a Split into gate and up, and the top-k-then-softmax gate
// are detected too.
// CHECK-LABEL: func.func @batched_mm_in_out
// CHECK: moe.router %{{.*}} top 2 softmax after_topk : tensor<?x4xf32>
// CHECK: moe.experts silu_glu {{.*}} w1 %{{.*}} : tensor<4x8x8xf32> w2 %{{.*}} : tensor<4x4x8xf32> layout in_out glu concatenated
// CHECK-NOT: moe.gather
func.func @batched_mm_in_out(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %h3 = moe.mat_mul %xc, %g13 : (tensor<?x1x8xf32>, tensor<?x8x8xf32>) -> tensor<?x1x8xf32>
  %h = moe.squeeze %h3, %c1 : (tensor<?x1x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g, %u = moe.split %h {axis = -1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sg = moe.sigmoid %g : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x4x8xf32>, tensor<?xi64>) -> tensor<?x4x8xf32>
  %ac = moe.unsqueeze %a, %c1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  %y3 = moe.mat_mul %ac, %g2 : (tensor<?x1x4xf32>, tensor<?x4x8xf32>) -> tensor<?x1x8xf32>
  %y = moe.squeeze %y3, %c1 : (tensor<?x1x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that tokens repeated as a block (torch.repeat: row t + j * T) rather
// than interleaved (row t * k + j, matching the flattened top-k) stay generic
// with a remark.
// CHECK-LABEL: func.func @block_repeat
// CHECK-NOT: moe.router
// CHECK: moe.reduce_sum
func.func @block_repeat(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
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
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @below {{MoE stacked experts not detected: the experts' rows are not the router's tokens each repeated k times}}
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %w = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c0 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<1x?x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<1x?x8xf32>, tensor<3xi64>) -> tensor<1x?x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<1x?x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
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
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that SiLU applied to the second half of the fused projection (up and
// gate swapped against the concatenated layout) stays generic with a remark.
// CHECK-LABEL: func.func @swapped_halves
// CHECK-NOT: moe.router
// CHECK: moe.reduce_sum
func.func @swapped_halves(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
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
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @below {{MoE stacked experts not detected: gate and up are not the two halves of one fused projection of size 2F}}
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %w = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g13, %xc : (tensor<?x8x8xf32>, tensor<?x8x1xf32>) -> tensor<?x8x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %sg = moe.sigmoid %u : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %u, %sg : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %a = moe.mul %silu, %g : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a sigmoid gate with a selection-only bias and a routed scaling
// factor (DeepSeek-V3's, without groups: the top-2 of sigmoid + bias, the
// weights gathered from the unbiased scores and scaled) becomes that
// moe.router, with the bias as a constant.
// CHECK-LABEL: func.func @sigmoid_gate
// CHECK: %[[B:.*]] = moe.constant dense<[0.000000e+00, 5.000000e-01, 0.000000e+00, 2.500000e-01]> : tensor<4xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %{{.*}} bias %[[B]] top 2 sigmoid scale 2.500000e+00 : tensor<?x4xf32>, tensor<4xf32>
// CHECK: moe.dispatch %{{.*}}, %[[I]] experts 4
// CHECK: moe.combine %{{.*}}, %{{.*}}, %[[W]]
// CHECK-NOT: moe.top_k
func.func @sigmoid_gate(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %bias = moe.constant dense<[0.0, 0.5, 0.0, 0.25]> : tensor<4xf32>
  %scale = moe.constant dense<2.5> : tensor<f32>
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
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %choice = moe.add %scores, %bias : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %choice, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %picked = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %w = moe.mul %picked, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
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
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a gate of no known form (here the sigmoid of the top-2
// logits) is kept as generic ops that feed moe.dispatch and moe.combine
// directly: no moe.router, the top-k's indices dispatch, the computed
// weights combine.
// CHECK-LABEL: func.func @generic_gate
// CHECK: %[[VALUES:.*]], %[[I:.*]] = moe.top_k
// CHECK: %[[W:.*]] = moe.sigmoid %[[VALUES]]
// CHECK-NOT: moe.router
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %{{.*}}, %[[I]] experts 4
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]]
// CHECK: moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.gather %
func.func @generic_gate(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
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
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.sigmoid %values : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
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
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that expert indices of no provable range (a graph input: a Gather
// would wrap a negative index where moe.dispatch drops or rejects it) keep
// the layer generic with a remark.
// CHECK-LABEL: func.func @unproven_indices
// CHECK-NOT: moe.dispatch
// CHECK: moe.reduce_sum
func.func @unproven_indices(%x: tensor<?x8xf32>, %indices: tensor<?x2xi64>, %w: tensor<?x2xf32>) -> tensor<?x8xf32> {
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
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
  // expected-remark @below {{MoE stacked experts not detected: the expert indices are not provably in [0, E): top-k or arg-max positions over the E experts}}
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests the GPT-OSS form: x @ W[e] + B[e] on both projections (biases
// gathered from [E, out] constants), the interleaved gate/up columns, the
// clamped SwiGLU, and a top-k-then-softmax router on biased logits. It
// becomes moe.experts clamped_swiglu with both biases, glu interleaved.
// CHECK-LABEL: func.func @clamped_swiglu_biases
// CHECK: moe.router %{{.*}} top 2 softmax after_topk
// CHECK: moe.experts clamped_swiglu %{{.*}} w1 %{{.*}} : tensor<4x8x8xf32> b1 %{{.*}} : tensor<4x8xf32> w2 %{{.*}} : tensor<4x4x8xf32> b2 %{{.*}} : tensor<4x8xf32> layout in_out glu interleaved alpha 1.702000e+00 beta 1.000000e+00 limit 7.000000e+00
// CHECK-NOT: moe.gather %
func.func @clamped_swiglu_biases(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<4x8xf32>
  %br = moe.constant dense<[0.0, 0.5, 0.0, 0.25]> : tensor<4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %b13 = moe.constant dense<1.000000e-01> : tensor<4x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x4x8xf32>
  %b2 = moe.constant dense<2.000000e-01> : tensor<4x8xf32>
  %alpha = moe.constant dense<1.702> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %limit = moe.constant dense<7.0> : tensor<f32>
  %nlimit = moe.constant dense<-7.0> : tensor<f32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %big = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %logits = moe.gemm %x, %wr, %br {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g13 = moe.gather %w13, %if : (tensor<4x8x8xf32>, tensor<?xi64>) -> tensor<?x8x8xf32>
  %gb13 = moe.gather %b13, %if : (tensor<4x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %xc = moe.unsqueeze %xr, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %h3 = moe.mat_mul %xc, %g13 : (tensor<?x1x8xf32>, tensor<?x8x8xf32>) -> tensor<?x1x8xf32>
  %hs = moe.squeeze %h3, %c1 : (tensor<?x1x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %h = moe.add %hs, %gb13 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %g = moe.slice %h, %c0, %big axes %m1 steps %c2 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %u = moe.slice %h, %c1, %big axes %m1 steps %c2 : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %gc = moe.clip %g max %limit : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %uc = moe.clip %u min %nlimit max %limit : (tensor<?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<?x4xf32>
  %ga = moe.mul %gc, %alpha : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %gs = moe.sigmoid %ga : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %glu = moe.mul %gc, %gs : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %up1 = moe.add %uc, %one : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %a = moe.mul %up1, %glu : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x4x8xf32>, tensor<?xi64>) -> tensor<?x4x8xf32>
  %gb2 = moe.gather %b2, %if : (tensor<4x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %ac = moe.unsqueeze %a, %c1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  %y3 = moe.mat_mul %ac, %g2 : (tensor<?x1x4xf32>, tensor<?x4x8xf32>) -> tensor<?x1x8xf32>
  %ys = moe.squeeze %y3, %c1 : (tensor<?x1x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %y = moe.add %ys, %gb2 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a sigmoid-gated SwiGLU shared expert on the same tokens
// (Qwen2-MoE: Gemm projections, a [1, H] gate) added to the sum over k
// becomes moe.shared_expert added to the combined output.
// CHECK-LABEL: func.func @shared_expert
// CHECK: %[[C:.*]] = moe.combine
// CHECK: %[[S:.*]] = moe.shared_expert silu_glu %{{.*}} : tensor<?x8xf32> w1 %{{.*}} : tensor<6x8xf32> w3 %{{.*}} : tensor<6x8xf32> w2 %{{.*}} : tensor<8x6xf32> gate %{{.*}} : tensor<1x8xf32> layout out_in
// CHECK: %[[SUM:.*]] = moe.add %[[C]], %[[S]]
// CHECK: return %[[SUM]]
func.func @shared_expert(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %sg1 = moe.constant dense<1.0e-01> : tensor<6x8xf32>
  %su = moe.constant dense<2.0e-01> : tensor<6x8xf32>
  %sd = moe.constant dense<3.0e-01> : tensor<8x6xf32>
  %sgate = moe.constant dense<4.0e-01> : tensor<1x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
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
  %s1 = moe.gemm %x, %sg1 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  %s1s = moe.sigmoid %s1 : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %s1a = moe.mul %s1, %s1s : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %s3 = moe.gemm %x, %su {transB = 1 : i64} : (tensor<?x8xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  %sa = moe.mul %s1a, %s3 : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.gemm %sa, %sd {transB = 1 : i64} : (tensor<?x6xf32>, tensor<8x6xf32>) -> tensor<?x8xf32>
  %gl = moe.gemm %x, %sgate {transB = 1 : i64} : (tensor<?x8xf32>, tensor<1x8xf32>) -> tensor<?x1xf32>
  %gs = moe.sigmoid %gl : (tensor<?x1xf32>) -> tensor<?x1xf32>
  %shared = moe.mul %gs, %sy : (tensor<?x1xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %out = moe.add %routed, %shared : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a non-gated expert (relu between an [E, F, H] up projection
// and the [E, H, F] down projection) becomes moe.experts relu without a
// gate/up packing.
// CHECK-LABEL: func.func @relu_experts
// CHECK: moe.router %{{.*}} top 2 softmax normalize
// CHECK: moe.experts relu %{{.*}} w1 %{{.*}} : tensor<4x4x8xf32> w2 %{{.*}} : tensor<4x8x4xf32> layout out_in
// CHECK-NOT: glu
// CHECK-NOT: moe.gather %
func.func @relu_experts(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w1 = moe.constant dense<1.250000e-01> : tensor<4x4x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %probs, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %w = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g1 = moe.gather %w1, %if : (tensor<4x4x8xf32>, tensor<?xi64>) -> tensor<?x4x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g1, %xc : (tensor<?x4x8xf32>, tensor<?x8x1xf32>) -> tensor<?x4x1xf32>
  %h = moe.squeeze %h3, %c2 : (tensor<?x4x1xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  %a = moe.relu %h : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x4xf32>, tensor<?xi64>) -> tensor<?x8x4xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x4xf32>, tensor<?x4x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %c2 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests ReLU² experts (Primer: relu(h) * relu(h), no GLU) with [E, F, H] /
// [E, H, F] weights gathered per assignment: moe.experts relu_squared.
// CHECK-LABEL: func.func @relu_squared_experts
// CHECK: moe.router %{{.*}} top 2 softmax after_topk : tensor<?x4xf32>
// CHECK: moe.experts relu_squared {{.*}} w1 %{{.*}} : tensor<4x6x8xf32> w2 %{{.*}} : tensor<4x8x6xf32> layout out_in
// CHECK-NOT: moe.gather
func.func @relu_squared_experts(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w1 = moe.constant dense<1.250000e-01> : tensor<4x6x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x8x6xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %rep = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %x1 = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %xt = moe.tile %x1, %rep : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %xr = moe.flatten %xt {axis = 2 : i64} : (tensor<?x2x8xf32>) -> tensor<?x8xf32>
  %wf = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %if = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g1 = moe.gather %w1, %if : (tensor<4x6x8xf32>, tensor<?xi64>) -> tensor<?x6x8xf32>
  %xc = moe.unsqueeze %xr, %m1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8x1xf32>
  %h3 = moe.mat_mul %g1, %xc : (tensor<?x6x8xf32>, tensor<?x8x1xf32>) -> tensor<?x6x1xf32>
  %h = moe.squeeze %h3, %m1 : (tensor<?x6x1xf32>, tensor<1xi64>) -> tensor<?x6xf32>
  %r = moe.relu %h : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %a = moe.mul %r, %r : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %g2 = moe.gather %w2, %if : (tensor<4x8x6xf32>, tensor<?xi64>) -> tensor<?x8x6xf32>
  %ac = moe.unsqueeze %a, %m1 : (tensor<?x6xf32>, tensor<1xi64>) -> tensor<?x6x1xf32>
  %y3 = moe.mat_mul %g2, %ac : (tensor<?x8x6xf32>, tensor<?x6x1xf32>) -> tensor<?x8x1xf32>
  %y = moe.squeeze %y3, %m1 : (tensor<?x8x1xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %wc = moe.unsqueeze %wf, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %yk = moe.reshape %yw, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %out = moe.reduce_sum %yk, %c1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}
