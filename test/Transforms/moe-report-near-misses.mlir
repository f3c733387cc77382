// RUN: moec-opt %s --split-input-file --moe-report-near-misses -verify-diagnostics | FileCheck %s
// RUN: moec-opt %s --split-input-file --moe-report-near-misses=all-reasons=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=ALL

// Tests that a top-k no detector took keeps one remark, the first reason
// recorded, and loses the attribute.
// CHECK-LABEL: func.func @generic_layer
// CHECK-NOT: moe.near_misses
// ALL: MoE per-expert loop not detected: first
// ALL: MoE stacked experts not detected: second
func.func @generic_layer(%scores: tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi64>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  // expected-remark @below {{MoE per-expert loop not detected: first}}
  %v, %i = moe.top_k %scores, %k {moe.near_misses = ["MoE per-expert loop not detected: first", "MoE stacked experts not detected: second"]} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  return %v, %i : tensor<?x2xf32>, tensor<?x2xi64>
}

// -----

// Tests that a top-k whose indices a detected layer dispatches by (a generic
// gate the detectors kept) gets no remark: a later detector took its layer.
// CHECK-LABEL: func.func @detected_layer
// CHECK-NOT: moe.near_misses
// CHECK: moe.dispatch
func.func @detected_layer(%x: tensor<?x16xf32>, %scores: tensor<?x8xf32>) -> tensor<?x16xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %w1 = moe.constant dense<1.0> : tensor<8x32x16xf32>
  %w3 = moe.constant dense<1.0> : tensor<8x32x16xf32>
  %w2 = moe.constant dense<1.0> : tensor<8x16x32xf32>
  %v, %i = moe.top_k %scores, %k {moe.near_misses = ["MoE per-expert loop not detected: loop"]} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
  %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
         w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
         w2 %w2 : tensor<8x16x32xf32> layout out_in
  %out = moe.combine %y, %source, %v : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
  return %out : tensor<?x16xf32>
}

// -----

// Tests that a near-miss whose values reach another layer's dispatch only
// through a projection (its output is the next layer's tokens) keeps its
// remark: the next layer's routing is not its own.
// CHECK-LABEL: func.func @next_layer
func.func @next_layer(%x: tensor<?x16xf32>, %scores: tensor<?x8xf32>, %proj: tensor<2x16xf32>, %i: tensor<?x2xi64>) -> tensor<?x16xf32> {
  %k = moe.constant dense<2> : tensor<1xi64>
  // expected-remark @below {{MoE dense experts not detected: near}}
  %v, %ignored = moe.top_k %scores, %k {moe.near_misses = ["MoE dense experts not detected: near"]} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %tokens = moe.mat_mul %v, %proj : (tensor<?x2xf32>, tensor<2x16xf32>) -> tensor<?x16xf32>
  %rows, %offsets, %source = moe.dispatch %tokens, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
  return %rows : tensor<?x16xf32>
}

// -----

// Tests that a top-k over 8 experts whose indices select rows (an equality
// with an expert index, as Mistral's reference code writes
// `torch.where(ids == e)`) and that no detector considered gets one remark
// naming the selecting op.
// CHECK-LABEL: func.func @unknown_form
func.func @unknown_form(%scores: tensor<?x8xf32>) -> tensor<?x2xi1> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %e = moe.constant dense<3> : tensor<i64>
  // expected-remark @below {{MoE layer not detected: a top-k over 8 experts selects rows or weights (moe.equal at}}
  %v, %i = moe.top_k %scores, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %hit = moe.equal %i, %e : (tensor<?x2xi64>, tensor<i64>) -> tensor<?x2xi1>
  return %hit : tensor<?x2xi1>
}

// -----

// Tests that a top-k whose indices select nothing (returned as they are), or
// that takes every element (a sort), gets no remark.
// CHECK-LABEL: func.func @no_selection
func.func @no_selection(%scores: tensor<?x8xf32>, %x: tensor<8x4xf32>) -> (tensor<?x2xi64>, tensor<?x8x4xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %all = moe.constant dense<8> : tensor<1xi64>
  %v, %i = moe.top_k %scores, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %sv, %si = moe.top_k %scores, %all : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x8xf32>, tensor<?x8xi64>)
  %rows = moe.gather %x, %si {axis = 0 : i64} : (tensor<8x4xf32>, tensor<?x8xi64>) -> tensor<?x8x4xf32>
  return %i, %rows : tensor<?x2xi64>, tensor<?x8x4xf32>
}

// -----

// Tests that a top-k whose values reach a later top-k without a projection
// between (DeepSeek's group top-k before its expert top-k) is part of that
// router's gate: the gate gets one remark, the later router's reason.
// CHECK-LABEL: func.func @one_gate
func.func @one_gate(%scores: tensor<?x8xf32>) -> tensor<?x2xi64> {
  %k = moe.constant dense<2> : tensor<1xi64>
  %groups, %groupIds = moe.top_k %scores, %k {moe.near_misses = ["MoE dense experts not detected: group"]} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %fill = moe.constant dense<0.0> : tensor<f32>
  %masked = moe.scatter_elements %scores, %groupIds, %groups {axis = 1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x8xf32>
  // expected-remark @below {{MoE per-expert loop not detected: router}}
  %v, %i = moe.top_k %masked, %k {moe.near_misses = ["MoE per-expert loop not detected: router"]} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  return %i : tensor<?x2xi64>
}
