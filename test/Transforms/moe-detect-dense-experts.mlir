// RUN: moec-opt %s --split-input-file --moe-detect-dense-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that the GPT-OSS dense form (top-k on the logits, softmax over the k,
// routing matrix scattered into zeros, every expert on every token with
// interleaved clamped SwiGLU and biases, tokens split back into [B, S])
// becomes router -> dispatch -> experts -> combine over the exported 3-D
// weights, and that the dense ops are erased.
// CHECK-LABEL: func.func @gpt_oss
// CHECK-SAME: (%[[X3:.*]]: tensor<?x?x8xf32>)
// CHECK-DAG: %[[W1:.*]] = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
// CHECK-DAG: %[[B1:.*]] = moe.constant dense<2.500000e-01> : tensor<4x1x8xf32>
// CHECK-DAG: %[[W2:.*]] = moe.constant dense<3.750000e-01> : tensor<4x4x8xf32>
// CHECK-DAG: %[[B2:.*]] = moe.constant dense<5.000000e-01> : tensor<4x1x8xf32>
// CHECK: %[[X:.*]] = moe.reshape %[[X3]]
// CHECK: %[[LOGITS:.*]] = moe.gemm %[[X]]
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax after_topk : tensor<?x4xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[B1S:.*]] = moe.reshape %[[B1]], %{{.*}} : (tensor<4x1x8xf32>, tensor<2xi64>) -> tensor<4x8xf32>
// CHECK: %[[B2S:.*]] = moe.reshape %[[B2]], %{{.*}} : (tensor<4x1x8xf32>, tensor<2xi64>) -> tensor<4x8xf32>
// CHECK: %[[Y:.*]] = moe.experts clamped_swiglu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %[[W1]] : tensor<4x8x8xf32> b1 %[[B1S]] : tensor<4x8xf32> w2 %[[W2]] : tensor<4x4x8xf32> b2 %[[B2S]] : tensor<4x8xf32> layout in_out glu interleaved alpha 1.702000e+00 beta 1.000000e+00 limit 7.000000e+00
// CHECK: %[[C:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK: %[[SHAPE:.*]] = moe.concat %{{.*}}, %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
// CHECK: %[[OUT:.*]] = moe.reshape %[[C]], %[[SHAPE]] : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
// CHECK-NOT: moe.scatter_elements
// CHECK-NOT: moe.mat_mul
// CHECK-NOT: moe.reduce_sum
// CHECK: return %[[OUT]]
func.func @gpt_oss(%x3: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %wr = moe.constant dense<[[0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.25, 1.0]]> : tensor<4x8xf32>
  %br = moe.constant dense<0.0> : tensor<4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %tiles = moe.constant dense<[4, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x8x8xf32>
  %b1 = moe.constant dense<0.25> : tensor<4x1x8xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x4x8xf32>
  %b2 = moe.constant dense<0.5> : tensor<4x1x8xf32>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %end = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %alpha = moe.constant dense<1.702> : tensor<f32>
  %beta = moe.constant dense<1.0> : tensor<f32>
  %lo = moe.constant dense<-7.0> : tensor<f32>
  %hi = moe.constant dense<7.0> : tensor<f32>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %ce = moe.constant dense<4> : tensor<1xi64>
  %cm1 = moe.constant dense<-1> : tensor<1xi64>
  %ch = moe.constant dense<8> : tensor<1xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %logits = moe.gemm %x, %wr, %br {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %tiled = moe.tile %x, %tiles : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %xe = moe.reshape %tiled, %eth : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %h = moe.mat_mul %xe, %w1 : (tensor<4x?x8xf32>, tensor<4x8x8xf32>) -> tensor<4x?x8xf32>
  %hb = moe.add %h, %b1 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %g = moe.slice %hb, %c0, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %u = moe.slice %hb, %c1, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %gc = moe.clip %g max %hi : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %uc = moe.clip %u min %lo max %hi : (tensor<4x?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<4x?x4xf32>
  %ga = moe.mul %gc, %alpha : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %gs = moe.sigmoid %ga : (tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %glu = moe.mul %gc, %gs : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %up = moe.add %uc, %beta : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %act = moe.mul %up, %glu : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %y = moe.mat_mul %act, %w2 : (tensor<4x?x4xf32>, tensor<4x4x8xf32>) -> tensor<4x?x8xf32>
  %yb = moe.add %y, %b2 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %rt = moe.transpose %routing {perm = array<i64: 1, 0>} : (tensor<?x4xf32>) -> tensor<4x?xf32>
  %batch = moe.dim %x3, 0 : tensor<?x?x8xf32>
  %bu = moe.unsqueeze %batch, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %yshape = moe.concat %ce, %bu, %cm1, %ch {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %y4 = moe.reshape %yb, %yshape : (tensor<4x?x8xf32>, tensor<4xi64>) -> tensor<4x?x?x8xf32>
  %rshape = moe.concat %ce, %bu, %cm1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %r3 = moe.reshape %rt, %rshape : (tensor<4x?xf32>, tensor<3xi64>) -> tensor<4x?x?xf32>
  %r4 = moe.unsqueeze %r3, %c3 : (tensor<4x?x?xf32>, tensor<1xi64>) -> tensor<4x?x?x1xf32>
  %weighted = moe.mul %y4, %r4 : (tensor<4x?x?x8xf32>, tensor<4x?x?x1xf32>) -> tensor<4x?x?x8xf32>
  %out = moe.reduce_sum %weighted, %c0 {keepdims = 0 : i64} : (tensor<4x?x?x8xf32>, tensor<1xi64>) -> tensor<?x?x8xf32>
  return %out : tensor<?x?x8xf32>
}

// -----

// Tests that the dense form on a [T, H] token matrix (no batch split around
// the combine) is rewritten too, with no reshape of the combined output.
// CHECK-LABEL: func.func @tokens_matrix
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %{{.*}} top 2 softmax after_topk
// CHECK: moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: moe.experts clamped_swiglu
// CHECK: %[[OUT:.*]] = moe.combine %{{.*}}, %{{.*}}, %[[W]]
// CHECK-NEXT: return %[[OUT]]
func.func @tokens_matrix(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %wr = moe.constant dense<[[0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.25, 1.0]]> : tensor<4x8xf32>
  %br = moe.constant dense<0.0> : tensor<4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %tiles = moe.constant dense<[4, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x8x8xf32>
  %b1 = moe.constant dense<0.25> : tensor<4x1x8xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x4x8xf32>
  %b2 = moe.constant dense<0.5> : tensor<4x1x8xf32>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %end = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %alpha = moe.constant dense<1.702> : tensor<f32>
  %beta = moe.constant dense<1.0> : tensor<f32>
  %lo = moe.constant dense<-7.0> : tensor<f32>
  %hi = moe.constant dense<7.0> : tensor<f32>
  %logits = moe.gemm %x, %wr, %br {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %tiled = moe.tile %x, %tiles : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %xe = moe.reshape %tiled, %eth : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %h = moe.mat_mul %xe, %w1 : (tensor<4x?x8xf32>, tensor<4x8x8xf32>) -> tensor<4x?x8xf32>
  %hb = moe.add %h, %b1 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %g = moe.slice %hb, %c0, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %u = moe.slice %hb, %c1, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %gc = moe.clip %g max %hi : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %uc = moe.clip %u min %lo max %hi : (tensor<4x?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<4x?x4xf32>
  %ga = moe.mul %gc, %alpha : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %gs = moe.sigmoid %ga : (tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %glu = moe.mul %gc, %gs : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %up = moe.add %uc, %beta : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %act = moe.mul %up, %glu : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %y = moe.mat_mul %act, %w2 : (tensor<4x?x4xf32>, tensor<4x4x8xf32>) -> tensor<4x?x8xf32>
  %yb = moe.add %y, %b2 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %rt = moe.transpose %routing {perm = array<i64: 1, 0>} : (tensor<?x4xf32>) -> tensor<4x?xf32>
  %r3 = moe.unsqueeze %rt, %c2 : (tensor<4x?xf32>, tensor<1xi64>) -> tensor<4x?x1xf32>
  %weighted = moe.mul %yb, %r3 : (tensor<4x?x8xf32>, tensor<4x?x1xf32>) -> tensor<4x?x8xf32>
  %out = moe.reduce_sum %weighted, %c0 {keepdims = 0 : i64} : (tensor<4x?x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a gate clamped from below as well as above is not GPT-OSS's
// clamped SwiGLU (which only caps the gate), so the layer stays generic.
// CHECK-LABEL: func.func @gate_clamped_both_sides
// CHECK-NOT: moe.router
// CHECK: moe.reduce_sum
func.func @gate_clamped_both_sides(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %wr = moe.constant dense<[[0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.25, 1.0]]> : tensor<4x8xf32>
  %br = moe.constant dense<0.0> : tensor<4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %tiles = moe.constant dense<[4, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x8x8xf32>
  %b1 = moe.constant dense<0.25> : tensor<4x1x8xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x4x8xf32>
  %b2 = moe.constant dense<0.5> : tensor<4x1x8xf32>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %end = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %alpha = moe.constant dense<1.702> : tensor<f32>
  %beta = moe.constant dense<1.0> : tensor<f32>
  %lo = moe.constant dense<-7.0> : tensor<f32>
  %hi = moe.constant dense<7.0> : tensor<f32>
  %logits = moe.gemm %x, %wr, %br {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  // expected-remark @below {{MoE dense experts not detected: the gate is not clamped from above only}}
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %tiled = moe.tile %x, %tiles : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %xe = moe.reshape %tiled, %eth : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %h = moe.mat_mul %xe, %w1 : (tensor<4x?x8xf32>, tensor<4x8x8xf32>) -> tensor<4x?x8xf32>
  %hb = moe.add %h, %b1 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %g = moe.slice %hb, %c0, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %u = moe.slice %hb, %c1, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %gc = moe.clip %g min %lo max %hi : (tensor<4x?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<4x?x4xf32>
  %uc = moe.clip %u min %lo max %hi : (tensor<4x?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<4x?x4xf32>
  %ga = moe.mul %gc, %alpha : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %gs = moe.sigmoid %ga : (tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %glu = moe.mul %gc, %gs : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %up = moe.add %uc, %beta : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %act = moe.mul %up, %glu : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %y = moe.mat_mul %act, %w2 : (tensor<4x?x4xf32>, tensor<4x4x8xf32>) -> tensor<4x?x8xf32>
  %yb = moe.add %y, %b2 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %rt = moe.transpose %routing {perm = array<i64: 1, 0>} : (tensor<?x4xf32>) -> tensor<4x?xf32>
  %r3 = moe.unsqueeze %rt, %c2 : (tensor<4x?xf32>, tensor<1xi64>) -> tensor<4x?x1xf32>
  %weighted = moe.mul %yb, %r3 : (tensor<4x?x8xf32>, tensor<4x?x1xf32>) -> tensor<4x?x8xf32>
  %out = moe.reduce_sum %weighted, %c0 {keepdims = 0 : i64} : (tensor<4x?x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that top-k weights not normalised by a softmax over the k (here a
// sigmoid) do not become a moe.router with after_topk: the gate stays
// generic ops, and the layer still runs sparse on the top-k indices and the
// sigmoid weights.
// CHECK-LABEL: func.func @sigmoid_over_topk
// CHECK-NOT: moe.router
// CHECK: %[[VALUES:.*]], %[[I:.*]] = moe.top_k
// CHECK: %[[P:.*]] = moe.sigmoid %[[VALUES]]
// CHECK: moe.dispatch %{{.*}}, %[[I]] experts 4
// CHECK: moe.experts clamped_swiglu
// CHECK: moe.combine %{{.*}}, %{{.*}}, %[[P]]
// CHECK-NOT: moe.reduce_sum
func.func @sigmoid_over_topk(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %rows = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %wr = moe.constant dense<[[0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.25, 1.0]]> : tensor<4x8xf32>
  %br = moe.constant dense<0.0> : tensor<4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %tiles = moe.constant dense<[4, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x8x8xf32>
  %b1 = moe.constant dense<0.25> : tensor<4x1x8xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x4x8xf32>
  %b2 = moe.constant dense<0.5> : tensor<4x1x8xf32>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %end = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %alpha = moe.constant dense<1.702> : tensor<f32>
  %beta = moe.constant dense<1.0> : tensor<f32>
  %lo = moe.constant dense<-7.0> : tensor<f32>
  %hi = moe.constant dense<7.0> : tensor<f32>
  %logits = moe.gemm %x, %wr, %br {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.sigmoid %values : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %tiled = moe.tile %x, %tiles : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %xe = moe.reshape %tiled, %eth : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %h = moe.mat_mul %xe, %w1 : (tensor<4x?x8xf32>, tensor<4x8x8xf32>) -> tensor<4x?x8xf32>
  %hb = moe.add %h, %b1 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %g = moe.slice %hb, %c0, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %u = moe.slice %hb, %c1, %end axes %c2 steps %c2 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %gc = moe.clip %g max %hi : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %uc = moe.clip %u min %lo max %hi : (tensor<4x?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<4x?x4xf32>
  %ga = moe.mul %gc, %alpha : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %gs = moe.sigmoid %ga : (tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %glu = moe.mul %gc, %gs : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %up = moe.add %uc, %beta : (tensor<4x?x4xf32>, tensor<f32>) -> tensor<4x?x4xf32>
  %act = moe.mul %up, %glu : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %y = moe.mat_mul %act, %w2 : (tensor<4x?x4xf32>, tensor<4x4x8xf32>) -> tensor<4x?x8xf32>
  %yb = moe.add %y, %b2 : (tensor<4x?x8xf32>, tensor<4x1x8xf32>) -> tensor<4x?x8xf32>
  %rt = moe.transpose %routing {perm = array<i64: 1, 0>} : (tensor<?x4xf32>) -> tensor<4x?xf32>
  %r3 = moe.unsqueeze %rt, %c2 : (tensor<4x?xf32>, tensor<1xi64>) -> tensor<4x?x1xf32>
  %weighted = moe.mul %yb, %r3 : (tensor<4x?x8xf32>, tensor<4x?x1xf32>) -> tensor<4x?x8xf32>
  %out = moe.reduce_sum %weighted, %c0 {keepdims = 0 : i64} : (tensor<4x?x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests the Tutel/fairseq form: every expert on every token by einsums on
// [T, E, N] with [E, H, F] weights and [1, E, N] biases, ReLU, and the
// combine einsum("te,teh->th") of the routing matrix, which the dynamo
// exporter starts from the expand of a zero scalar. It becomes router ->
// dispatch -> experts relu with [E, N] biases.
// CHECK-LABEL: func.func @tutel_einsum
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-DAG: %[[W1:.*]] = moe.constant dense<1.250000e-01> : tensor<4x8x6xf32>
// CHECK-DAG: %[[W2:.*]] = moe.constant dense<3.750000e-01> : tensor<4x6x8xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %{{.*}} top 2 softmax after_topk
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[B1:.*]] = moe.reshape %{{.*}} : (tensor<1x4x6xf32>, tensor<2xi64>) -> tensor<4x6xf32>
// CHECK: %[[B2:.*]] = moe.reshape %{{.*}} : (tensor<1x4x8xf32>, tensor<2xi64>) -> tensor<4x8xf32>
// CHECK: %[[Y:.*]] = moe.experts relu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %[[W1]] : tensor<4x8x6xf32> b1 %[[B1]] : tensor<4x6xf32> w2 %[[W2]] : tensor<4x6x8xf32> b2 %[[B2]] : tensor<4x8xf32> layout in_out
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.einsum
// CHECK: return %[[OUT]]
func.func @tutel_einsum(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<[[0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.25, 1.0]]> : tensor<4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %w1 = moe.constant dense<0.125> : tensor<4x8x6xf32>
  %b1 = moe.constant dense<0.25> : tensor<1x4x6xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x6x8xf32>
  %b2 = moe.constant dense<0.5> : tensor<1x4x8xf32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %shape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %probs = moe.softmax %values : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %h = moe.einsum %x, %w1 {equation = "th,ehf->tef"} : (tensor<?x8xf32>, tensor<4x8x6xf32>) -> tensor<?x4x6xf32>
  %hb = moe.add %h, %b1 : (tensor<?x4x6xf32>, tensor<1x4x6xf32>) -> tensor<?x4x6xf32>
  %a = moe.relu %hb : (tensor<?x4x6xf32>) -> tensor<?x4x6xf32>
  %y = moe.einsum %a, %w2 {equation = "tef,efh->teh"} : (tensor<?x4x6xf32>, tensor<4x6x8xf32>) -> tensor<?x4x8xf32>
  %yb = moe.add %y, %b2 : (tensor<?x4x8xf32>, tensor<1x4x8xf32>) -> tensor<?x4x8xf32>
  %out = moe.einsum %routing, %yb {equation = "te,teh->th"} : (tensor<?x4xf32>, tensor<?x4x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests GeGLU experts with separate gate and up einsums over [E, F, H]
// (out_in) weights and no biases, whose routing weights are a sigmoid of
// the top-k logits: a gate moe.router has no form of, so it stays generic
// ops feeding moe.dispatch and moe.combine.
// CHECK-LABEL: func.func @geglu_out_in_generic_gate
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-NOT: moe.router
// CHECK: %[[VALUES:.*]], %[[I:.*]] = moe.top_k
// CHECK: %[[P:.*]] = moe.sigmoid %[[VALUES]]
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[Y:.*]] = moe.experts gelu_glu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %{{.*}} : tensor<4x6x8xf32> w3 %{{.*}} : tensor<4x6x8xf32> w2 %{{.*}} : tensor<4x8x6xf32> layout out_in
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[P]]
// CHECK: return %[[OUT]]
func.func @geglu_out_in_generic_gate(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<[[0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.25, 1.0]]> : tensor<4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x6x8xf32>
  %w3 = moe.constant dense<0.25> : tensor<4x6x8xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x8x6xf32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.sigmoid %values : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %g = moe.einsum %x, %w1 {equation = "th,efh->tef"} : (tensor<?x8xf32>, tensor<4x6x8xf32>) -> tensor<?x4x6xf32>
  %u = moe.einsum %x, %w3 {equation = "th,efh->tef"} : (tensor<?x8xf32>, tensor<4x6x8xf32>) -> tensor<?x4x6xf32>
  %ga = moe.gelu %g : (tensor<?x4x6xf32>) -> tensor<?x4x6xf32>
  %a = moe.mul %ga, %u : (tensor<?x4x6xf32>, tensor<?x4x6xf32>) -> tensor<?x4x6xf32>
  %y = moe.einsum %a, %w2 {equation = "tef,ehf->teh"} : (tensor<?x4x6xf32>, tensor<4x8x6xf32>) -> tensor<?x4x8xf32>
  %out = moe.einsum %y, %routing {equation = "teh,te->th"} : (tensor<?x4x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a routing matrix scattered at indices that are not a top-k's
// (an arg-max repeated k times could write one expert twice, where the
// scatter keeps one weight) stays generic: only top-k rows are distinct.
// CHECK-LABEL: func.func @scatter_not_at_topk
// CHECK-NOT: moe.experts
// CHECK: moe.einsum
func.func @scatter_not_at_topk(%x: tensor<?x8xf32>, %ids: tensor<?x2xi64>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<0.5> : tensor<8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x8x6xf32>
  %w2 = moe.constant dense<0.375> : tensor<4x6x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.softmax %values : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %ids, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %h = moe.einsum %x, %w1 {equation = "th,ehf->tef"} : (tensor<?x8xf32>, tensor<4x8x6xf32>) -> tensor<?x4x6xf32>
  %a = moe.relu %h : (tensor<?x4x6xf32>) -> tensor<?x4x6xf32>
  %y = moe.einsum %a, %w2 {equation = "tef,efh->teh"} : (tensor<?x4x6xf32>, tensor<4x6x8xf32>) -> tensor<?x4x8xf32>
  %out = moe.einsum %routing, %y {equation = "te,teh->th"} : (tensor<?x4xf32>, tensor<?x4x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that an einsum whose expert weights are not per expert (the same
// [H, F] matrix for all, "th,hf->tf" broadcast) is no batched projection:
// the layer stays generic with a remark.
// CHECK-LABEL: func.func @einsum_second_layer_not_batched
// CHECK-NOT: moe.experts
func.func @einsum_second_layer_not_batched(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<0.5> : tensor<8x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %w1 = moe.constant dense<0.125> : tensor<4x8x6xf32>
  %w2 = moe.constant dense<0.375> : tensor<6x8xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  // expected-remark @below {{MoE dense experts not detected: the expert output's down projection is not a product with stacked [E, ., .] f32 weights over the experts' axis (plus an [E, out] bias)}}
  %values, %indices = moe.top_k %logits, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %probs = moe.softmax %values : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %routing = moe.scatter_elements %zeros, %indices, %probs {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %h = moe.einsum %x, %w1 {equation = "th,ehf->tef"} : (tensor<?x8xf32>, tensor<4x8x6xf32>) -> tensor<?x4x6xf32>
  %a = moe.relu %h : (tensor<?x4x6xf32>) -> tensor<?x4x6xf32>
  %y = moe.einsum %a, %w2 {equation = "tef,fh->teh"} : (tensor<?x4x6xf32>, tensor<6x8xf32>) -> tensor<?x4x8xf32>
  %out = moe.einsum %routing, %y {equation = "te,teh->th"} : (tensor<?x4xf32>, tensor<?x4x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}
