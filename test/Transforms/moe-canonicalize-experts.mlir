// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts | FileCheck %s

// Tests that `ids == e` for top-k indices over 8 experts becomes the slice e
// of one [E, T, k] one-hot mask, made once after the top-k and shared by
// both experts.
// CHECK-LABEL: func.func @expert_equality
// CHECK-DAG: %[[VALUES:.*]] = moe.constant dense<[0, 1]> : tensor<2xi64>
// CHECK-DAG: %[[DEPTH:.*]] = moe.constant dense<8> : tensor<i64>
// CHECK: %{{.*}}, %[[IDS:.*]] = moe.top_k
// CHECK-NEXT: %[[ONEHOT:.*]] = moe.one_hot %[[IDS]], %[[DEPTH]], %[[VALUES]] {{.*}} -> tensor<?x2x8xi64>
// CHECK-NEXT: %[[MASK:.*]] = moe.transpose %[[ONEHOT]] {perm = array<i64: 2, 0, 1>} : (tensor<?x2x8xi64>) -> tensor<8x?x2xi64>
// CHECK: %[[ROW3:.*]] = moe.gather %[[MASK]], %{{.*}} {{.*}} -> tensor<?x2xi64>
// CHECK: moe.cast %[[ROW3]] {to = i1}
// CHECK: %[[ROW5:.*]] = moe.gather %[[MASK]], %{{.*}} {{.*}} -> tensor<?x2xi64>
// CHECK: moe.cast %[[ROW5]] {to = i1}
// CHECK-NOT: moe.one_hot
// CHECK-NOT: moe.equal
func.func @expert_equality(%scores: tensor<?x8xf32>) -> (tensor<?x2xi1>, tensor<?x2xi1>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e3 = moe.constant dense<3> : tensor<i64>
  %e5 = moe.constant dense<5> : tensor<i64>
  %v, %i = moe.top_k %scores, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %a = moe.equal %i, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %b = moe.equal %e5, %i : (tensor<i64>, tensor<?x2xi64>) -> tensor<?x2xi1>
  return %a, %b : tensor<?x2xi1>, tensor<?x2xi1>
}

// -----

// Tests that an equality with an index outside [0, E), or of values that
// are not top-k indices, stays as it is: it is no expert's slice of a mask.
// CHECK-LABEL: func.func @not_an_expert
// CHECK-NOT: moe.one_hot
// CHECK-COUNT-2: moe.equal
func.func @not_an_expert(%scores: tensor<?x8xf32>, %ids: tensor<?x2xi64>) -> (tensor<?x2xi1>, tensor<?x2xi1>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e8 = moe.constant dense<8> : tensor<i64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %v, %i = moe.top_k %scores, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %a = moe.equal %i, %e8 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %b = moe.equal %ids, %e1 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  return %a, %b : tensor<?x2xi1>, tensor<?x2xi1>
}

// -----

// Tests that GELU's tanh approximation written out as opset 18 exports
// write it, 0.5 * (x * (1 + tanh(c * (x + 0.044715 * x * x * x)))), becomes
// moe.gelu "tanh" and its ops are erased.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-NEXT: %[[G:.*]] = moe.gelu %[[X]] {approximate = "tanh"}
// CHECK-NEXT: return %[[G]]
func.func @gelu_tanh(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %half = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %c = moe.constant dense<0.797884583> : tensor<f32>
  %a = moe.constant dense<4.471500e-02> : tensor<f32>
  %x2 = moe.mul %x, %x : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %x3 = moe.mul %x, %x2 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %ax3 = moe.mul %a, %x3 : (tensor<f32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %inner = moe.add %x, %ax3 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %scaled = moe.mul %c, %inner : (tensor<f32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %t = moe.tanh %scaled : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %onePlus = moe.add %one, %t : (tensor<f32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %xp = moe.mul %x, %onePlus : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y = moe.mul %half, %xp : (tensor<f32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that the exact GELU written out, x * 0.5 * (1 + erf(x / sqrt(2))),
// also as a factor of a larger product (GeGLU's gelu(g) * u), becomes
// moe.gelu "none".
// CHECK-LABEL: func.func @gelu_erf_in_product
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>, %[[U:.*]]: tensor<?x8xf32>)
// CHECK-NEXT: %[[G:.*]] = moe.gelu %[[X]] : (tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %[[Y:.*]] = moe.mul %[[G]], %[[U]]
// CHECK-NEXT: return %[[Y]]
func.func @gelu_erf_in_product(%x: tensor<?x8xf32>, %u: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %half = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %sqrt2 = moe.constant dense<1.41421354> : tensor<f32>
  %d = moe.div %x, %sqrt2 : (tensor<?x8xf32>, tensor<f32>) -> tensor<?x8xf32>
  %e = moe.erf %d : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %onePlus = moe.add %e, %one : (tensor<?x8xf32>, tensor<f32>) -> tensor<?x8xf32>
  %xh = moe.mul %x, %half : (tensor<?x8xf32>, tensor<f32>) -> tensor<?x8xf32>
  %g = moe.mul %xh, %onePlus : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %y = moe.mul %g, %u : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that a near miss, a factor 0.6 where GELU has 0.5, stays as it is.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: moe.gelu
// CHECK: moe.erf
func.func @not_gelu(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %notHalf = moe.constant dense<6.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %sqrt2 = moe.constant dense<1.41421354> : tensor<f32>
  %d = moe.div %x, %sqrt2 : (tensor<?x8xf32>, tensor<f32>) -> tensor<?x8xf32>
  %e = moe.erf %d : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %onePlus = moe.add %e, %one : (tensor<?x8xf32>, tensor<f32>) -> tensor<?x8xf32>
  %xh = moe.mul %x, %notHalf : (tensor<?x8xf32>, tensor<f32>) -> tensor<?x8xf32>
  %g = moe.mul %xh, %onePlus : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %g : tensor<?x8xf32>
}

// -----

// Tests that `acc[rows] += u` exported as a read-modify-write scatter_nd,
// with rows = torch.where(ids == 3)[0] (distinct: top-k indices are distinct
// within a row), becomes acc + scatter_elements(zeros, rows, u), the
// index_add form.
// CHECK-LABEL: func.func @read_modify_write
// CHECK-SAME: (%{{.*}}: tensor<?x8xf32>, %[[ACC:.*]]: tensor<?x4xf32>, %[[U:.*]]: tensor<?x4xf32>)
// CHECK-NOT: moe.scatter_nd
// CHECK: %[[ZEROS:.*]] = moe.constant_of_shape
// CHECK: %[[IDX:.*]] = moe.expand
// CHECK: %[[SCATTERED:.*]] = moe.scatter_elements %[[ZEROS]], %[[IDX]], %[[U]]
// CHECK: %[[SUM:.*]] = moe.add %[[ACC]], %[[SCATTERED]]
// CHECK: return %[[SUM]]
func.func @read_modify_write(%scores: tensor<?x8xf32>, %acc: tensor<?x4xf32>, %u: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e3 = moe.constant dense<3> : tensor<i64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %v, %i = moe.top_k %scores, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %hit = moe.equal %i, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %nz = moe.non_zero %hit : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %cols:2 = moe.split %pairs, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %rows = moe.squeeze %cols#0, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %read = moe.gather %acc, %rows : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %sum = moe.add %read, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx = moe.unsqueeze %rows, %c1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %out = moe.scatter_nd %acc, %idx, %sum : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that the same read-modify-write with rows nothing proves distinct
// (an input) stays a scatter_nd: with a repeated row it keeps only one
// update, where index_add would add both.
// CHECK-LABEL: func.func @rows_maybe_repeated
// CHECK: moe.scatter_nd
// CHECK-NOT: moe.scatter_elements
func.func @rows_maybe_repeated(%acc: tensor<?x4xf32>, %u: tensor<?x4xf32>, %rows: tensor<?xi64>) -> tensor<?x4xf32> {
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %read = moe.gather %acc, %rows : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %sum = moe.add %read, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx = moe.unsqueeze %rows, %c1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %out = moe.scatter_nd %acc, %idx, %sum : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests dynamo's spelling of the same write: the rows are the slice [0, 1)
// of the pairs' columns and acc[rows] is a gather_nd at rows[:, None].
// CHECK-LABEL: func.func @read_modify_write_dynamo
// CHECK-SAME: (%{{.*}}: tensor<?x8xf32>, %[[ACC:.*]]: tensor<?x4xf32>, %[[U:.*]]: tensor<?x4xf32>)
// CHECK-NOT: moe.scatter_nd
// CHECK: %[[SCATTERED:.*]] = moe.scatter_elements %{{.*}}, %{{.*}}, %[[U]]
// CHECK: %[[SUM:.*]] = moe.add %[[ACC]], %[[SCATTERED]]
// CHECK: return %[[SUM]]
func.func @read_modify_write_dynamo(%scores: tensor<?x8xf32>, %acc: tensor<?x4xf32>, %u: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e3 = moe.constant dense<3> : tensor<i64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %cm1 = moe.constant dense<-1> : tensor<1xi64>
  %v, %i = moe.top_k %scores, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %hit = moe.equal %i, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %nz = moe.non_zero %hit : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %pairs = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %col = moe.slice %pairs, %c0, %c1 axes %c1 : (tensor<?x2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.squeeze %col, %c1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %idx = moe.unsqueeze %rows, %cm1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %read = moe.gather_nd %acc, %idx : (tensor<?x4xf32>, tensor<?x1xi64>) -> tensor<?x4xf32>
  %sum = moe.add %read, %u : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %out = moe.scatter_nd %acc, %idx, %sum : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}
