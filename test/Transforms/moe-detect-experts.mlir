// RUN: moec-opt %s --split-input-file --moe-detect-experts -verify-diagnostics | FileCheck %s

// Tests that a renormalised top-2 per-expert SwiGLU loop (Mixtral) becomes
// router -> dispatch -> experts -> combine over stacked weights, and that the
// loop is erased.
// CHECK-LABEL: func.func @mixtral
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]]
// CHECK-DAG: %[[W1:.*]] = moe.constant dense_resource<{{.*}}> : tensor<2x4x8xf32>
// CHECK-DAG: %[[W3:.*]] = moe.constant dense_resource<{{.*}}> : tensor<2x4x8xf32>
// CHECK-DAG: %[[W2:.*]] = moe.constant dense_resource<{{.*}}> : tensor<2x8x4xf32>
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

// Tests that sigmoid scores (DeepSeek-V3 style) are a near-miss that stays
// generic with a remark.
// CHECK-LABEL: func.func @sigmoid_scores
// CHECK-NOT: moe.router
// CHECK: moe.scatter_elements
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
  // expected-remark @+1 {{MoE per-expert loop not detected: top-k input is not a softmax}}
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

// Tests that an activation other than SwiGLU is a near-miss naming the
// expert.
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
  // expected-remark @+1 {{: the activation is not SwiGLU (silu(x @ w1) * (x @ w3))}}
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
