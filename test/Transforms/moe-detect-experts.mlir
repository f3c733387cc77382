// RUN: moec-opt %s --split-input-file --moe-detect-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that a renormalised top-2 per-expert SwiGLU loop (Mixtral) becomes
// router -> dispatch -> experts -> combine over stacked weights, and that the
// loop is erased.
// CHECK-LABEL: func.func @mixtral
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]]
// CHECK-DAG: %[[W1:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-DAG: %[[W3:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-DAG: %[[W2:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<2x8x4xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax normalize : tensor<?x2xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 2
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x4xf32>, tensor<3xi64> w1 %[[W1]] : tensor<2x4x8xf32> w3 %[[W3]] : tensor<2x4x8xf32> w2 %[[W2]] : tensor<2x8x4xf32> layout in_out
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.scatter_elements
// CHECK: return %[[OUT]]
func.func @mixtral(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// Tests that top-k scores used without renormalisation (Qwen2-MoE) give a
// router without `normalize`.
// CHECK-LABEL: func.func @no_renormalisation
// CHECK: moe.router %{{.*}} top 1 softmax : tensor<?x2xf32>
// CHECK: moe.experts silu_glu
// CHECK: moe.combine
func.func @no_renormalisation(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<1> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<1> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x1xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x1x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x1x2xi64>) -> tensor<2x1x?xi64>
  %w3d = moe.unsqueeze %values, %c2v : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?x1x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x1x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x1x?xi64>, tensor<i64>) -> tensor<1x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<1x?xi64>) -> tensor<1x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<1x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x1x?xi64>, tensor<i64>) -> tensor<1x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<1x?xi64>) -> tensor<1x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<1x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// Tests that an expert pruned at export time (no block for expert 0) is
// still matched: its stacked weights are zero, as its contribution was.
// CHECK-LABEL: func.func @pruned_expert
// CHECK: moe.router %{{.*}} top 2 softmax normalize
// CHECK: moe.experts silu_glu
// CHECK: moe.combine
func.func @pruned_expert(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// Tests that sigmoid scores chosen directly by top-k and renormalised give a
// sigmoid router.
// CHECK-LABEL: func.func @sigmoid_scores
// CHECK: moe.router %{{.*}} top 2 sigmoid normalize : tensor<?x2xf32>
// CHECK: moe.experts silu_glu
// CHECK-NOT: moe.scatter_elements
func.func @sigmoid_scores(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.sigmoid %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// Tests that scores other than a softmax or sigmoid (here tanh) are a
// near-miss that stays generic with a remark.
// CHECK-LABEL: func.func @tanh_scores
// CHECK-NOT: moe.router
// CHECK: moe.scatter_elements
func.func @tanh_scores(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.tanh %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @+1 {{MoE per-expert loop not detected: top-k input is neither a softmax nor sigmoid scores with an optional selection bias}}
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// -----

// Tests that an activation the network matcher does not know (here
// `h * relu(h) * up`) is a near-miss naming the expert.
// CHECK-LABEL: func.func @relu_gate
// CHECK-NOT: moe.router
// CHECK: moe.scatter_elements
func.func @relu_gate(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @+1 {{expert 1: the activation is neither act(x @ w1 + b1) (relu, gelu, silu) nor act(x @ w1 + b1) * (x @ w3 + b3) (SwiGLU, GeGLU)}}
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.relu %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.relu %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// Tests that a loop whose experts are GeGLU (tanh GELU of the gate times the
// up projection, as Grok-1's) becomes moe.experts gelu_tanh_glu with the
// gate and up weights stacked.
// CHECK-LABEL: func.func @geglu_experts
// CHECK: moe.router
// CHECK: moe.experts gelu_tanh_glu {{.*}} w1 {{.*}} : tensor<2x4x8xf32> w3 {{.*}} : tensor<2x4x8xf32> w2 {{.*}} : tensor<2x8x4xf32> layout in_out {moe.form = "per-expert loop"}
// CHECK-NOT: moe.scatter_elements
func.func @geglu_experts(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.gelu %e0h {approximate = "tanh"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.gelu %e1h {approximate = "tanh"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}


// -----

// Tests that a loop whose experts are GELU networks with biases on both
// projections (V-MoE's) becomes moe.experts gelu with the biases stacked to
// [E, F] and [E, H] beside the weights.
// CHECK-LABEL: func.func @gelu_bias_experts
// CHECK: moe.router
// CHECK: moe.experts gelu {{.*}} w1 {{.*}} : tensor<2x4x8xf32> b1 {{.*}} : tensor<2x8xf32> w2 {{.*}} : tensor<2x8x4xf32> b2 {{.*}} : tensor<2x4xf32> layout in_out
// CHECK-NOT: moe.scatter_elements
func.func @gelu_bias_experts(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0b1 = moe.constant dense<0.05> : tensor<8xf32>
  %e0b2 = moe.constant dense<0.07> : tensor<4xf32>
  %e0hm = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0h = moe.add %e0b1, %e0hm : (tensor<8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.gelu %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0ym = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0y = moe.add %e0ym, %e0b2 : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1b1 = moe.constant dense<-0.05> : tensor<8xf32>
  %e1b2 = moe.constant dense<0.03> : tensor<4xf32>
  %e1hm = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1h = moe.add %e1b1, %e1hm : (tensor<8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.gelu %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1ym = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1y = moe.add %e1ym, %e1b2 : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}


// -----

// Tests that a sigmoid-gated SwiGLU MLP on the router's tokens added to the
// routed output (Qwen2-MoE's shared expert) becomes a gated moe.shared_expert
// and that its generic ops are erased.
// CHECK-LABEL: func.func @gated_shared_expert
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK: %[[ROUTED:.*]] = moe.combine
// CHECK-DAG: %[[G:.*]] = moe.constant dense<2.500000e-01> : tensor<4x1xf32>
// CHECK-DAG: %[[SW1:.*]] = moe.constant dense<0.699999988> : tensor<4x6xf32>
// CHECK-DAG: %[[SW3:.*]] = moe.constant dense<8.000000e-01> : tensor<4x6xf32>
// CHECK-DAG: %[[SW2:.*]] = moe.constant dense<0.899999976> : tensor<6x4xf32>
// CHECK: %[[SHARED:.*]] = moe.shared_expert silu_glu %[[X]] : tensor<?x4xf32> w1 %[[SW1]] : tensor<4x6xf32> w3 %[[SW3]] : tensor<4x6xf32> w2 %[[SW2]] : tensor<6x4xf32> gate %[[G]] : tensor<4x1xf32> layout in_out
// CHECK: %[[OUT:.*]] = moe.add %[[ROUTED]], %[[SHARED]]
// CHECK-NOT: moe.sigmoid
// CHECK: return %[[OUT]]
func.func @gated_shared_expert(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x6xf32>, tensor<6x4xf32>) -> tensor<?x4xf32>
  %sg = moe.constant dense<0.25> : tensor<4x1xf32>
  %sgl = moe.mat_mul %x, %sg : (tensor<?x4xf32>, tensor<4x1xf32>) -> tensor<?x1xf32>
  %sgs = moe.sigmoid %sgl : (tensor<?x1xf32>) -> tensor<?x1xf32>
  %sgy = moe.mul %sgs, %sy : (tensor<?x1xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %out = moe.add %e1acc, %sgy : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that an ungated SwiGLU MLP on the router's tokens added to the
// routed output (DeepSeek's shared experts) becomes a moe.shared_expert
// without a gate, whichever side of the addition it is on.
// CHECK-LABEL: func.func @plain_shared_expert
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK: %[[ROUTED:.*]] = moe.combine
// CHECK: %[[SHARED:.*]] = moe.shared_expert silu_glu %[[X]] : tensor<?x4xf32> w1 %{{.*}} : tensor<4x6xf32> w3 %{{.*}} : tensor<4x6xf32> w2 %{{.*}} : tensor<6x4xf32> layout in_out
// CHECK: %[[OUT:.*]] = moe.add %[[SHARED]], %[[ROUTED]]
// CHECK: return %[[OUT]]
func.func @plain_shared_expert(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x6xf32>, tensor<6x4xf32>) -> tensor<?x4xf32>
  %out = moe.add %sy, %e1acc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that an MLP added to the routed output but computed on other rows
// than the router's tokens is a near-miss: it stays generic with a remark.
// CHECK-LABEL: func.func @shared_expert_other_tokens
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK: moe.mat_mul %{{.*}}, %{{.*}} : (tensor<?x6xf32>, tensor<6x4xf32>)
func.func @shared_expert_other_tokens(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %y, %sw1 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %y, %sw3 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x6xf32>, tensor<6x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE shared expert not detected in the MLP added to the routed experts' output: it is not an f32 SwiGLU MLP on the router's tokens}}
  %out = moe.add %e1acc, %sy : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that a shared expert whose sigmoid gate is not a [H, 1] projection
// of the tokens (here one gate value per hidden unit) is a near-miss: it
// stays generic with a remark.
// CHECK-LABEL: func.func @shared_expert_wide_gate
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK: moe.sigmoid %{{.*}} : (tensor<?x4xf32>)
func.func @shared_expert_wide_gate(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x, %sw1 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x6xf32>) -> tensor<?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sup = moe.mat_mul %x, %sw3 : (tensor<?x4xf32>, tensor<4x6xf32>) -> tensor<?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x6xf32>, tensor<?x6xf32>) -> tensor<?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x6xf32>, tensor<6x4xf32>) -> tensor<?x4xf32>
  %sg = moe.constant dense<0.25> : tensor<4x4xf32>
  %sgl = moe.mat_mul %x, %sg : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %sgs = moe.sigmoid %sgl : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %sgy = moe.mul %sgs, %sy : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE shared expert not detected in the MLP added to the routed experts' output: its gate is not sigmoid(tokens @ w) with a constant f32 [H, 1] weight w}}
  %out = moe.add %e1acc, %sgy : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that the DeepSeek-V3 gate (sigmoid scores, a selection-only bias,
// top-2-sum group scores keeping the best group, the weights gathered from the
// unbiased scores, renormalised with 1e-20 and scaled) and its [E, T, k]
// expert mask become one router, and that the ungated shared expert on the
// [B, S, H] input becomes a moe.shared_expert on the flattened tokens.
// CHECK-LABEL: func.func @deepseek_v3
// CHECK-SAME: (%[[X3:.*]]: tensor<?x?x4xf32>)
// CHECK: %[[X:.*]] = moe.reshape %[[X3]]
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]]
// CHECK: %[[BIAS:.*]] = moe.constant dense<[1.000000e-01, 2.000000e-01, 3.000000e-01, 4.000000e-01]> : tensor<4xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] bias %[[BIAS]] top 2 sigmoid groups 2 keep 1 normalize scale 2.500000e+00 : tensor<?x4xf32>, tensor<4xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]]
// CHECK: %[[ROUTED:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK: %[[ROUTED3:.*]] = moe.reshape %[[ROUTED]]
// CHECK: %[[SHARED:.*]] = moe.shared_expert silu_glu %[[X]] : tensor<?x4xf32> w1 %{{.*}} : tensor<4x6xf32> w3 %{{.*}} : tensor<4x6xf32> w2 %{{.*}} : tensor<6x4xf32> layout in_out
// CHECK: %[[SHARED3:.*]] = moe.reshape %[[SHARED]], %{{.*}} : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
// CHECK: %[[OUT:.*]] = moe.add %[[ROUTED3]], %[[SHARED3]]
// CHECK-NOT: moe.top_k
// CHECK-NOT: moe.where
// CHECK: return %[[OUT]]
func.func @deepseek_v3(%x3: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %wr = moe.constant dense<0.5> : tensor<4x4xf32>
  %bias = moe.constant dense<[[0.1, 0.2, 0.3, 0.4]]> : tensor<1x4xf32>
  %grouped = moe.constant dense<[-1, 2, 2]> : tensor<3xi64>
  %repeat = moe.constant dense<[1, 2, 2]> : tensor<3xi64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m = moe.constant dense<1> : tensor<1xi64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-20> : tensor<f32>
  %scale = moe.constant dense<2.5> : tensor<f32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %choice = moe.add %scores, %bias : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  %byGroup = moe.reshape %choice, %grouped : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %best, %bestIdx = moe.top_k %byGroup, %k : (tensor<?x2x2xf32>, tensor<1xi64>) -> (tensor<?x2x2xf32>, tensor<?x2x2xi64>)
  %groupScores = moe.reduce_sum %best, %last {keepdims = 0 : i64} : (tensor<?x2x2xf32>, tensor<1xi64>) -> tensor<?x2xf32>
  %topGroups, %topGroupIdx = moe.top_k %groupScores, %m {sorted = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %gsShape = moe.shape %groupScores : (tensor<?x2xf32>) -> tensor<2xi64>
  %gzeros = moe.constant_of_shape %gsShape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %idxShape = moe.shape %topGroupIdx : (tensor<?x1xi64>) -> tensor<2xi64>
  %gones = moe.expand %one, %idxShape : (tensor<f32>, tensor<2xi64>) -> tensor<?x1xf32>
  %groupMask = moe.scatter_elements %gzeros, %topGroupIdx, %gones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %gm3 = moe.unsqueeze %groupMask, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %em3 = moe.expand %gm3, %repeat : (tensor<?x2x1xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %expertMask = moe.reshape %em3, %rows : (tensor<?x2x2xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %keep = moe.cast %expertMask {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %drop = moe.not %keep : (tensor<?x4xi1>) -> tensor<?x4xi1>
  %masked = moe.where %drop, %zero, %choice : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %masked, %k {sorted = 0 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %chosen = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %chosen, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %denom = moe.add %sum, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %norm = moe.div %chosen, %denom : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %weights = moe.mul %norm, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x4xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} : (tensor<?x2x4xi64>) -> tensor<4x?x2xi64>
  %wflat = moe.flatten %weights {axis = 2 : i64} : (tensor<?x2xf32>) -> tensor<?x1xf32>
  %acc = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %acc {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<?x2xi64>) -> tensor<?x2xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1tok = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1slot = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tk = moe.mul %e1tok, %k : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1rw1 = moe.reshape %e1rw, %last : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?xf32>
  %e1in = moe.gather %x, %e1tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1rwc = moe.unsqueeze %e1rw1, %last : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %zeros : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %zeros, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %routed = moe.reshape %e1acc, %shape3 : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x3, %sw1 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %x3, %sw3 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x?x6xf32>, tensor<6x4xf32>) -> tensor<?x?x4xf32>
  %out = moe.add %routed, %sy : (tensor<?x?x4xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that grouped selection filling dropped experts with -inf is exact
// without a selection bias: a group's experts stay eligible only in the kept
// groups.
// CHECK-LABEL: func.func @deepseek_no_bias_inf_fill
// CHECK: moe.router %{{.*}} top 2 sigmoid groups 2 keep 1 normalize scale 2.500000e+00 : tensor<?x4xf32>
// CHECK-NOT: moe.where
func.func @deepseek_no_bias_inf_fill(%x3: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %wr = moe.constant dense<0.5> : tensor<4x4xf32>
  %grouped = moe.constant dense<[-1, 2, 2]> : tensor<3xi64>
  %repeat = moe.constant dense<[1, 2, 2]> : tensor<3xi64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m = moe.constant dense<1> : tensor<1xi64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %zero = moe.constant dense<0xFF800000> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-20> : tensor<f32>
  %scale = moe.constant dense<2.5> : tensor<f32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %byGroup = moe.reshape %scores, %grouped : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %best, %bestIdx = moe.top_k %byGroup, %k : (tensor<?x2x2xf32>, tensor<1xi64>) -> (tensor<?x2x2xf32>, tensor<?x2x2xi64>)
  %groupScores = moe.reduce_sum %best, %last {keepdims = 0 : i64} : (tensor<?x2x2xf32>, tensor<1xi64>) -> tensor<?x2xf32>
  %topGroups, %topGroupIdx = moe.top_k %groupScores, %m {sorted = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %gsShape = moe.shape %groupScores : (tensor<?x2xf32>) -> tensor<2xi64>
  %gzeros = moe.constant_of_shape %gsShape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %idxShape = moe.shape %topGroupIdx : (tensor<?x1xi64>) -> tensor<2xi64>
  %gones = moe.expand %one, %idxShape : (tensor<f32>, tensor<2xi64>) -> tensor<?x1xf32>
  %groupMask = moe.scatter_elements %gzeros, %topGroupIdx, %gones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %gm3 = moe.unsqueeze %groupMask, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %em3 = moe.expand %gm3, %repeat : (tensor<?x2x1xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %expertMask = moe.reshape %em3, %rows : (tensor<?x2x2xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %keep = moe.cast %expertMask {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %drop = moe.not %keep : (tensor<?x4xi1>) -> tensor<?x4xi1>
  %masked = moe.where %drop, %zero, %scores : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %masked, %k {sorted = 0 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %chosen = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %chosen, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %denom = moe.add %sum, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %norm = moe.div %chosen, %denom : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %weights = moe.mul %norm, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x4xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} : (tensor<?x2x4xi64>) -> tensor<4x?x2xi64>
  %wflat = moe.flatten %weights {axis = 2 : i64} : (tensor<?x2xf32>) -> tensor<?x1xf32>
  %acc = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %acc {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<?x2xi64>) -> tensor<?x2xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1tok = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1slot = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tk = moe.mul %e1tok, %k : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1rw1 = moe.reshape %e1rw, %last : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?xf32>
  %e1in = moe.gather %x, %e1tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1rwc = moe.unsqueeze %e1rw1, %last : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %zeros : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %zeros, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %routed = moe.reshape %e1acc, %shape3 : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x3, %sw1 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %x3, %sw3 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x?x6xf32>, tensor<6x4xf32>) -> tensor<?x?x4xf32>
  %out = moe.add %routed, %sy : (tensor<?x?x4xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that grouped selection filling dropped experts with 0 is a near-miss
// when a selection bias entry is negative: a dropped expert's 0 could beat a
// kept expert's negative choice score.
// CHECK-LABEL: func.func @deepseek_negative_bias
// CHECK-NOT: moe.router
// CHECK: moe.where
func.func @deepseek_negative_bias(%x3: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %wr = moe.constant dense<0.5> : tensor<4x4xf32>
  %bias = moe.constant dense<[[0.1, -0.2, 0.3, 0.4]]> : tensor<1x4xf32>
  %grouped = moe.constant dense<[-1, 2, 2]> : tensor<3xi64>
  %repeat = moe.constant dense<[1, 2, 2]> : tensor<3xi64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m = moe.constant dense<1> : tensor<1xi64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-20> : tensor<f32>
  %scale = moe.constant dense<2.5> : tensor<f32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %choice = moe.add %scores, %bias : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  %byGroup = moe.reshape %choice, %grouped : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %best, %bestIdx = moe.top_k %byGroup, %k : (tensor<?x2x2xf32>, tensor<1xi64>) -> (tensor<?x2x2xf32>, tensor<?x2x2xi64>)
  %groupScores = moe.reduce_sum %best, %last {keepdims = 0 : i64} : (tensor<?x2x2xf32>, tensor<1xi64>) -> tensor<?x2xf32>
  %topGroups, %topGroupIdx = moe.top_k %groupScores, %m {sorted = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %gsShape = moe.shape %groupScores : (tensor<?x2xf32>) -> tensor<2xi64>
  %gzeros = moe.constant_of_shape %gsShape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %idxShape = moe.shape %topGroupIdx : (tensor<?x1xi64>) -> tensor<2xi64>
  %gones = moe.expand %one, %idxShape : (tensor<f32>, tensor<2xi64>) -> tensor<?x1xf32>
  %groupMask = moe.scatter_elements %gzeros, %topGroupIdx, %gones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %gm3 = moe.unsqueeze %groupMask, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %em3 = moe.expand %gm3, %repeat : (tensor<?x2x1xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %expertMask = moe.reshape %em3, %rows : (tensor<?x2x2xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %keep = moe.cast %expertMask {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %drop = moe.not %keep : (tensor<?x4xi1>) -> tensor<?x4xi1>
  %masked = moe.where %drop, %zero, %choice : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE per-expert loop not detected: grouped selection sets masked experts to 0, not below every selection bias, so they could still be chosen}}
  %values, %indices = moe.top_k %masked, %k {sorted = 0 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %chosen = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %chosen, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %denom = moe.add %sum, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %norm = moe.div %chosen, %denom : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %weights = moe.mul %norm, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x4xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} : (tensor<?x2x4xi64>) -> tensor<4x?x2xi64>
  %wflat = moe.flatten %weights {axis = 2 : i64} : (tensor<?x2xf32>) -> tensor<?x1xf32>
  %acc = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %acc {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<?x2xi64>) -> tensor<?x2xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1tok = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1slot = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tk = moe.mul %e1tok, %k : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1rw1 = moe.reshape %e1rw, %last : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?xf32>
  %e1in = moe.gather %x, %e1tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1rwc = moe.unsqueeze %e1rw1, %last : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %zeros : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %zeros, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %routed = moe.reshape %e1acc, %shape3 : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x3, %sw1 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %x3, %sw3 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x?x6xf32>, tensor<6x4xf32>) -> tensor<?x?x4xf32>
  %out = moe.add %routed, %sy : (tensor<?x?x4xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that keeping the groups with the smallest scores is a near-miss
// naming the grouped selection.
// CHECK-LABEL: func.func @deepseek_smallest_groups
// CHECK-NOT: moe.router
// CHECK: moe.where
func.func @deepseek_smallest_groups(%x3: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %wr = moe.constant dense<0.5> : tensor<4x4xf32>
  %bias = moe.constant dense<[[0.1, 0.2, 0.3, 0.4]]> : tensor<1x4xf32>
  %grouped = moe.constant dense<[-1, 2, 2]> : tensor<3xi64>
  %repeat = moe.constant dense<[1, 2, 2]> : tensor<3xi64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m = moe.constant dense<1> : tensor<1xi64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-20> : tensor<f32>
  %scale = moe.constant dense<2.5> : tensor<f32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %choice = moe.add %scores, %bias : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  %byGroup = moe.reshape %choice, %grouped : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %best, %bestIdx = moe.top_k %byGroup, %k : (tensor<?x2x2xf32>, tensor<1xi64>) -> (tensor<?x2x2xf32>, tensor<?x2x2xi64>)
  %groupScores = moe.reduce_sum %best, %last {keepdims = 0 : i64} : (tensor<?x2x2xf32>, tensor<1xi64>) -> tensor<?x2xf32>
  %topGroups, %topGroupIdx = moe.top_k %groupScores, %m {largest = 0 : i64, sorted = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %gsShape = moe.shape %groupScores : (tensor<?x2xf32>) -> tensor<2xi64>
  %gzeros = moe.constant_of_shape %gsShape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %idxShape = moe.shape %topGroupIdx : (tensor<?x1xi64>) -> tensor<2xi64>
  %gones = moe.expand %one, %idxShape : (tensor<f32>, tensor<2xi64>) -> tensor<?x1xf32>
  %groupMask = moe.scatter_elements %gzeros, %topGroupIdx, %gones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %gm3 = moe.unsqueeze %groupMask, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %em3 = moe.expand %gm3, %repeat : (tensor<?x2x1xf32>, tensor<3xi64>) -> tensor<?x2x2xf32>
  %expertMask = moe.reshape %em3, %rows : (tensor<?x2x2xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %keep = moe.cast %expertMask {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %drop = moe.not %keep : (tensor<?x4xi1>) -> tensor<?x4xi1>
  %masked = moe.where %drop, %zero, %choice : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE per-expert loop not detected: grouped selection: the kept groups are not the top-m of the group scores}}
  %values, %indices = moe.top_k %masked, %k {sorted = 0 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %chosen = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %chosen, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %denom = moe.add %sum, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %norm = moe.div %chosen, %denom : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %weights = moe.mul %norm, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x4xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} : (tensor<?x2x4xi64>) -> tensor<4x?x2xi64>
  %wflat = moe.flatten %weights {axis = 2 : i64} : (tensor<?x2xf32>) -> tensor<?x1xf32>
  %acc = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %acc {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<?x2xi64>) -> tensor<?x2xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1tok = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1slot = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tk = moe.mul %e1tok, %k : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1rw1 = moe.reshape %e1rw, %last : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?xf32>
  %e1in = moe.gather %x, %e1tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1rwc = moe.unsqueeze %e1rw1, %last : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %zeros : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %zeros, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %routed = moe.reshape %e1acc, %shape3 : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x3, %sw1 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %x3, %sw3 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x?x6xf32>, tensor<6x4xf32>) -> tensor<?x?x4xf32>
  %out = moe.add %routed, %sy : (tensor<?x?x4xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that the dynamo export of the loop (Gemm with [out, in] weights, an
// Equal one-hot, Slice columns, GatherND rows and weights, ScatterND add from
// expanded zeros) becomes the same sparse layer, with out_in weights.
// CHECK-LABEL: func.func @mixtral_dynamo
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK: %[[LOGITS:.*]] = moe.gemm %[[X]]
// CHECK-DAG: %[[W1:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<2x8x4xf32>
// CHECK-DAG: %[[W3:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<2x8x4xf32>
// CHECK-DAG: %[[W2:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax normalize : tensor<?x2xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 2
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x4xf32>, tensor<3xi64> w1 %[[W1]] : tensor<2x8x4xf32> w3 %[[W3]] : tensor<2x8x4xf32> w2 %[[W2]] : tensor<2x4x8xf32> layout out_in
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[OUT]]
func.func @mixtral_dynamo(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<2x4xf32>
  %w1_0 = moe.constant dense<0.1> : tensor<8x4xf32>
  %w3_0 = moe.constant dense<0.2> : tensor<8x4xf32>
  %w2_0 = moe.constant dense<0.3> : tensor<4x8xf32>
  %w1_1 = moe.constant dense<0.4> : tensor<8x4xf32>
  %w3_1 = moe.constant dense<0.5> : tensor<8x4xf32>
  %w2_1 = moe.constant dense<0.6> : tensor<4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %cm1 = moe.constant dense<-1> : tensor<1xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %range = moe.constant dense<[0, 1]> : tensor<2xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %rowshape = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %cm1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %xs = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %xs : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %iu = moe.unsqueeze %indices, %cm1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?x2x1xi64>
  %eq = moe.equal %iu, %range : (tensor<?x2x1xi64>, tensor<2xi64>) -> tensor<?x2x2xi1>
  %onehot = moe.cast %eq {to = i64} : (tensor<?x2x2xi1>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xt = moe.transpose %xu {perm = array<i64: 1, 0, 2>} : (tensor<1x?x4xf32>) -> tensor<?x1x4xf32>
  %sel0 = moe.gather %mask, %c0 : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %nz0 = moe.non_zero %sel0 : (tensor<2x?xi64>) -> tensor<2x?xi64>
  %pairs0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %js0 = moe.slice %pairs0, %c0v, %c1v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %j0 = moe.squeeze %js0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %ts0 = moe.slice %pairs0, %c1v, %c2v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %t0 = moe.squeeze %ts0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %tc0 = moe.unsqueeze %t0, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %g0 = moe.gather_nd %xt, %tc0 : (tensor<?x1x4xf32>, tensor<?x1xi64>) -> tensor<?x1x4xf32>
  %gt0 = moe.transpose %g0 {perm = array<i64: 1, 0, 2>} : (tensor<?x1x4xf32>) -> tensor<1x?x4xf32>
  %rows0 = moe.reshape %gt0, %rowshape {allowzero = 1 : i64} : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %h1_0 = moe.gemm %rows0, %w1_0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %sg0 = moe.sigmoid %h1_0 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %silu0 = moe.mul %h1_0, %sg0 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %h3_0 = moe.gemm %rows0, %w3_0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %act0 = moe.mul %silu0, %h3_0 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y0 = moe.gemm %act0, %w2_0 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  %jc0 = moe.unsqueeze %j0, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %ij0 = moe.concat %tc0, %jc0 {axis = -1 : i64} : (tensor<?x1xi64>, tensor<?x1xi64>) -> tensor<?x2xi64>
  %wt0 = moe.gather_nd %w3d, %ij0 : (tensor<?x2x1xf32>, tensor<?x2xi64>) -> tensor<?x1xf32>
  %yw0 = moe.mul %y0, %wt0 : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %acc0 = moe.scatter_nd %zeros, %tc0, %yw0 {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sel1 = moe.gather %mask, %c1 : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %nz1 = moe.non_zero %sel1 : (tensor<2x?xi64>) -> tensor<2x?xi64>
  %pairs1 = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %js1 = moe.slice %pairs1, %c0v, %c1v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %j1 = moe.squeeze %js1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %ts1 = moe.slice %pairs1, %c1v, %c2v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %t1 = moe.squeeze %ts1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %tc1 = moe.unsqueeze %t1, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %g1 = moe.gather_nd %xt, %tc1 : (tensor<?x1x4xf32>, tensor<?x1xi64>) -> tensor<?x1x4xf32>
  %gt1 = moe.transpose %g1 {perm = array<i64: 1, 0, 2>} : (tensor<?x1x4xf32>) -> tensor<1x?x4xf32>
  %rows1 = moe.reshape %gt1, %rowshape {allowzero = 1 : i64} : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %h1_1 = moe.gemm %rows1, %w1_1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %sg1 = moe.sigmoid %h1_1 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %silu1 = moe.mul %h1_1, %sg1 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %h3_1 = moe.gemm %rows1, %w3_1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %act1 = moe.mul %silu1, %h3_1 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y1 = moe.gemm %act1, %w2_1 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  %jc1 = moe.unsqueeze %j1, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %ij1 = moe.concat %tc1, %jc1 {axis = -1 : i64} : (tensor<?x1xi64>, tensor<?x1xi64>) -> tensor<?x2xi64>
  %wt1 = moe.gather_nd %w3d, %ij1 : (tensor<?x2x1xf32>, tensor<?x2xi64>) -> tensor<?x1xf32>
  %yw1 = moe.mul %y1, %wt1 : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %acc1 = moe.scatter_nd %acc0, %tc1, %yw1 {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %acc1 : tensor<?x4xf32>
}

// -----

// Tests that a dynamo loop whose second expert overwrites its rows (ScatterND
// without reduction) rather than adding to them stays generic: a token routed
// to both experts would lose the first one's output.
// CHECK-LABEL: func.func @mixtral_dynamo_overwrite
// CHECK-NOT: moe.router
// CHECK: moe.scatter_nd
func.func @mixtral_dynamo_overwrite(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<2x4xf32>
  %w1_0 = moe.constant dense<0.1> : tensor<8x4xf32>
  %w3_0 = moe.constant dense<0.2> : tensor<8x4xf32>
  %w2_0 = moe.constant dense<0.3> : tensor<4x8xf32>
  %w1_1 = moe.constant dense<0.4> : tensor<8x4xf32>
  %w3_1 = moe.constant dense<0.5> : tensor<8x4xf32>
  %w2_1 = moe.constant dense<0.6> : tensor<4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %cm1 = moe.constant dense<-1> : tensor<1xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %range = moe.constant dense<[0, 1]> : tensor<2xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %rowshape = moe.constant dense<[-1, 4]> : tensor<2xi64>
  // expected-remark @+3 {{MoE per-expert loop not detected: expert 1: the scatter is not a row-wise add into the accumulator}}
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %cm1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %xs = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %xs : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %iu = moe.unsqueeze %indices, %cm1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?x2x1xi64>
  %eq = moe.equal %iu, %range : (tensor<?x2x1xi64>, tensor<2xi64>) -> tensor<?x2x2xi1>
  %onehot = moe.cast %eq {to = i64} : (tensor<?x2x2xi1>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xt = moe.transpose %xu {perm = array<i64: 1, 0, 2>} : (tensor<1x?x4xf32>) -> tensor<?x1x4xf32>
  %sel0 = moe.gather %mask, %c0 : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %nz0 = moe.non_zero %sel0 : (tensor<2x?xi64>) -> tensor<2x?xi64>
  %pairs0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %js0 = moe.slice %pairs0, %c0v, %c1v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %j0 = moe.squeeze %js0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %ts0 = moe.slice %pairs0, %c1v, %c2v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %t0 = moe.squeeze %ts0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %tc0 = moe.unsqueeze %t0, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %g0 = moe.gather_nd %xt, %tc0 : (tensor<?x1x4xf32>, tensor<?x1xi64>) -> tensor<?x1x4xf32>
  %gt0 = moe.transpose %g0 {perm = array<i64: 1, 0, 2>} : (tensor<?x1x4xf32>) -> tensor<1x?x4xf32>
  %rows0 = moe.reshape %gt0, %rowshape {allowzero = 1 : i64} : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %h1_0 = moe.gemm %rows0, %w1_0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %sg0 = moe.sigmoid %h1_0 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %silu0 = moe.mul %h1_0, %sg0 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %h3_0 = moe.gemm %rows0, %w3_0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %act0 = moe.mul %silu0, %h3_0 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y0 = moe.gemm %act0, %w2_0 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  %jc0 = moe.unsqueeze %j0, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %ij0 = moe.concat %tc0, %jc0 {axis = -1 : i64} : (tensor<?x1xi64>, tensor<?x1xi64>) -> tensor<?x2xi64>
  %wt0 = moe.gather_nd %w3d, %ij0 : (tensor<?x2x1xf32>, tensor<?x2xi64>) -> tensor<?x1xf32>
  %yw0 = moe.mul %y0, %wt0 : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %acc0 = moe.scatter_nd %zeros, %tc0, %yw0 {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sel1 = moe.gather %mask, %c1 : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %nz1 = moe.non_zero %sel1 : (tensor<2x?xi64>) -> tensor<2x?xi64>
  %pairs1 = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %js1 = moe.slice %pairs1, %c0v, %c1v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %j1 = moe.squeeze %js1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %ts1 = moe.slice %pairs1, %c1v, %c2v axes %c1v : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %t1 = moe.squeeze %ts1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %tc1 = moe.unsqueeze %t1, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %g1 = moe.gather_nd %xt, %tc1 : (tensor<?x1x4xf32>, tensor<?x1xi64>) -> tensor<?x1x4xf32>
  %gt1 = moe.transpose %g1 {perm = array<i64: 1, 0, 2>} : (tensor<?x1x4xf32>) -> tensor<1x?x4xf32>
  %rows1 = moe.reshape %gt1, %rowshape {allowzero = 1 : i64} : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %h1_1 = moe.gemm %rows1, %w1_1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %sg1 = moe.sigmoid %h1_1 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %silu1 = moe.mul %h1_1, %sg1 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %h3_1 = moe.gemm %rows1, %w3_1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %act1 = moe.mul %silu1, %h3_1 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y1 = moe.gemm %act1, %w2_1 {transB = 1 : i64} : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<?x4xf32>
  %jc1 = moe.unsqueeze %j1, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %ij1 = moe.concat %tc1, %jc1 {axis = -1 : i64} : (tensor<?x1xi64>, tensor<?x1xi64>) -> tensor<?x2xi64>
  %wt1 = moe.gather_nd %w3d, %ij1 : (tensor<?x2x1xf32>, tensor<?x2xi64>) -> tensor<?x1xf32>
  %yw1 = moe.mul %y1, %wt1 : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %acc1 = moe.scatter_nd %acc0, %tc1, %yw1 {reduction = "none"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %acc1 : tensor<?x4xf32>
}

// -----

// Tests that a Switch Transformers block (arg-max top-1, capacity counted per
// sequence by CumSum + LessOrEqual, ReLU experts overwriting their tokens'
// rows of a copy of the input, the result scaled by the largest score)
// becomes router (capacity, on the [B, S, E] logits) -> dispatch -> experts
// relu -> combine passing dropped tokens through.
// CHECK-LABEL: func.func @switch
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x4xf32>)
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]]
// CHECK-DAG: %[[W1:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-DAG: %[[W2:.*]] = moe.stack %{{.*}}, %{{.*}} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<2x8x4xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 1 softmax capacity 4 : tensor<?x?x2xf32>
// CHECK: %[[T:.*]] = moe.reshape %[[X]], %{{.*}} : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
// CHECK: %[[I2:.*]] = moe.reshape %[[I]], %{{.*}} : (tensor<?x?x1xi64>, tensor<2xi64>) -> tensor<?x1xi64>
// CHECK: %[[W2D:.*]] = moe.reshape %[[W]], %{{.*}} : (tensor<?x?x1xf32>, tensor<2xi64>) -> tensor<?x1xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[T]], %[[I2]] experts 2
// CHECK: %[[Y:.*]] = moe.experts relu %[[ROWS]], %[[OFF]] : tensor<?x4xf32>, tensor<3xi64> w1 %[[W1]] : tensor<2x4x8xf32> w2 %[[W2]] : tensor<2x8x4xf32> layout in_out
// CHECK: %[[C:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W2D]] passthrough %[[T]], %[[I2]]
// CHECK: %[[SHAPE:.*]] = moe.shape %[[X]]
// CHECK: %[[OUT:.*]] = moe.reshape %[[C]], %[[SHAPE]]
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[OUT]]
func.func @switch(%x: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %w1_0 = moe.constant dense<0.1> : tensor<4x8xf32>
  %w2_0 = moe.constant dense<0.2> : tensor<8x4xf32>
  %w1_1 = moe.constant dense<0.3> : tensor<4x8xf32>
  %w2_1 = moe.constant dense<0.4> : tensor<8x4xf32>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %seqaxis = moe.constant dense<-2> : tensor<i32>
  %cap = moe.constant dense<4> : tensor<i64>
  %cm1 = moe.constant dense<-1> : tensor<1xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x?x4xf32>, tensor<4x2xf32>) -> tensor<?x?x2xf32>
  %scores = moe.softmax %logits : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  %e = moe.arg_max %scores {axis = -1 : i64, keepdims = 0 : i64} : (tensor<?x?x2xf32>) -> tensor<?x?xi64>
  %onehot = moe.one_hot %e, %depth, %onoff : (tensor<?x?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x?x2xi64>
  %pos = moe.cum_sum %onehot, %seqaxis : (tensor<?x?x2xi64>, tensor<i32>) -> tensor<?x?x2xi64>
  %within = moe.less_or_equal %pos, %cap : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %wi = moe.cast %within {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %kept = moe.mul %onehot, %wi : (tensor<?x?x2xi64>, tensor<?x?x2xi64>) -> tensor<?x?x2xi64>
  %p = moe.reduce_max %scores, %cm1 {keepdims = 0 : i64} : (tensor<?x?x2xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  %pc = moe.unsqueeze %p, %cm1 : (tensor<?x?xf32>, tensor<1xi64>) -> tensor<?x?x1xf32>
  %keep = moe.cast %kept {to = i1} : (tensor<?x?x2xi64>) -> tensor<?x?x2xi1>
  %sel0 = moe.gather %keep, %c0 {axis = 2 : i64} : (tensor<?x?x2xi1>, tensor<i64>) -> tensor<?x?xi1>
  %nz0 = moe.non_zero %sel0 : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %rows0 = moe.gather_nd %x, %pairs0 : (tensor<?x?x4xf32>, tensor<?x2xi64>) -> tensor<?x4xf32>
  %h0 = moe.mat_mul %rows0, %w1_0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %r0 = moe.relu %h0 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %y0 = moe.mat_mul %r0, %w2_0 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %su0 = moe.unsqueeze %sel0, %c2v : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %sh0 = moe.shape %x : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %ex0 = moe.expand %su0, %sh0 : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x4xi1>
  %enz0 = moe.non_zero %ex0 : (tensor<?x?x4xi1>) -> tensor<3x?xi64>
  %eidx0 = moe.transpose %enz0 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %flat0 = moe.reshape %y0, %cm1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %n0 = moe.dim %enz0, 1 : tensor<3x?xi64>
  %nv0 = moe.unsqueeze %n0, %c0v : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %upd0 = moe.slice %flat0, %c0v, %nv0 axes %c0v : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %acc0 = moe.scatter_nd %x, %eidx0, %upd0 : (tensor<?x?x4xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x4xf32>
  %sel1 = moe.gather %keep, %c1 {axis = 2 : i64} : (tensor<?x?x2xi1>, tensor<i64>) -> tensor<?x?xi1>
  %nz1 = moe.non_zero %sel1 : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs1 = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %rows1 = moe.gather_nd %x, %pairs1 : (tensor<?x?x4xf32>, tensor<?x2xi64>) -> tensor<?x4xf32>
  %h1 = moe.mat_mul %rows1, %w1_1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %r1 = moe.relu %h1 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %y1 = moe.mat_mul %r1, %w2_1 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %su1 = moe.unsqueeze %sel1, %c2v : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %sh1 = moe.shape %acc0 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %ex1 = moe.expand %su1, %sh1 : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x4xi1>
  %enz1 = moe.non_zero %ex1 : (tensor<?x?x4xi1>) -> tensor<3x?xi64>
  %eidx1 = moe.transpose %enz1 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %flat1 = moe.reshape %y1, %cm1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %n1 = moe.dim %enz1, 1 : tensor<3x?xi64>
  %nv1 = moe.unsqueeze %n1, %c0v : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %upd1 = moe.slice %flat1, %c0v, %nv1 axes %c0v : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %acc1 = moe.scatter_nd %acc0, %eidx1, %upd1 : (tensor<?x?x4xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x4xf32>
  %out = moe.mul %pc, %acc1 : (tensor<?x?x1xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that a Switch block without expert 1's block stays generic: a token
// kept for expert 1 keeps its input row, which the sparse layer cannot
// express.
// CHECK-LABEL: func.func @switch_missing_expert
// CHECK-NOT: moe.router
// CHECK: moe.scatter_nd
func.func @switch_missing_expert(%x: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %w1_0 = moe.constant dense<0.1> : tensor<4x8xf32>
  %w2_0 = moe.constant dense<0.2> : tensor<8x4xf32>
  %w1_1 = moe.constant dense<0.3> : tensor<4x8xf32>
  %w2_1 = moe.constant dense<0.4> : tensor<8x4xf32>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %seqaxis = moe.constant dense<-2> : tensor<i32>
  %cap = moe.constant dense<4> : tensor<i64>
  %cm1 = moe.constant dense<-1> : tensor<1xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x?x4xf32>, tensor<4x2xf32>) -> tensor<?x?x2xf32>
  %scores = moe.softmax %logits : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
  // expected-remark @+1 {{MoE Switch layer not detected: expert 1 has no block}}
  %e = moe.arg_max %scores {axis = -1 : i64, keepdims = 0 : i64} : (tensor<?x?x2xf32>) -> tensor<?x?xi64>
  %onehot = moe.one_hot %e, %depth, %onoff : (tensor<?x?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x?x2xi64>
  %pos = moe.cum_sum %onehot, %seqaxis : (tensor<?x?x2xi64>, tensor<i32>) -> tensor<?x?x2xi64>
  %within = moe.less_or_equal %pos, %cap : (tensor<?x?x2xi64>, tensor<i64>) -> tensor<?x?x2xi1>
  %wi = moe.cast %within {to = i64} : (tensor<?x?x2xi1>) -> tensor<?x?x2xi64>
  %kept = moe.mul %onehot, %wi : (tensor<?x?x2xi64>, tensor<?x?x2xi64>) -> tensor<?x?x2xi64>
  %p = moe.reduce_max %scores, %cm1 {keepdims = 0 : i64} : (tensor<?x?x2xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  %pc = moe.unsqueeze %p, %cm1 : (tensor<?x?xf32>, tensor<1xi64>) -> tensor<?x?x1xf32>
  %keep = moe.cast %kept {to = i1} : (tensor<?x?x2xi64>) -> tensor<?x?x2xi1>
  %sel0 = moe.gather %keep, %c0 {axis = 2 : i64} : (tensor<?x?x2xi1>, tensor<i64>) -> tensor<?x?xi1>
  %nz0 = moe.non_zero %sel0 : (tensor<?x?xi1>) -> tensor<2x?xi64>
  %pairs0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %rows0 = moe.gather_nd %x, %pairs0 : (tensor<?x?x4xf32>, tensor<?x2xi64>) -> tensor<?x4xf32>
  %h0 = moe.mat_mul %rows0, %w1_0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %r0 = moe.relu %h0 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %y0 = moe.mat_mul %r0, %w2_0 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %su0 = moe.unsqueeze %sel0, %c2v : (tensor<?x?xi1>, tensor<1xi64>) -> tensor<?x?x1xi1>
  %sh0 = moe.shape %x : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %ex0 = moe.expand %su0, %sh0 : (tensor<?x?x1xi1>, tensor<3xi64>) -> tensor<?x?x4xi1>
  %enz0 = moe.non_zero %ex0 : (tensor<?x?x4xi1>) -> tensor<3x?xi64>
  %eidx0 = moe.transpose %enz0 {perm = array<i64: 1, 0>} : (tensor<3x?xi64>) -> tensor<?x3xi64>
  %flat0 = moe.reshape %y0, %cm1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %n0 = moe.dim %enz0, 1 : tensor<3x?xi64>
  %nv0 = moe.unsqueeze %n0, %c0v : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %upd0 = moe.slice %flat0, %c0v, %nv0 axes %c0v : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %acc0 = moe.scatter_nd %x, %eidx0, %upd0 : (tensor<?x?x4xf32>, tensor<?x3xi64>, tensor<?xf32>) -> tensor<?x?x4xf32>
  %out = moe.mul %pc, %acc0 : (tensor<?x?x1xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that a loop over the experts hit at run time (transformers 4.57's
// nonzero(expert_mask.sum() > 0), here the mask's sum) stays generic with a
// remark: its blocks are tied to the experts hit when it was traced.
// CHECK-LABEL: func.func @mixtral_hit_loop
// CHECK-NOT: moe.router
// CHECK: moe.scatter_elements
func.func @mixtral_hit_loop(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @+1 {{MoE per-expert loop not detected: the loop runs over the experts hit at run time (a NonZero of the expert mask's sum), split into as many blocks as were hit at trace time: it is valid only for inputs that hit the same experts}}
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %hitaxes = moe.constant dense<[1, 2]> : tensor<2xi64>
  %hits = moe.reduce_sum %mask, %hitaxes {keepdims = 0 : i64} : (tensor<2x2x?xi64>, tensor<2xi64>) -> tensor<2xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// Tests that an expert output expanded to the shape of the accumulator's
// first row (TorchScript's index_add: a broadcast that keeps the rows) is
// still the loop form.
// CHECK-LABEL: func.func @update_expanded_to_first_row
// CHECK: moe.router
// CHECK-NOT: moe.scatter_elements
func.func @update_expanded_to_first_row(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %sst = moe.constant dense<0> : tensor<2xi64>
  %sen = moe.constant dense<[1, 9223372036854775807]> : tensor<2xi64>
  %sax = moe.constant dense<[0, 1]> : tensor<2xi64>
  %e0row = moe.slice %acc, %sst, %sen axes %sax : (tensor<?x4xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0rs = moe.shape %e0row : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0ex = moe.expand %e0yw, %e0rs : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0ex : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0ex : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}

// -----

// Tests that an expert output expanded to the shape of an empty slice of the
// accumulator (rows [0, 0): the update vanishes where the expert has one
// token, and the expand fails where it has more) is a near-miss.
// CHECK-LABEL: func.func @update_expanded_to_no_row
// CHECK-NOT: moe.router
// CHECK: moe.scatter_elements
func.func @update_expanded_to_no_row(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<0.5> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c0v = moe.constant dense<0> : tensor<1xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c2v = moe.constant dense<2> : tensor<1xi64>
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %kk = moe.constant dense<2> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %scores = moe.softmax %logits {axis = -1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @+1 {{MoE per-expert loop not detected: expert 0: the expert output is expanded to a shape that may not keep its rows}}
  %values, %indices = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sum = moe.reduce_sum %values, %axes : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %norm = moe.div %values, %sum : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x2xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 1, 0>} : (tensor<?x2x2xi64>) -> tensor<2x2x?xi64>
  %w3d = moe.unsqueeze %norm, %c2v : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %wflat = moe.flatten %w3d {axis = 2 : i64} : (tensor<?x2x1xf32>) -> tensor<?x1xf32>
  %xu = moe.unsqueeze %x, %c0v : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %acc = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0id = moe.constant dense<0> : tensor<i64>
  %e0w1 = moe.constant dense<0.1> : tensor<4x8xf32>
  %e0w3 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e0w2 = moe.constant dense<0.3> : tensor<8x4xf32>
  %e0sel = moe.gather %mask, %e0id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e0bool = moe.cast %e0sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e0nz = moe.non_zero %e0bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e0nzt = moe.transpose %e0nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e0split:2 = moe.split %e0nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e0slot = moe.squeeze %e0split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0tok = moe.squeeze %e0split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0g = moe.gather %xu, %e0tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e0in = moe.reshape %e0g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0h = moe.mat_mul %e0in, %e0w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0sig = moe.sigmoid %e0h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0silu = moe.mul %e0h, %e0sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0up = moe.mat_mul %e0in, %e0w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e0act = moe.mul %e0silu, %e0up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e0y = moe.mat_mul %e0act, %e0w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e0tk = moe.mul %e0tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e0flat = moe.add %e0slot, %e0tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e0rw = moe.gather %wflat, %e0flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e0yw = moe.mul %e0y, %e0rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %sst = moe.constant dense<0> : tensor<2xi64>
  %sen = moe.constant dense<[0, 9223372036854775807]> : tensor<2xi64>
  %sax = moe.constant dense<[0, 1]> : tensor<2xi64>
  %e0row = moe.slice %acc, %sst, %sen axes %sax : (tensor<?x4xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0rs = moe.shape %e0row : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0ex = moe.expand %e0yw, %e0rs : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e0t1 = moe.unsqueeze %e0tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e0ys = moe.shape %e0ex : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0idx = moe.expand %e0t1, %e0ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e0as = moe.shape %acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e0z = moe.constant_of_shape %e0as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e0sc = moe.scatter_elements %e0z, %e0idx, %e0ex : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e0acc = moe.add %acc, %e0sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<2x2x?xi64>, tensor<i64>) -> tensor<2x?xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<2x?xi64>) -> tensor<2x?xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<2x?xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1slot = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tok = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1g = moe.gather %xu, %e1tok {axis = 1 : i64} : (tensor<1x?x4xf32>, tensor<?xi64>) -> tensor<1x?x4xf32>
  %e1in = moe.reshape %e1g, %rows : (tensor<1x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1tk = moe.mul %e1tok, %kk : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rw : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %e0acc : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %e0acc, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %e1acc : tensor<?x4xf32>
}
