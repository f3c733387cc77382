// RUN: moec-opt %s --split-input-file --moe-canonicalize-segments | FileCheck %s

// Tests that Megatron-Core's per-expert slices rows[ends[e-1]:ends[e]] of
// the sorted tokens, over the cum_sum of a [T, E] routing map's sum over the
// tokens (torch scatter of ones at the top-k indices, counted in f32), become
// gathers of each expert's moe.segment of the sorted ids.
// CHECK-LABEL: func.func @routing_map_slices
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[ROWS:.*]] = moe.gather %{{.*}}, %{{.*}} : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
// CHECK: %[[S0:.*]] = moe.segment %[[SORTED]] expert 0 fallback %{{.*}}
// CHECK: %[[R0:.*]] = moe.gather %[[ROWS]], %[[S0]]
// CHECK: %[[S1:.*]] = moe.segment %[[SORTED]] expert 1 fallback %{{.*}}
// CHECK: %[[R1:.*]] = moe.gather %[[ROWS]], %[[S1]]
// CHECK-NOT: moe.slice
// CHECK: return %[[R0]], %[[R1]]
func.func @routing_map_slices(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %one1 = moe.constant dense<1> : tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 steps %one1 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 steps %one1 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  return %r0, %r1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Tests that a routing map filled with twos (so that its sum is not the
// histogram of the ids) leaves the slices alone, and so does a slice whose
// start is not the previous expert's end.
// CHECK-LABEL: func.func @routing_map_not_counts
// CHECK-NOT: moe.segment
// CHECK: moe.slice
// CHECK: moe.slice
// CHECK-NOT: moe.segment
func.func @routing_map_not_counts(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %two = moe.constant dense<2.000000e+00> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %twos = moe.expand %two, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %twos {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %map1 = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum1 = moe.reduce_sum %map1, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts1 = moe.cast %sum1 {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %ends1 = moe.cum_sum %counts1, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %f1 = moe.gather %ends1, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %f1v = moe.unsqueeze %f1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r1 = moe.slice %rows, %ax0, %f1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  return %r0, %r1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Tests that JetMoE's split of the sorted tokens by the routing map's counts
// (dynamo) becomes a gather of each expert's moe.segment.
// CHECK-LABEL: func.func @split_by_counts
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[S0:.*]] = moe.segment %[[SORTED]] expert 0 fallback %{{.*}}
// CHECK: %[[R0:.*]] = moe.gather %[[ROWS:.*]], %[[S0]]
// CHECK: %[[S1:.*]] = moe.segment %[[SORTED]] expert 1 fallback %{{.*}}
// CHECK: %[[R1:.*]] = moe.gather %[[ROWS]], %[[S1]]
// CHECK-NOT: moe.split
// CHECK: return %[[R0]], %[[R1]]
func.func @split_by_counts(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %lshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %imap = moe.cast %map {to = i64} : (tensor<?x2xf32>) -> tensor<?x2xi64>
  %counts = moe.reduce_sum %imap, %ax0 {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %one1 = moe.constant dense<1> : tensor<1xi64>
  %cc0 = moe.slice %counts, %ax0, %one1 axes %ax0 : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %cc1 = moe.slice %counts, %one1, %k axes %ax0 : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %cc0, %cc1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %parts:2 = moe.split %rows, %sizes : (tensor<?x4xf32>, tensor<2xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  return %parts#0, %parts#1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Tests that a split of the sorted tokens by the counts in another order
// (expert 1's count first), which is not the experts' segments, is kept.
// CHECK-LABEL: func.func @split_counts_reordered
// CHECK-NOT: moe.segment
// CHECK: moe.split
func.func @split_counts_reordered(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %lshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %imap = moe.cast %map {to = i64} : (tensor<?x2xf32>) -> tensor<?x2xi64>
  %counts = moe.reduce_sum %imap, %ax0 {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %one1 = moe.constant dense<1> : tensor<1xi64>
  %cc0 = moe.slice %counts, %ax0, %one1 axes %ax0 : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %cc1 = moe.slice %counts, %one1, %k axes %ax0 : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %cc1, %cc0 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %parts:2 = moe.split %rows, %sizes : (tensor<?x4xf32>, tensor<2xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  return %parts#0, %parts#1 : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Tests JetMoE's masked assignment (TorchScript): out = zeros; out[sorted
// == e] = rows[sorted == e] @ W[e] for each expert, the index_put's element
// scatter by the expanded boolean mask. nonzero(sorted == e) becomes the
// moe.segment of e, each write a row scatter, and the writes of every
// expert's segment into zeros the concatenation of the experts' rows.
// CHECK-LABEL: func.func @masked_rows
// CHECK-DAG: %[[W0:.*]] = moe.constant dense<1.000000e+00> : tensor<4x3xf32>
// CHECK-DAG: %[[W1:.*]] = moe.constant dense<2.000000e+00> : tensor<4x3xf32>
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[ROWS:.*]] = moe.gather %{{.*}}, %{{.*}} : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
// CHECK: %[[S0:.*]] = moe.segment %[[SORTED]] expert 0 fallback
// CHECK: %[[G0:.*]] = moe.gather %[[ROWS]], %[[S0]]
// CHECK: %[[P0:.*]] = moe.mat_mul %[[G0]], %[[W0]]
// CHECK: %[[S1:.*]] = moe.segment %[[SORTED]] expert 1 fallback
// CHECK: %[[G1:.*]] = moe.gather %[[ROWS]], %[[S1]]
// CHECK: %[[P1:.*]] = moe.mat_mul %[[G1]], %[[W1]]
// CHECK: %[[OUT:.*]] = moe.concat %[[P0]], %[[P1]] {axis = 0 : i64}
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[OUT]]
func.func @masked_rows(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> tensor<?x3xf32> {
  %w0 = moe.constant dense<1.000000e+00> : tensor<4x3xf32>
  %w1 = moe.constant dense<2.000000e+00> : tensor<4x3xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %cols = moe.constant dense<3> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %len = moe.dim %rows, 0 : tensor<?x4xf32>
  %len1 = moe.unsqueeze %len, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %oshape = moe.concat %len1, %cols {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %oshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x3xf32>
  // Expert 0.
  %sel0 = moe.equal %sorted, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz0 = moe.non_zero %sel0 : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %i0 = moe.squeeze %nzt0, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g0 = moe.gather %rows, %i0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %p0 = moe.mat_mul %g0, %w0 : (tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
  %m0 = moe.unsqueeze %sel0, %ax1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?x1xi1>
  %z0shape = moe.shape %zeros : (tensor<?x3xf32>) -> tensor<2xi64>
  %mask0 = moe.expand %m0, %z0shape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x3xi1>
  %at0 = moe.non_zero %mask0 : (tensor<?x3xi1>) -> tensor<2x?xi64>
  %at0t = moe.transpose %at0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %f0 = moe.reshape %p0, %m1 : (tensor<?x3xf32>, tensor<1xi64>) -> tensor<?xf32>
  %cnt0 = moe.dim %at0, 1 : tensor<2x?xi64>
  %cnt0v = moe.unsqueeze %cnt0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %v0 = moe.slice %f0, %ax0, %cnt0v axes %ax0 : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %out0 = moe.scatter_nd %zeros, %at0t, %v0 : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x3xf32>
  // Expert 1.
  %sel1 = moe.equal %sorted, %c1 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz1 = moe.non_zero %sel1 : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt1 = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %i1 = moe.squeeze %nzt1, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g1 = moe.gather %rows, %i1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %p1 = moe.mat_mul %g1, %w1 : (tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
  %m1b = moe.unsqueeze %sel1, %ax1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?x1xi1>
  %z1shape = moe.shape %out0 : (tensor<?x3xf32>) -> tensor<2xi64>
  %mask1 = moe.expand %m1b, %z1shape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x3xi1>
  %at1 = moe.non_zero %mask1 : (tensor<?x3xi1>) -> tensor<2x?xi64>
  %at1t = moe.transpose %at1 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %f1 = moe.reshape %p1, %m1 : (tensor<?x3xf32>, tensor<1xi64>) -> tensor<?xf32>
  %cnt1 = moe.dim %at1, 1 : tensor<2x?xi64>
  %cnt1v = moe.unsqueeze %cnt1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %v1 = moe.slice %f1, %ax0, %cnt1v axes %ax0 : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %out1 = moe.scatter_nd %out0, %at1t, %v1 : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x3xf32>
  return %out1 : tensor<?x3xf32>
}

// -----

// Tests that when only expert 0's rows are written (expert 1's rows of the
// zeros stay zero), the write becomes a row scatter of expert 0's segment
// but no concatenation; and that values computed from other rows than the
// masked ones (all the sorted rows) keep the element scatter.
// CHECK-LABEL: func.func @masked_rows_partial
// CHECK: %[[SORTED:.*]], %{{.*}} = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[S0:.*]] = moe.segment %[[SORTED]] expert 0 fallback
// CHECK: %[[C0:.*]] = moe.unsqueeze %[[S0]], %{{.*}} : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
// CHECK: %[[OUT0:.*]] = moe.scatter_nd %{{.*}}, %[[C0]], %{{.*}} : (tensor<?x3xf32>, tensor<?x1xi64>, tensor<?x3xf32>) -> tensor<?x3xf32>
// CHECK-NOT: moe.concat
// CHECK: %[[OUT1:.*]] = moe.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x3xf32>
// CHECK: return %[[OUT0]], %[[OUT1]]
func.func @masked_rows_partial(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> (tensor<?x3xf32>, tensor<?x3xf32>) {
  %w0 = moe.constant dense<1.000000e+00> : tensor<4x3xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %cols = moe.constant dense<3> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %len = moe.dim %rows, 0 : tensor<?x4xf32>
  %len1 = moe.unsqueeze %len, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %oshape = moe.concat %len1, %cols {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %oshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x3xf32>
  %sel0 = moe.equal %sorted, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz0 = moe.non_zero %sel0 : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %i0 = moe.squeeze %nzt0, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %g0 = moe.gather %rows, %i0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %p0 = moe.mat_mul %g0, %w0 : (tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
  %m0 = moe.unsqueeze %sel0, %ax1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?x1xi1>
  %z0shape = moe.shape %zeros : (tensor<?x3xf32>) -> tensor<2xi64>
  %mask0 = moe.expand %m0, %z0shape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x3xi1>
  %at0 = moe.non_zero %mask0 : (tensor<?x3xi1>) -> tensor<2x?xi64>
  %at0t = moe.transpose %at0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %f0 = moe.reshape %p0, %m1 : (tensor<?x3xf32>, tensor<1xi64>) -> tensor<?xf32>
  %cnt0 = moe.dim %at0, 1 : tensor<2x?xi64>
  %cnt0v = moe.unsqueeze %cnt0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %v0 = moe.slice %f0, %ax0, %cnt0v axes %ax0 : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %out0 = moe.scatter_nd %zeros, %at0t, %v0 : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x3xf32>
  // All the sorted rows' values, sliced to the mask's count: not the
  // masked rows.
  %all = moe.mat_mul %rows, %w0 : (tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
  %fa = moe.reshape %all, %m1 : (tensor<?x3xf32>, tensor<1xi64>) -> tensor<?xf32>
  %va = moe.slice %fa, %ax0, %cnt0v axes %ax0 : (tensor<?xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?xf32>
  %out1 = moe.scatter_nd %zeros, %at0t, %va : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x3xf32>
  return %out0, %out1 : tensor<?x3xf32>, tensor<?x3xf32>
}

// -----

// Tests Megatron-Core's unpermute: the concatenated expert rows y (the
// sorted order) scatter-added at repeat(perm, H) into zeros of y's shape,
// then reshaped to [T, k, H] and scaled by the [T, k] routing weights. It
// becomes the segments form: y scaled by the sorted weights, put back by
// the inverse permutation (scatter of range(0, N) at perm).
// CHECK-LABEL: func.func @unpermute
// CHECK: %[[W:.*]], %[[IDS:.*]] = moe.top_k %{{.*}}, %{{.*}} {axis = 1 : i64}
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[N:.*]] = moe.dim %[[PERM]], 0
// CHECK: %[[IOTA:.*]] = moe.range %{{.*}}, %[[N]], %{{.*}}
// CHECK: %[[INV:.*]] = moe.scatter_elements %{{.*}}, %[[PERM]], %[[IOTA]] : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
// CHECK: %[[Y:.*]] = moe.concat
// CHECK: %[[WF:.*]] = moe.reshape %[[W]], %{{.*}} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
// CHECK: %[[WS:.*]] = moe.gather %[[WF]], %[[PERM]]
// CHECK: %[[WC:.*]] = moe.unsqueeze %[[WS]], %{{.*}} : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
// CHECK: %[[YW:.*]] = moe.mul %[[Y]], %[[WC]]
// CHECK: %[[Z:.*]] = moe.gather %[[YW]], %[[INV]]
// CHECK: %[[Z3:.*]] = moe.reshape %[[Z]], %{{.*}} : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
// CHECK: %[[OUT:.*]] = moe.reduce_sum %[[Z3]]
// CHECK-NOT: reduction = "add"
// CHECK: return %[[OUT]]
func.func @unpermute(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> tensor<?x4xf32> {
  %wa = moe.constant dense<1.000000e+00> : tensor<4x4xf32>
  %wb = moe.constant dense<2.000000e+00> : tensor<4x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %y0 = moe.mat_mul %r0, %wa : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %y1 = moe.mat_mul %r1, %wb : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %un, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %wcol = moe.unsqueeze %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %scaled = moe.mul %un3, %wcol : (tensor<?x2x4xf32>, tensor<?x2x1xf32>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %scaled, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that a scatter-add at repeat(perm, H) of rows that are not the
// sorted rows (a function argument, of any length) is kept.
// CHECK-LABEL: func.func @unpermute_other_rows
// CHECK: moe.scatter_elements {{.*}} {reduction = "add"}
// CHECK-NOT: moe.range
func.func @unpermute_other_rows(%y: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %un : tensor<?x4xf32>
}

// -----

// Tests JetMoE's unsort: the sorted rows u scatter-added at repeat(perm / k,
// H) into zeros of the tokens' shape (index_add into [T, H]) becomes the sum
// over k of u put back by the inverse permutation.
// CHECK-LABEL: func.func @token_scatter
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[INV:.*]] = moe.scatter_elements %{{.*}}, %[[PERM]], %{{.*}} : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
// CHECK: %[[ROWS:.*]] = moe.gather %[[X]]
// CHECK: %[[Z:.*]] = moe.gather %[[ROWS]], %[[INV]]
// CHECK: %[[Z3:.*]] = moe.reshape %[[Z]], %{{.*}} : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
// CHECK: %[[OUT:.*]] = moe.reduce_sum %[[Z3]], %{{.*}} {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
// CHECK: return %[[OUT]]
func.func @token_scatter(%x: tensor<?x4xf32>, %wr: tensor<4x2xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %xshape = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %xshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %tcol = moe.unsqueeze %tok, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %tidx = moe.tile %tcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %out = moe.scatter_elements %zeros, %tidx, %rows {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that the same scatter-add into zeros of another matrix's shape (not
// provably the T tokens the ids were chosen for) is kept.
// CHECK-LABEL: func.func @token_scatter_other_zeros
// CHECK: moe.scatter_elements {{.*}} {reduction = "add"}
// CHECK-NOT: moe.reduce_sum
func.func @token_scatter_other_zeros(%x: tensor<?x4xf32>, %wr: tensor<4x2xf32>, %other: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %oshape = moe.shape %other : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %oshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %tcol = moe.unsqueeze %tok, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %tidx = moe.tile %tcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %out = moe.scatter_elements %zeros, %tidx, %rows {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests the unpermute followed by the weights per row (moe-canonicalize-
// idioms' form of the weights after the view: y * unsqueeze(flatten(w), 1)
// on the [T*k, H] rows): the weights are moved before the unpermute alike.
// CHECK-LABEL: func.func @unpermute_rows_weights
// CHECK: %[[W:.*]], %[[IDS:.*]] = moe.top_k %{{.*}}, %{{.*}} {axis = 1 : i64}
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %{{.*}}, %{{.*}} {largest = 0 : i64}
// CHECK: %[[INV:.*]] = moe.scatter_elements %{{.*}}, %[[PERM]], %{{.*}} : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
// CHECK: %[[Y:.*]] = moe.concat
// CHECK: %[[WF:.*]] = moe.reshape %[[W]], %{{.*}} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
// CHECK: %[[WS:.*]] = moe.gather %[[WF]], %[[PERM]]
// CHECK: %[[WC:.*]] = moe.unsqueeze %[[WS]]
// CHECK: %[[YW:.*]] = moe.mul %[[Y]], %[[WC]]
// CHECK: %[[Z:.*]] = moe.gather %[[YW]], %[[INV]]
// CHECK: %[[Z3:.*]] = moe.reshape %[[Z]]
// CHECK: %[[OUT:.*]] = moe.reduce_sum %[[Z3]]
// CHECK: return %[[OUT]]
func.func @unpermute_rows_weights(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>) -> tensor<?x4xf32> {
  %wa = moe.constant dense<1.000000e+00> : tensor<4x4xf32>
  %wb = moe.constant dense<2.000000e+00> : tensor<4x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %y0 = moe.mat_mul %r0, %wa : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %y1 = moe.mat_mul %r1, %wb : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %wcol = moe.unsqueeze %wflat, %ax1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %scaled = moe.mul %un, %wcol : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %scaled, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %un3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that weights of another [T, k] matrix than the gate's (an argument,
// of any row count) stay after the unpermute.
// CHECK-LABEL: func.func @unpermute_rows_other_weights
// CHECK: %[[INV:.*]] = moe.scatter_elements %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
// CHECK: %[[Z:.*]] = moe.gather %{{.*}}, %[[INV]]
// CHECK: moe.mul %[[Z]], %{{.*}} : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
func.func @unpermute_rows_other_weights(%x: tensor<?x4xf32>, %logits: tensor<?x2xf32>, %v: tensor<?x2xf32>) -> tensor<?x4xf32> {
  %wa = moe.constant dense<1.000000e+00> : tensor<4x4xf32>
  %wb = moe.constant dense<2.000000e+00> : tensor<4x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %y0 = moe.mat_mul %r0, %wa : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %y1 = moe.mat_mul %r1, %wb : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %wflat = moe.reshape %v, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %wcol = moe.unsqueeze %wflat, %ax1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %scaled = moe.mul %un, %wcol : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %scaled, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %un3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}
