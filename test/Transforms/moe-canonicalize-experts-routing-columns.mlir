// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts | FileCheck %s

// Tests that a loop over the columns of a [T, E] routing matrix (top-k
// weights scattered into zeros; V-MoE's torch port, TorchScript form) finds
// expert e's rows as the token column of the (token, slot) pairs of the
// top-k's one-hot mask, and its weights as w[token, slot], the form
// moe-detect-experts proves; the column, its nonzero and the matrix die.
// CHECK-LABEL: func.func @routing_column
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>, %[[SCORES:.*]]: tensor<?x4xf32>)
// CHECK: %[[W:.*]], %[[IDS:.*]] = moe.top_k %[[SCORES]]
// CHECK-NEXT: %[[ONEHOT:.*]] = moe.one_hot %[[IDS]]
// CHECK-NEXT: %[[MASK:.*]] = moe.transpose %[[ONEHOT]] {perm = array<i64: 2, 0, 1>}
// CHECK: %[[SEL:.*]] = moe.gather %[[MASK]], %{{.*}} : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
// CHECK: %[[HITS:.*]] = moe.cast %[[SEL]] {to = i1}
// CHECK: %[[NZ:.*]] = moe.non_zero %[[HITS]] : (tensor<?x2xi1>) -> tensor<2x?xi64>
// CHECK: %[[PAIRS:.*]] = moe.transpose %[[NZ]] {perm = array<i64: 1, 0>}
// CHECK: %[[TCOL:.*]] = moe.slice %[[PAIRS]]
// CHECK: %[[TOKEN:.*]] = moe.squeeze %[[TCOL]]
// CHECK: %[[SCOL:.*]] = moe.slice %[[PAIRS]]
// CHECK: %[[SLOT:.*]] = moe.squeeze %[[SCOL]]
// CHECK: %[[TU:.*]] = moe.unsqueeze %[[TOKEN]]
// CHECK: %[[SU:.*]] = moe.unsqueeze %[[SLOT]]
// CHECK: %[[AT:.*]] = moe.concat %[[TU]], %[[SU]] {axis = 1 : i64}
// CHECK: %[[WT:.*]] = moe.gather_nd %[[W]], %[[AT]]
// CHECK: %[[ROWS:.*]] = moe.gather %[[X]], %[[TOKEN]]
// CHECK: %[[WC:.*]] = moe.unsqueeze %[[WT]]
// CHECK: moe.mul %[[ROWS]], %[[WC]]
// CHECK-NOT: moe.scatter_elements
// CHECK-NOT: moe.non_zero %{{.*}} : (tensor<?xf32>)
func.func @routing_column(%x: tensor<?x8xf32>, %scores: tensor<?x4xf32>) -> tensor<?x8xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %w, %ids = moe.top_k %scores, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %scores : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %r = moe.scatter_elements %zeros, %ids, %w {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %col = moe.gather %r, %e1 {axis = 1 : i64} : (tensor<?x4xf32>, tensor<i64>) -> tensor<?xf32>
  %nz = moe.non_zero %col : (tensor<?xf32>) -> tensor<1x?xi64>
  %t = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %rows = moe.squeeze %t, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %xr = moe.gather %x, %rows : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %wr = moe.gather %col, %rows : (tensor<?xf32>, tensor<?xi64>) -> tensor<?xf32>
  %wc = moe.unsqueeze %wr, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %y = moe.mul %xr, %wc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests dynamo's form: the weights read by gather_nd at rows[:, None].
// CHECK-LABEL: func.func @routing_column_gather_nd
// CHECK: %[[W:.*]], %[[IDS:.*]] = moe.top_k
// CHECK: %[[WT:.*]] = moe.gather_nd %[[W]], %{{.*}} : (tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?xf32>
// CHECK: return %[[WT]]
func.func @routing_column_gather_nd(%scores: tensor<?x4xf32>) -> tensor<?xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %w, %ids = moe.top_k %scores, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %scores : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %shape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %r = moe.scatter_elements %zeros, %ids, %w {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %col = moe.gather %r, %e1 {axis = 1 : i64} : (tensor<?x4xf32>, tensor<i64>) -> tensor<?xf32>
  %nz = moe.non_zero %col : (tensor<?xf32>) -> tensor<1x?xi64>
  %t = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %rows = moe.squeeze %t, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at = moe.unsqueeze %rows, %c1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wr = moe.gather_nd %col, %at : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  return %wr : tensor<?xf32>
}

// -----

// Tests that a matrix scattered into ones (entries of unrouted experts are
// not zero, so nonzero(R[:, e]) holds every token) is left alone.
// CHECK-LABEL: func.func @routing_column_not_zeros
// CHECK-NOT: moe.one_hot
// CHECK: moe.non_zero %{{.*}} : (tensor<?xf32>)
func.func @routing_column_not_zeros(%scores: tensor<?x4xf32>) -> tensor<?xi64> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %w, %ids = moe.top_k %scores, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %scores : (tensor<?x4xf32>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %shape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %r = moe.scatter_elements %ones, %ids, %w {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %col = moe.gather %r, %e1 {axis = 1 : i64} : (tensor<?x4xf32>, tensor<i64>) -> tensor<?xf32>
  %nz = moe.non_zero %col : (tensor<?xf32>) -> tensor<1x?xi64>
  %t = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %rows = moe.squeeze %t, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  return %rows : tensor<?xi64>
}

// -----

// Tests that a column read at other positions than its rows (here the whole
// column feeds a sum) is left alone: the rewrite would change those reads.
// CHECK-LABEL: func.func @routing_column_other_use
// CHECK-NOT: moe.one_hot
// CHECK: moe.non_zero %{{.*}} : (tensor<?xf32>)
func.func @routing_column_other_use(%scores: tensor<?x4xf32>) -> (tensor<?xi64>, tensor<1xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %w, %ids = moe.top_k %scores, %k : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %scores : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %r = moe.scatter_elements %zeros, %ids, %w {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %col = moe.gather %r, %e1 {axis = 1 : i64} : (tensor<?x4xf32>, tensor<i64>) -> tensor<?xf32>
  %nz = moe.non_zero %col : (tensor<?xf32>) -> tensor<1x?xi64>
  %t = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %rows = moe.squeeze %t, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %sum = moe.reduce_sum %col, %c0 : (tensor<?xf32>, tensor<1xi64>) -> tensor<1xf32>
  return %rows, %sum : tensor<?xi64>, tensor<1xf32>
}
