// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts | FileCheck %s

// Tests that makeMoE's rows, the tokens of `(ids == e).any(-1)` (TorchScript:
// a sum of the i64 mask over k, greater than 0), become the token column of
// the (token, slot) pairs of the expert's one-hot mask, and its weights, the
// routing matrix's column e read at the rows, become w[token, slot].
// CHECK-LABEL: func.func @any_rows
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>, %[[L:.*]]: tensor<?x8xf32>)
// CHECK: %[[V:.*]], %[[IDS:.*]] = moe.top_k %[[L]]
// CHECK: %[[ONEHOT:.*]] = moe.one_hot %[[IDS]]
// CHECK-NEXT: %[[MASK:.*]] = moe.transpose %[[ONEHOT]] {perm = array<i64: 2, 0, 1>}
// CHECK: %[[W:.*]] = moe.softmax %[[V]]
// CHECK: %[[SEL:.*]] = moe.gather %[[MASK]], %{{.*}} : (tensor<8x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
// CHECK: %[[HITS:.*]] = moe.cast %[[SEL]] {to = i1}
// CHECK: %[[NZ:.*]] = moe.non_zero %[[HITS]] : (tensor<?x2xi1>) -> tensor<2x?xi64>
// CHECK: %[[PAIRS:.*]] = moe.transpose %[[NZ]] {perm = array<i64: 1, 0>}
// CHECK: %[[TCOL:.*]] = moe.slice %[[PAIRS]]
// CHECK: %[[TOKEN:.*]] = moe.squeeze %[[TCOL]]
// CHECK: %[[ROWS:.*]] = moe.unsqueeze %[[TOKEN]]
// CHECK: %[[XR:.*]] = moe.gather_nd %[[X]], %[[ROWS]]
// CHECK: %[[SCOL:.*]] = moe.slice %[[PAIRS]]
// CHECK: %[[SLOT:.*]] = moe.squeeze %[[SCOL]]
// CHECK: %[[SU:.*]] = moe.unsqueeze %[[SLOT]]
// CHECK: %[[AT:.*]] = moe.concat %[[ROWS]], %[[SU]] {axis = 1 : i64}
// CHECK: %[[WT:.*]] = moe.gather_nd %[[W]], %[[AT]] : (tensor<?x2xf32>, tensor<?x2xi64>) -> tensor<?xf32>
// CHECK: %[[WC:.*]] = moe.unsqueeze %[[WT]]
// CHECK: moe.mul %[[XR]], %[[WC]]
// CHECK-NOT: moe.reduce_sum
// CHECK-NOT: moe.scatter_elements
func.func @any_rows(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>) -> tensor<?x16xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %logits : (tensor<?x8xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %sparse = moe.scatter_elements %fill, %ids, %v {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %gate = moe.softmax %sparse : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %hit = moe.equal %ids, %e1 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %sum = moe.reduce_sum %count, %last {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.greater %sum, %zero : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %xr = moe.gather_nd %x, %rows : (tensor<?x16xf32>, tensor<?x1xi64>) -> tensor<?x16xf32>
  %col = moe.gather %gate, %e1 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
  %wr = moe.gather_nd %col, %rows : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %wc = moe.unsqueeze %wr, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %y = moe.mul %xr, %wc : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests dynamo's any: the maximum of the i64 mask over k, cast to bool.
// CHECK-LABEL: func.func @any_rows_max
// CHECK: %[[NZ:.*]] = moe.non_zero %{{.*}} : (tensor<?x2xi1>) -> tensor<2x?xi64>
// CHECK: %[[PAIRS:.*]] = moe.transpose %[[NZ]] {perm = array<i64: 1, 0>}
// CHECK: %[[TCOL:.*]] = moe.slice %[[PAIRS]]
// CHECK: %[[TOKEN:.*]] = moe.squeeze %[[TCOL]]
// CHECK: %[[ROWS:.*]] = moe.unsqueeze %[[TOKEN]]
// CHECK: return %[[ROWS]]
func.func @any_rows_max(%logits: tensor<?x8xf32>) -> tensor<?x1xi64> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e3 = moe.constant dense<3> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %hit = moe.equal %ids, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %max = moe.reduce_max %count, %last {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.cast %max {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  return %rows : tensor<?x1xi64>
}

// -----

// Tests that indices not of a top-k are refused: a row may hold e twice,
// which the pairs would list twice.
// CHECK-LABEL: func.func @any_rows_not_topk
// CHECK: %[[NZ:.*]] = moe.non_zero %{{.*}} : (tensor<?xi1>) -> tensor<1x?xi64>
// CHECK-NEXT: %[[ROWS:.*]] = moe.transpose %[[NZ]]
// CHECK-NEXT: return %[[ROWS]]
func.func @any_rows_not_topk(%ids: tensor<?x2xi64>) -> tensor<?x1xi64> {
  %e3 = moe.constant dense<3> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %hit = moe.equal %ids, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %sum = moe.reduce_sum %count, %last {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.greater %sum, %zero : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  return %rows : tensor<?x1xi64>
}

// -----

// Tests that a count above 1 instead of above 0 (not an any) is refused.
// CHECK-LABEL: func.func @any_rows_threshold
// CHECK: moe.greater
// CHECK-NEXT: %[[NZ:.*]] = moe.non_zero %{{.*}} : (tensor<?xi1>) -> tensor<1x?xi64>
// CHECK-NEXT: %[[ROWS:.*]] = moe.transpose %[[NZ]]
// CHECK-NEXT: return %[[ROWS]]
func.func @any_rows_threshold(%logits: tensor<?x8xf32>) -> tensor<?x1xi64> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e3 = moe.constant dense<3> : tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %hit = moe.equal %ids, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %sum = moe.reduce_sum %count, %last {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.greater %sum, %one : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  return %rows : tensor<?x1xi64>
}

// -----

// Tests that a reduction over the tokens instead of the slots is refused.
// CHECK-LABEL: func.func @any_rows_over_tokens
// CHECK: moe.reduce_max
// CHECK: %[[NZ:.*]] = moe.non_zero %{{.*}} : (tensor<?xi1>) -> tensor<1x?xi64>
// CHECK-NEXT: %[[ROWS:.*]] = moe.transpose %[[NZ]]
// CHECK-NEXT: return %[[ROWS]]
func.func @any_rows_over_tokens(%logits: tensor<?x8xf32>) -> tensor<?x1xi64> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e3 = moe.constant dense<3> : tensor<i64>
  %first = moe.constant dense<0> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %hit = moe.equal %ids, %e3 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %max = moe.reduce_max %count, %first {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.cast %max {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  return %rows : tensor<?x1xi64>
}

// -----

// Tests that the routing matrix's column of another expert than the rows'
// is not read as the rows' slot weights.
// CHECK-LABEL: func.func @column_of_other_expert
// CHECK: %[[COL:.*]] = moe.gather %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
// CHECK: %[[WR:.*]] = moe.gather_nd %[[COL]], %{{.*}} : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
// CHECK: return %[[WR]]
func.func @column_of_other_expert(%logits: tensor<?x8xf32>) -> tensor<?xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e1 = moe.constant dense<1> : tensor<i64>
  %e2 = moe.constant dense<2> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %v, %ids = moe.top_k %logits, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %v : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %shape = moe.shape %logits : (tensor<?x8xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %shape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x8xf32>
  %r = moe.scatter_elements %zeros, %ids, %w {axis = -1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  %hit = moe.equal %ids, %e1 : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  %count = moe.cast %hit {to = i64} : (tensor<?x2xi1>) -> tensor<?x2xi64>
  %sum = moe.reduce_sum %count, %last {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %any = moe.greater %sum, %zero : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %any : (tensor<?xi1>) -> tensor<1x?xi64>
  %rows = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %col = moe.gather %r, %e2 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<i64>) -> tensor<?xf32>
  %wr = moe.gather_nd %col, %rows : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  return %wr : tensor<?xf32>
}
