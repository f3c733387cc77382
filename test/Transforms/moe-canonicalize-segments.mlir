// RUN: moec-opt %s --split-input-file --moe-canonicalize-segments | FileCheck %s

// Tests that a gather_nd by unsqueeze(ids, -1) (dynamo's and transformers'
// row gather) becomes a gather along axis 0 of the ids themselves.
// CHECK-LABEL: func.func @gather_nd_of_unsqueeze
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>, %[[IDS:.*]]: tensor<?xi64>)
// CHECK: %[[Y:.*]] = moe.gather %[[X]], %[[IDS]] : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
// CHECK-NOT: moe.gather_nd
// CHECK: return %[[Y]]
func.func @gather_nd_of_unsqueeze(%x: tensor<?x8xf32>, %ids: tensor<?xi64>) -> tensor<?x8xf32> {
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %i = moe.unsqueeze %ids, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %y = moe.gather_nd %x, %i : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that a gather_nd by any one-element index tuples becomes a gather of
// the squeezed indices, keeping the result type.
// CHECK-LABEL: func.func @gather_nd_of_tuples
// CHECK-SAME: (%[[W:.*]]: tensor<4x8x2xf32>, %[[I:.*]]: tensor<?x3x1xi64>)
// CHECK: %[[AXES:.*]] = moe.constant dense<2> : tensor<1xi64>
// CHECK: %[[S:.*]] = moe.squeeze %[[I]], %[[AXES]] : (tensor<?x3x1xi64>, tensor<1xi64>) -> tensor<?x3xi64>
// CHECK: %[[Y:.*]] = moe.gather %[[W]], %[[S]] : (tensor<4x8x2xf32>, tensor<?x3xi64>) -> tensor<?x3x8x2xf32>
// CHECK: return %[[Y]]
func.func @gather_nd_of_tuples(%w: tensor<4x8x2xf32>, %i: tensor<?x3x1xi64>) -> tensor<?x3x8x2xf32> {
  %y = moe.gather_nd %w, %i : (tensor<4x8x2xf32>, tensor<?x3x1xi64>) -> tensor<?x3x8x2xf32>
  return %y : tensor<?x3x8x2xf32>
}

// -----

// Tests that gather_nd with two-element index tuples or batch dimensions,
// which no single-axis gather computes, is left alone.
// CHECK-LABEL: func.func @gather_nd_kept
// CHECK: moe.gather_nd
// CHECK: moe.gather_nd
// CHECK-NOT: moe.gather %
func.func @gather_nd_kept(%x: tensor<4x8xf32>, %i: tensor<?x2xi64>, %b: tensor<4x1xi64>) -> (tensor<?xf32>, tensor<4xf32>) {
  %y = moe.gather_nd %x, %i : (tensor<4x8xf32>, tensor<?x2xi64>) -> tensor<?xf32>
  %z = moe.gather_nd %x, %b {batch_dims = 1 : i64} : (tensor<4x8xf32>, tensor<4x1xi64>) -> tensor<4xf32>
  return %y, %z : tensor<?xf32>, tensor<4xf32>
}

// -----

// Tests that transformers' inverse permutation, scatter_nd of range(0, N)
// into a vector at unsqueeze(perm, -1), becomes scatter_elements at perm.
// CHECK-LABEL: func.func @scatter_nd_vector
// CHECK-SAME: (%[[D:.*]]: tensor<?xi64>, %[[P:.*]]: tensor<?xi64>, %[[R:.*]]: tensor<?xi64>)
// CHECK: %[[Y:.*]] = moe.scatter_elements %[[D]], %[[P]], %[[R]] : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[Y]]
func.func @scatter_nd_vector(%d: tensor<?xi64>, %p: tensor<?xi64>, %r: tensor<?xi64>) -> tensor<?xi64> {
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %i = moe.unsqueeze %p, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %y = moe.scatter_nd %d, %i, %r : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  return %y : tensor<?xi64>
}

// -----

// Tests that the reduction of a vector scatter_nd is kept.
// CHECK-LABEL: func.func @scatter_nd_add
// CHECK: moe.scatter_elements {{.*}} {reduction = "add"}
func.func @scatter_nd_add(%d: tensor<4xf32>, %i: tensor<?x1xi64>, %u: tensor<?xf32>) -> tensor<4xf32> {
  %y = moe.scatter_nd %d, %i, %u {reduction = "add"} : (tensor<4xf32>, tensor<?x1xi64>, tensor<?xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a scatter_nd of whole rows into a matrix, whose
// scatter_elements form would need broadcast indices, is left alone.
// CHECK-LABEL: func.func @scatter_nd_rows
// CHECK: moe.scatter_nd
func.func @scatter_nd_rows(%d: tensor<4x8xf32>, %i: tensor<?x1xi64>, %u: tensor<?x8xf32>) -> tensor<4x8xf32> {
  %y = moe.scatter_nd %d, %i, %u : (tensor<4x8xf32>, tensor<?x1xi64>, tensor<?x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Tests that the per-expert ranges over the cum_sum of torch.bincount's
// histogram (reduce_sum of one_hot) of the stably sorted top-k ids become
// moe.segment of each expert, the ranges kept as fallbacks, and that a
// range whose start is not the previous end (expert 0's rows again) does
// not.
// CHECK-LABEL: func.func @bincount_segments
// CHECK: %[[SORTED:.*]], %{{.*}} = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[R0:.*]] = moe.range %{{.*}}, %[[E0:.*]], %{{.*}}
// CHECK: %[[S0:.*]] = moe.segment %[[SORTED]] expert 0 fallback %[[R0]] : tensor<?xi64>, tensor<?xi64>
// CHECK: %[[R1:.*]] = moe.range %[[E0]], %{{.*}}, %{{.*}}
// CHECK: %[[S1:.*]] = moe.segment %[[SORTED]] expert 1 fallback %[[R1]] : tensor<?xi64>, tensor<?xi64>
// CHECK: %[[BAD:.*]] = moe.range %{{.*}}, %{{.*}}, %{{.*}}
// CHECK-NOT: moe.segment
// CHECK: return %[[S0]], %[[S1]], %[[BAD]]
func.func @bincount_segments(%scores: tensor<?x2xf32>) -> (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %w, %ids = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %hot = moe.one_hot %sorted, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %hist = moe.reduce_sum %hot, %ax0 {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ends = moe.cum_sum %hist, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bad = moe.range %c0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return %seg0, %seg1, %bad : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>
}

// -----

// Tests that ranges over the histogram of ids that are not sorted (the
// flattened ids themselves) are not segments: the rows of an expert are then
// not contiguous.
// CHECK-LABEL: func.func @unsorted_ids
// CHECK-NOT: moe.segment
func.func @unsorted_ids(%scores: tensor<?x2xf32>) -> tensor<?xi64> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %depth = moe.constant dense<2> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %w, %ids = moe.top_k %scores, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %hot = moe.one_hot %flat, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %hist = moe.reduce_sum %hot, %ax0 {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ends = moe.cum_sum %hist, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return %seg0 : tensor<?xi64>
}
