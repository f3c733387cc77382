// RUN: moec-opt %s --split-input-file | moec-opt --split-input-file | FileCheck %s
// RUN: moec-opt %s --split-input-file --mlir-print-op-generic | moec-opt --split-input-file | FileCheck %s

// Tests that constants and dims round-trip.
// CHECK-LABEL: func.func @constant_and_dim
func.func @constant_and_dim(%x: tensor<?x16xf32>) -> tensor<i64> {
  // CHECK: moe.constant dense<[1, 2]> : tensor<2xi64>
  %0 = moe.constant dense<[1, 2]> : tensor<2xi64>
  // CHECK: moe.dim %{{.*}}, 0 : tensor<?x16xf32>
  %1 = moe.dim %x, 0 : tensor<?x16xf32>
  return %1 : tensor<i64>
}

// -----

// Tests that shape queries and shape-built tensors round-trip.
// CHECK-LABEL: func.func @shape_values
func.func @shape_values(%x: tensor<?x16xf32>, %s: tensor<2xi64>, %a: tensor<i64>, %b: tensor<i64>) {
  // CHECK: moe.shape %{{.*}} : (tensor<?x16xf32>) -> tensor<2xi64>
  %0 = moe.shape %x : (tensor<?x16xf32>) -> tensor<2xi64>
  // CHECK: moe.shape %{{.*}} {end = 2 : i64, start = -1 : i64} : (tensor<?x16xf32>) -> tensor<1xi64>
  %1 = moe.shape %x {start = -1 : i64, end = 2 : i64} : (tensor<?x16xf32>) -> tensor<1xi64>
  // CHECK: moe.size %{{.*}} : (tensor<?x16xf32>) -> tensor<i64>
  %2 = moe.size %x : (tensor<?x16xf32>) -> tensor<i64>
  // CHECK: moe.constant_of_shape %{{.*}} {value = dense<1> : tensor<1xi64>} : (tensor<2xi64>) -> tensor<?x?xi64>
  %3 = moe.constant_of_shape %s {value = dense<1> : tensor<1xi64>} : (tensor<2xi64>) -> tensor<?x?xi64>
  // CHECK: moe.constant_of_shape %{{.*}} : (tensor<2xi64>) -> tensor<?x?xf32>
  %4 = moe.constant_of_shape %s : (tensor<2xi64>) -> tensor<?x?xf32>
  // CHECK: moe.range %{{.*}}, %{{.*}}, %{{.*}} : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %5 = moe.range %a, %b, %a : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  // CHECK: moe.identity %{{.*}} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %6 = moe.identity %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

// Tests that every elementwise unary op round-trips.
// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<?x16xf32>, %i: tensor<4xi64>, %b: tensor<4xi1>) {
  // CHECK: moe.sqrt %{{.*}} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %0 = moe.sqrt %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.reciprocal
  %1 = moe.reciprocal %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.neg %{{.*}} : (tensor<4xi64>) -> tensor<4xi64>
  %2 = moe.neg %i : (tensor<4xi64>) -> tensor<4xi64>
  // CHECK: moe.abs
  %3 = moe.abs %i : (tensor<4xi64>) -> tensor<4xi64>
  // CHECK: moe.exp
  %4 = moe.exp %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.log
  %5 = moe.log %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.tanh
  %6 = moe.tanh %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.erf
  %7 = moe.erf %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.sigmoid
  %8 = moe.sigmoid %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.relu
  %9 = moe.relu %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.sin
  %10 = moe.sin %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.cos
  %11 = moe.cos %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.floor
  %12 = moe.floor %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.ceil
  %13 = moe.ceil %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.softplus
  %14 = moe.softplus %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.not %{{.*}} : (tensor<4xi1>) -> tensor<4xi1>
  %15 = moe.not %b : (tensor<4xi1>) -> tensor<4xi1>
  // CHECK: moe.gelu %{{.*}} {approximate = "tanh"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %16 = moe.gelu %x {approximate = "tanh"} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.gelu %{{.*}} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %17 = moe.gelu %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.sign %{{.*}} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %18 = moe.sign %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

// Tests that casts round-trip.
// CHECK-LABEL: func.func @casts
func.func @casts(%x: tensor<?xi32>, %t: tensor<f16>) {
  // CHECK: moe.cast %{{.*}} {to = i64} : (tensor<?xi32>) -> tensor<?xi64>
  %0 = moe.cast %x {to = i64} : (tensor<?xi32>) -> tensor<?xi64>
  // CHECK: moe.cast %{{.*}} {to = i1} : (tensor<?xi32>) -> tensor<?xi1>
  %1 = moe.cast %x {to = i1} : (tensor<?xi32>) -> tensor<?xi1>
  // CHECK: moe.cast_like %{{.*}}, %{{.*}} : (tensor<?xi32>, tensor<f16>) -> tensor<?xf16>
  %2 = moe.cast_like %x, %t : (tensor<?xi32>, tensor<f16>) -> tensor<?xf16>
  return
}

// -----

// Tests that broadcasting binary, comparison and logical ops round-trip.
// CHECK-LABEL: func.func @binary
func.func @binary(%x: tensor<?x16xf32>, %y: tensor<16xf32>, %i: tensor<2xi64>, %j: tensor<1xi64>, %b: tensor<2xi1>) {
  // CHECK: moe.add %{{.*}}, %{{.*}} : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %0 = moe.add %x, %y : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.sub
  %1 = moe.sub %x, %y : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.mul
  %2 = moe.mul %x, %y : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.div
  %3 = moe.div %i, %j : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  // CHECK: moe.pow %{{.*}}, %{{.*}} : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?x16xf32>
  %4 = moe.pow %x, %j : (tensor<?x16xf32>, tensor<1xi64>) -> tensor<?x16xf32>
  // CHECK: moe.mod %{{.*}}, %{{.*}} {fmod = 1 : i64} : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %5 = moe.mod %x, %y {fmod = 1 : i64} : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.mod %{{.*}}, %{{.*}} : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %6 = moe.mod %i, %j : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  // CHECK: moe.equal %{{.*}}, %{{.*}} : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>
  %7 = moe.equal %i, %j : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>
  // CHECK: moe.less
  %8 = moe.less %i, %j : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>
  // CHECK: moe.less_or_equal
  %9 = moe.less_or_equal %i, %j : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>
  // CHECK: moe.greater
  %10 = moe.greater %x, %y : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xi1>
  // CHECK: moe.greater_or_equal
  %11 = moe.greater_or_equal %i, %j : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>
  // CHECK: moe.and %{{.*}}, %{{.*}} : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
  %12 = moe.and %b, %b : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
  // CHECK: moe.or
  %13 = moe.or %b, %b : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
  // CHECK: moe.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2xi1>, tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %14 = moe.where %b, %i, %j : (tensor<2xi1>, tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  return
}

// -----

// Tests that variadic elementwise ops and clip round-trip.
// CHECK-LABEL: func.func @variadic_and_clip
func.func @variadic_and_clip(%a: tensor<4x1xf32>, %b: tensor<8xf32>, %lo: tensor<f32>, %hi: tensor<f32>) {
  // CHECK: moe.sum %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x1xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %0 = moe.sum %a, %b, %lo : (tensor<4x1xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK: moe.min %{{.*}}, %{{.*}} : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = moe.min %a, %b : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: moe.max %{{.*}} : (tensor<8xf32>) -> tensor<8xf32>
  %2 = moe.max %b : (tensor<8xf32>) -> tensor<8xf32>
  // CHECK: moe.clip %{{.*}} min %{{.*}} max %{{.*}} : (tensor<8xf32>, tensor<f32>, tensor<f32>) -> tensor<8xf32>
  %3 = moe.clip %b min %lo max %hi : (tensor<8xf32>, tensor<f32>, tensor<f32>) -> tensor<8xf32>
  // CHECK: moe.clip %{{.*}} max %{{.*}} : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %4 = moe.clip %b max %hi : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  // CHECK: moe.clip %{{.*}} : (tensor<8xf32>) -> tensor<8xf32>
  %5 = moe.clip %b : (tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests that softmax, reductions and axis ops round-trip.
// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<?x8xf32>, %axes: tensor<1xi64>, %m: tensor<?x8xi64>, %k: tensor<1xi64>, %ax: tensor<i64>) {
  // CHECK: moe.softmax %{{.*}} {axis = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %0 = moe.softmax %x {axis = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: moe.log_softmax %{{.*}} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = moe.log_softmax %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: moe.reduce_sum %{{.*}}, %{{.*}} {keepdims = 0 : i64} : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?xf32>
  %2 = moe.reduce_sum %x, %axes {keepdims = 0 : i64} : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?xf32>
  // CHECK: moe.reduce_mean %{{.*}}, %{{.*}} : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  %3 = moe.reduce_mean %x, %axes : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  // CHECK: moe.reduce_max %{{.*}} : (tensor<?x8xf32>) -> tensor<1x1xf32>
  %4 = moe.reduce_max %x : (tensor<?x8xf32>) -> tensor<1x1xf32>
  // CHECK: moe.reduce_min %{{.*}} {noop_with_empty_axes = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %5 = moe.reduce_min %x {noop_with_empty_axes = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK: moe.arg_max %{{.*}} {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x8xf32>) -> tensor<?xi64>
  %6 = moe.arg_max %x {axis = 1 : i64, keepdims = 0 : i64} : (tensor<?x8xf32>) -> tensor<?xi64>
  // CHECK: moe.cum_sum %{{.*}}, %{{.*}} {exclusive = 1 : i64} : (tensor<?x8xi64>, tensor<i64>) -> tensor<?x8xi64>
  %7 = moe.cum_sum %m, %ax {exclusive = 1 : i64} : (tensor<?x8xi64>, tensor<i64>) -> tensor<?x8xi64>
  // CHECK: moe.top_k %{{.*}}, %{{.*}} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  %8:2 = moe.top_k %x, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  return
}

// -----

// Tests that the normalisations round-trip with all their results.
// CHECK-LABEL: func.func @normalization
func.func @normalization(%x: tensor<?x64xf32>, %g: tensor<64xf32>, %h: tensor<?x64xf16>, %gh: tensor<64xf16>, %bh: tensor<64xf16>) {
  // CHECK: moe.layer_normalization %{{.*}}, %{{.*}}, %{{.*}} {axis = 1 : i64, epsilon = 9.99999997E-7 : f32, stash_type = 10 : i64} : (tensor<?x64xf16>, tensor<64xf16>, tensor<64xf16>) -> (tensor<?x64xf16>, tensor<?x1xf16>, tensor<?x1xf16>)
  %0:3 = moe.layer_normalization %h, %gh, %bh {axis = 1 : i64, epsilon = 9.99999997E-7 : f32, stash_type = 10 : i64} : (tensor<?x64xf16>, tensor<64xf16>, tensor<64xf16>) -> (tensor<?x64xf16>, tensor<?x1xf16>, tensor<?x1xf16>)
  // CHECK: moe.layer_normalization %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>, tensor<?x1xf32>)
  %1:3 = moe.layer_normalization %x, %g : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>, tensor<?x1xf32>)
  // CHECK: moe.simplified_layer_normalization %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32} : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>)
  %2:2 = moe.simplified_layer_normalization %x, %g {epsilon = 9.99999997E-7 : f32} : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>)
  return
}

// -----

// Tests that contractions round-trip.
// CHECK-LABEL: func.func @contractions
func.func @contractions(%x: tensor<?x64xf32>, %w: tensor<64x128xf32>, %wt: tensor<128x64xf32>, %c: tensor<128xf32>, %h: tensor<8x?x64xf32>, %w3: tensor<8x64x32xf32>) {
  // CHECK: moe.mat_mul %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<64x128xf32>) -> tensor<?x128xf32>
  %0 = moe.mat_mul %x, %w : (tensor<?x64xf32>, tensor<64x128xf32>) -> tensor<?x128xf32>
  // CHECK: moe.gemm %{{.*}}, %{{.*}}, %{{.*}} {alpha = 5.000000e-01 : f32, transB = 1 : i64} : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  %1 = moe.gemm %x, %wt, %c {transB = 1 : i64, alpha = 0.5 : f32} : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  // CHECK: moe.gemm %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<64x128xf32>) -> tensor<?x128xf32>
  %2 = moe.gemm %x, %w : (tensor<?x64xf32>, tensor<64x128xf32>) -> tensor<?x128xf32>
  // CHECK: moe.einsum %{{.*}}, %{{.*}} {equation = "etd,edf->etf"} : (tensor<8x?x64xf32>, tensor<8x64x32xf32>) -> tensor<8x?x32xf32>
  %3 = moe.einsum %h, %w3 {equation = "etd,edf->etf"} : (tensor<8x?x64xf32>, tensor<8x64x32xf32>) -> tensor<8x?x32xf32>
  return
}

// -----

// Tests that Conv round-trips with its attributes and infers the output
// sizes: a Qwen-VL patch embedding (one output per patch), and a padded,
// strided, dilated, grouped 2-D convolution.
// CHECK-LABEL: func.func @conv
func.func @conv(%p: tensor<?x3x2x8x8xf32>, %w: tensor<16x3x2x8x8xf32>, %b: tensor<16xf32>, %x: tensor<2x4x9x7xf32>, %w2: tensor<6x2x3x2xf32>) {
  // CHECK: moe.conv %{{.*}}, %{{.*}}, %{{.*}} {kernel_shape = array<i64: 2, 8, 8>, strides = array<i64: 2, 8, 8>} : (tensor<?x3x2x8x8xf32>, tensor<16x3x2x8x8xf32>, tensor<16xf32>) -> tensor<?x16x1x1x1xf32>
  %0 = moe.conv %p, %w, %b {kernel_shape = array<i64: 2, 8, 8>, strides = array<i64: 2, 8, 8>} : (tensor<?x3x2x8x8xf32>, tensor<16x3x2x8x8xf32>, tensor<16xf32>) -> tensor<?x16x1x1x1xf32>
  // CHECK: moe.conv %{{.*}}, %{{.*}} {dilations = array<i64: 1, 2>, group = 2 : i64, pads = array<i64: 1, 0, 2, 1>, strides = array<i64: 2, 1>} : (tensor<2x4x9x7xf32>, tensor<6x2x3x2xf32>) -> tensor<2x6x5x6xf32>
  %1 = moe.conv %x, %w2 {dilations = array<i64: 1, 2>, group = 2 : i64, pads = array<i64: 1, 0, 2, 1>, strides = array<i64: 2, 1>} : (tensor<2x4x9x7xf32>, tensor<6x2x3x2xf32>) -> tensor<2x6x5x6xf32>
  // CHECK: moe.conv %{{.*}}, %{{.*}} {auto_pad = "SAME_UPPER", strides = array<i64: 2, 2>} : (tensor<2x4x9x7xf32>, tensor<6x4x3x2xf32>) -> tensor<2x6x5x4xf32>
  %w3 = moe.constant dense<1.0> : tensor<6x4x3x2xf32>
  %2 = moe.conv %x, %w3 {auto_pad = "SAME_UPPER", strides = array<i64: 2, 2>} : (tensor<2x4x9x7xf32>, tensor<6x4x3x2xf32>) -> tensor<2x6x5x4xf32>
  return
}

// -----

// Tests that GridSample round-trips with its attributes and infers
// [N, C, Ho, Wo], the batch from the grid when the input's is dynamic:
// GLM-4.5V's position table sampled at each patch, and the defaults.
// CHECK-LABEL: func.func @grid_sample
func.func @grid_sample(%t: tensor<1x16x6x6xf32>, %g: tensor<1x?x1x2xf32>, %x: tensor<?x3x5x6xf32>, %h: tensor<2x4x7x2xf32>) {
  // CHECK: moe.grid_sample %{{.*}}, %{{.*}} {mode = "bicubic", padding_mode = "border"} : (tensor<1x16x6x6xf32>, tensor<1x?x1x2xf32>) -> tensor<1x16x?x1xf32>
  %0 = moe.grid_sample %t, %g {mode = "bicubic", padding_mode = "border"} : (tensor<1x16x6x6xf32>, tensor<1x?x1x2xf32>) -> tensor<1x16x?x1xf32>
  // CHECK: moe.grid_sample %{{.*}}, %{{.*}} : (tensor<?x3x5x6xf32>, tensor<2x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  %1 = moe.grid_sample %x, %h : (tensor<?x3x5x6xf32>, tensor<2x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  // CHECK: moe.grid_sample %{{.*}}, %{{.*}} {align_corners = 1 : i64, mode = "nearest", padding_mode = "reflection"}
  %2 = moe.grid_sample %x, %h {align_corners = 1 : i64, mode = "nearest", padding_mode = "reflection"} : (tensor<?x3x5x6xf32>, tensor<2x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  return
}

// -----

// Tests that shape manipulation ops round-trip.
// CHECK-LABEL: func.func @shape_ops
func.func @shape_ops(%x: tensor<?x4x16xf32>, %s: tensor<2xi64>, %a: tensor<1xi64>, %y: tensor<?x128xf32>, %i: tensor<1xi64>) {
  // CHECK: moe.reshape %{{.*}}, %{{.*}} : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  %0 = moe.reshape %x, %s : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  // CHECK: moe.reshape %{{.*}}, %{{.*}} {allowzero = 1 : i64}
  %1 = moe.reshape %x, %s {allowzero = 1 : i64} : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  // CHECK: moe.flatten %{{.*}} {axis = 2 : i64} : (tensor<?x4x16xf32>) -> tensor<?x16xf32>
  %2 = moe.flatten %x {axis = 2 : i64} : (tensor<?x4x16xf32>) -> tensor<?x16xf32>
  // CHECK: moe.flatten %{{.*}} {axis = -3 : i64} : (tensor<?x4x16xf32>) -> tensor<1x?xf32>
  %f = moe.flatten %x {axis = -3 : i64} : (tensor<?x4x16xf32>) -> tensor<1x?xf32>
  // CHECK: moe.transpose %{{.*}} {perm = array<i64: 2, 0, 1>} : (tensor<?x4x16xf32>) -> tensor<16x?x4xf32>
  %3 = moe.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<?x4x16xf32>) -> tensor<16x?x4xf32>
  // CHECK: moe.transpose %{{.*}} : (tensor<?x4x16xf32>) -> tensor<16x4x?xf32>
  %4 = moe.transpose %x : (tensor<?x4x16xf32>) -> tensor<16x4x?xf32>
  // CHECK: moe.squeeze %{{.*}}, %{{.*}} : (tensor<?x4x16xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  %5 = moe.squeeze %x, %a : (tensor<?x4x16xf32>, tensor<1xi64>) -> tensor<?x?xf32>
  // CHECK: moe.squeeze %{{.*}} : (tensor<?x4x16xf32>) -> tensor<?x4x16xf32>
  %6 = moe.squeeze %x : (tensor<?x4x16xf32>) -> tensor<?x4x16xf32>
  // CHECK: moe.unsqueeze %{{.*}}, %{{.*}} : (tensor<?x4x16xf32>, tensor<1xi64>) -> tensor<?x?x?x?xf32>
  %7 = moe.unsqueeze %x, %a : (tensor<?x4x16xf32>, tensor<1xi64>) -> tensor<?x?x?x?xf32>
  // CHECK: moe.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>) -> tensor<3xi64>
  %8 = moe.concat %s, %a {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>) -> tensor<3xi64>
  // CHECK: moe.split %{{.*}} {axis = -1 : i64, num_outputs = 2 : i64} : (tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  %9:2 = moe.split %y {axis = -1 : i64, num_outputs = 2 : i64} : (tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  // CHECK: moe.split %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<?x128xf32>, tensor<2xi64>) -> (tensor<?x?xf32>, tensor<?x?xf32>)
  %10:2 = moe.split %y, %s {axis = 1 : i64} : (tensor<?x128xf32>, tensor<2xi64>) -> (tensor<?x?xf32>, tensor<?x?xf32>)
  // CHECK: moe.slice %{{.*}}, %{{.*}}, %{{.*}} axes %{{.*}} steps %{{.*}} : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?xf32>
  %11 = moe.slice %y, %i, %i axes %a steps %a : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?xf32>
  // CHECK: moe.slice %{{.*}}, %{{.*}}, %{{.*}} steps %{{.*}} : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x128xf32>
  %12 = moe.slice %y, %i, %i steps %a : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x128xf32>
  // CHECK: moe.slice %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x128xf32>
  %13 = moe.slice %y, %i, %i : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x128xf32>
  // CHECK: moe.expand %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<2xi64>) -> tensor<?x128xf32>
  %14 = moe.expand %y, %s : (tensor<?x128xf32>, tensor<2xi64>) -> tensor<?x128xf32>
  // CHECK: moe.tile %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  %15 = moe.tile %y, %s : (tensor<?x128xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that trilu round-trips with and without its diagonal operand.
// CHECK-LABEL: func.func @trilu
func.func @trilu(%x: tensor<?x?xf32>, %k: tensor<i64>) {
  // CHECK: moe.trilu %{{.*}}, %{{.*}} {upper = 0 : i64} : (tensor<?x?xf32>, tensor<i64>) -> tensor<?x?xf32>
  %0 = moe.trilu %x, %k {upper = 0 : i64} : (tensor<?x?xf32>, tensor<i64>) -> tensor<?x?xf32>
  // CHECK: moe.trilu %{{.*}} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  %1 = moe.trilu %x : (tensor<?x?xf32>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that indexing ops round-trip.
// CHECK-LABEL: func.func @indexing
func.func @indexing(%x: tensor<?x64xf32>, %idx: tensor<?xi64>, %p: tensor<?x8xf32>, %ti: tensor<?x2xi64>, %t3: tensor<4x8x16xf32>, %acc: tensor<?x64xf32>, %ei: tensor<?x64xi64>, %d: tensor<i64>, %v: tensor<2xi64>, %m: tensor<?xi1>) {
  // CHECK: moe.gather %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x?xf32>
  %0 = moe.gather %x, %idx {axis = 1 : i64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x?xf32>
  // CHECK: moe.gather_elements %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %1 = moe.gather_elements %p, %ti {axis = 1 : i64} : (tensor<?x8xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  // CHECK: moe.gather_nd %{{.*}}, %{{.*}} : (tensor<4x8x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  %2 = moe.gather_nd %t3, %ti : (tensor<4x8x16xf32>, tensor<?x2xi64>) -> tensor<?x16xf32>
  // CHECK: moe.scatter_elements %{{.*}}, %{{.*}}, %{{.*}} {reduction = "add"} : (tensor<?x64xf32>, tensor<?x64xi64>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %3 = moe.scatter_elements %acc, %ei, %x {reduction = "add"} : (tensor<?x64xf32>, tensor<?x64xi64>, tensor<?x64xf32>) -> tensor<?x64xf32>
  // CHECK: moe.scatter_nd %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x8x16xf32>, tensor<?x2xi64>, tensor<?x16xf32>) -> tensor<4x8x16xf32>
  %4 = moe.scatter_nd %t3, %ti, %2 : (tensor<4x8x16xf32>, tensor<?x2xi64>, tensor<?x16xf32>) -> tensor<4x8x16xf32>
  // CHECK: moe.one_hot %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x?xi64>
  %5 = moe.one_hot %ti, %d, %v : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x?xi64>
  // CHECK: moe.non_zero %{{.*}} : (tensor<?xi1>) -> tensor<1x?xi64>
  %6 = moe.non_zero %m : (tensor<?xi1>) -> tensor<1x?xi64>
  return
}

// -----

// Tests that a stack of same-typed tensors round-trips.
// CHECK-LABEL: func.func @stack
func.func @stack(%a: tensor<16x32xf32>, %b: tensor<16x32xf32>) -> tensor<2x16x32xf32> {
  // CHECK: moe.stack %{{.*}}, %{{.*}} : (tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<2x16x32xf32>
  %0 = moe.stack %a, %b : (tensor<16x32xf32>, tensor<16x32xf32>) -> tensor<2x16x32xf32>
  return %0 : tensor<2x16x32xf32>
}

// -----

// Tests that attention round-trips with and without its mask, grouped-query
// heads (8 over 2) and dynamic sequence sizes.
// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<1x8x?x16xf32>, %k: tensor<1x2x?x16xf32>,
                     %v: tensor<1x2x?x4xf32>, %m: tensor<1x1x?x?xf32>)
    -> (tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>) {
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.250000e-01 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<1x1x?x?xf32> -> tensor<1x8x?x4xf32>
  %0 = moe.attention %q, %k, %v mask %m scale 0.125 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<1x1x?x?xf32> -> tensor<1x8x?x4xf32>
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} scale 1.000000e+00 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32> -> tensor<1x8x?x4xf32>
  %1 = moe.attention %q, %k, %v scale 1.0 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32> -> tensor<1x8x?x4xf32>
  return %0, %1 : tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>
}

// -----

// Tests that attention's sinks (one logit per query head) and soft cap
// round-trip, with the mask, alone and together, and that the default
// softcap 0 is not printed: the sink's type follows the mask's when both
// are present and the value's when the mask is absent.
// CHECK-LABEL: func.func @attention_sinks_softcap
func.func @attention_sinks_softcap(%q: tensor<1x8x?x16xf32>, %k: tensor<1x2x?x16xf32>,
                                   %v: tensor<1x2x?x4xf32>, %m: tensor<1x1x?x?xf32>,
                                   %s: tensor<8xf32>)
    -> (tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>) {
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} sinks %{{.*}} scale 1.250000e-01 softcap 3.000000e+01 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<1x1x?x?xf32>, tensor<8xf32> -> tensor<1x8x?x4xf32>
  %0 = moe.attention %q, %k, %v mask %m sinks %s scale 0.125 softcap 30.0 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<1x1x?x?xf32>, tensor<8xf32> -> tensor<1x8x?x4xf32>
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} sinks %{{.*}} scale 1.000000e+00 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<8xf32> -> tensor<1x8x?x4xf32>
  %1 = moe.attention %q, %k, %v sinks %s scale 1.0 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<8xf32> -> tensor<1x8x?x4xf32>
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} scale 1.000000e+00 softcap 5.000000e+01 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32> -> tensor<1x8x?x4xf32>
  %2 = moe.attention %q, %k, %v scale 1.0 softcap 50.0 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32> -> tensor<1x8x?x4xf32>
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.000000e+00 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<1x1x?x?xf32> -> tensor<1x8x?x4xf32>
  %3 = moe.attention %q, %k, %v mask %m scale 1.0 softcap 0.0 : tensor<1x8x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x4xf32>, tensor<1x1x?x?xf32> -> tensor<1x8x?x4xf32>
  return %0, %1, %2, %3 : tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>, tensor<1x8x?x4xf32>
}

// -----

// Tests that the gated delta rule round-trips with query/key heads (2)
// shared by the value heads (4), a dynamic sequence and a dynamic batch.
// CHECK-LABEL: func.func @gated_delta_rule
func.func @gated_delta_rule(%q: tensor<?x?x2x16xf32>, %k: tensor<?x?x2x16xf32>,
                            %v: tensor<?x?x4x8xf32>, %s: tensor<?x4x16x8xf32>,
                            %g: tensor<?x?x4xf32>, %beta: tensor<?x?x4xf32>)
    -> (tensor<?x?x4x8xf32>, tensor<?x4x16x8xf32>) {
  // CHECK: %{{.*}}, %{{.*}} = moe.gated_delta_rule %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale 2.500000e-01 : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x4x8xf32>, tensor<?x4x16x8xf32>, tensor<?x?x4xf32>, tensor<?x?x4xf32> -> tensor<?x?x4x8xf32>, tensor<?x4x16x8xf32>
  %o, %n = moe.gated_delta_rule %q, %k, %v, %s, %g, %beta scale 0.25 : tensor<?x?x2x16xf32>, tensor<?x?x2x16xf32>, tensor<?x?x4x8xf32>, tensor<?x4x16x8xf32>, tensor<?x?x4xf32>, tensor<?x?x4xf32> -> tensor<?x?x4x8xf32>, tensor<?x4x16x8xf32>
  return %o, %n : tensor<?x?x4x8xf32>, tensor<?x4x16x8xf32>
}

// Tests that the causal convolution round-trips with and without a bias.
// CHECK-LABEL: func.func @causal_conv
func.func @causal_conv(%x: tensor<1x8x?xf32>, %w: tensor<8x3xf32>,
                       %s: tensor<1x8x2xf32>, %b: tensor<8xf32>)
    -> (tensor<1x8x?xf32>, tensor<1x8x2xf32>) {
  // CHECK: moe.causal_conv %{{.*}}, %{{.*}}, %{{.*}}, bias %{{.*}} silu true : tensor<1x8x?xf32>, tensor<8x3xf32>, tensor<1x8x2xf32>, tensor<8xf32> -> tensor<1x8x?xf32>, tensor<1x8x2xf32>
  %y, %n = moe.causal_conv %x, %w, %s, bias %b silu true : tensor<1x8x?xf32>, tensor<8x3xf32>, tensor<1x8x2xf32>, tensor<8xf32> -> tensor<1x8x?xf32>, tensor<1x8x2xf32>
  // CHECK: moe.causal_conv %{{.*}}, %{{.*}}, %{{.*}} silu false : tensor<1x8x?xf32>, tensor<8x3xf32>, tensor<1x8x2xf32> -> tensor<1x8x?xf32>, tensor<1x8x2xf32>
  %z, %m = moe.causal_conv %y, %w, %n silu false : tensor<1x8x?xf32>, tensor<8x3xf32>, tensor<1x8x2xf32> -> tensor<1x8x?xf32>, tensor<1x8x2xf32>
  return %z, %m : tensor<1x8x?xf32>, tensor<1x8x2xf32>
}
