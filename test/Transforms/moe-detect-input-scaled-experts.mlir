// RUN: moec-opt %s --split-input-file --moe-detect-input-scaled-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that Llama4's form (top-1 logits scattered into -inf, their sigmoid
// scaling every expert's input, all experts on all tokens, summed over the
// experts) becomes the dispatch of the tokens scaled by their chosen score
// to the chosen expert, combined with unit weights; the gate's ops stay.
// CHECK-LABEL: func.func @llama4
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK: %[[VALUES:.*]], %[[I:.*]] = moe.top_k
// CHECK: %[[S:.*]] = moe.sigmoid
// CHECK: %[[CHOSEN:.*]] = moe.gather_elements %[[S]], %[[I]] {axis = 1 : i64}
// CHECK: %[[XS:.*]] = moe.mul %[[X]], %[[CHOSEN]]
// CHECK: %[[ZERO:.*]] = moe.mul %[[CHOSEN]]
// CHECK: %[[ONES:.*]] = moe.add %[[ZERO]]
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[XS]], %[[I]] experts 4
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<5xi64> w1 %{{.*}} : tensor<4x8x8xf32> w2 %{{.*}} : tensor<4x4x8xf32> layout in_out glu concatenated
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[ONES]]
// CHECK-NOT: moe.tile
// CHECK: return %[[OUT]]
func.func @llama4(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x4x8xf32>
  %k = moe.constant dense<1> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[4, 1]> : tensor<2xi64>
  %col = moe.constant dense<[-1, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %kept = moe.scatter_elements %fill, %indices, %values {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %s = moe.sigmoid %kept : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %xt = moe.tile %x, %rep : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %st = moe.transpose %s {perm = array<i64: 1, 0>} : (tensor<?x4xf32>) -> tensor<4x?xf32>
  %sc = moe.reshape %st, %col : (tensor<4x?xf32>, tensor<2xi64>) -> tensor<?x1xf32>
  %xs = moe.mul %xt, %sc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %rows = moe.reshape %xs, %eth : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %h = moe.mat_mul %rows, %w13 : (tensor<4x?x8xf32>, tensor<4x8x8xf32>) -> tensor<4x?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %sg = moe.sigmoid %g : (tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %a = moe.mul %u, %silu : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %y = moe.mat_mul %a, %w2 : (tensor<4x?x4xf32>, tensor<4x4x8xf32>) -> tensor<4x?x8xf32>
  %yr = moe.reshape %y, %eth : (tensor<4x?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %out = moe.reduce_sum %yr, %c0 {keepdims = 0 : i64} : (tensor<4x?x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests the form of one token (a decode step, as the OnnxExporter writes
// it): the -inf fill folded into a constant, transpose(s) already [E, 1]
// (its reshape to [-1, 1] folded away) and the repeat written as an Expand
// to ones before the Tile.
// CHECK-LABEL: func.func @one_token
// CHECK-SAME: (%[[X:.*]]: tensor<1x8xf32>)
// CHECK: %[[VALUES:.*]], %[[I:.*]] = moe.top_k
// CHECK: %[[S:.*]] = moe.sigmoid
// CHECK: %[[CHOSEN:.*]] = moe.gather_elements %[[S]], %[[I]] {axis = 1 : i64}
// CHECK: %[[XS:.*]] = moe.mul %[[X]], %[[CHOSEN]]
// CHECK: moe.dispatch %[[XS]], %[[I]] experts 4
// CHECK: moe.experts silu_glu
// CHECK: %[[OUT:.*]] = moe.combine
// CHECK-NOT: moe.tile
// CHECK: return %[[OUT]]
func.func @one_token(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x4x8xf32>
  %k = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %ones = moe.constant dense<[1, 1]> : tensor<2xi64>
  %rep = moe.constant dense<[4, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %fill = moe.constant dense<0xFF800000> : tensor<1x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<1x4xf32>, tensor<1xi64>) -> (tensor<1x1xf32>, tensor<1x1xi64>)
  %kept = moe.scatter_elements %fill, %indices, %values {axis = 1 : i64} : (tensor<1x4xf32>, tensor<1x1xi64>, tensor<1x1xf32>) -> tensor<1x4xf32>
  %s = moe.sigmoid %kept : (tensor<1x4xf32>) -> tensor<1x4xf32>
  %xe = moe.expand %x, %ones : (tensor<1x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %xt = moe.tile %xe, %rep : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<4x8xf32>
  %st = moe.transpose %s {perm = array<i64: 1, 0>} : (tensor<1x4xf32>) -> tensor<4x1xf32>
  %xs = moe.mul %xt, %st : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %rows = moe.reshape %xs, %eth : (tensor<4x8xf32>, tensor<3xi64>) -> tensor<4x1x8xf32>
  %h = moe.mat_mul %rows, %w13 : (tensor<4x1x8xf32>, tensor<4x8x8xf32>) -> tensor<4x1x8xf32>
  %g, %u = moe.split %h {axis = 2 : i64, num_outputs = 2 : i64} : (tensor<4x1x8xf32>) -> (tensor<4x1x4xf32>, tensor<4x1x4xf32>)
  %sg = moe.sigmoid %g : (tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %silu = moe.mul %g, %sg : (tensor<4x1x4xf32>, tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %a = moe.mul %u, %silu : (tensor<4x1x4xf32>, tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %y = moe.mat_mul %a, %w2 : (tensor<4x1x4xf32>, tensor<4x4x8xf32>) -> tensor<4x1x8xf32>
  %out = moe.reduce_sum %y, %c0 {keepdims = 0 : i64} : (tensor<4x1x8xf32>, tensor<1xi64>) -> tensor<1x8xf32>
  return %out : tensor<1x8xf32>
}

// -----

// Tests that with two experts per token (both chosen experts then see a
// scaled input, which one dispatch of unscaled rows cannot express) the
// layer stays generic with a remark.
// CHECK-LABEL: func.func @top2
// CHECK-NOT: moe.dispatch
// CHECK: moe.reduce_sum
func.func @top2(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x4xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<4x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<4x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %f = moe.constant dense<4> : tensor<1xi64>
  %f2 = moe.constant dense<8> : tensor<1xi64>
  %rep = moe.constant dense<[4, 1]> : tensor<2xi64>
  %col = moe.constant dense<[-1, 1]> : tensor<2xi64>
  %eth = moe.constant dense<[4, -1, 8]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  // expected-remark @below {{MoE input-scaled experts not detected: the router does not choose one expert per token (only then is every other expert's input zero)}}
  %values, %indices = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %shape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %fill = moe.constant_of_shape %shape {value = dense<0xFF800000> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %kept = moe.scatter_elements %fill, %indices, %values {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %s = moe.sigmoid %kept : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %xt = moe.tile %x, %rep : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
  %st = moe.transpose %s {perm = array<i64: 1, 0>} : (tensor<?x4xf32>) -> tensor<4x?xf32>
  %sc = moe.reshape %st, %col : (tensor<4x?xf32>, tensor<2xi64>) -> tensor<?x1xf32>
  %xs = moe.mul %xt, %sc : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %rows = moe.reshape %xs, %eth : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %h = moe.mat_mul %rows, %w13 : (tensor<4x?x8xf32>, tensor<4x8x8xf32>) -> tensor<4x?x8xf32>
  %g = moe.slice %h, %c0, %f axes %m1 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %u = moe.slice %h, %f, %f2 axes %m1 : (tensor<4x?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x?x4xf32>
  %sg = moe.sigmoid %g : (tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %silu = moe.mul %g, %sg : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %a = moe.mul %u, %silu : (tensor<4x?x4xf32>, tensor<4x?x4xf32>) -> tensor<4x?x4xf32>
  %y = moe.mat_mul %a, %w2 : (tensor<4x?x4xf32>, tensor<4x4x8xf32>) -> tensor<4x?x8xf32>
  %yr = moe.reshape %y, %eth : (tensor<4x?x8xf32>, tensor<3xi64>) -> tensor<4x?x8xf32>
  %out = moe.reduce_sum %yr, %c0 {keepdims = 0 : i64} : (tensor<4x?x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}
