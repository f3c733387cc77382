// RUN: moec-opt %s --split-input-file --moe-canonicalize-idioms | FileCheck %s

// Tests that dynamo's row gather of stacked weights, GatherND by
// unsqueeze(ids, -1), becomes Gather(W, ids) along axis 0.
// CHECK-LABEL: func.func @gather_nd_of_unsqueezed
// CHECK-SAME: (%[[W:.*]]: tensor<4x8x6xf32>, %[[IDS:.*]]: tensor<?xi64>)
// CHECK: %[[G:.*]] = moe.gather %[[W]], %[[IDS]] : (tensor<4x8x6xf32>, tensor<?xi64>) -> tensor<?x8x6xf32>
// CHECK-NOT: moe.gather_nd
// CHECK: return %[[G]]
func.func @gather_nd_of_unsqueezed(%w: tensor<4x8x6xf32>, %ids: tensor<?xi64>) -> tensor<?x8x6xf32> {
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %col = moe.unsqueeze %ids, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %g = moe.gather_nd %w, %col : (tensor<4x8x6xf32>, tensor<?x1xi64>) -> tensor<?x8x6xf32>
  return %g : tensor<?x8x6xf32>
}

// -----

// Tests that a GatherND whose trailing index dimension of size 1 is not an
// unsqueeze gathers by the squeezed indices.
// CHECK-LABEL: func.func @gather_nd_of_column
// CHECK: %[[S:.*]] = moe.squeeze %{{.*}}, %{{.*}} : (tensor<?x2x1xi64>, tensor<1xi64>) -> tensor<?x2xi64>
// CHECK: moe.gather %{{.*}}, %[[S]] : (tensor<4x6xf32>, tensor<?x2xi64>) -> tensor<?x2x6xf32>
// CHECK-NOT: moe.gather_nd
func.func @gather_nd_of_column(%w: tensor<4x6xf32>, %ids: tensor<?x2x1xi64>) -> tensor<?x2x6xf32> {
  %g = moe.gather_nd %w, %ids : (tensor<4x6xf32>, tensor<?x2x1xi64>) -> tensor<?x2x6xf32>
  return %g : tensor<?x2x6xf32>
}

// -----

// Tests that GatherND with index tuples of two (which index two dimensions)
// or with batch dimensions stays as it is.
// CHECK-LABEL: func.func @gather_nd_kept
// CHECK: moe.gather_nd %{{.*}}, %{{.*}} :
// CHECK: moe.gather_nd %{{.*}}, %{{.*}} {batch_dims = 1 : i64}
// CHECK-NOT: moe.gather
func.func @gather_nd_kept(%w: tensor<4x8x6xf32>, %pairs: tensor<?x2xi64>, %b: tensor<4x1xi64>) -> (tensor<?x6xf32>, tensor<4x6xf32>) {
  %g = moe.gather_nd %w, %pairs : (tensor<4x8x6xf32>, tensor<?x2xi64>) -> tensor<?x6xf32>
  %h = moe.gather_nd %w, %b {batch_dims = 1 : i64} : (tensor<4x8x6xf32>, tensor<4x1xi64>) -> tensor<4x6xf32>
  return %g, %h : tensor<?x6xf32>, tensor<4x6xf32>
}

// -----

// Tests that repeat_interleave as dynamo writes it, Expand of a size-1
// dimension to k, becomes Tile with repeats [1, k, 1].
// CHECK-LABEL: func.func @expand_repeat
// CHECK: %[[R:.*]] = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
// CHECK: %[[T:.*]] = moe.tile %{{.*}}, %[[R]] : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
// CHECK-NOT: moe.expand
// CHECK: return %[[T]]
func.func @expand_repeat(%x: tensor<?x1x8xf32>) -> tensor<?x2x8xf32> {
  %s = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %e = moe.expand %x, %s : (tensor<?x1x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  return %e : tensor<?x2x8xf32>
}

// -----

// Tests that an Expand that may broadcast a dynamic dimension (its run-time
// size decides), one that adds dimensions, and one of a computed shape stay.
// CHECK-LABEL: func.func @expand_kept
// CHECK-COUNT-3: moe.expand
// CHECK-NOT: moe.tile
func.func @expand_kept(%x: tensor<?x8xf32>, %y: tensor<8xf32>, %shape: tensor<2xi64>) -> (tensor<?x8xf32>, tensor<3x8xf32>, tensor<?x?xf32>) {
  %s = moe.constant dense<[3, 8]> : tensor<2xi64>
  %a = moe.expand %x, %s : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %b = moe.expand %y, %s : (tensor<8xf32>, tensor<2xi64>) -> tensor<3x8xf32>
  %c = moe.expand %x, %shape : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  return %a, %b, %c : tensor<?x8xf32>, tensor<3x8xf32>, tensor<?x?xf32>
}

// -----

// Tests that a squeeze of the axis an unsqueeze inserted is removed, and
// that a squeeze of another size-1 axis stays.
// CHECK-LABEL: func.func @squeeze_of_unsqueeze
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>, %[[Y:.*]]: tensor<?x1x8xf32>)
// CHECK: %[[U:.*]] = moe.unsqueeze %[[Y]]
// CHECK: %[[S:.*]] = moe.squeeze %[[U]]
// CHECK: return %[[X]], %[[S]]
func.func @squeeze_of_unsqueeze(%x: tensor<?x8xf32>, %y: tensor<?x1x8xf32>) -> (tensor<?x8xf32>, tensor<1x?x8xf32>) {
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %m2 = moe.constant dense<-2> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %u = moe.unsqueeze %x, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %s = moe.squeeze %u, %m2 : (tensor<?x1x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  %u0 = moe.unsqueeze %y, %c0 : (tensor<?x1x8xf32>, tensor<1xi64>) -> tensor<1x?x1x8xf32>
  %s2 = moe.squeeze %u0, %c2 : (tensor<1x?x1x8xf32>, tensor<1xi64>) -> tensor<1x?x8xf32>
  return %s, %s2 : tensor<?x8xf32>, tensor<1x?x8xf32>
}

// -----

// Tests that routing weights applied after the expert rows are viewed per
// token, reshape(y, [T, k, H]) * unsqueeze(w, -1), become the weights
// applied per row before the view, as the stacked form writes them.
// CHECK-LABEL: func.func @weights_after_view
// CHECK-SAME: (%[[Y:.*]]: tensor<?x8xf32>, %[[W:.*]]: tensor<?x2xf32>)
// CHECK: %[[FLAT:.*]] = moe.reshape %[[W]], %{{.*}} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
// CHECK: %[[COL:.*]] = moe.unsqueeze %[[FLAT]], %{{.*}} : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
// CHECK: %[[ROWS:.*]] = moe.mul %[[Y]], %[[COL]] : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK: %[[VIEW:.*]] = moe.reshape %[[ROWS]], %{{.*}} : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
// CHECK: return %[[VIEW]]
func.func @weights_after_view(%y: tensor<?x8xf32>, %w: tensor<?x2xf32>) -> tensor<?x2x8xf32> {
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %yk = moe.reshape %y, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %wc = moe.unsqueeze %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %out = moe.mul %wc, %yk : (tensor<?x2x1xf32>, tensor<?x2x8xf32>) -> tensor<?x2x8xf32>
  return %out : tensor<?x2x8xf32>
}

// -----

// Tests that weights broadcast along the choices (unsqueezed at axis 1, so
// w[t, h] scales every choice) are not routing weights per (token, choice):
// the product stays as written.
// CHECK-LABEL: func.func @weights_over_hidden
// CHECK: %[[VIEW:.*]] = moe.reshape
// CHECK: moe.mul %[[VIEW]]
func.func @weights_over_hidden(%y: tensor<?x8xf32>, %w: tensor<?x8xf32>) -> tensor<?x2x8xf32> {
  %tkh = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %yk = moe.reshape %y, %tkh : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %wc = moe.unsqueeze %w, %c1 : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x1x8xf32>
  %out = moe.mul %yk, %wc : (tensor<?x2x8xf32>, tensor<?x1x8xf32>) -> tensor<?x2x8xf32>
  return %out : tensor<?x2x8xf32>
}
