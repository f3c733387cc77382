// RUN: moec-opt %s --split-input-file | moec-opt --split-input-file | FileCheck %s

// Tests that moe.block_quantized_constant round-trips: MatMulNBits' [N, K]
// weight transposed to [K, N] (K 40 in blocks of 32: a ragged last block,
// 2 blocks of 16 bytes a row), with packed zero points.
// CHECK-LABEL: func.func @transposed
// CHECK: moe.block_quantized_constant bits 4 block_size 32 transposed codes dense<17> : tensor<3x32xui8> scales dense<5.000000e-01> : tensor<3x2xf32> zero_points dense<120> : tensor<3x1xui8> : tensor<40x3xf32>
func.func @transposed() -> tensor<40x3xf32> {
  %w = moe.block_quantized_constant bits 4 block_size 32 transposed
         codes dense<17> : tensor<3x32xui8>
         scales dense<0.5> : tensor<3x2xf32>
         zero_points dense<120> : tensor<3x1xui8> : tensor<40x3xf32>
  return %w : tensor<40x3xf32>
}

// -----

// Tests QMoE's [E, N, K] 8-bit expert weights, without zero points, whose
// products may use int8 activations (accuracy_level 4); the attributes' own
// shapes do not matter, their element counts do.
// CHECK-LABEL: func.func @experts
// CHECK: moe.block_quantized_constant bits 8 block_size 16 codes
// CHECK-SAME: scales dense<2.500000e-01> : tensor<2x4x2xf32> int8_activations : tensor<2x4x32xf32>
func.func @experts() -> tensor<2x4x32xf32> {
  %w = moe.block_quantized_constant bits 8 block_size 16
         codes dense<3> : tensor<256xui8>
         scales dense<0.25> : tensor<2x4x2xf32> int8_activations
         : tensor<2x4x32xf32>
  return %w : tensor<2x4x32xf32>
}
