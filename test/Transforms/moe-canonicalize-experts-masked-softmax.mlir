// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts | FileCheck %s

// Tests that makeMoE's gate, the top-2 logits scattered into -inf
// (TorchScript's constant_of_shape) and a softmax over every expert, becomes
// the softmax of the two logits scattered into zeros: the routing matrix.
// CHECK-LABEL: func.func @masked_softmax
// CHECK-SAME: (%[[L:.*]]: tensor<?x?x8xf32>)
// CHECK: %[[V:.*]], %[[IDS:.*]] = moe.top_k %[[L]]
// CHECK: %[[SHAPE:.*]] = moe.shape %[[L]]
// CHECK-NOT: moe.constant_of_shape
// CHECK: %[[W:.*]] = moe.softmax %[[V]] : (tensor<?x?x2xf32>) -> tensor<?x?x2xf32>
// CHECK-NEXT: %[[Z:.*]] = moe.constant_of_shape %[[SHAPE]] {value = dense<0.000000e+00> : tensor<1xf32>}
// CHECK: %[[R:.*]] = moe.scatter_elements %[[Z]], %[[IDS]], %[[W]] {axis = -1 : i64}
// CHECK-NOT: moe.softmax
// CHECK: return %[[R]]
func.func @masked_softmax(%logits: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x?x8xf32>, tensor<1xi64>) -> (tensor<?x?x2xf32>, tensor<?x?x2xi64>)
  %shape = moe.shape %logits : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<3xi64>) -> tensor<?x?x8xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = -1 : i64} : (tensor<?x?x8xf32>, tensor<?x?x2xi64>, tensor<?x?x2xf32>) -> tensor<?x?x8xf32>
  %gate = moe.softmax %sparse : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  return %gate : tensor<?x?x8xf32>
}

// -----

// Tests dynamo's form: the expand of a -inf scalar, on [T, E] with k = 1 and
// explicit axes.
// CHECK-LABEL: func.func @masked_softmax_expand
// CHECK: %[[V:.*]], %[[IDS:.*]] = moe.top_k
// CHECK: %[[SHAPE:.*]] = moe.shape
// CHECK-NOT: moe.expand
// CHECK: %[[W:.*]] = moe.softmax %[[V]] : (tensor<?x1xf32>)
// CHECK-NEXT: %[[Z:.*]] = moe.constant_of_shape %[[SHAPE]] {value = dense<0.000000e+00> : tensor<1xf32>}
// CHECK-NEXT: %[[R:.*]] = moe.scatter_elements %[[Z]], %[[IDS]], %[[W]] {axis = 1 : i64}
// CHECK: return %[[R]]
func.func @masked_softmax_expand(%logits: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<1> : tensor<1xi64>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %v, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %fill = moe.expand %ninf, %shape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %gate = moe.softmax %sparse {axis = 1 : i64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  return %gate : tensor<?x4xf32>
}

// -----

// Tests that a top-3 is refused: the sum of three exponentials over E would
// be taken in another order than over k.
// CHECK-LABEL: func.func @masked_softmax_top3
// CHECK: %[[S:.*]] = moe.scatter_elements %{{.*}}, %{{.*}}, %{{.*}} {axis = -1 : i64}
// CHECK-NEXT: %[[G:.*]] = moe.softmax %[[S]] :
// CHECK-NEXT: return %[[G]]
func.func @masked_softmax_top3(%logits: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %k = moe.constant dense<3> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x3xf32>, tensor<?x3xi64>)
  %shape = moe.shape %logits : (tensor<?x8xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x3xi64>, tensor<?x3xf32>) -> tensor<?x8xf32>
  %gate = moe.softmax %sparse : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %gate : tensor<?x8xf32>
}

// -----

// Tests that a finite fill (-1e9, a common stand-in for -inf) is refused:
// its exponentials are not zero when the logits are of its size.
// CHECK-LABEL: func.func @masked_softmax_finite_fill
// CHECK: %[[S:.*]] = moe.scatter_elements
// CHECK-NEXT: %[[G:.*]] = moe.softmax %[[S]] :
// CHECK-NEXT: return %[[G]]
func.func @masked_softmax_finite_fill(%logits: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %logits : (tensor<?x8xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<-1.0e+09> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %gate = moe.softmax %sparse : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %gate : tensor<?x8xf32>
}

// -----

// Tests that indices not of a top-k are refused: repeated indices would
// leave fewer than k entries, and another softmax.
// CHECK-LABEL: func.func @masked_softmax_not_topk
// CHECK: %[[S:.*]] = moe.scatter_elements
// CHECK-NEXT: %[[G:.*]] = moe.softmax %[[S]] :
// CHECK-NEXT: return %[[G]]
func.func @masked_softmax_not_topk(%logits: tensor<?x8xf32>, %ids: tensor<?x2xi64>, %v: tensor<?x2xf32>) -> tensor<?x8xf32> {
  %shape = moe.shape %logits : (tensor<?x8xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %gate = moe.softmax %sparse : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %gate : tensor<?x8xf32>
}

// -----

// Tests that a softmax along another axis than the scatter's is refused.
// CHECK-LABEL: func.func @masked_softmax_other_axis
// CHECK: %[[S:.*]] = moe.scatter_elements
// CHECK-NEXT: %[[G:.*]] = moe.softmax %[[S]] {axis = 0 : i64}
// CHECK-NEXT: return %[[G]]
func.func @masked_softmax_other_axis(%logits: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %logits : (tensor<?x8xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %gate = moe.softmax %sparse {axis = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %gate : tensor<?x8xf32>
}
