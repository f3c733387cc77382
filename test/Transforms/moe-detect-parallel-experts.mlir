// RUN: moec-opt %s --split-input-file --moe-detect-parallel-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that the Granite parallel-experts form (top-k on the logits, softmax
// over k; stable sort of the flattened expert ids; tokens and weights
// gathered in sorted order; a split by the in-graph per-expert counts; one
// projection per expert with its own weight; scatter_nd add into zeros)
// becomes router -> dispatch -> experts -> combine, with the per-expert
// weights stacked in place (layout out_in, concatenated gate/up), and that
// the sort, the splits and the projections are erased.
// CHECK-LABEL: func.func @granite
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-DAG: %[[A0:.*]] = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
// CHECK-DAG: %[[A1:.*]] = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
// CHECK-DAG: %[[A2:.*]] = moe.constant dense<3.750000e-01> : tensor<4x4xf32>
// CHECK-DAG: %[[B0:.*]] = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
// CHECK-DAG: %[[B1:.*]] = moe.constant dense<6.250000e-01> : tensor<4x2xf32>
// CHECK-DAG: %[[B2:.*]] = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
// CHECK: %[[LOGITS:.*]] = moe.gemm %[[X]]
// CHECK: %[[W13:.*]] = moe.stack %[[A0]], %[[A1]], %[[A2]] : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<3x4x4xf32>
// CHECK: %[[W2:.*]] = moe.stack %[[B0]], %[[B1]], %[[B2]] : (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<3x4x2xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax after_topk : tensor<?x3xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 3
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x4xf32>, tensor<4xi64> w1 %[[W13]] : tensor<3x4x4xf32> w2 %[[W2]] : tensor<3x4x2xf32> layout out_in glu concatenated
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.top_k
// CHECK-NOT: moe.split
// CHECK-NOT: moe.scatter_nd
// CHECK: return %[[OUT]]
func.func @granite(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<3x4xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %a2 = moe.constant dense<3.750000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<6.250000e-01> : tensor<4x2xf32>
  %b2 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %ki = moe.constant dense<2> : tensor<i64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %kf = moe.constant dense<2.000000e+00> : tensor<f32>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %h = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x3xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %t = moe.dim %x, 0 : tensor<?x4xf32>
  %t1 = moe.reshape %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %mshape = moe.concat %t1, %c3 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %mzeros = moe.expand %zero, %mshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x3xf32>
  %ishape = moe.shape %indices : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %mask = moe.scatter_elements %mzeros, %indices, %ones {axis = 1 : i64} : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x3xf32>
  %maski = moe.cast %mask {to = i64} : (tensor<?x3xf32>) -> tensor<?x3xi64>
  %counts = moe.reduce_sum %maski, %c0 {keepdims = 0 : i64} : (tensor<?x3xi64>, tensor<1xi64>) -> tensor<3xi64>
  %s0 = moe.slice %counts, %c0, %c1 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.slice %counts, %c1, %c2 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s2 = moe.slice %counts, %c2, %c3 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %s0, %s1, %s2 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %fi = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %fi, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %c1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %fi, %n1 {axis = 0 : i64, largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %pf = moe.cast %perm {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %q = moe.div %pf, %kf : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %qa = moe.abs %q : (tensor<?xf32>) -> tensor<?xf32>
  %qf = moe.floor %qa : (tensor<?xf32>) -> tensor<?xf32>
  %qs = moe.sign %q : (tensor<?xf32>) -> tensor<?xf32>
  %qt = moe.mul %qf, %qs : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %tok = moe.cast %qt {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %wf = moe.reshape %w, %m1 {allowzero = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %tc = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pc = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rw = moe.gather_nd %wf, %pc : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %xs = moe.gather_nd %x, %tc : (tensor<?x4xf32>, tensor<?x1xi64>) -> tensor<?x4xf32>
  %p:3 = moe.split %xs, %sizes : (tensor<?x4xf32>, tensor<3xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %h0 = moe.gemm %p#0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h1 = moe.gemm %p#1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h2 = moe.gemm %p#2, %a2 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %hc = moe.concat %h0, %h1, %h2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gu:2 = moe.split %hc {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %sg = moe.sigmoid %gu#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu = moe.mul %gu#0, %sg : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %q3:3 = moe.split %act, %sizes : (tensor<?x2xf32>, tensor<3xi64>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
  %y0 = moe.gemm %q3#0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y1 = moe.gemm %q3#1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y2 = moe.gemm %q3#2, %b2 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %yc = moe.concat %y0, %y1, %y2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %rwc = moe.unsqueeze %rw, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yc, %rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %oshape = moe.concat %t1, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ozeros = moe.expand %zero, %oshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %out = moe.scatter_nd %ozeros, %tc, %yw {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that the form with an integer division for the rows' tokens, Gather
// instead of GatherND, [in, out] weights applied by MatMul (layout in_out)
// and an Expand of the updates to their own shape is detected too.
// CHECK-LABEL: func.func @granite_in_out
// CHECK: moe.stack {{.*}} -> tensor<3x4x4xf32>
// CHECK: moe.stack {{.*}} -> tensor<3x2x4xf32>
// CHECK: moe.router %{{.*}} top 2 softmax after_topk : tensor<?x3xf32>
// CHECK: moe.experts silu_glu {{.*}} w1 %{{.*}} : tensor<3x4x4xf32> w2 %{{.*}} : tensor<3x2x4xf32> layout in_out glu concatenated
// CHECK-NOT: moe.scatter_nd
func.func @granite_in_out(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<3x4xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %a2 = moe.constant dense<3.750000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<5.000000e-01> : tensor<2x4xf32>
  %b1 = moe.constant dense<6.250000e-01> : tensor<2x4xf32>
  %b2 = moe.constant dense<7.500000e-01> : tensor<2x4xf32>
  %ki = moe.constant dense<2> : tensor<i64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %kf = moe.constant dense<2.000000e+00> : tensor<f32>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %h = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x3xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %t = moe.dim %x, 0 : tensor<?x4xf32>
  %t1 = moe.reshape %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %mshape = moe.concat %t1, %c3 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %mzeros = moe.expand %zero, %mshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x3xf32>
  %ishape = moe.shape %indices : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %mask = moe.scatter_elements %mzeros, %indices, %ones {axis = 1 : i64} : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x3xf32>
  %maski = moe.cast %mask {to = i64} : (tensor<?x3xf32>) -> tensor<?x3xi64>
  %counts = moe.reduce_sum %maski, %c0 {keepdims = 0 : i64} : (tensor<?x3xi64>, tensor<1xi64>) -> tensor<3xi64>
  %s0 = moe.slice %counts, %c0, %c1 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.slice %counts, %c1, %c2 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s2 = moe.slice %counts, %c2, %c3 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %s0, %s1, %s2 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %fi = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %fi, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %c1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %fi, %n1 {axis = 0 : i64, largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %ki : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %wf = moe.reshape %w, %m1 {allowzero = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %tc = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rw = moe.gather %wf, %perm : (tensor<?xf32>, tensor<?xi64>) -> tensor<?xf32>
  %xs = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %p:3 = moe.split %xs, %sizes : (tensor<?x4xf32>, tensor<3xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %h0 = moe.mat_mul %p#0, %a0 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h1 = moe.mat_mul %p#1, %a1 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h2 = moe.mat_mul %p#2, %a2 : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %hc = moe.concat %h0, %h1, %h2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gu:2 = moe.split %hc {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %sg = moe.sigmoid %gu#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu = moe.mul %gu#0, %sg : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %q3:3 = moe.split %act, %sizes : (tensor<?x2xf32>, tensor<3xi64>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
  %y0 = moe.mat_mul %q3#0, %b0 : (tensor<?x2xf32>, tensor<2x4xf32>) -> tensor<?x4xf32>
  %y1 = moe.mat_mul %q3#1, %b1 : (tensor<?x2xf32>, tensor<2x4xf32>) -> tensor<?x4xf32>
  %y2 = moe.mat_mul %q3#2, %b2 : (tensor<?x2xf32>, tensor<2x4xf32>) -> tensor<?x4xf32>
  %yc = moe.concat %y0, %y1, %y2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %rwc = moe.unsqueeze %rw, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yc, %rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %oshape = moe.concat %t1, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ozeros = moe.expand %zero, %oshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %nshape = moe.shape %tok : (tensor<?xi64>) -> tensor<1xi64>
  %ushape = moe.concat %nshape, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ywe = moe.expand %yw, %ushape : (tensor<?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %out = moe.scatter_nd %ozeros, %tc, %ywe {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that a descending sort of the expert ids (groups in the wrong order
// for the per-expert split) stays generic with a remark.
// CHECK-LABEL: func.func @descending_sort
// CHECK-NOT: moe.router
// CHECK: moe.scatter_nd
func.func @descending_sort(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<3x4xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %a2 = moe.constant dense<3.750000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<6.250000e-01> : tensor<4x2xf32>
  %b2 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %ki = moe.constant dense<2> : tensor<i64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %kf = moe.constant dense<2.000000e+00> : tensor<f32>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %h = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  // expected-remark @below {{MoE parallel experts not detected: the flattened assignments are not sorted by expert (ascending top-k over all of them)}}
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x3xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %t = moe.dim %x, 0 : tensor<?x4xf32>
  %t1 = moe.reshape %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %mshape = moe.concat %t1, %c3 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %mzeros = moe.expand %zero, %mshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x3xf32>
  %ishape = moe.shape %indices : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %mask = moe.scatter_elements %mzeros, %indices, %ones {axis = 1 : i64} : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x3xf32>
  %maski = moe.cast %mask {to = i64} : (tensor<?x3xf32>) -> tensor<?x3xi64>
  %counts = moe.reduce_sum %maski, %c0 {keepdims = 0 : i64} : (tensor<?x3xi64>, tensor<1xi64>) -> tensor<3xi64>
  %s0 = moe.slice %counts, %c0, %c1 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.slice %counts, %c1, %c2 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s2 = moe.slice %counts, %c2, %c3 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %s0, %s1, %s2 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %fi = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %fi, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %c1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %fi, %n1 {axis = 0 : i64, largest = 1 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %pf = moe.cast %perm {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %q = moe.div %pf, %kf : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %qa = moe.abs %q : (tensor<?xf32>) -> tensor<?xf32>
  %qf = moe.floor %qa : (tensor<?xf32>) -> tensor<?xf32>
  %qs = moe.sign %q : (tensor<?xf32>) -> tensor<?xf32>
  %qt = moe.mul %qf, %qs : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %tok = moe.cast %qt {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %wf = moe.reshape %w, %m1 {allowzero = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %tc = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pc = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rw = moe.gather_nd %wf, %pc : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %xs = moe.gather_nd %x, %tc : (tensor<?x4xf32>, tensor<?x1xi64>) -> tensor<?x4xf32>
  %p:3 = moe.split %xs, %sizes : (tensor<?x4xf32>, tensor<3xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %h0 = moe.gemm %p#0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h1 = moe.gemm %p#1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h2 = moe.gemm %p#2, %a2 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %hc = moe.concat %h0, %h1, %h2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gu:2 = moe.split %hc {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %sg = moe.sigmoid %gu#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu = moe.mul %gu#0, %sg : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %q3:3 = moe.split %act, %sizes : (tensor<?x2xf32>, tensor<3xi64>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
  %y0 = moe.gemm %q3#0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y1 = moe.gemm %q3#1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y2 = moe.gemm %q3#2, %b2 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %yc = moe.concat %y0, %y1, %y2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %rwc = moe.unsqueeze %rw, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yc, %rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %oshape = moe.concat %t1, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ozeros = moe.expand %zero, %oshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %out = moe.scatter_nd %ozeros, %tc, %yw {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that split sizes that are not the per-expert counts in expert order
// stay generic with a remark.
// CHECK-LABEL: func.func @permuted_sizes
// CHECK-NOT: moe.router
// CHECK: moe.scatter_nd
func.func @permuted_sizes(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<3x4xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %a2 = moe.constant dense<3.750000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<6.250000e-01> : tensor<4x2xf32>
  %b2 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %ki = moe.constant dense<2> : tensor<i64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %kf = moe.constant dense<2.000000e+00> : tensor<f32>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %h = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  // expected-remark @below {{MoE parallel experts not detected: the split sizes are not the per-expert counts in expert order}}
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x3xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %t = moe.dim %x, 0 : tensor<?x4xf32>
  %t1 = moe.reshape %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %mshape = moe.concat %t1, %c3 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %mzeros = moe.expand %zero, %mshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x3xf32>
  %ishape = moe.shape %indices : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %mask = moe.scatter_elements %mzeros, %indices, %ones {axis = 1 : i64} : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x3xf32>
  %maski = moe.cast %mask {to = i64} : (tensor<?x3xf32>) -> tensor<?x3xi64>
  %counts = moe.reduce_sum %maski, %c0 {keepdims = 0 : i64} : (tensor<?x3xi64>, tensor<1xi64>) -> tensor<3xi64>
  %s0 = moe.slice %counts, %c0, %c1 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.slice %counts, %c1, %c2 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s2 = moe.slice %counts, %c2, %c3 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %s1, %s0, %s2 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %fi = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %fi, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %c1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %fi, %n1 {axis = 0 : i64, largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %pf = moe.cast %perm {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %q = moe.div %pf, %kf : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %qa = moe.abs %q : (tensor<?xf32>) -> tensor<?xf32>
  %qf = moe.floor %qa : (tensor<?xf32>) -> tensor<?xf32>
  %qs = moe.sign %q : (tensor<?xf32>) -> tensor<?xf32>
  %qt = moe.mul %qf, %qs : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %tok = moe.cast %qt {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %wf = moe.reshape %w, %m1 {allowzero = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %tc = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pc = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rw = moe.gather_nd %wf, %pc : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %xs = moe.gather_nd %x, %tc : (tensor<?x4xf32>, tensor<?x1xi64>) -> tensor<?x4xf32>
  %p:3 = moe.split %xs, %sizes : (tensor<?x4xf32>, tensor<3xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %h0 = moe.gemm %p#0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h1 = moe.gemm %p#1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h2 = moe.gemm %p#2, %a2 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %hc = moe.concat %h0, %h1, %h2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gu:2 = moe.split %hc {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %sg = moe.sigmoid %gu#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu = moe.mul %gu#0, %sg : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %q3:3 = moe.split %act, %sizes : (tensor<?x2xf32>, tensor<3xi64>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
  %y0 = moe.gemm %q3#0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y1 = moe.gemm %q3#1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y2 = moe.gemm %q3#2, %b2 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %yc = moe.concat %y0, %y1, %y2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %rwc = moe.unsqueeze %rw, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yc, %rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %oshape = moe.concat %t1, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ozeros = moe.expand %zero, %oshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %out = moe.scatter_nd %ozeros, %tc, %yw {reduction = "add"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that writing the expert outputs without accumulation (the wrong
// TorchScript lowering of index_add: the last of a token's k rows wins)
// stays generic with a remark.
// CHECK-LABEL: func.func @no_accumulation
// CHECK-NOT: moe.router
// CHECK: moe.scatter_nd
func.func @no_accumulation(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<3x4xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %a2 = moe.constant dense<3.750000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<6.250000e-01> : tensor<4x2xf32>
  %b2 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %ki = moe.constant dense<2> : tensor<i64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %kf = moe.constant dense<2.000000e+00> : tensor<f32>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %h = moe.constant dense<4> : tensor<1xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  // expected-remark @below {{MoE parallel experts not detected: the weighted expert outputs are not added into the output rows (scatter_nd with reduction add)}}
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x3xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %values {axis = 1 : i64} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %t = moe.dim %x, 0 : tensor<?x4xf32>
  %t1 = moe.reshape %t, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %mshape = moe.concat %t1, %c3 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %mzeros = moe.expand %zero, %mshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x3xf32>
  %ishape = moe.shape %indices : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %ishape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %mask = moe.scatter_elements %mzeros, %indices, %ones {axis = 1 : i64} : (tensor<?x3xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x3xf32>
  %maski = moe.cast %mask {to = i64} : (tensor<?x3xf32>) -> tensor<?x3xi64>
  %counts = moe.reduce_sum %maski, %c0 {keepdims = 0 : i64} : (tensor<?x3xi64>, tensor<1xi64>) -> tensor<3xi64>
  %s0 = moe.slice %counts, %c0, %c1 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.slice %counts, %c1, %c2 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %s2 = moe.slice %counts, %c2, %c3 axes %c0 : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %sizes = moe.concat %s0, %s1, %s2 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %fi = moe.reshape %indices, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %fi, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %c1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %fi, %n1 {axis = 0 : i64, largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %pf = moe.cast %perm {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %q = moe.div %pf, %kf : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %qa = moe.abs %q : (tensor<?xf32>) -> tensor<?xf32>
  %qf = moe.floor %qa : (tensor<?xf32>) -> tensor<?xf32>
  %qs = moe.sign %q : (tensor<?xf32>) -> tensor<?xf32>
  %qt = moe.mul %qf, %qs : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %tok = moe.cast %qt {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %wf = moe.reshape %w, %m1 {allowzero = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %tc = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pc = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rw = moe.gather_nd %wf, %pc : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %xs = moe.gather_nd %x, %tc : (tensor<?x4xf32>, tensor<?x1xi64>) -> tensor<?x4xf32>
  %p:3 = moe.split %xs, %sizes : (tensor<?x4xf32>, tensor<3xi64>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>)
  %h0 = moe.gemm %p#0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h1 = moe.gemm %p#1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %h2 = moe.gemm %p#2, %a2 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %hc = moe.concat %h0, %h1, %h2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gu:2 = moe.split %hc {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %sg = moe.sigmoid %gu#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu = moe.mul %gu#0, %sg : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %q3:3 = moe.split %act, %sizes : (tensor<?x2xf32>, tensor<3xi64>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2xf32>)
  %y0 = moe.gemm %q3#0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y1 = moe.gemm %q3#1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y2 = moe.gemm %q3#2, %b2 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %yc = moe.concat %y0, %y1, %y2 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %rwc = moe.unsqueeze %rw, %c1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yc, %rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %oshape = moe.concat %t1, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ozeros = moe.expand %zero, %oshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x4xf32>
  %out = moe.scatter_nd %ozeros, %tc, %yw {reduction = "none"} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}
