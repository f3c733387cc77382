// RUN: moec-opt %s --split-input-file --moe-detect-capacity-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that Switch as t5x writes it (logits flattened to [T, E], arg-max of
// the softmax, priority = cumsum(one_hot) * one_hot - 1, dispatch =
// (priority == arange(C)) * one_hot, combine = scores * dispatch, stacked
// [E, H, F] einsum experts around a ReLU) becomes a top-1 router with the
// graph's capacity 3, dispatch, the stacked weights as exported (in_out) and
// a combine without pass-through (dropped tokens give 0), and that the dense
// [T, E, C] ops are erased.
// CHECK-LABEL: func.func @switch_t5x
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-DAG: %[[WI:.*]] = moe.constant dense<1.250000e-01> : tensor<4x8x16xf32>
// CHECK-DAG: %[[WO:.*]] = moe.constant dense<5.000000e-01> : tensor<4x16x8xf32>
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]]
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 1 softmax capacity 3 : tensor<?x4xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[Y:.*]] = moe.experts relu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %[[WI]] : tensor<4x8x16xf32> w2 %[[WO]] : tensor<4x16x8xf32> layout in_out
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]] : tensor<?x8xf32>, tensor<?xi64>, tensor<?x1xf32>
// CHECK-NOT: moe.einsum
// CHECK-NOT: moe.cum_sum
// CHECK: return %[[OUT]]
func.func @switch_t5x(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %wi = moe.constant dense<1.250000e-01> : tensor<4x8x16xf32>
  %wo = moe.constant dense<5.000000e-01> : tensor<4x16x8xf32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i32>
  %one = moe.constant dense<1> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %a1 = moe.constant dense<1> : tensor<1xi64>
  %a2 = moe.constant dense<2> : tensor<1xi64>
  %slots = moe.constant dense<[0, 1, 2]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx = moe.arg_max %probs {axis = -1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask = moe.one_hot %idx, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum = moe.cum_sum %mask, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %counted = moe.mul %cum, %mask : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %shifted = moe.sub %counted, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %priority = moe.reduce_max %shifted, %last {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %p1 = moe.unsqueeze %priority, %a1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %p2 = moe.unsqueeze %p1, %a2 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?x1x1xi64>
  %hit = moe.equal %p2, %slots : (tensor<?x1x1xi64>, tensor<3xi64>) -> tensor<?x1x3xi1>
  %slot = moe.cast %hit {to = f32} : (tensor<?x1x3xi1>) -> tensor<?x1x3xf32>
  %m3 = moe.unsqueeze %mask, %a2 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?x4x1xi64>
  %column = moe.cast %m3 {to = f32} : (tensor<?x4x1xi64>) -> tensor<?x4x1xf32>
  %dispatch = moe.mul %slot, %column : (tensor<?x1x3xf32>, tensor<?x4x1xf32>) -> tensor<?x4x3xf32>
  %p3 = moe.unsqueeze %probs, %a2 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %combine = moe.mul %p3, %dispatch : (tensor<?x4x1xf32>, tensor<?x4x3xf32>) -> tensor<?x4x3xf32>
  %in = moe.einsum %x, %dispatch {equation = "th,tec->ech"} : (tensor<?x8xf32>, tensor<?x4x3xf32>) -> tensor<4x3x8xf32>
  %h = moe.einsum %in, %wi {equation = "ech,ehf->ecf"} : (tensor<4x3x8xf32>, tensor<4x8x16xf32>) -> tensor<4x3x16xf32>
  %a = moe.relu %h : (tensor<4x3x16xf32>) -> tensor<4x3x16xf32>
  %y = moe.einsum %a, %wo {equation = "ecf,efh->ech"} : (tensor<4x3x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %out = moe.einsum %y, %combine {equation = "ech,tec->th"} : (tensor<4x3x8xf32>, tensor<?x4x3xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests the same Switch layer as dynamo writes it: the one-hot as an
// equality with arange(E), both unsqueezes in one op, other einsum letters.
// CHECK-LABEL: func.func @switch_t5x_dynamo
// CHECK: moe.router %{{.*}} top 1 softmax capacity 3 : tensor<?x4xf32>
// CHECK: moe.experts relu
// CHECK-NOT: moe.einsum
func.func @switch_t5x_dynamo(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %wi = moe.constant dense<1.250000e-01> : tensor<4x8x16xf32>
  %wo = moe.constant dense<5.000000e-01> : tensor<4x16x8xf32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i32>
  %one = moe.constant dense<1> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %a1 = moe.constant dense<1> : tensor<1xi64>
  %a2 = moe.constant dense<2> : tensor<1xi64>
  %slots = moe.constant dense<[0, 1, 2]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx = moe.arg_max %probs {axis = -1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %experts = moe.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %iu = moe.unsqueeze %idx, %last : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %is = moe.equal %iu, %experts : (tensor<?x1xi64>, tensor<4xi64>) -> tensor<?x4xi1>
  %mask = moe.cast %is {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %cum = moe.cum_sum %mask, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %counted = moe.mul %cum, %mask : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %shifted = moe.sub %counted, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %priority = moe.reduce_max %shifted, %last {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %a12 = moe.constant dense<[1, 2]> : tensor<2xi64>
  %p2 = moe.unsqueeze %priority, %a12 : (tensor<?xi64>, tensor<2xi64>) -> tensor<?x1x1xi64>
  %hit = moe.equal %p2, %slots : (tensor<?x1x1xi64>, tensor<3xi64>) -> tensor<?x1x3xi1>
  %slot = moe.cast %hit {to = f32} : (tensor<?x1x3xi1>) -> tensor<?x1x3xf32>
  %m3 = moe.unsqueeze %mask, %a2 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?x4x1xi64>
  %column = moe.cast %m3 {to = f32} : (tensor<?x4x1xi64>) -> tensor<?x4x1xf32>
  %dispatch = moe.mul %slot, %column : (tensor<?x1x3xf32>, tensor<?x4x1xf32>) -> tensor<?x4x3xf32>
  %p3 = moe.unsqueeze %probs, %a2 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %combine = moe.mul %p3, %dispatch : (tensor<?x4x1xf32>, tensor<?x4x3xf32>) -> tensor<?x4x3xf32>
  %in = moe.einsum %x, %dispatch {equation = "sm,sec->ecm"} : (tensor<?x8xf32>, tensor<?x4x3xf32>) -> tensor<4x3x8xf32>
  %h = moe.einsum %in, %wi {equation = "ech,ehf->ecf"} : (tensor<4x3x8xf32>, tensor<4x8x16xf32>) -> tensor<4x3x16xf32>
  %a = moe.relu %h : (tensor<4x3x16xf32>) -> tensor<4x3x16xf32>
  %y = moe.einsum %a, %wo {equation = "ecf,efh->ech"} : (tensor<4x3x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %out = moe.einsum %y, %combine {equation = "ech,tec->th"} : (tensor<4x3x8xf32>, tensor<?x4x3xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that GShard's top-2 gating as DeepSpeed writes it (second choice by
// the arg-max of the logits without the first, second slots after every
// first choice, capacity 2, gates renormalised over the kept choices with
// clamp(min = eps), combine [S, E, C], dispatch = combine != 0, each
// expert's ReLU network with biases on its [1, C, H] slice) becomes a top-2
// router with capacity 2 and normalize_kept eps, and the per-expert
// constants stacked.
// CHECK-LABEL: func.func @gshard_top2
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-DAG: %[[W1_0:.*]] = moe.constant dense<1.250000e-01> : tensor<8x8xf32>
// CHECK-DAG: %[[W1_1:.*]] = moe.constant dense<2.500000e-01> : tensor<8x8xf32>
// CHECK-DAG: %[[W1_2:.*]] = moe.constant dense<3.750000e-01> : tensor<8x8xf32>
// CHECK-DAG: %[[W1_3:.*]] = moe.constant dense<5.000000e-01> : tensor<8x8xf32>
// CHECK-DAG: %[[B2_0:.*]] = moe.constant dense<-1.000000e+00> : tensor<8xf32>
// CHECK-DAG: %[[B2_1:.*]] = moe.constant dense<-2.000000e+00> : tensor<8xf32>
// CHECK-DAG: %[[B2_2:.*]] = moe.constant dense<-3.000000e+00> : tensor<8xf32>
// CHECK-DAG: %[[B2_3:.*]] = moe.constant dense<-4.000000e+00> : tensor<8xf32>
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]]
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax capacity 2 normalize_kept 1.1920929E-7 : tensor<?x4xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 4
// CHECK: %[[W1:.*]] = moe.stack %[[W1_0]], %[[W1_1]], %[[W1_2]], %[[W1_3]] : {{.*}} -> tensor<4x8x8xf32>
// CHECK: %[[B1:.*]] = moe.stack {{.*}} -> tensor<4x8xf32>
// CHECK: %[[W2:.*]] = moe.stack {{.*}} -> tensor<4x8x8xf32>
// CHECK: %[[B2:.*]] = moe.stack %[[B2_0]], %[[B2_1]], %[[B2_2]], %[[B2_3]] : {{.*}} -> tensor<4x8xf32>
// CHECK: %[[Y:.*]] = moe.experts relu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %[[W1]] : tensor<4x8x8xf32> b1 %[[B1]] : tensor<4x8xf32> w2 %[[W2]] : tensor<4x8x8xf32> b2 %[[B2]] : tensor<4x8xf32> layout in_out
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]] : tensor<?x8xf32>, tensor<?xi64>, tensor<?x2xf32>
// CHECK-NOT: moe.einsum
// CHECK-NOT: moe.arg_max
// CHECK: return %[[OUT]]
func.func @gshard_top2(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %w1_0 = moe.constant dense<1.250000e-01> : tensor<8x8xf32>
  %b1_0 = moe.constant dense<1.000000e+00> : tensor<8xf32>
  %w2_0 = moe.constant dense<-1.250000e-01> : tensor<8x8xf32>
  %b2_0 = moe.constant dense<-1.000000e+00> : tensor<8xf32>
  %w1_1 = moe.constant dense<2.500000e-01> : tensor<8x8xf32>
  %b1_1 = moe.constant dense<2.000000e+00> : tensor<8xf32>
  %w2_1 = moe.constant dense<-2.500000e-01> : tensor<8x8xf32>
  %b2_1 = moe.constant dense<-2.000000e+00> : tensor<8xf32>
  %w1_2 = moe.constant dense<3.750000e-01> : tensor<8x8xf32>
  %b1_2 = moe.constant dense<3.000000e+00> : tensor<8xf32>
  %w2_2 = moe.constant dense<-3.750000e-01> : tensor<8x8xf32>
  %b2_2 = moe.constant dense<-3.000000e+00> : tensor<8xf32>
  %w1_3 = moe.constant dense<5.000000e-01> : tensor<8x8xf32>
  %b1_3 = moe.constant dense<4.000000e+00> : tensor<8xf32>
  %w2_3 = moe.constant dense<-5.000000e-01> : tensor<8x8xf32>
  %b2_3 = moe.constant dense<-4.000000e+00> : tensor<8xf32>
  %wg = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %eps = moe.constant dense<1.1920929E-7> : tensor<f32>
  %cap = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i32>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %depth = moe.constant dense<4> : tensor<i64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %ax2 = moe.constant dense<2> : tensor<1xi64>
  %ax3 = moe.constant dense<3> : tensor<1xi64>
  %ax4 = moe.constant dense<4> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wg : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %gates = moe.softmax %logits {axis = 1 : i64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx1 = moe.arg_max %gates {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask1 = moe.one_hot %idx1, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %taken = moe.cast %mask1 {to = i1} : (tensor<?x4xi64>) -> tensor<?x4xi1>
  %rest = moe.where %taken, %ninf, %logits : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx2 = moe.arg_max %rest {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask2 = moe.one_hot %idx2, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum1 = moe.cum_sum %mask1, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %loc1 = moe.sub %cum1, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %cum2 = moe.cum_sum %mask2, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %own2 = moe.sub %cum2, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %firsts = moe.reduce_sum %mask1, %ax0 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<1x4xi64>
  %loc2 = moe.add %own2, %firsts : (tensor<?x4xi64>, tensor<1x4xi64>) -> tensor<?x4xi64>
  %in1 = moe.less %loc1, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in1i = moe.cast %in1 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept1 = moe.mul %mask1, %in1i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %in2 = moe.less %loc2, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in2i = moe.cast %in2 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept2 = moe.mul %mask2, %in2i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %at1 = moe.mul %loc1, %kept1 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot1 = moe.reduce_sum %at1, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at2 = moe.mul %loc2, %kept2 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot2 = moe.reduce_sum %at2, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %kept1f = moe.cast %kept1 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %kept2f = moe.cast %kept2 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %g1 = moe.einsum %gates, %kept1f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %g2 = moe.einsum %gates, %kept2f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %sum = moe.add %g1, %g2 : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %denom = moe.clip %sum min %eps : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %n1 = moe.div %g1, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %n2 = moe.div %g2, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %gates1 = moe.einsum %n1, %kept1f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gates2 = moe.einsum %n2, %kept2f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sc1 = moe.one_hot %slot1, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc1f = moe.cast %sc1 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %sc2 = moe.one_hot %slot2, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc2f = moe.cast %sc2 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %t1 = moe.einsum %gates1, %sc1f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %t2 = moe.einsum %gates2, %sc2f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %combine = moe.add %t1, %t2 : (tensor<?x4x2xf32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %nz = moe.cast %combine {to = i1} : (tensor<?x4x2xf32>) -> tensor<?x4x2xi1>
  %dispatch = moe.cast %nz {to = f32} : (tensor<?x4x2xi1>) -> tensor<?x4x2xf32>
  %slots = moe.einsum %dispatch, %x {equation = "sec,sm->ecm"} : (tensor<?x4x2xf32>, tensor<?x8xf32>) -> tensor<4x2x8xf32>
  %c0 = moe.slice %slots, %ax0, %ax1 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c1 = moe.slice %slots, %ax1, %ax2 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c2 = moe.slice %slots, %ax2, %ax3 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c3 = moe.slice %slots, %ax3, %ax4 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %h0 = moe.mat_mul %c0, %w1_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb0 = moe.add %b1_0, %h0 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r0 = moe.relu %hb0 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o0 = moe.mat_mul %r0, %w2_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y0 = moe.add %o0, %b2_0 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h1 = moe.mat_mul %c1, %w1_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb1 = moe.add %b1_1, %h1 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r1 = moe.relu %hb1 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o1 = moe.mat_mul %r1, %w2_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y1 = moe.add %o1, %b2_1 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h2 = moe.mat_mul %c2, %w1_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb2 = moe.add %b1_2, %h2 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r2 = moe.relu %hb2 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o2 = moe.mat_mul %r2, %w2_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y2 = moe.add %o2, %b2_2 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h3 = moe.mat_mul %c3, %w1_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb3 = moe.add %b1_3, %h3 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r3 = moe.relu %hb3 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o3 = moe.mat_mul %r3, %w2_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y3 = moe.add %o3, %b2_3 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %ys = moe.concat %y0, %y1, %y2, %y3 {axis = 0 : i64} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<4x2x8xf32>
  %out = moe.einsum %combine, %ys {equation = "sec,ecm->sm"} : (tensor<?x4x2xf32>, tensor<4x2x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests the same GShard layer with its slots split into the experts' chunks
// (dynamo's Split) rather than sliced.
// CHECK-LABEL: func.func @gshard_top2_split
// CHECK: moe.router %{{.*}} top 2 softmax capacity 2 normalize_kept 1.1920929E-7
// CHECK: moe.experts relu
// CHECK-NOT: moe.split
func.func @gshard_top2_split(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %w1_0 = moe.constant dense<1.250000e-01> : tensor<8x8xf32>
  %b1_0 = moe.constant dense<1.000000e+00> : tensor<8xf32>
  %w2_0 = moe.constant dense<-1.250000e-01> : tensor<8x8xf32>
  %b2_0 = moe.constant dense<-1.000000e+00> : tensor<8xf32>
  %w1_1 = moe.constant dense<2.500000e-01> : tensor<8x8xf32>
  %b1_1 = moe.constant dense<2.000000e+00> : tensor<8xf32>
  %w2_1 = moe.constant dense<-2.500000e-01> : tensor<8x8xf32>
  %b2_1 = moe.constant dense<-2.000000e+00> : tensor<8xf32>
  %w1_2 = moe.constant dense<3.750000e-01> : tensor<8x8xf32>
  %b1_2 = moe.constant dense<3.000000e+00> : tensor<8xf32>
  %w2_2 = moe.constant dense<-3.750000e-01> : tensor<8x8xf32>
  %b2_2 = moe.constant dense<-3.000000e+00> : tensor<8xf32>
  %w1_3 = moe.constant dense<5.000000e-01> : tensor<8x8xf32>
  %b1_3 = moe.constant dense<4.000000e+00> : tensor<8xf32>
  %w2_3 = moe.constant dense<-5.000000e-01> : tensor<8x8xf32>
  %b2_3 = moe.constant dense<-4.000000e+00> : tensor<8xf32>
  %wg = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %eps = moe.constant dense<1.1920929E-7> : tensor<f32>
  %cap = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i32>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %depth = moe.constant dense<4> : tensor<i64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %ax2 = moe.constant dense<2> : tensor<1xi64>
  %ax3 = moe.constant dense<3> : tensor<1xi64>
  %ax4 = moe.constant dense<4> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wg : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %gates = moe.softmax %logits {axis = 1 : i64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx1 = moe.arg_max %gates {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask1 = moe.one_hot %idx1, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %taken = moe.cast %mask1 {to = i1} : (tensor<?x4xi64>) -> tensor<?x4xi1>
  %rest = moe.where %taken, %ninf, %logits : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx2 = moe.arg_max %rest {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask2 = moe.one_hot %idx2, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum1 = moe.cum_sum %mask1, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %loc1 = moe.sub %cum1, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %cum2 = moe.cum_sum %mask2, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %own2 = moe.sub %cum2, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %firsts = moe.reduce_sum %mask1, %ax0 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<1x4xi64>
  %loc2 = moe.add %own2, %firsts : (tensor<?x4xi64>, tensor<1x4xi64>) -> tensor<?x4xi64>
  %in1 = moe.less %loc1, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in1i = moe.cast %in1 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept1 = moe.mul %mask1, %in1i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %in2 = moe.less %loc2, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in2i = moe.cast %in2 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept2 = moe.mul %mask2, %in2i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %at1 = moe.mul %loc1, %kept1 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot1 = moe.reduce_sum %at1, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at2 = moe.mul %loc2, %kept2 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot2 = moe.reduce_sum %at2, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %kept1f = moe.cast %kept1 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %kept2f = moe.cast %kept2 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %g1 = moe.einsum %gates, %kept1f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %g2 = moe.einsum %gates, %kept2f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %sum = moe.add %g1, %g2 : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %denom = moe.clip %sum min %eps : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %n1 = moe.div %g1, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %n2 = moe.div %g2, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %gates1 = moe.einsum %n1, %kept1f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gates2 = moe.einsum %n2, %kept2f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sc1 = moe.one_hot %slot1, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc1f = moe.cast %sc1 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %sc2 = moe.one_hot %slot2, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc2f = moe.cast %sc2 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %t1 = moe.einsum %gates1, %sc1f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %t2 = moe.einsum %gates2, %sc2f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %combine = moe.add %t1, %t2 : (tensor<?x4x2xf32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %nz = moe.cast %combine {to = i1} : (tensor<?x4x2xf32>) -> tensor<?x4x2xi1>
  %dispatch = moe.cast %nz {to = f32} : (tensor<?x4x2xi1>) -> tensor<?x4x2xf32>
  %slots = moe.einsum %dispatch, %x {equation = "sec,sm->ecm"} : (tensor<?x4x2xf32>, tensor<?x8xf32>) -> tensor<4x2x8xf32>
  %parts:4 = moe.split %slots {num_outputs = 4 : i64} : (tensor<4x2x8xf32>) -> (tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>)
  %h0 = moe.mat_mul %parts#0, %w1_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb0 = moe.add %b1_0, %h0 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r0 = moe.relu %hb0 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o0 = moe.mat_mul %r0, %w2_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y0 = moe.add %o0, %b2_0 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h1 = moe.mat_mul %parts#1, %w1_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb1 = moe.add %b1_1, %h1 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r1 = moe.relu %hb1 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o1 = moe.mat_mul %r1, %w2_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y1 = moe.add %o1, %b2_1 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h2 = moe.mat_mul %parts#2, %w1_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb2 = moe.add %b1_2, %h2 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r2 = moe.relu %hb2 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o2 = moe.mat_mul %r2, %w2_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y2 = moe.add %o2, %b2_2 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h3 = moe.mat_mul %parts#3, %w1_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb3 = moe.add %b1_3, %h3 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r3 = moe.relu %hb3 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o3 = moe.mat_mul %r3, %w2_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y3 = moe.add %o3, %b2_3 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %ys = moe.concat %y0, %y1, %y2, %y3 {axis = 0 : i64} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<4x2x8xf32>
  %out = moe.einsum %combine, %ys {equation = "sec,ecm->sm"} : (tensor<?x4x2xf32>, tensor<4x2x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that an exclusive cumulative sum (slots counted from the token
// before) is not Switch's priority: the layer stays generic with one remark.
// CHECK-LABEL: func.func @switch_exclusive_cumsum
// CHECK-NOT: moe.router
// CHECK: moe.einsum
func.func @switch_exclusive_cumsum(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %wi = moe.constant dense<1.250000e-01> : tensor<4x8x16xf32>
  %wo = moe.constant dense<5.000000e-01> : tensor<4x16x8xf32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i32>
  %one = moe.constant dense<1> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %a1 = moe.constant dense<1> : tensor<1xi64>
  %a2 = moe.constant dense<2> : tensor<1xi64>
  %slots = moe.constant dense<[0, 1, 2]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE capacity slots not detected: the priority is not reduce_max(cumsum(mask, 0) * mask - 1) over the experts}}
  %idx = moe.arg_max %probs {axis = -1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask = moe.one_hot %idx, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum = moe.cum_sum %mask, %zero {exclusive = 1 : i64} : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %counted = moe.mul %cum, %mask : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %shifted = moe.sub %counted, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %priority = moe.reduce_max %shifted, %last {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %p1 = moe.unsqueeze %priority, %a1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %p2 = moe.unsqueeze %p1, %a2 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?x1x1xi64>
  %hit = moe.equal %p2, %slots : (tensor<?x1x1xi64>, tensor<3xi64>) -> tensor<?x1x3xi1>
  %slot = moe.cast %hit {to = f32} : (tensor<?x1x3xi1>) -> tensor<?x1x3xf32>
  %m3 = moe.unsqueeze %mask, %a2 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?x4x1xi64>
  %column = moe.cast %m3 {to = f32} : (tensor<?x4x1xi64>) -> tensor<?x4x1xf32>
  %dispatch = moe.mul %slot, %column : (tensor<?x1x3xf32>, tensor<?x4x1xf32>) -> tensor<?x4x3xf32>
  %p3 = moe.unsqueeze %probs, %a2 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %combine = moe.mul %p3, %dispatch : (tensor<?x4x1xf32>, tensor<?x4x3xf32>) -> tensor<?x4x3xf32>
  %in = moe.einsum %x, %dispatch {equation = "th,tec->ech"} : (tensor<?x8xf32>, tensor<?x4x3xf32>) -> tensor<4x3x8xf32>
  %h = moe.einsum %in, %wi {equation = "ech,ehf->ecf"} : (tensor<4x3x8xf32>, tensor<4x8x16xf32>) -> tensor<4x3x16xf32>
  %a = moe.relu %h : (tensor<4x3x16xf32>) -> tensor<4x3x16xf32>
  %y = moe.einsum %a, %wo {equation = "ecf,efh->ech"} : (tensor<4x3x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %out = moe.einsum %y, %combine {equation = "ech,tec->th"} : (tensor<4x3x8xf32>, tensor<?x4x3xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that stacked experts with another activation than ReLU between the
// einsums are refused (only ReLU is matched in the stacked form).
// CHECK-LABEL: func.func @switch_sigmoid_experts
// CHECK-NOT: moe.router
func.func @switch_sigmoid_experts(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %wi = moe.constant dense<1.250000e-01> : tensor<4x8x16xf32>
  %wo = moe.constant dense<5.000000e-01> : tensor<4x16x8xf32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i32>
  %one = moe.constant dense<1> : tensor<i64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %a1 = moe.constant dense<1> : tensor<1xi64>
  %a2 = moe.constant dense<2> : tensor<1xi64>
  %slots = moe.constant dense<[0, 1, 2]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %probs = moe.softmax %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE capacity slots not detected: the stacked experts are not relu(einsum("ech,ehf->ecf", slots, w1)) with a constant [E, H, F] or [E, F, H] w1}}
  %idx = moe.arg_max %probs {axis = -1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask = moe.one_hot %idx, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum = moe.cum_sum %mask, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %counted = moe.mul %cum, %mask : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %shifted = moe.sub %counted, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %priority = moe.reduce_max %shifted, %last {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %p1 = moe.unsqueeze %priority, %a1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %p2 = moe.unsqueeze %p1, %a2 : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?x1x1xi64>
  %hit = moe.equal %p2, %slots : (tensor<?x1x1xi64>, tensor<3xi64>) -> tensor<?x1x3xi1>
  %slot = moe.cast %hit {to = f32} : (tensor<?x1x3xi1>) -> tensor<?x1x3xf32>
  %m3 = moe.unsqueeze %mask, %a2 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?x4x1xi64>
  %column = moe.cast %m3 {to = f32} : (tensor<?x4x1xi64>) -> tensor<?x4x1xf32>
  %dispatch = moe.mul %slot, %column : (tensor<?x1x3xf32>, tensor<?x4x1xf32>) -> tensor<?x4x3xf32>
  %p3 = moe.unsqueeze %probs, %a2 : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?x4x1xf32>
  %combine = moe.mul %p3, %dispatch : (tensor<?x4x1xf32>, tensor<?x4x3xf32>) -> tensor<?x4x3xf32>
  %in = moe.einsum %x, %dispatch {equation = "th,tec->ech"} : (tensor<?x8xf32>, tensor<?x4x3xf32>) -> tensor<4x3x8xf32>
  %h = moe.einsum %in, %wi {equation = "ech,ehf->ecf"} : (tensor<4x3x8xf32>, tensor<4x8x16xf32>) -> tensor<4x3x16xf32>
  %a = moe.sigmoid %h : (tensor<4x3x16xf32>) -> tensor<4x3x16xf32>
  %y = moe.einsum %a, %wo {equation = "ecf,efh->ech"} : (tensor<4x3x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %out = moe.einsum %y, %combine {equation = "ech,tec->th"} : (tensor<4x3x8xf32>, tensor<?x4x3xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that second choices whose slots count from 0 per choice (not after
// every first choice) are refused: two assignments could share a slot, and
// the router's priority order differs.
// CHECK-LABEL: func.func @gshard_slots_per_choice
// CHECK-NOT: moe.router
func.func @gshard_slots_per_choice(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %w1_0 = moe.constant dense<1.250000e-01> : tensor<8x8xf32>
  %b1_0 = moe.constant dense<1.000000e+00> : tensor<8xf32>
  %w2_0 = moe.constant dense<-1.250000e-01> : tensor<8x8xf32>
  %b2_0 = moe.constant dense<-1.000000e+00> : tensor<8xf32>
  %w1_1 = moe.constant dense<2.500000e-01> : tensor<8x8xf32>
  %b1_1 = moe.constant dense<2.000000e+00> : tensor<8xf32>
  %w2_1 = moe.constant dense<-2.500000e-01> : tensor<8x8xf32>
  %b2_1 = moe.constant dense<-2.000000e+00> : tensor<8xf32>
  %w1_2 = moe.constant dense<3.750000e-01> : tensor<8x8xf32>
  %b1_2 = moe.constant dense<3.000000e+00> : tensor<8xf32>
  %w2_2 = moe.constant dense<-3.750000e-01> : tensor<8x8xf32>
  %b2_2 = moe.constant dense<-3.000000e+00> : tensor<8xf32>
  %w1_3 = moe.constant dense<5.000000e-01> : tensor<8x8xf32>
  %b1_3 = moe.constant dense<4.000000e+00> : tensor<8xf32>
  %w2_3 = moe.constant dense<-5.000000e-01> : tensor<8x8xf32>
  %b2_3 = moe.constant dense<-4.000000e+00> : tensor<8xf32>
  %wg = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %eps = moe.constant dense<1.1920929E-7> : tensor<f32>
  %cap = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i32>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %depth = moe.constant dense<4> : tensor<i64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %ax2 = moe.constant dense<2> : tensor<1xi64>
  %ax3 = moe.constant dense<3> : tensor<1xi64>
  %ax4 = moe.constant dense<4> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wg : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %gates = moe.softmax %logits {axis = 1 : i64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx1 = moe.arg_max %gates {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask1 = moe.one_hot %idx1, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %taken = moe.cast %mask1 {to = i1} : (tensor<?x4xi64>) -> tensor<?x4xi1>
  %rest = moe.where %taken, %ninf, %logits : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE capacity slots not detected: the second choice's slots are not cumsum(mask2, 0) - 1 + sum(mask1, 0): after every first choice}}
  %idx2 = moe.arg_max %rest {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask2 = moe.one_hot %idx2, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum1 = moe.cum_sum %mask1, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %loc1 = moe.sub %cum1, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %cum2 = moe.cum_sum %mask2, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %loc2 = moe.sub %cum2, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %in1 = moe.less %loc1, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in1i = moe.cast %in1 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept1 = moe.mul %mask1, %in1i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %in2 = moe.less %loc2, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in2i = moe.cast %in2 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept2 = moe.mul %mask2, %in2i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %at1 = moe.mul %loc1, %kept1 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot1 = moe.reduce_sum %at1, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at2 = moe.mul %loc2, %kept2 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot2 = moe.reduce_sum %at2, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %kept1f = moe.cast %kept1 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %kept2f = moe.cast %kept2 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %g1 = moe.einsum %gates, %kept1f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %g2 = moe.einsum %gates, %kept2f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %sum = moe.add %g1, %g2 : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %denom = moe.clip %sum min %eps : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %n1 = moe.div %g1, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %n2 = moe.div %g2, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %gates1 = moe.einsum %n1, %kept1f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gates2 = moe.einsum %n2, %kept2f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sc1 = moe.one_hot %slot1, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc1f = moe.cast %sc1 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %sc2 = moe.one_hot %slot2, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc2f = moe.cast %sc2 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %t1 = moe.einsum %gates1, %sc1f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %t2 = moe.einsum %gates2, %sc2f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %combine = moe.add %t1, %t2 : (tensor<?x4x2xf32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %nz = moe.cast %combine {to = i1} : (tensor<?x4x2xf32>) -> tensor<?x4x2xi1>
  %dispatch = moe.cast %nz {to = f32} : (tensor<?x4x2xi1>) -> tensor<?x4x2xf32>
  %slots = moe.einsum %dispatch, %x {equation = "sec,sm->ecm"} : (tensor<?x4x2xf32>, tensor<?x8xf32>) -> tensor<4x2x8xf32>
  %c0 = moe.slice %slots, %ax0, %ax1 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c1 = moe.slice %slots, %ax1, %ax2 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c2 = moe.slice %slots, %ax2, %ax3 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c3 = moe.slice %slots, %ax3, %ax4 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %h0 = moe.mat_mul %c0, %w1_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb0 = moe.add %b1_0, %h0 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r0 = moe.relu %hb0 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o0 = moe.mat_mul %r0, %w2_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y0 = moe.add %o0, %b2_0 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h1 = moe.mat_mul %c1, %w1_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb1 = moe.add %b1_1, %h1 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r1 = moe.relu %hb1 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o1 = moe.mat_mul %r1, %w2_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y1 = moe.add %o1, %b2_1 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h2 = moe.mat_mul %c2, %w1_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb2 = moe.add %b1_2, %h2 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r2 = moe.relu %hb2 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o2 = moe.mat_mul %r2, %w2_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y2 = moe.add %o2, %b2_2 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h3 = moe.mat_mul %c3, %w1_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb3 = moe.add %b1_3, %h3 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r3 = moe.relu %hb3 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o3 = moe.mat_mul %r3, %w2_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y3 = moe.add %o3, %b2_3 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %ys = moe.concat %y0, %y1, %y2, %y3 {axis = 0 : i64} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<4x2x8xf32>
  %out = moe.einsum %combine, %ys {equation = "sec,ecm->sm"} : (tensor<?x4x2xf32>, tensor<4x2x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a denominator also clamped from above is not normalize_kept's.
// CHECK-LABEL: func.func @gshard_clip_max
// CHECK-NOT: moe.router
func.func @gshard_clip_max(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %w1_0 = moe.constant dense<1.250000e-01> : tensor<8x8xf32>
  %b1_0 = moe.constant dense<1.000000e+00> : tensor<8xf32>
  %w2_0 = moe.constant dense<-1.250000e-01> : tensor<8x8xf32>
  %b2_0 = moe.constant dense<-1.000000e+00> : tensor<8xf32>
  %w1_1 = moe.constant dense<2.500000e-01> : tensor<8x8xf32>
  %b1_1 = moe.constant dense<2.000000e+00> : tensor<8xf32>
  %w2_1 = moe.constant dense<-2.500000e-01> : tensor<8x8xf32>
  %b2_1 = moe.constant dense<-2.000000e+00> : tensor<8xf32>
  %w1_2 = moe.constant dense<3.750000e-01> : tensor<8x8xf32>
  %b1_2 = moe.constant dense<3.000000e+00> : tensor<8xf32>
  %w2_2 = moe.constant dense<-3.750000e-01> : tensor<8x8xf32>
  %b2_2 = moe.constant dense<-3.000000e+00> : tensor<8xf32>
  %w1_3 = moe.constant dense<5.000000e-01> : tensor<8x8xf32>
  %b1_3 = moe.constant dense<4.000000e+00> : tensor<8xf32>
  %w2_3 = moe.constant dense<-5.000000e-01> : tensor<8x8xf32>
  %b2_3 = moe.constant dense<-4.000000e+00> : tensor<8xf32>
  %wg = moe.constant dense<2.500000e-01> : tensor<8x4xf32>
  %eps = moe.constant dense<1.1920929E-7> : tensor<f32>
  %cap = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  %zero = moe.constant dense<0> : tensor<i32>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %depth = moe.constant dense<4> : tensor<i64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %ax2 = moe.constant dense<2> : tensor<1xi64>
  %ax3 = moe.constant dense<3> : tensor<1xi64>
  %ax4 = moe.constant dense<4> : tensor<1xi64>
  %logits = moe.mat_mul %x, %wg : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %gates = moe.softmax %logits {axis = 1 : i64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %idx1 = moe.arg_max %gates {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask1 = moe.one_hot %idx1, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %taken = moe.cast %mask1 {to = i1} : (tensor<?x4xi64>) -> tensor<?x4xi1>
  %rest = moe.where %taken, %ninf, %logits : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  // expected-remark @+1 {{MoE capacity slots not detected: the weights' denominator is not clip(g1 + g2, min = eps) of the kept choices' scores with a positive eps}}
  %idx2 = moe.arg_max %rest {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x4xf32>) -> tensor<?xi64>
  %mask2 = moe.one_hot %idx2, %depth, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %cum1 = moe.cum_sum %mask1, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %loc1 = moe.sub %cum1, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %cum2 = moe.cum_sum %mask2, %zero : (tensor<?x4xi64>, tensor<i32>) -> tensor<?x4xi64>
  %own2 = moe.sub %cum2, %one : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi64>
  %firsts = moe.reduce_sum %mask1, %ax0 : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<1x4xi64>
  %loc2 = moe.add %own2, %firsts : (tensor<?x4xi64>, tensor<1x4xi64>) -> tensor<?x4xi64>
  %in1 = moe.less %loc1, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in1i = moe.cast %in1 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept1 = moe.mul %mask1, %in1i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %in2 = moe.less %loc2, %cap : (tensor<?x4xi64>, tensor<i64>) -> tensor<?x4xi1>
  %in2i = moe.cast %in2 {to = i64} : (tensor<?x4xi1>) -> tensor<?x4xi64>
  %kept2 = moe.mul %mask2, %in2i : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %at1 = moe.mul %loc1, %kept1 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot1 = moe.reduce_sum %at1, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %at2 = moe.mul %loc2, %kept2 : (tensor<?x4xi64>, tensor<?x4xi64>) -> tensor<?x4xi64>
  %slot2 = moe.reduce_sum %at2, %ax1 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<?xi64>
  %kept1f = moe.cast %kept1 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %kept2f = moe.cast %kept2 {to = f32} : (tensor<?x4xi64>) -> tensor<?x4xf32>
  %g1 = moe.einsum %gates, %kept1f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %g2 = moe.einsum %gates, %kept2f {equation = "se,se->s"} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?xf32>
  %sum = moe.add %g1, %g2 : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %denom = moe.clip %sum min %eps max %eps : (tensor<?xf32>, tensor<f32>, tensor<f32>) -> tensor<?xf32>
  %n1 = moe.div %g1, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %n2 = moe.div %g2, %denom : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  %gates1 = moe.einsum %n1, %kept1f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %gates2 = moe.einsum %n2, %kept2f {equation = "s,se->se"} : (tensor<?xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %sc1 = moe.one_hot %slot1, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc1f = moe.cast %sc1 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %sc2 = moe.one_hot %slot2, %cap, %onoff : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %sc2f = moe.cast %sc2 {to = f32} : (tensor<?x2xi64>) -> tensor<?x2xf32>
  %t1 = moe.einsum %gates1, %sc1f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %t2 = moe.einsum %gates2, %sc2f {equation = "se,sc->sec"} : (tensor<?x4xf32>, tensor<?x2xf32>) -> tensor<?x4x2xf32>
  %combine = moe.add %t1, %t2 : (tensor<?x4x2xf32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %nz = moe.cast %combine {to = i1} : (tensor<?x4x2xf32>) -> tensor<?x4x2xi1>
  %dispatch = moe.cast %nz {to = f32} : (tensor<?x4x2xi1>) -> tensor<?x4x2xf32>
  %slots = moe.einsum %dispatch, %x {equation = "sec,sm->ecm"} : (tensor<?x4x2xf32>, tensor<?x8xf32>) -> tensor<4x2x8xf32>
  %c0 = moe.slice %slots, %ax0, %ax1 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c1 = moe.slice %slots, %ax1, %ax2 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c2 = moe.slice %slots, %ax2, %ax3 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %c3 = moe.slice %slots, %ax3, %ax4 axes %ax0 : (tensor<4x2x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x8xf32>
  %h0 = moe.mat_mul %c0, %w1_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb0 = moe.add %b1_0, %h0 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r0 = moe.relu %hb0 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o0 = moe.mat_mul %r0, %w2_0 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y0 = moe.add %o0, %b2_0 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h1 = moe.mat_mul %c1, %w1_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb1 = moe.add %b1_1, %h1 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r1 = moe.relu %hb1 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o1 = moe.mat_mul %r1, %w2_1 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y1 = moe.add %o1, %b2_1 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h2 = moe.mat_mul %c2, %w1_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb2 = moe.add %b1_2, %h2 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r2 = moe.relu %hb2 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o2 = moe.mat_mul %r2, %w2_2 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y2 = moe.add %o2, %b2_2 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %h3 = moe.mat_mul %c3, %w1_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %hb3 = moe.add %b1_3, %h3 : (tensor<8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %r3 = moe.relu %hb3 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  %o3 = moe.mat_mul %r3, %w2_3 : (tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32>
  %y3 = moe.add %o3, %b2_3 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %ys = moe.concat %y0, %y1, %y2, %y3 {axis = 0 : i64} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<4x2x8xf32>
  %out = moe.einsum %combine, %ys {equation = "sec,ecm->sm"} : (tensor<?x4x2xf32>, tensor<4x2x8xf32>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}
