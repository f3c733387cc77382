// RUN: moec-opt %s --split-input-file --moe-canonicalize-segments | FileCheck %s

// Tests DeepSeek-MoE's training path on the flattened top-k ids, without a
// sort: the rows of expert 1, nonzero(flat == 1), become perm at expert 1's
// moe.segment of a new stable sort of the flat ids, and the tokens repeated
// k times (repeat_interleave: unsqueeze, tile, reshape) read at those
// positions become the tokens gathered at perm / k, at the segment.
// CHECK-LABEL: func.func @flat_mask_positions
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>, %[[WR:.*]]: tensor<4x2xf32>)
// CHECK: %{{.*}}, %[[IDS:.*]] = moe.top_k
// CHECK: %[[FLAT:.*]] = moe.reshape %[[IDS]]
// CHECK: %[[N:.*]] = moe.dim %[[FLAT]], 0
// CHECK: %[[N1:.*]] = moe.unsqueeze %[[N]]
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k %[[FLAT]], %[[N1]] {axis = 0 : i64, largest = 0 : i64}
// CHECK: %[[TOK:.*]] = moe.div %[[PERM]], %{{.*}}
// CHECK: %[[ROWS:.*]] = moe.gather %[[X]], %[[TOK]]
// CHECK: %[[S1:.*]] = moe.segment %[[SORTED]] expert 1 fallback
// CHECK: %[[P1:.*]] = moe.gather %[[PERM]], %[[S1]]
// CHECK: %[[R1:.*]] = moe.gather %[[ROWS]], %[[S1]]
// CHECK-NOT: moe.tile
// CHECK: return %[[R1]], %[[P1]]
func.func @flat_mask_positions(%x: tensor<?x4xf32>, %wr: tensor<4x2xf32>) -> (tensor<?x4xf32>, tensor<?xi64>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %reps = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %th = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %x1 = moe.unsqueeze %x, %ax1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  %xk = moe.tile %x1, %reps : (tensor<?x1x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %xs = moe.reshape %xk, %th : (tensor<?x2x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %sel = moe.equal %flat, %c1 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %sel : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %pos = moe.squeeze %nzt, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %rows = moe.gather %xs, %pos : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  return %rows, %pos : tensor<?x4xf32>, tensor<?xi64>
}

// -----

// Tests that the positions of an expert among ids that are not provably
// expert indices (an argument, not a top-k's) are left alone: no sort is
// added.
// CHECK-LABEL: func.func @flat_mask_not_top_k
// CHECK-NOT: moe.top_k
// CHECK-NOT: moe.segment
// CHECK: moe.non_zero
func.func @flat_mask_not_top_k(%ids: tensor<?x2xi64>) -> tensor<?xi64> {
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %sel = moe.equal %flat, %c1 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %sel : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %pos = moe.squeeze %nzt, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  return %pos : tensor<?xi64>
}

// -----

// Tests that repeated rows of another matrix than the tokens the ids were
// chosen for (so not provably T*k rows) are still read at the sorted
// positions, not through perm / k.
// CHECK-LABEL: func.func @repeated_other_rows
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k {{.*}}largest = 0
// CHECK-NOT: moe.div
// CHECK: %[[S1:.*]] = moe.segment %[[SORTED]] expert 1 fallback
// CHECK: %[[P1:.*]] = moe.gather %[[PERM]], %[[S1]]
// CHECK: %[[R1:.*]] = moe.gather %{{.*}}, %[[P1]]
// CHECK: return %[[R1]]
func.func @repeated_other_rows(%x: tensor<?x4xf32>, %other: tensor<?x4xf32>, %wr: tensor<4x2xf32>) -> tensor<?x4xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %reps = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %th = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %x1 = moe.unsqueeze %other, %ax1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  %xk = moe.tile %x1, %reps : (tensor<?x1x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %xs = moe.reshape %xk, %th : (tensor<?x2x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %sel = moe.equal %flat, %c1 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz = moe.non_zero %sel : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt = moe.transpose %nz {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %pos = moe.squeeze %nzt, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %rows = moe.gather %xs, %pos : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  return %rows : tensor<?x4xf32>
}

// -----

// Tests DeepSeek-MoE's masked writes as dynamo exports them (the values
// expanded to [sum(mask), C] and flattened): y = zeros of the repeated
// tokens' shape; y[flat == e] = xs[flat == e] @ W[e] for both experts. The
// writes become row scatters at perm[segment(e)], and all of them the
// concatenation of the experts' rows put back by the inverse permutation;
// then the [T, k, H] view of it, typed [?, k, ?] from a computed shape, is
// retyped [?, k, H] with its sum over k.
// CHECK-LABEL: func.func @flat_masked_writes
// CHECK-DAG: %[[W0:.*]] = moe.constant dense<1.000000e+00> : tensor<4x4xf32>
// CHECK-DAG: %[[W1:.*]] = moe.constant dense<2.000000e+00> : tensor<4x4xf32>
// CHECK: %[[SORTED:.*]], %[[PERM:.*]] = moe.top_k {{.*}}largest = 0
// CHECK: %[[INV:.*]] = moe.scatter_elements %{{.*}}, %[[PERM]], %{{.*}} : (tensor<?xi64>, tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
// CHECK: %[[ROWS:.*]] = moe.gather %{{.*}}, %{{.*}} : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
// CHECK: %[[Y0:.*]] = moe.mat_mul %{{.*}}, %[[W0]]
// CHECK: %[[Y1:.*]] = moe.mat_mul %{{.*}}, %[[W1]]
// CHECK: %[[CAT:.*]] = moe.concat %[[Y0]], %[[Y1]] {axis = 0 : i64}
// CHECK: %[[Y:.*]] = moe.gather %[[CAT]], %[[INV]]
// CHECK: %[[Y3:.*]] = moe.reshape %[[Y]], %{{.*}} : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
// CHECK: %[[OUT:.*]] = moe.reduce_sum %[[Y3]], %{{.*}} {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
// CHECK-NOT: moe.scatter_nd
// CHECK: %[[R:.*]] = moe.add %[[OUT]], %{{.*}}
// CHECK: return %[[R]]
func.func @flat_masked_writes(%x: tensor<?x4xf32>, %wr: tensor<4x2xf32>) -> tensor<?x4xf32> {
  %w0 = moe.constant dense<1.000000e+00> : tensor<4x4xf32>
  %w1 = moe.constant dense<2.000000e+00> : tensor<4x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %cols = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %reps = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %th = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %x1 = moe.unsqueeze %x, %ax1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  %xk = moe.tile %x1, %reps : (tensor<?x1x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %xs = moe.reshape %xk, %th : (tensor<?x2x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %xshape = moe.shape %xs : (tensor<?x4xf32>) -> tensor<2xi64>
  %y = moe.expand %zero, %xshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  // Expert 0.
  %sel0 = moe.equal %flat, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz0 = moe.non_zero %sel0 : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %pos0 = moe.squeeze %nzt0, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %r0 = moe.gather %xs, %pos0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %v0 = moe.mat_mul %r0, %w0 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %m0 = moe.unsqueeze %sel0, %ax1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?x1xi1>
  %y0shape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %mask0 = moe.expand %m0, %y0shape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x4xi1>
  %at0 = moe.non_zero %mask0 : (tensor<?x4xi1>) -> tensor<2x?xi64>
  %at0t = moe.transpose %at0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %sel0f = moe.reshape %sel0, %m1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %sel0i = moe.cast %sel0f {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %cnt0 = moe.reduce_sum %sel0i : (tensor<?xi64>) -> tensor<1xi64>
  %v0shape = moe.concat %cnt0, %cols {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %v0e = moe.expand %v0, %v0shape : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %v0f = moe.reshape %v0e, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %y0 = moe.scatter_nd %y, %at0t, %v0f : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x4xf32>
  // Expert 1.
  %sel1 = moe.equal %flat, %c1 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz1 = moe.non_zero %sel1 : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt1 = moe.transpose %nz1 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %pos1 = moe.squeeze %nzt1, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %r1 = moe.gather %xs, %pos1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %v1 = moe.mat_mul %r1, %w1 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %m1b = moe.unsqueeze %sel1, %ax1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?x1xi1>
  %y1shape = moe.shape %y0 : (tensor<?x4xf32>) -> tensor<2xi64>
  %mask1 = moe.expand %m1b, %y1shape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x4xi1>
  %at1 = moe.non_zero %mask1 : (tensor<?x4xi1>) -> tensor<2x?xi64>
  %at1t = moe.transpose %at1 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %sel1f = moe.reshape %sel1, %m1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %sel1i = moe.cast %sel1f {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %cnt1 = moe.reduce_sum %sel1i : (tensor<?xi64>) -> tensor<1xi64>
  %v1shape = moe.concat %cnt1, %cols {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %v1e = moe.expand %v1, %v1shape : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %v1f = moe.reshape %v1e, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %y1 = moe.scatter_nd %y0, %at1t, %v1f : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x4xf32>
  // y.view(*w.shape, -1).sum(1), then a residual add.
  %t = moe.dim %w, 0 : tensor<?x2xf32>
  %t1 = moe.unsqueeze %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %tkshape = moe.concat %t1, %k, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %y3 = moe.reshape %y1, %tkshape : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x?xf32>
  %sum = moe.reduce_sum %y3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x?xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  %out = moe.add %sum, %x : (tensor<?x?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that when expert 0's rows are written twice (expert 1's never), the
// writes stay row scatters, without a concatenation; and that a view whose
// leading size is not the gate's tokens (an argument's rows) keeps its
// type.
// CHECK-LABEL: func.func @flat_masked_writes_twice
// CHECK-NOT: moe.concat
// CHECK: moe.scatter_nd {{.*}} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
// CHECK: moe.scatter_nd {{.*}} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
// CHECK: moe.reduce_sum {{.*}} -> tensor<?x?xf32>
func.func @flat_masked_writes_twice(%x: tensor<?x4xf32>, %wr: tensor<4x2xf32>, %other: tensor<?x4xf32>) -> tensor<?x?xf32> {
  %w0 = moe.constant dense<1.000000e+00> : tensor<4x4xf32>
  %w1 = moe.constant dense<2.000000e+00> : tensor<4x4xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %cols = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %reps = moe.constant dense<[1, 2, 1]> : tensor<3xi64>
  %th = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %x1 = moe.unsqueeze %x, %ax1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x1x4xf32>
  %xk = moe.tile %x1, %reps : (tensor<?x1x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %xs = moe.reshape %xk, %th : (tensor<?x2x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %xshape = moe.shape %xs : (tensor<?x4xf32>) -> tensor<2xi64>
  %y = moe.expand %zero, %xshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %sel0 = moe.equal %flat, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %nz0 = moe.non_zero %sel0 : (tensor<?xi1>) -> tensor<1x?xi64>
  %nzt0 = moe.transpose %nz0 {perm = array<i64: 1, 0>} : (tensor<1x?xi64>) -> tensor<?x1xi64>
  %pos0 = moe.squeeze %nzt0, %ax1 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %r0 = moe.gather %xs, %pos0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %v0 = moe.mat_mul %r0, %w0 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %v1 = moe.mat_mul %r0, %w1 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %m0 = moe.unsqueeze %sel0, %ax1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?x1xi1>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %mask0 = moe.expand %m0, %yshape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x4xi1>
  %at0 = moe.non_zero %mask0 : (tensor<?x4xi1>) -> tensor<2x?xi64>
  %at0t = moe.transpose %at0 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %sel0f = moe.reshape %sel0, %m1 : (tensor<?xi1>, tensor<1xi64>) -> tensor<?xi1>
  %sel0i = moe.cast %sel0f {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %cnt0 = moe.reduce_sum %sel0i : (tensor<?xi64>) -> tensor<1xi64>
  %v0shape = moe.concat %cnt0, %cols {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %v0e = moe.expand %v0, %v0shape : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %v0f = moe.reshape %v0e, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %y0 = moe.scatter_nd %y, %at0t, %v0f : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x4xf32>
  %y0shape = moe.shape %y0 : (tensor<?x4xf32>) -> tensor<2xi64>
  %mask1 = moe.expand %m0, %y0shape : (tensor<?x1xi1>, tensor<2xi64>) -> tensor<?x4xi1>
  %at1 = moe.non_zero %mask1 : (tensor<?x4xi1>) -> tensor<2x?xi64>
  %at1t = moe.transpose %at1 {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %v1e = moe.expand %v1, %v0shape : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %v1f = moe.reshape %v1e, %m1 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  %y1 = moe.scatter_nd %y0, %at1t, %v1f : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?xf32>) -> tensor<?x4xf32>
  %t = moe.dim %other, 0 : tensor<?x4xf32>
  %t1 = moe.unsqueeze %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %tkshape = moe.concat %t1, %k, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %y3 = moe.reshape %y1, %tkshape : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x?xf32>
  %sum = moe.reduce_sum %y3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x?xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  return %sum : tensor<?x?xf32>
}
