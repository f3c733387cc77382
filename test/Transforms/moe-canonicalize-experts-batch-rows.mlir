// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts --cse | FileCheck %s
// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts --cse --moe-detect-experts 2>&1 | FileCheck %s --check-prefix=DETECT

// Tests makeMoE's [B, T, H] expert block as dynamo exports it: the top-k of
// the [B, T, E] logits (with the router's bias), the routing matrix, the
// expert's tokens `(ids == e).any(-1)`, and the write-back `out[mask] += y`
// as a ScatterND of every element of the masked rows. The top-k runs on
// the flattened [B * T, E] logits of the flattened tokens, the tokens'
// rows and weights come from the one-hot mask's (token, slot) pairs, and
// the write-back becomes index_add's scatter into zeros plus Add on the
// flattened [B * T, H] accumulator, reshaped back to [B, T, H].
// CHECK-LABEL: func.func @makemoe_block
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x16xf32>)
// CHECK: %[[XT:.*]] = moe.reshape %[[X]], %{{.*}} {allowzero = 1 : i64} : (tensor<?x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
// CHECK: %[[MM:.*]] = moe.mat_mul %[[XT]], %{{.*}} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
// CHECK: %[[L:.*]] = moe.add %[[MM]], %{{.*}} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
// CHECK: %[[ZEROS:.*]] = moe.expand %{{.*}}, %{{.*}} : (tensor<f32>, tensor<2xi64>) -> tensor<?x16xf32>
// CHECK: %[[V:.*]], %[[IDS:.*]] = moe.top_k %[[L]], %{{.*}} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
// CHECK: %[[ONEHOT:.*]] = moe.one_hot %[[IDS]]
// CHECK: %[[MASK:.*]] = moe.transpose %[[ONEHOT]] {perm = array<i64: 2, 0, 1>}
// CHECK-NOT: moe.top_k
// CHECK-DAG: %[[W:.*]] = moe.softmax %[[V]] : (tensor<?x2xf32>) -> tensor<?x2xf32>
// CHECK-DAG: %[[SEL:.*]] = moe.gather %[[MASK]], %{{.*}} : (tensor<8x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
// CHECK: %[[HITS:.*]] = moe.cast %[[SEL]] {to = i1}
// CHECK: %[[NZ:.*]] = moe.non_zero %[[HITS]] : (tensor<?x2xi1>) -> tensor<2x?xi64>
// CHECK: %[[PAIRS:.*]] = moe.transpose %[[NZ]] {perm = array<i64: 1, 0>}
// CHECK: %[[TCOL:.*]] = moe.slice %[[PAIRS]]
// CHECK: %[[TOKEN:.*]] = moe.squeeze %[[TCOL]]
// CHECK: %[[ROWS:.*]] = moe.unsqueeze %[[TOKEN]]
// CHECK: %[[AT:.*]] = moe.unsqueeze %[[TOKEN]]
// CHECK: moe.gather_nd %[[XT]], %[[AT]] : (tensor<?x16xf32>, tensor<?x1xi64>) -> tensor<?x16xf32>
// CHECK: moe.gather_nd %[[W]], %{{.*}} : (tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?xf32>
// CHECK: %[[IDX:.*]] = moe.expand %[[ROWS]]
// CHECK: %[[SCATTERED:.*]] = moe.scatter_elements %{{.*}}, %[[IDX]], %{{.*}} : (tensor<?x16xf32>, tensor<?x16xi64>, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK: %[[ACC:.*]] = moe.add %[[ZEROS]], %[[SCATTERED]] : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK: %[[OUT:.*]] = moe.reshape %[[ACC]], %{{.*}} : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x?x16xf32>
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[OUT]]
// The loop detector takes the block, its router's logits with their bias
// (an nn.Linear with a bias) as the router's input.
// DETECT-LABEL: func.func @makemoe_block(
// DETECT: %[[XT:.*]] = moe.reshape %arg0
// DETECT: %[[MM:.*]] = moe.mat_mul %[[XT]]
// DETECT: %[[L:.*]] = moe.add %[[MM]]
// DETECT: %[[W:.*]], %[[IDS:.*]] = moe.router %[[L]] top 2 softmax after_topk : tensor<?x8xf32>
// DETECT: moe.dispatch %[[XT]], %[[IDS]] experts 8
// DETECT: moe.experts relu
// DETECT: moe.combine
func.func @makemoe_block(%x: tensor<?x?x16xf32>) -> tensor<?x?x16xf32> {
  %wr = moe.constant dense<0.25> : tensor<16x8xf32>
  %br = moe.constant dense<[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]> : tensor<8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %rows16 = moe.constant dense<[-1, 16]> : tensor<2xi64>
  %rows8 = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %e0 = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %h = moe.constant dense<16> : tensor<1xi64>
  %w1 = moe.constant dense<0.5> : tensor<64x16xf32>
  %b1 = moe.constant dense<0.1> : tensor<64xf32>
  %w2 = moe.constant dense<0.5> : tensor<16x64xf32>
  %b2 = moe.constant dense<0.1> : tensor<16xf32>
  %mm = moe.mat_mul %x, %wr : (tensor<?x?x16xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  %logits = moe.add %mm, %br : (tensor<?x?x8xf32>, tensor<8xf32>) -> tensor<?x?x8xf32>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %probs = moe.softmax %v : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  %zl = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<3xi64>) -> tensor<?x?x8xf32>
  %gate = moe.scatter_elements %zl, %ids, %probs {axis = -1 : i64} : (tensor<?x?x8xf32>, tensor<?x?x2xi64>, tensor<?x?x2xf32>) -> tensor<?x?x8xf32>
  %xshape = moe.shape %x : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %out = moe.expand %zero, %xshape : (tensor<f32>, tensor<3xi64>) -> tensor<?x?x16xf32>
  %xt = moe.reshape %x, %rows16 {allowzero = 1 : i64} : (tensor<?x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %gt = moe.reshape %gate, %rows8 {allowzero = 1 : i64} : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %hit = moe.equal %ids, %e0 : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %hit64 = moe.cast %hit {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %max = moe.reduce_max %hit64, %last {keepdims = 0 : i64} : (tensor<?x?x2xi64>, tensor<1xi64>) -> tensor<?x?xi64>
  %mask = moe.cast %max {to = i1} : (tensor<?x?xi64>) -> tensor<?x?xi1>
  %fmask = moe.reshape %mask, %last {allowzero = 1 : i64} : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %nz2 = moe.non_zero %mask : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz2 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %read = moe.gather_nd %out, %pairs : (tensor<?x?x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  %nz1 = moe.non_zero %fmask : (tensor<?xi1>) -> tensor<1x?xi64>
  %col = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %tok = moe.squeeze %col, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at = moe.unsqueeze %tok, %last : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %xr = moe.gather_nd %xt, %at : (tensor<?x16xf32>, tensor<?x1xi64>) -> tensor<?x16xf32>
  %f1 = moe.gemm %xr, %w1, %b1 {transB = 1 : i64} : (tensor<?x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %a = moe.relu %f1 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %y = moe.gemm %a, %w2, %b2 {transB = 1 : i64} : (tensor<?x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %gcol = moe.gather %gt, %e0 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
  %wr1 = moe.gather_nd %gcol, %at : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %wc = moe.unsqueeze %wr1, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
  %sum = moe.add %read, %yw : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m3 = moe.unsqueeze %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %oshape = moe.shape %out : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %em = moe.expand %m3, %oshape : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x16xi1>
  %nz3 = moe.non_zero %em : (tensor<?x?x16xi1>) -> tensor<3x?xi64>
  %elems = moe.transpose %nz3 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %fm = moe.reshape %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %fm64 = moe.cast %fm {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %count = moe.reduce_sum %fm64 : (tensor<?xi64>) -> tensor<1xi64>
  %ushape = moe.concat %count, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %u = moe.expand %sum, %ushape : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %uf = moe.reshape %u, %last : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?xf32>
  %new = moe.scatter_nd %out, %elems, %uf : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x16xf32>
  return %new : tensor<?x?x16xf32>
}

// -----

// Tests TorchScript's form: the any as a count above 0, the router's bias
// first, the rows read through the flattened mask without a squeeze, and
// the element-mask write-back's updates sliced to the number of element
// indices.
// CHECK-LABEL: func.func @makemoe_block_torchscript
// CHECK: %[[V:.*]], %[[IDS:.*]] = moe.top_k %{{.*}}, %{{.*}} : (tensor<?x8xf32>, tensor<1xi64>)
// CHECK: moe.one_hot %[[IDS]]
// CHECK: %[[SCATTERED:.*]] = moe.scatter_elements %{{.*}} : (tensor<?x16xf32>, tensor<?x16xi64>, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK: %[[ACC:.*]] = moe.add %{{.*}}, %[[SCATTERED]] : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK: %[[OUT:.*]] = moe.reshape %[[ACC]], %{{.*}} : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x?x16xf32>
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[OUT]]
func.func @makemoe_block_torchscript(%x: tensor<?x?x16xf32>) -> tensor<?x?x16xf32> {
  %wr = moe.constant dense<0.25> : tensor<16x8xf32>
  %br = moe.constant dense<[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]> : tensor<8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %rows16 = moe.constant dense<[-1, 16]> : tensor<2xi64>
  %rows8 = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %e0 = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %first = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %w1 = moe.constant dense<0.5> : tensor<64x16xf32>
  %b1 = moe.constant dense<0.1> : tensor<64xf32>
  %w2 = moe.constant dense<0.5> : tensor<16x64xf32>
  %b2 = moe.constant dense<0.1> : tensor<16xf32>
  %mm = moe.mat_mul %x, %wr : (tensor<?x?x16xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  %logits = moe.add %br, %mm : (tensor<8xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %probs = moe.softmax %v : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  %zl = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<3xi64>) -> tensor<?x?x8xf32>
  %gate = moe.scatter_elements %zl, %ids, %probs {axis = -1 : i64} : (tensor<?x?x8xf32>, tensor<?x?x2xi64>, tensor<?x?x2xf32>) -> tensor<?x?x8xf32>
  %xshape = moe.shape %x : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %out = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<3xi64>) -> tensor<?x?x16xf32>
  %xt = moe.reshape %x, %rows16 : (tensor<?x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %gt = moe.reshape %gate, %rows8 : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %hit = moe.equal %ids, %e0 : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %hit64 = moe.cast %hit {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %sum = moe.reduce_sum %hit64, %last {keepdims = 0 : i64} : (tensor<?x?x2xi64>, tensor<1xi64>) -> tensor<?x?xi64>
  %mask = moe.greater %sum, %e0 : (tensor<?x?xi64>, tensor<i64>) -> tensor<?x?xi1>
  %fmask = moe.reshape %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %nz1 = moe.non_zero %fmask : (tensor<?xi1>) -> tensor<1x?xi64>
  %at = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %xr = moe.gather_nd %xt, %at : (tensor<?x16xf32>, tensor<?x1xi64>) -> tensor<?x16xf32>
  %f1 = moe.gemm %xr, %w1, %b1 {transB = 1 : i64} : (tensor<?x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %a = moe.relu %f1 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %y = moe.gemm %a, %w2, %b2 {transB = 1 : i64} : (tensor<?x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %gcol = moe.gather %gt, %e0 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
  %wr1 = moe.gather_nd %gcol, %at : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %wc = moe.unsqueeze %wr1, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
  %nz2 = moe.non_zero %mask : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz2 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %read = moe.gather_nd %out, %pairs : (tensor<?x?x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  %upd = moe.add %read, %yw : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m3 = moe.unsqueeze %mask, %k : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %oshape = moe.shape %out : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %em = moe.expand %m3, %oshape : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x16xi1>
  %nz3 = moe.non_zero %em : (tensor<?x?x16xi1>) -> tensor<3x?xi64>
  %elems = moe.transpose %nz3 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %uf = moe.reshape %upd, %last : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?xf32>
  %n = moe.dim %nz3, 1 : tensor<3x?xi64>
  %end = moe.unsqueeze %n, %first : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %us = moe.slice %uf, %first, %end axes %first : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %new = moe.scatter_nd %out, %elems, %us : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x16xf32>
  return %new : tensor<?x?x16xf32>
}

// -----

// Tests that a router bias that is not a constant (not an nn.Linear's) is
// no router the loop detector takes: the block is rewritten onto the
// flattened tokens all the same, and stays generic.
// DETECT-LABEL: func.func @makemoe_block_computed_bias
// DETECT-NOT: moe.router
// DETECT: return
func.func @makemoe_block_computed_bias(%x: tensor<?x?x16xf32>, %br: tensor<8xf32>) -> tensor<?x?x16xf32> {
  %wr = moe.constant dense<0.25> : tensor<16x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %rows16 = moe.constant dense<[-1, 16]> : tensor<2xi64>
  %rows8 = moe.constant dense<[-1, 8]> : tensor<2xi64>
  %e0 = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %h = moe.constant dense<16> : tensor<1xi64>
  %w1 = moe.constant dense<0.5> : tensor<64x16xf32>
  %b1 = moe.constant dense<0.1> : tensor<64xf32>
  %w2 = moe.constant dense<0.5> : tensor<16x64xf32>
  %b2 = moe.constant dense<0.1> : tensor<16xf32>
  %mm = moe.mat_mul %x, %wr : (tensor<?x?x16xf32>, tensor<16x8xf32>) -> tensor<?x?x8xf32>
  %logits = moe.add %mm, %br : (tensor<?x?x8xf32>, tensor<8xf32>) -> tensor<?x?x8xf32>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %probs = moe.softmax %v : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  %zl = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<3xi64>) -> tensor<?x?x8xf32>
  %gate = moe.scatter_elements %zl, %ids, %probs {axis = -1 : i64} : (tensor<?x?x8xf32>, tensor<?x?x2xi64>, tensor<?x?x2xf32>) -> tensor<?x?x8xf32>
  %xshape = moe.shape %x : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %out = moe.expand %zero, %xshape : (tensor<f32>, tensor<3xi64>) -> tensor<?x?x16xf32>
  %xt = moe.reshape %x, %rows16 {allowzero = 1 : i64} : (tensor<?x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %gt = moe.reshape %gate, %rows8 {allowzero = 1 : i64} : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %hit = moe.equal %ids, %e0 : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %hit64 = moe.cast %hit {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %max = moe.reduce_max %hit64, %last {keepdims = 0 : i64} : (tensor<?x?x2xi64>, tensor<1xi64>) -> tensor<?x?xi64>
  %mask = moe.cast %max {to = i1} : (tensor<?x?xi64>) -> tensor<?x?xi1>
  %fmask = moe.reshape %mask, %last {allowzero = 1 : i64} : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %nz2 = moe.non_zero %mask : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz2 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %read = moe.gather_nd %out, %pairs : (tensor<?x?x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  %nz1 = moe.non_zero %fmask : (tensor<?xi1>) -> tensor<1x?xi64>
  %col = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %tok = moe.squeeze %col, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at = moe.unsqueeze %tok, %last : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %xr = moe.gather_nd %xt, %at : (tensor<?x16xf32>, tensor<?x1xi64>) -> tensor<?x16xf32>
  %f1 = moe.gemm %xr, %w1, %b1 {transB = 1 : i64} : (tensor<?x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %a = moe.relu %f1 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %y = moe.gemm %a, %w2, %b2 {transB = 1 : i64} : (tensor<?x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %gcol = moe.gather %gt, %e0 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
  %wr1 = moe.gather_nd %gcol, %at : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %wc = moe.unsqueeze %wr1, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %y, %wc : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
  %sum = moe.add %read, %yw : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m3 = moe.unsqueeze %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %oshape = moe.shape %out : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %em = moe.expand %m3, %oshape : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x16xi1>
  %nz3 = moe.non_zero %em : (tensor<?x?x16xi1>) -> tensor<3x?xi64>
  %elems = moe.transpose %nz3 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %fm = moe.reshape %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %fm64 = moe.cast %fm {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %count = moe.reduce_sum %fm64 : (tensor<?xi64>) -> tensor<1xi64>
  %ushape = moe.concat %count, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %u = moe.expand %sum, %ushape : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %uf = moe.reshape %u, %last : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?xf32>
  %new = moe.scatter_nd %out, %elems, %uf : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x16xf32>
  return %new : tensor<?x?x16xf32>
}

// -----

// Tests that `out[mask] = out[other] + u`, the read at another mask's rows
// than the write's, keeps its element scatter: the rows written are not the
// ones read.
// CHECK-LABEL: func.func @element_scatter_other_read
// CHECK: %[[S:.*]] = moe.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>)
// CHECK-NEXT: return %[[S]]
func.func @element_scatter_other_read(%out: tensor<?x?x16xf32>, %mask: tensor<?x?xi1>, %other: tensor<?x?xi1>, %u: tensor<?x16xf32>) -> tensor<?x?x16xf32> {
  %last = moe.constant dense<-1> : tensor<1xi64>
  %h = moe.constant dense<16> : tensor<1xi64>
  %nz2 = moe.non_zero %other : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz2 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %read = moe.gather_nd %out, %pairs : (tensor<?x?x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  %sum = moe.add %read, %u : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m3 = moe.unsqueeze %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %oshape = moe.shape %out : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %em = moe.expand %m3, %oshape : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x16xi1>
  %nz3 = moe.non_zero %em : (tensor<?x?x16xi1>) -> tensor<3x?xi64>
  %elems = moe.transpose %nz3 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %fm = moe.reshape %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %fm64 = moe.cast %fm {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %count = moe.reduce_sum %fm64 : (tensor<?xi64>) -> tensor<1xi64>
  %ushape = moe.concat %count, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ue = moe.expand %sum, %ushape : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %uf = moe.reshape %ue, %last : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?xf32>
  %new = moe.scatter_nd %out, %elems, %uf : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x16xf32>
  return %new : tensor<?x?x16xf32>
}

// -----

// Tests that a mask expanded to the shape of another tensor than the one it
// was computed from (the expansion may repeat its rows along an axis of
// size 1) keeps its element scatter.
// CHECK-LABEL: func.func @element_scatter_broadcast_mask
// CHECK: %[[S:.*]] = moe.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>)
// CHECK-NEXT: return %[[S]]
func.func @element_scatter_broadcast_mask(%out: tensor<?x?x16xf32>, %mask: tensor<?x?xi1>, %u: tensor<?x16xf32>) -> tensor<?x?x16xf32> {
  %last = moe.constant dense<-1> : tensor<1xi64>
  %h = moe.constant dense<16> : tensor<1xi64>
  %nz2 = moe.non_zero %mask : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz2 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %read = moe.gather_nd %out, %pairs : (tensor<?x?x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  %sum = moe.add %read, %u : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  %m3 = moe.unsqueeze %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %oshape = moe.shape %out : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %em = moe.expand %m3, %oshape : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x16xi1>
  %nz3 = moe.non_zero %em : (tensor<?x?x16xi1>) -> tensor<3x?xi64>
  %elems = moe.transpose %nz3 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %fm = moe.reshape %mask, %last : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %fm64 = moe.cast %fm {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %count = moe.reduce_sum %fm64 : (tensor<?xi64>) -> tensor<1xi64>
  %ushape = moe.concat %count, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ue = moe.expand %sum, %ushape : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %uf = moe.reshape %ue, %last : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?xf32>
  %new = moe.scatter_nd %out, %elems, %uf : (tensor<?x?x16xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x16xf32>
  return %new : tensor<?x?x16xf32>
}

// -----

// Tests that a [B, T, E] top-k whose indices are compared with an expert
// but not reduced over k (no `.any(-1)` of makeMoE's masks) stays 3-D.
// CHECK-LABEL: func.func @batch_topk_no_any
// CHECK: moe.top_k %{{.*}}, %{{.*}} : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
// CHECK-NOT: moe.top_k
func.func @batch_topk_no_any(%logits: tensor<?x?x8xf32>) -> tensor<?x?x2xi1> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e0 = moe.constant dense<0> : tensor<i64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %hit = moe.equal %ids, %e0 : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  return %hit : tensor<?x?x2xi1>
}

// -----

// Tests that a row scatter into a [B, T, H] tensor whose leading axes are
// not provably the mask's keeps its (b, t) indices: flattened, the same
// pairs would name other rows.
// CHECK-LABEL: func.func @row_scatter_other_shape
// CHECK: %[[S:.*]] = moe.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x?x16xf32>, tensor<?x2xi64>, tensor<?x16xf32>)
// CHECK-NEXT: return %[[S]]
func.func @row_scatter_other_shape(%x: tensor<?x?x16xf32>, %mask: tensor<?x?xi1>, %u: tensor<?x16xf32>) -> tensor<?x?x16xf32> {
  %zero = moe.constant dense<0.0> : tensor<f32>
  %xshape = moe.shape %x : (tensor<?x?x16xf32>) -> tensor<3xi64>
  %out = moe.expand %zero, %xshape : (tensor<f32>, tensor<3xi64>) -> tensor<?x?x16xf32>
  %nz2 = moe.non_zero %mask : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz2 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %new = moe.scatter_nd %out, %pairs, %u : (tensor<?x?x16xf32>, tensor<?x2xi64>, tensor<?x16xf32>) -> tensor<?x?x16xf32>
  return %new : tensor<?x?x16xf32>
}

// -----

// Tests that a [B, T, k] value computed from the flattened top-k's results
// and viewed per token is recomputed on the tokens: the softmax over k of
// the top-k values runs on [B * T, k].
// CHECK-LABEL: func.func @flat_softmax_over_k
// CHECK: %[[V:.*]], %{{.*}} = moe.top_k %{{.*}} : (tensor<?x8xf32>, tensor<1xi64>)
// CHECK: %[[W:.*]] = moe.softmax %[[V]] : (tensor<?x2xf32>) -> tensor<?x2xf32>
// CHECK: return %[[W]]
func.func @flat_softmax_over_k(%logits: tensor<?x?x8xf32>) -> (tensor<?x2xf32>, tensor<?x?xi64>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e0 = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 2]> : tensor<2xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %hit = moe.equal %ids, %e0 : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %hit64 = moe.cast %hit {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %any = moe.reduce_max %hit64, %last {keepdims = 0 : i64} : (tensor<?x?x2xi64>, tensor<1xi64>) -> tensor<?x?xi64>
  %w = moe.softmax %v : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  %flat = moe.reshape %w, %rows : (tensor<?x?x2xf32>, tensor<2xi64>) -> tensor<?x2xf32>
  return %flat, %any : tensor<?x2xf32>, tensor<?x?xi64>
}

// -----

// Tests that a softmax over the sequence axis (-2 of [B, T, k]) is not
// recomputed on the flattened tokens, where it would mix the sequences.
// CHECK-LABEL: func.func @flat_softmax_over_sequence
// CHECK: %[[W:.*]] = moe.softmax %{{.*}} {axis = -2 : i64} : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
// CHECK-NEXT: %[[FLAT:.*]] = moe.reshape %[[W]], %{{.*}} : (tensor<?x?x2xf32>, tensor<2xi64>) -> tensor<?x2xf32>
// CHECK: return %[[FLAT]]
func.func @flat_softmax_over_sequence(%logits: tensor<?x?x8xf32>) -> (tensor<?x2xf32>, tensor<?x?xi64>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e0 = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 2]> : tensor<2xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %hit = moe.equal %ids, %e0 : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %hit64 = moe.cast %hit {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %any = moe.reduce_max %hit64, %last {keepdims = 0 : i64} : (tensor<?x?x2xi64>, tensor<1xi64>) -> tensor<?x?xi64>
  %w = moe.softmax %v {axis = -2 : i64} : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  %flat = moe.reshape %w, %rows : (tensor<?x?x2xf32>, tensor<2xi64>) -> tensor<?x2xf32>
  return %flat, %any : tensor<?x2xf32>, tensor<?x?xi64>
}

// -----

// Tests that a routing matrix filled with zeros of another tensor's shape
// than the logits' (not provably the same rows) is not read as the top-k's
// weights: its column stays a column.
// CHECK-LABEL: func.func @routing_zeros_of_other_shape
// CHECK: %[[COL:.*]] = moe.gather %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
// CHECK: moe.gather_nd %[[COL]]
func.func @routing_zeros_of_other_shape(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>, %other: tensor<?x8xf32>) -> tensor<?x16xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %v : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %other : (tensor<?x8xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %gate = moe.scatter_elements %zeros, %ids, %w {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %hit = moe.equal %ids, %e1 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %max = moe.reduce_max %count, %last {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.cast %max {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %xr = moe.gather_nd %x, %rows : (tensor<?x16xf32>, tensor<?x1xi64>) -> tensor<?x16xf32>
  %col = moe.gather %gate, %e1 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
  %wr = moe.gather_nd %col, %rows : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %wc = moe.unsqueeze %wr, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %y = moe.mul %xr, %wc : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
