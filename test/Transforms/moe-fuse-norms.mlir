// RUN: moec-opt %s --split-input-file --moe-fuse-norms | FileCheck %s

// Tests that the TorchScript RMSNorm form x * (1 / sqrt(mean(x^2) + eps)) * w
// becomes one simplified_layer_normalization with w as its scale.
// CHECK-LABEL: func.func @rms_norm_weighted
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>, %[[W:.*]]: tensor<16xf32>)
func.func @rms_norm_weighted(%x: tensor<?x16xf32>, %w: tensor<16xf32>) -> tensor<?x16xf32> {
  // CHECK: %[[N:.*]], %{{.*}} = moe.simplified_layer_normalization %[[X]], %[[W]] {epsilon = 9.99999997E-7 : f32}
  // CHECK-NOT: moe.reduce_mean
  // CHECK: return %[[N]]
  %two = moe.constant dense<2.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-6> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %0 = moe.pow %x, %two : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  %1 = moe.reduce_mean %0, %axes : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %2 = moe.add %1, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %3 = moe.sqrt %2 : (tensor<?x1xf32>) -> tensor<?x1xf32>
  %4 = moe.div %one, %3 : (tensor<f32>, tensor<?x1xf32>) -> tensor<?x1xf32>
  %5 = moe.mul %x, %4 : (tensor<?x16xf32>, tensor<?x1xf32>) -> tensor<?x16xf32>
  %6 = moe.mul %w, %5 : (tensor<16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %6 : tensor<?x16xf32>
}

// -----

// Tests the reciprocal form without a weight: the scale is a splat of ones
// (epsilon 1e-5 is the default, so it is not printed).
// CHECK-LABEL: func.func @rms_norm_reciprocal
func.func @rms_norm_reciprocal(%x: tensor<2x?x8xf32>) -> tensor<2x?x8xf32> {
  // CHECK: %[[ONES:.*]] = moe.constant dense<1.000000e+00> : tensor<8xf32>
  // CHECK: moe.simplified_layer_normalization %{{.*}}, %[[ONES]] :
  %two = moe.constant dense<2.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-5> : tensor<f32>
  %axes = moe.constant dense<2> : tensor<1xi64>
  %0 = moe.pow %x, %two : (tensor<2x?x8xf32>, tensor<f32>) -> tensor<2x?x8xf32>
  %1 = moe.reduce_mean %0, %axes : (tensor<2x?x8xf32>, tensor<1xi64>) -> tensor<2x?x1xf32>
  %2 = moe.add %eps, %1 : (tensor<f32>, tensor<2x?x1xf32>) -> tensor<2x?x1xf32>
  %3 = moe.sqrt %2 : (tensor<2x?x1xf32>) -> tensor<2x?x1xf32>
  %4 = moe.reciprocal %3 : (tensor<2x?x1xf32>) -> tensor<2x?x1xf32>
  %5 = moe.mul %4, %x : (tensor<2x?x1xf32>, tensor<2x?x8xf32>) -> tensor<2x?x8xf32>
  return %5 : tensor<2x?x8xf32>
}

// -----

// Tests that a norm whose intermediate (the mean square) is used elsewhere is
// left alone: fusing would have to recompute it.
// CHECK-LABEL: func.func @shared_intermediate
func.func @shared_intermediate(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  // CHECK-NOT: moe.simplified_layer_normalization
  %two = moe.constant dense<2.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-5> : tensor<f32>
  %axes = moe.constant dense<-1> : tensor<1xi64>
  %0 = moe.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = moe.reduce_mean %0, %axes : (tensor<4x8xf32>, tensor<1xi64>) -> tensor<4x1xf32>
  %2 = moe.add %1, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %3 = moe.sqrt %2 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %4 = moe.div %x, %3 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %4, %1 : tensor<4x8xf32>, tensor<4x1xf32>
}

// -----

// Tests that a mean over another axis is not RMSNorm.
// CHECK-LABEL: func.func @wrong_axis
func.func @wrong_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NOT: moe.simplified_layer_normalization
  %two = moe.constant dense<2.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-5> : tensor<f32>
  %axes = moe.constant dense<0> : tensor<1xi64>
  %0 = moe.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = moe.reduce_mean %0, %axes : (tensor<4x8xf32>, tensor<1xi64>) -> tensor<1x8xf32>
  %2 = moe.add %1, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %3 = moe.sqrt %2 : (tensor<1x8xf32>) -> tensor<1x8xf32>
  %4 = moe.div %x, %3 : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}
