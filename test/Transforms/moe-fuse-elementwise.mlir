// RUN: moec-opt %s --split-input-file --moe-fuse-elementwise | FileCheck %s

// Tests that a chain of f32 elementwise ops of one shape becomes one fused op,
// with the broadcast operand and the scalar constant handled inside.
// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<?x16xf32>, %b: tensor<16xf32>) -> tensor<?x16xf32> {
  // CHECK: %[[F:.*]] = moe.fused_elementwise ins(%{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.constant dense<5.000000e-01>
  // CHECK: moe.add
  // CHECK: moe.mul
  // CHECK: moe.sigmoid
  // CHECK: moe.yield
  // CHECK: return %[[F]]
  %half = moe.constant dense<0.5> : tensor<f32>
  %0 = moe.add %x, %b : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %1 = moe.mul %0, %half : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  %2 = moe.sigmoid %1 : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %2 : tensor<?x16xf32>
}

// -----

// Tests that a value used outside the group becomes a second result, and that
// an op of another shape starts its own group.
// CHECK-LABEL: func.func @two_outputs
func.func @two_outputs(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>) -> (tensor<4x16xf32>, tensor<4x8xf32>) {
  // CHECK: %[[F:.*]]:2 = moe.fused_elementwise
  // CHECK: moe.exp
  // CHECK: moe.neg
  // CHECK: moe.yield %{{.*}}, %{{.*}} : tensor<4x16xf32>, tensor<4x16xf32>
  // CHECK: moe.mat_mul %[[F]]#1
  %0 = moe.exp %x : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = moe.neg %0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = moe.mat_mul %1, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %0, %2 : tensor<4x16xf32>, tensor<4x8xf32>
}

// -----

// Tests that a group closes when an op outside it uses one of its values, so
// that the fused op (placed at its last member) dominates that use.
// CHECK-LABEL: func.func @closed_by_outside_use
func.func @closed_by_outside_use(%x: tensor<4x16xf32>, %w: tensor<16x16xf32>) -> tensor<4x16xf32> {
  // CHECK: %[[F:.*]]:2 = moe.fused_elementwise
  // CHECK: %[[M:.*]] = moe.mat_mul %[[F]]#1
  // CHECK: moe.add %[[F]]#0, %[[M]]
  %0 = moe.exp %x : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = moe.tanh %0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = moe.mat_mul %1, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %3 = moe.add %0, %2 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %3 : tensor<4x16xf32>
}

// -----

// Tests that integer arithmetic (shape computations) and single ops are left
// alone.
// CHECK-LABEL: func.func @not_fused
func.func @not_fused(%a: tensor<2xi64>, %b: tensor<2xi64>, %x: tensor<4xf32>) -> (tensor<2xi64>, tensor<4xf32>) {
  // CHECK-NOT: moe.fused_elementwise
  %0 = moe.add %a, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  %1 = moe.mul %0, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  %2 = moe.exp %x : (tensor<4xf32>) -> tensor<4xf32>
  return %1, %2 : tensor<2xi64>, tensor<4xf32>
}
