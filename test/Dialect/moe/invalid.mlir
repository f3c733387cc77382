// RUN: moec-opt %s --split-input-file --verify-diagnostics

// Tests that operands must broadcast: numpy broadcasting only stretches size-1
// dimensions, so 3 against 4 is a malformed model.
func.func @add_not_broadcastable(%a: tensor<3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{shapes [3] and [4] are not broadcastable: sizes 3 and 4 differ in dimension 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.add %a, %b : (tensor<3xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that binary operands share an element type: ONNX has no implicit
// promotion, the exporter must insert a Cast.
func.func @add_mixed_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+2 {{operands have different element types: 'f32' and 'f16'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.add %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

// Tests that a declared result type must agree with the inferred one: static
// sizes may refine dynamic ones but never contradict them.
func.func @result_contradicts_inference(%a: tensor<?x16xf32>) {
  // expected-error @+2 {{'moe.relu' op inferred type(s) 'tensor<?x16xf32>' are incompatible with return type(s) of operation 'tensor<?x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.relu %a : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that moe.dim names an existing dimension.
func.func @dim_out_of_range(%a: tensor<?x16xf32>) {
  // expected-error @+1 {{dimension index 2 is out of range for a tensor of rank 2}}
  %0 = moe.dim %a, 2 : tensor<?x16xf32>
  return
}

// -----

// Tests that a transpose permutation is a permutation: a repeated or missing
// dimension has no meaning.
func.func @transpose_not_permutation(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{'perm' [0, 0] is not a permutation of [0, 2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.transpose %a {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

// Tests that a transpose permutation names every dimension once.
func.func @transpose_perm_length(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{'perm' has 3 entries but the input has rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.transpose %a {perm = array<i64: 0, 1, 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that the softmax axis exists.
func.func @softmax_axis(%a: tensor<?x8xf32>) {
  // expected-error @+1 {{'moe.softmax' op attribute 'axis' = 2 is out of range for rank 2 (expected [-2, 2))}}
  %0 = moe.softmax %a {axis = 2 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that reduction flags are booleans: ONNX defines only 0 and 1.
func.func @reduce_keepdims(%a: tensor<?x8xf32>) {
  // expected-error @+1 {{'moe.reduce_sum' op attribute 'keepdims' must be 0 or 1, got 2}}
  %0 = moe.reduce_sum %a {keepdims = 2 : i64} : (tensor<?x8xf32>) -> tensor<1x1xf32>
  return
}

// -----

// Tests that a reduction axis appears once: reducing a dimension twice is a
// malformed model.
func.func @reduce_repeated_axis(%a: tensor<?x8xf32>) {
  %axes = moe.constant dense<[1, -1]> : tensor<2xi64>
  // expected-error @+2 {{axis -1 is repeated in 'axes'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reduce_mean %a, %axes : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<?x1xf32>
  return
}

// -----

// Tests that a reduction axis exists.
func.func @reduce_axis_range(%a: tensor<?x8xf32>) {
  %axes = moe.constant dense<[2]> : tensor<1xi64>
  // expected-error @+2 {{axis 2 is out of range for rank 2 (expected [-2, 2))}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reduce_max %a, %axes : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that a non-constant axes list without keepdims has a static length,
// which the result rank depends on.
func.func @reduce_unknown_rank(%a: tensor<?x8xf32>, %axes: tensor<?xi64>) {
  // expected-error @+2 {{cannot infer the result rank}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reduce_min %a, %axes {keepdims = 0 : i64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?xf32>
  return
}

// -----

// Tests that Gelu's approximation is one ONNX defines.
func.func @gelu_approximate(%a: tensor<4xf32>) {
  // expected-error @+1 {{'moe.gelu' op attribute 'approximate' must be "none" or "tanh", got "fast"}}
  %0 = moe.gelu %a {approximate = "fast"} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that a float Mod uses fmod = 1, as ONNX requires: the integer
// (Python) remainder is not defined on floats.
func.func @mod_float_fmod(%a: tensor<4xf32>) {
  // expected-error @+1 {{'moe.mod' op requires 'fmod' = 1 for floating-point operands}}
  %0 = moe.mod %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that fmod is a boolean.
func.func @mod_fmod_range(%a: tensor<4xi64>) {
  // expected-error @+1 {{'moe.mod' op attribute 'fmod' must be 0 or 1, got 3}}
  %0 = moe.mod %a, %a {fmod = 3 : i64} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return
}

// -----

// Tests that clip bounds have the input's element type.
func.func @clip_bound_type(%a: tensor<4xf32>, %lo: tensor<f16>) {
  // expected-error @+1 {{'moe.clip' op bound 'min' has element type 'f16' but the input has 'f32'}}
  %0 = moe.clip %a min %lo : (tensor<4xf32>, tensor<f16>) -> tensor<4xf32>
  return
}

// -----

// Tests that clip bounds are scalars.
func.func @clip_bound_scalar(%a: tensor<4xf32>, %hi: tensor<4xf32>) {
  // expected-error @+1 {{'moe.clip' op bound 'max' must be a scalar, got 'tensor<4xf32>'}}
  %0 = moe.clip %a max %hi : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that ArgMax's tie-breaking flag is a boolean.
func.func @arg_max_flag(%a: tensor<?x8xf32>) {
  // expected-error @+1 {{'moe.arg_max' op attribute 'select_last_index' must be 0 or 1, got -1}}
  %0 = moe.arg_max %a {select_last_index = -1 : i64} : (tensor<?x8xf32>) -> tensor<1x8xi64>
  return
}

// -----

// Tests that ArgMax's axis exists.
func.func @arg_max_axis(%a: tensor<?x8xf32>) {
  // expected-error @+2 {{axis -3 is out of range for rank 2 (expected [-2, 2))}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.arg_max %a {axis = -3 : i64} : (tensor<?x8xf32>) -> tensor<1x8xi64>
  return
}

// -----

// Tests that CumSum's axis is a single value.
func.func @cum_sum_axis(%a: tensor<?x8xi64>, %axis: tensor<2xi64>) {
  // expected-error @+1 {{'moe.cum_sum' op operand 'axis' must be a scalar, got 'tensor<2xi64>'}}
  %0 = moe.cum_sum %a, %axis : (tensor<?x8xi64>, tensor<2xi64>) -> tensor<?x8xi64>
  return
}

// -----

// Tests that a constant CumSum axis exists.
func.func @cum_sum_axis_range(%a: tensor<?x8xi64>) {
  %axis = moe.constant dense<2> : tensor<i64>
  // expected-error @+1 {{'moe.cum_sum' op attribute 'axis' = 2 is out of range for rank 2 (expected [-2, 2))}}
  %0 = moe.cum_sum %a, %axis : (tensor<?x8xi64>, tensor<i64>) -> tensor<?x8xi64>
  return
}

// -----

// Tests that TopK cannot select more elements than the axis has.
func.func @top_k_too_large(%a: tensor<?x8xf32>) {
  %k = moe.constant dense<9> : tensor<1xi64>
  // expected-error @+2 {{k = 9 is out of range for axis size 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.top_k %a, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x9xf32>, tensor<?x9xi64>)
  return
}

// -----

// Tests that TopK's k is the 1-element tensor ONNX specifies.
func.func @top_k_k_shape(%a: tensor<?x8xf32>, %k: tensor<2xi64>) {
  // expected-error @+2 {{operand 'k' must be a 1-element 1-D tensor, got 'tensor<2xi64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.top_k %a, %k : (tensor<?x8xf32>, tensor<2xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  return
}

// -----

// Tests that TopK's flags are booleans.
func.func @top_k_flag(%a: tensor<?x8xf32>, %k: tensor<1xi64>) {
  // expected-error @+1 {{'moe.top_k' op attribute 'largest' must be 0 or 1, got 2}}
  %0:2 = moe.top_k %a, %k {largest = 2 : i64} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  return
}

// -----

// Tests that the statistics type of a layer normalisation is a float type.
func.func @layer_norm_stash_type(%x: tensor<?x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+2 {{'stash_type' 7 is not a float type (expected 1, 10, 11 or 16)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = moe.layer_normalization %x, %g {stash_type = 7 : i64} : (tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>, tensor<?x1xf32>)
  return
}

// -----

// Tests that the scale covers the normalised dimensions.
func.func @layer_norm_scale_shape(%x: tensor<?x64xf32>, %g: tensor<32xf32>) {
  // expected-error @+2 {{operand 'scale' of shape [32] does not broadcast to the normalised shape [64]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.simplified_layer_normalization %x, %g : (tensor<?x64xf32>, tensor<32xf32>) -> (tensor<?x64xf32>, tensor<?x1xf32>)
  return
}

// -----

// Tests that MatMul's contracting dimensions agree.
func.func @mat_mul_contracting(%a: tensor<?x64xf32>, %b: tensor<32x16xf32>) {
  // expected-error @+2 {{contracting dimensions differ: [?, 64] x [32, 16]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.mat_mul %a, %b : (tensor<?x64xf32>, tensor<32x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

// Tests that Gemm works on matrices only, as ONNX defines it.
func.func @gemm_rank(%a: tensor<2x?x64xf32>, %b: tensor<64x16xf32>) {
  // expected-error @+2 {{operands 'a' and 'b' must be 2-D}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.gemm %a, %b : (tensor<2x?x64xf32>, tensor<64x16xf32>) -> tensor<?x16xf32>
  return
}

// -----

// Tests that Gemm's transpose flags are booleans.
func.func @gemm_trans_flag(%a: tensor<16x64xf32>, %b: tensor<64x16xf32>) {
  // expected-error @+2 {{attribute 'transA' must be 0 or 1, got 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.gemm %a, %b {transA = 2 : i64} : (tensor<16x64xf32>, tensor<64x16xf32>) -> tensor<16x16xf32>
  return
}

// -----

// Tests that Conv's per-axis lists have one entry per spatial axis.
func.func @conv_pads_length(%x: tensor<1x3x4x4xf32>, %w: tensor<2x3x2x2xf32>) {
  // expected-error @+2 {{attribute 'pads' has 3 entries; the input has 4 (2 per spatial axis)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.conv %x, %w {pads = array<i64: 1, 1, 1>} : (tensor<1x3x4x4xf32>, tensor<2x3x2x2xf32>) -> tensor<1x2x3x3xf32>
  return
}

// -----

// Tests that Conv's auto_pad is one of ONNX's values.
func.func @conv_auto_pad(%x: tensor<1x3x4x4xf32>, %w: tensor<2x3x2x2xf32>) {
  // expected-error @+2 {{attribute 'auto_pad' is "SAME"; expected NOTSET, VALID, SAME_UPPER or SAME_LOWER}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.conv %x, %w {auto_pad = "SAME"} : (tensor<1x3x4x4xf32>, tensor<2x3x2x2xf32>) -> tensor<1x2x3x3xf32>
  return
}

// -----

// Tests that Conv's input channels are the weight's times the groups.
func.func @conv_channels(%x: tensor<1x3x4x4xf32>, %w: tensor<2x2x2x2xf32>) {
  // expected-error @+2 {{input 'x' has 3 channels; the weight}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.conv %x, %w : (tensor<1x3x4x4xf32>, tensor<2x2x2x2xf32>) -> tensor<1x2x3x3xf32>
  return
}

// -----

// Tests that a kernel_shape must be the weight's spatial sizes.
func.func @conv_kernel_shape(%x: tensor<1x3x4x4xf32>, %w: tensor<2x3x2x2xf32>) {
  // expected-error @+2 {{attribute 'kernel_shape' [3, 3] differs from the weight's spatial sizes [2, 2]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.conv %x, %w {kernel_shape = array<i64: 3, 3>} : (tensor<1x3x4x4xf32>, tensor<2x3x2x2xf32>) -> tensor<1x2x2x2xf32>
  return
}

// -----

// Tests that GridSample's mode is one ONNX names.
func.func @grid_sample_mode(%x: tensor<1x3x5x6xf32>, %g: tensor<1x4x7x2xf32>) {
  // expected-error @+2 {{attribute 'mode' is "area"; expected linear, nearest or cubic (bilinear or bicubic in opset 16)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.grid_sample %x, %g {mode = "area"} : (tensor<1x3x5x6xf32>, tensor<1x4x7x2xf32>) -> tensor<1x3x4x7xf32>
  return
}

// -----

// Tests that GridSample's padding_mode is one ONNX names.
func.func @grid_sample_padding(%x: tensor<1x3x5x6xf32>, %g: tensor<1x4x7x2xf32>) {
  // expected-error @+2 {{attribute 'padding_mode' is "clamp"; expected zeros, border or reflection}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.grid_sample %x, %g {padding_mode = "clamp"} : (tensor<1x3x5x6xf32>, tensor<1x4x7x2xf32>) -> tensor<1x3x4x7xf32>
  return
}

// -----

// Tests that GridSample's align_corners is 0 or 1.
func.func @grid_sample_align(%x: tensor<1x3x5x6xf32>, %g: tensor<1x4x7x2xf32>) {
  // expected-error @+2 {{attribute 'align_corners' is 2; expected 0 or 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.grid_sample %x, %g {align_corners = 2 : i64} : (tensor<1x3x5x6xf32>, tensor<1x4x7x2xf32>) -> tensor<1x3x4x7xf32>
  return
}

// -----

// Tests that GridSample 20's volumetric form is refused: only 4-D is
// implemented.
func.func @grid_sample_5d(%x: tensor<1x3x4x5x6xf32>, %g: tensor<1x2x3x4x3xf32>) {
  // expected-error @+2 {{input 'x' has rank 5; only 4-D GridSample ([N, C, H, W]) is supported}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.grid_sample %x, %g : (tensor<1x3x4x5x6xf32>, tensor<1x2x3x4x3xf32>) -> tensor<1x3x2x3x4xf32>
  return
}

// -----

// Tests that a 4-D GridSample's grid holds (x, y) pairs.
func.func @grid_sample_grid_pairs(%x: tensor<1x3x5x6xf32>, %g: tensor<1x4x7x3xf32>) {
  // expected-error @+2 {{grid 'tensor<1x4x7x3xf32>' is not [N, Ho, Wo, 2] for the 4-D input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.grid_sample %x, %g : (tensor<1x3x5x6xf32>, tensor<1x4x7x3xf32>) -> tensor<1x3x4x7xf32>
  return
}

// -----

// Tests that the grid has the input's batch.
func.func @grid_sample_batch(%x: tensor<2x3x5x6xf32>, %g: tensor<3x4x7x2xf32>) {
  // expected-error @+2 {{grid 'tensor<3x4x7x2xf32>' has batch 3 but the input has 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.grid_sample %x, %g : (tensor<2x3x5x6xf32>, tensor<3x4x7x2xf32>) -> tensor<2x3x4x7xf32>
  return
}

// -----

// Tests that the kernel must fit the padded input.
func.func @conv_kernel_too_large(%x: tensor<1x3x2x2xf32>, %w: tensor<2x3x3x3xf32>) {
  // expected-error @+2 {{spatial axis 0: the kernel spans 3 but the padded input has 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.conv %x, %w : (tensor<1x3x2x2xf32>, tensor<2x3x3x3xf32>) -> tensor<1x2x1x1xf32>
  return
}

// -----

// Tests that einsum terms hold letters and at most one ellipsis.
func.func @einsum_bad_term(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{einsum term 'i1' is malformed at '1': expected letters and at most one '...'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.einsum %a {equation = "i1->i"} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that the equation has one term per operand.
func.func @einsum_term_count(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{einsum equation 'ij,jk->ik' has 2 input terms but the op has 1 operands}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.einsum %a {equation = "ij,jk->ik"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that a term has one letter per operand dimension.
func.func @einsum_term_rank(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{einsum term 'ijk' has 3 letters but its operand has rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.einsum %a {equation = "ijk->i"} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that one letter denotes one size everywhere.
func.func @einsum_letter_sizes(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+2 {{einsum letter 'j' has sizes 3 and 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.einsum %a, %b {equation = "ij,jk->ik"} : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

// Tests that output letters come from the inputs.
func.func @einsum_output_letter(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{einsum output letter 'z' does not appear in any input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.einsum %a {equation = "ij->iz"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that Reshape infers at most one dimension.
func.func @reshape_two_inferred(%a: tensor<4x16xf32>) {
  %s = moe.constant dense<[-1, -1]> : tensor<2xi64>
  // expected-error @+2 {{shape has more than one -1 entry}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reshape %a, %s : (tensor<4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that Reshape keeps the element count.
func.func @reshape_count(%a: tensor<4x16xf32>) {
  %s = moe.constant dense<[8, 16]> : tensor<2xi64>
  // expected-error @+2 {{cannot reshape 'tensor<4x16xf32>' into [8, 16]: element counts 64 and 128 differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reshape %a, %s : (tensor<4x16xf32>, tensor<2xi64>) -> tensor<8x16xf32>
  return
}

// -----

// Tests that an inferred Reshape dimension divides the element count.
func.func @reshape_indivisible(%a: tensor<4x16xf32>) {
  %s = moe.constant dense<[-1, 5]> : tensor<2xi64>
  // expected-error @+2 {{64 elements do not divide by 5}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reshape %a, %s : (tensor<4x16xf32>, tensor<2xi64>) -> tensor<?x5xf32>
  return
}

// -----

// Tests that a 0 (copy) entry refers to an input dimension.
func.func @reshape_copy_out_of_range(%a: tensor<64xf32>) {
  %s = moe.constant dense<[8, 0]> : tensor<2xi64>
  // expected-error @+2 {{shape entry 1 is 0 (copy) but the input has rank 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reshape %a, %s : (tensor<64xf32>, tensor<2xi64>) -> tensor<8x8xf32>
  return
}

// -----

// Tests that Reshape sizes are -1, 0 or positive.
func.func @reshape_negative(%a: tensor<64xf32>) {
  %s = moe.constant dense<[-2, 32]> : tensor<2xi64>
  // expected-error @+2 {{shape entry 0 is -2 (expected -1, 0 or a positive size)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reshape %a, %s : (tensor<64xf32>, tensor<2xi64>) -> tensor<2x32xf32>
  return
}

// -----

// Tests that a shape operand has a static length: it gives the result rank.
func.func @reshape_unknown_rank(%a: tensor<64xf32>, %s: tensor<?xi64>) {
  // expected-error @+2 {{operand 'shape' must have a static number of elements}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.reshape %a, %s : (tensor<64xf32>, tensor<?xi64>) -> tensor<?xf32>
  return
}

// -----

// Tests that Flatten's axis is within [-rank, rank].
func.func @flatten_axis(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{axis 3 is out of range for rank 2 (expected [-2, 2])}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.flatten %a {axis = 3 : i64} : (tensor<2x3xf32>) -> tensor<6x1xf32>
  return
}

// -----

// Tests that Squeeze only removes size-1 dimensions.
func.func @squeeze_non_unit(%a: tensor<?x4xf32>) {
  %axes = moe.constant dense<1> : tensor<1xi64>
  // expected-error @+2 {{cannot squeeze dimension 1 of size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.squeeze %a, %axes : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  return
}

// -----

// Tests that Unsqueeze inserts each dimension once.
func.func @unsqueeze_repeated(%a: tensor<4xf32>) {
  %axes = moe.constant dense<[0, -3]> : tensor<2xi64>
  // expected-error @+2 {{axis -3 is repeated in 'axes'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.unsqueeze %a, %axes : (tensor<4xf32>, tensor<2xi64>) -> tensor<1x1x4xf32>
  return
}

// -----

// Tests that Unsqueeze's axes are a scalar or 1-D (a fuzz find: a [1, 1]
// constant was read as one axis and the runtime refused the plan).
func.func @unsqueeze_axes_rank_2(%a: tensor<4xf32>) {
  %axes = moe.constant dense<0> : tensor<1x1xi64>
  // expected-error @+2 {{operand 'axes' must be a scalar or a 1-D tensor, got 'tensor<1x1xi64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.unsqueeze %a, %axes : (tensor<4xf32>, tensor<1x1xi64>) -> tensor<1x4xf32>
  return
}

// -----

// Tests that Squeeze's axes are a scalar or 1-D.
func.func @squeeze_axes_rank_2(%a: tensor<1x4xf32>) {
  %axes = moe.constant dense<0> : tensor<1x1xi64>
  // expected-error @+2 {{operand 'axes' must be a scalar or a 1-D tensor, got 'tensor<1x1xi64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.squeeze %a, %axes : (tensor<1x4xf32>, tensor<1x1xi64>) -> tensor<4xf32>
  return
}

// -----

// Tests that Concat joins tensors of one rank.
func.func @concat_rank(%a: tensor<4xi64>, %b: tensor<1x4xi64>) {
  // expected-error @+2 {{input 1 has type 'tensor<1x4xi64>' but input 0 has 'tensor<4xi64>' (expected the same rank and element type)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.concat %a, %b {axis = 0 : i64} : (tensor<4xi64>, tensor<1x4xi64>) -> tensor<5xi64>
  return
}

// -----

// Tests that Concat's non-axis dimensions agree.
func.func @concat_sizes(%a: tensor<2x4xf32>, %b: tensor<2x5xf32>) {
  // expected-error @+2 {{input 1 has size 5 in dimension 1 but input 0 has 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.concat %a, %b {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x5xf32>) -> tensor<4x4xf32>
  return
}

// -----

// Tests that Concat has an input.
func.func @concat_empty() {
  // expected-error @+2 {{requires at least one input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.concat {axis = 0 : i64} : () -> tensor<0xi64>
  return
}

// -----

// Tests that split sizes cover the split dimension exactly.
func.func @split_sizes(%a: tensor<?x128xf32>) {
  %s = moe.constant dense<[64, 32]> : tensor<2xi64>
  // expected-error @+2 {{split sizes [64, 32] add up to 96 but dimension 1 has size 128}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.split %a, %s {axis = 1 : i64} : (tensor<?x128xf32>, tensor<2xi64>) -> (tensor<?x64xf32>, tensor<?x32xf32>)
  return
}

// -----

// Tests that Split knows its number of results without looking at them.
func.func @split_count(%a: tensor<?x128xf32>) {
  // expected-error @+2 {{requires a 'split' operand or a 'num_outputs' attribute to know the number of results}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.split %a {axis = 1 : i64} : (tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

// Tests that a count of parts from the model is bounded before the result
// types are made: a dynamic dimension split into 2^40 parts is refused.
func.func @split_too_many(%a: tensor<?x128xf32>) {
  // expected-error @+2 {{'num_outputs' 1099511627776 is more than the 65536 results supported}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.split %a {axis = 0 : i64, num_outputs = 1099511627776 : i64} : (tensor<?x128xf32>) -> (tensor<?x128xf32>, tensor<?x128xf32>)
  return
}

// -----

// Tests that Split takes sizes or a count, not both, as ONNX requires.
func.func @split_both(%a: tensor<?x128xf32>, %s: tensor<2xi64>) {
  // expected-error @+2 {{'split' and 'num_outputs' must not both be given}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = moe.split %a, %s {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x128xf32>, tensor<2xi64>) -> (tensor<?x?xf32>, tensor<?x?xf32>)
  return
}

// -----

// Tests that a slice step is not zero, which would never advance.
func.func @slice_zero_step(%a: tensor<8xf32>) {
  %start = moe.constant dense<0> : tensor<1xi64>
  %end = moe.constant dense<8> : tensor<1xi64>
  %step = moe.constant dense<0> : tensor<1xi64>
  // expected-error @+2 {{slice steps must not be 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.slice %a, %start, %end steps %step : (tensor<8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<8xf32>
  return
}

// -----

// Tests that Slice's parameter vectors have one length.
func.func @slice_lengths(%a: tensor<8x8xf32>, %s: tensor<2xi64>, %e: tensor<1xi64>) {
  // expected-error @+2 {{operand 'ends' has 1 elements but 'starts' has 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.slice %a, %s, %e : (tensor<8x8xf32>, tensor<2xi64>, tensor<1xi64>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that Expand's target shape broadcasts with the input.
func.func @expand_not_broadcastable(%a: tensor<3x4xf32>) {
  %s = moe.constant dense<[2, 4]> : tensor<2xi64>
  // expected-error @+2 {{shapes [3, 4] and [2, 4] are not broadcastable}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.expand %a, %s : (tensor<3x4xf32>, tensor<2xi64>) -> tensor<3x4xf32>
  return
}

// -----

// Tests that Tile has one repeat count per dimension.
func.func @tile_repeats(%a: tensor<3x4xf32>) {
  %r = moe.constant dense<[2]> : tensor<1xi64>
  // expected-error @+2 {{'repeats' has 1 elements but the input has rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.tile %a, %r : (tensor<3x4xf32>, tensor<1xi64>) -> tensor<6x4xf32>
  return
}

// -----

// Tests that Trilu's triangle selector is a boolean.
func.func @trilu_upper(%a: tensor<4x4xf32>) {
  // expected-error @+1 {{'moe.trilu' op attribute 'upper' must be 0 or 1, got 2}}
  %0 = moe.trilu %a {upper = 2 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

// Tests that Trilu works on matrices.
func.func @trilu_rank(%a: tensor<4xf32>) {
  // expected-error @+1 {{'moe.trilu' op requires an input of rank >= 2, got 'tensor<4xf32>'}}
  %0 = moe.trilu %a : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that the Gather axis exists.
func.func @gather_axis(%a: tensor<?x64xf32>, %i: tensor<?xi64>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2 (expected [-2, 2))}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.gather %a, %i {axis = 2 : i64} : (tensor<?x64xf32>, tensor<?xi64>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that GatherElements indexes with a tensor of the data's rank.
func.func @gather_elements_rank(%a: tensor<?x8xf32>, %i: tensor<?xi64>) {
  // expected-error @+2 {{'indices' has rank 1 but 'data' has rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.gather_elements %a, %i {axis = 1 : i64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?xf32>
  return
}

// -----

// Tests that GatherND's index tuples fit the data.
func.func @gather_nd_depth(%a: tensor<4x8xf32>, %i: tensor<?x3xi64>) {
  // expected-error @+2 {{index tuples of length 3 cannot index 2 non-batch dimensions}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.gather_nd %a, %i : (tensor<4x8xf32>, tensor<?x3xi64>) -> tensor<?xf32>
  return
}

// -----

// Tests that the scatter reduction is one ONNX defines.
func.func @scatter_elements_reduction(%a: tensor<?x64xf32>, %i: tensor<?x64xi64>) {
  // expected-error @+1 {{'moe.scatter_elements' op attribute 'reduction' must be one of none, add, mul, max, min; got "sub"}}
  %0 = moe.scatter_elements %a, %i, %a {reduction = "sub"} : (tensor<?x64xf32>, tensor<?x64xi64>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that ScatterElements' indices and updates correspond one to one.
func.func @scatter_elements_shapes(%a: tensor<8x64xf32>, %i: tensor<2x64xi64>, %u: tensor<3x64xf32>) {
  // expected-error @+1 {{'moe.scatter_elements' op 'indices' 'tensor<2x64xi64>' and 'updates' 'tensor<3x64xf32>' must have the same shape}}
  %0 = moe.scatter_elements %a, %i, %u : (tensor<8x64xf32>, tensor<2x64xi64>, tensor<3x64xf32>) -> tensor<8x64xf32>
  return
}

// -----

// Tests that ScatterND's updates have the slices' shape.
func.func @scatter_nd_updates(%a: tensor<8x16xf32>, %i: tensor<?x1xi64>, %u: tensor<?x8xf32>) {
  // expected-error @+1 {{'moe.scatter_nd' op 'updates' has shape [?, 8] but expected [?, 16]}}
  %0 = moe.scatter_nd %a, %i, %u : (tensor<8x16xf32>, tensor<?x1xi64>, tensor<?x8xf32>) -> tensor<8x16xf32>
  return
}

// -----

// Tests that scatter updates have the data's element type.
func.func @scatter_nd_type(%a: tensor<8x16xf32>, %i: tensor<?x1xi64>, %u: tensor<?x16xf16>) {
  // expected-error @+1 {{'moe.scatter_nd' op 'updates' has element type 'f16' but 'data' has 'f32'}}
  %0 = moe.scatter_nd %a, %i, %u : (tensor<8x16xf32>, tensor<?x1xi64>, tensor<?x16xf16>) -> tensor<8x16xf32>
  return
}

// -----

// Tests that OneHot's values are the [off, on] pair.
func.func @one_hot_values(%i: tensor<?xi64>, %d: tensor<i64>, %v: tensor<3xf32>) {
  // expected-error @+2 {{operand 'values' must be a 2-element 1-D tensor [off, on], got 'tensor<3xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.one_hot %i, %d, %v : (tensor<?xi64>, tensor<i64>, tensor<3xf32>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that Range advances.
func.func @range_zero_delta(%a: tensor<i64>) {
  %zero = moe.constant dense<0> : tensor<i64>
  // expected-error @+2 {{'delta' must not be zero}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.range %a, %a, %zero : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return
}

// -----

// Tests that Range's operands share one type.
func.func @range_types(%a: tensor<i64>, %b: tensor<i32>) {
  // expected-error @+2 {{operand 'limit' has element type 'i32' but the input has 'i64'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.range %a, %b, %a : (tensor<i64>, tensor<i32>, tensor<i64>) -> tensor<?xi64>
  return
}

// -----

// Tests that ConstantOfShape's value is a single element.
func.func @constant_of_shape_value(%s: tensor<2xi64>) {
  // expected-error @+2 {{attribute 'value' must hold one element, got 'tensor<2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.constant_of_shape %s {value = dense<1.0> : tensor<2xf32>} : (tensor<2xi64>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that ConstantOfShape sizes are not negative.
func.func @constant_of_shape_negative() {
  %s = moe.constant dense<[2, -1]> : tensor<2xi64>
  // expected-error @+2 {{operand 'input' has negative entry -1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.constant_of_shape %s : (tensor<2xi64>) -> tensor<2x?xf32>
  return
}

// -----

// Tests that Where's branches share an element type.
func.func @where_types(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xi64>) {
  // expected-error @+2 {{operands have different element types: 'f32' and 'i64'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.where %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

// Tests that Sum has an operand.
func.func @sum_empty() {
  // expected-error @+2 {{expected at least one operand}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.sum : () -> tensor<f32>
  return
}

// -----

// Tests that Cast targets an element type a graph tensor can hold.
func.func @cast_to_index(%a: tensor<4xi64>) {
  // expected-error @+1 {{'moe.cast' op attribute 'to' failed to satisfy constraint}}
  %0 = moe.cast %a {to = index} : (tensor<4xi64>) -> tensor<4xindex>
  return
}

// -----

// Tests that Stack's inputs have one type: each is one slice of the result.
func.func @stack_types(%a: tensor<4x8xf32>, %b: tensor<4x9xf32>) {
  // expected-error @+2 {{input 1 has type 'tensor<4x9xf32>' but input 0 has 'tensor<4x8xf32>' (stacked inputs must have one type)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.stack %a, %b : (tensor<4x8xf32>, tensor<4x9xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// Tests that Stack's leading dimension is the number of inputs.
func.func @stack_count(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+2 {{'moe.stack' op inferred type(s) 'tensor<2x4x8xf32>' are incompatible with return type(s) of operation 'tensor<3x4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.stack %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<3x4x8xf32>
  return
}

// -----

// Tests that Stack has an input.
func.func @stack_empty() {
  // expected-error @+2 {{requires at least one input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = moe.stack : () -> tensor<0xf32>
  return
}

// -----

// Tests that moe.attention's key/value heads must divide the query heads:
// query head h reads key/value head h / (H / Hkv).
func.func @attention_heads(%q: tensor<1x6x4x8xf32>, %k: tensor<1x4x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op expects the key/value heads to divide the query heads, got 4 and 6}}
  %o = moe.attention %q, %k, %k scale 1.0 : tensor<1x6x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32> -> tensor<1x6x4x8xf32>
  return
}

// -----

// Tests that query and key have the same head size (their dot product).
func.func @attention_head_size(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x16xf32>) {
  // expected-error @+1 {{expects query and key of the same head size}}
  %o = moe.attention %q, %k, %k scale 1.0 : tensor<1x2x4x8xf32>, tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32> -> tensor<1x2x4x16xf32>
  return
}

// -----

// Tests that keys and values describe the same positions and heads.
func.func @attention_key_value(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x5x8xf32>) {
  // expected-error @+1 {{expects key and value to agree in dimension 2}}
  %o = moe.attention %q, %k, %v scale 1.0 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x2x4x8xf32>
  return
}

// -----

// Tests that the mask broadcasts into the scores [B, H, Sq, Skv] and never
// beyond them: the op's result has the query's batch and heads.
func.func @attention_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %m: tensor<1x1x4x3xf32>) {
  // expected-error @+1 {{expects mask dimension 3 to be 1 or the scores' size 4}}
  %o = moe.attention %q, %k, %k mask %m scale 1.0 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x3xf32> -> tensor<1x2x4x8xf32>
  return
}

// -----

// Tests that keys of another batch than 1 or the query's are refused.
func.func @attention_batch(%q: tensor<2x2x4x8xf32>, %k: tensor<3x2x4x8xf32>) {
  // expected-error @+1 {{expects key batch 1 or the query's batch}}
  %o = moe.attention %q, %k, %k scale 1.0 : tensor<2x2x4x8xf32>, tensor<3x2x4x8xf32>, tensor<3x2x4x8xf32> -> tensor<2x2x4x8xf32>
  return
}

// -----

// Tests that attention sinks are one logit per query head, [H].
func.func @attention_sinks_shape(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{expects sinks of shape [H], one per query head, got 'tensor<2xf32>' for 'tensor<1x4x4x8xf32>'}}
  %o = moe.attention %q, %k, %k sinks %s scale 1.0 : tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<2xf32> -> tensor<1x4x4x8xf32>
  return
}

// -----

// Tests that attention sinks have rank 1 (not per query row).
func.func @attention_sinks_rank(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %s: tensor<4x4xf32>) {
  // expected-error @+1 {{expects sinks of shape [H]}}
  %o = moe.attention %q, %k, %k sinks %s scale 1.0 : tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<4x4xf32> -> tensor<1x4x4x8xf32>
  return
}

// -----

// Tests that a negative soft cap is refused (0 means none).
func.func @attention_softcap_negative(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{expects a finite non-negative softcap (0: none), got -1.000000e+00}}
  %o = moe.attention %q, %k, %k scale 1.0 softcap -1.0 : tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x4x4x8xf32>
  return
}

// -----

// Tests that an infinite soft cap is refused: it would compute inf * tanh(0).
func.func @attention_softcap_infinite(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{expects a finite non-negative softcap}}
  %o = moe.attention %q, %k, %k scale 1.0 softcap 0x7F800000 : tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x4x4x8xf32>
  return
}

// -----

// Tests that a NaN soft cap is refused.
func.func @attention_softcap_nan(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{expects a finite non-negative softcap}}
  %o = moe.attention %q, %k, %k scale 1.0 softcap 0x7FC00000 : tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x4x4x8xf32>
  return
}

// -----

// Tests that the query heads must divide the value heads: value head h
// reads query head h / (Hv / Hq).
func.func @gated_delta_rule_heads(%q: tensor<1x3x3x16xf32>, %k: tensor<1x3x2x16xf32>, %v: tensor<1x3x4x8xf32>, %s: tensor<1x4x16x8xf32>, %g: tensor<1x3x4xf32>, %b: tensor<1x3x4xf32>) {
  // expected-error @+1 {{'moe.gated_delta_rule' op expects the query heads to divide the value heads, got 3 and 4}}
  %o, %n = moe.gated_delta_rule %q, %k, %v, %s, %g, %b scale 1.0 : tensor<1x3x3x16xf32>, tensor<1x3x2x16xf32>, tensor<1x3x4x8xf32>, tensor<1x4x16x8xf32>, tensor<1x3x4xf32>, tensor<1x3x4xf32> -> tensor<1x3x4x8xf32>, tensor<1x4x16x8xf32>
  return
}

// -----

// Tests that the state is [B, Hv, Dk, Dv]: its rows are the key size.
func.func @gated_delta_rule_state_key_size(%q: tensor<1x3x2x16xf32>, %k: tensor<1x3x2x16xf32>, %v: tensor<1x3x4x8xf32>, %s: tensor<1x4x8x8xf32>, %g: tensor<1x3x4xf32>, %b: tensor<1x3x4xf32>) {
  // expected-error @+1 {{expects query, key and state dimension 2 of one key size}}
  %o, %n = moe.gated_delta_rule %q, %k, %v, %s, %g, %b scale 1.0 : tensor<1x3x2x16xf32>, tensor<1x3x2x16xf32>, tensor<1x3x4x8xf32>, tensor<1x4x8x8xf32>, tensor<1x3x4xf32>, tensor<1x3x4xf32> -> tensor<1x3x4x8xf32>, tensor<1x4x8x8xf32>
  return
}

// -----

// Tests that the decay has one value per value head and token.
func.func @gated_delta_rule_decay_heads(%q: tensor<1x3x2x16xf32>, %k: tensor<1x3x2x16xf32>, %v: tensor<1x3x4x8xf32>, %s: tensor<1x4x16x8xf32>, %g: tensor<1x3x2xf32>, %b: tensor<1x3x4xf32>) {
  // expected-error @+1 {{expects decay to have the value's 4 heads, got 2}}
  %o, %n = moe.gated_delta_rule %q, %k, %v, %s, %g, %b scale 1.0 : tensor<1x3x2x16xf32>, tensor<1x3x2x16xf32>, tensor<1x3x4x8xf32>, tensor<1x4x16x8xf32>, tensor<1x3x2xf32>, tensor<1x3x4xf32> -> tensor<1x3x4x8xf32>, tensor<1x4x16x8xf32>
  return
}

// -----

// Tests that every operand covers the query's tokens.
func.func @gated_delta_rule_sequence(%q: tensor<1x3x2x16xf32>, %k: tensor<1x3x2x16xf32>, %v: tensor<1x3x4x8xf32>, %s: tensor<1x4x16x8xf32>, %g: tensor<1x3x4xf32>, %b: tensor<1x5x4xf32>) {
  // expected-error @+1 {{expects beta to agree with the query in dimension 1}}
  %o, %n = moe.gated_delta_rule %q, %k, %v, %s, %g, %b scale 1.0 : tensor<1x3x2x16xf32>, tensor<1x3x2x16xf32>, tensor<1x3x4x8xf32>, tensor<1x4x16x8xf32>, tensor<1x3x4xf32>, tensor<1x5x4xf32> -> tensor<1x3x4x8xf32>, tensor<1x4x16x8xf32>
  return
}

// -----

// Tests moe.block_quantized_constant's checks: bits 4 or 8.
func.func @quantized_bits() -> tensor<4x8xf32> {
  // expected-error @+1 {{'moe.block_quantized_constant' op expects bits 4 or 8, got 3}}
  %w = moe.block_quantized_constant bits 3 block_size 8
         codes dense<0> : tensor<12xui8> scales dense<1.0> : tensor<4xf32>
         : tensor<4x8xf32>
  return %w : tensor<4x8xf32>
}

// -----

// Tests that the codes hold rows * blocks * block_size * bits / 8 bytes.
func.func @quantized_codes() -> tensor<4x40xf32> {
  // expected-error @+1 {{'moe.block_quantized_constant' op expects codes to hold 128 elements for 'tensor<4x40xf32>', got 'tensor<4x20xui8>'}}
  %w = moe.block_quantized_constant bits 4 block_size 32
         codes dense<0> : tensor<4x20xui8> scales dense<1.0> : tensor<4x2xf32>
         : tensor<4x40xf32>
  return %w : tensor<4x40xf32>
}

// -----

// Tests that the scales are f32, one per block.
func.func @quantized_scales() -> tensor<4x40xf32> {
  // expected-error @+1 {{'moe.block_quantized_constant' op expects scales to hold 8 elements for 'tensor<4x40xf32>', got 'tensor<4xf32>'}}
  %w = moe.block_quantized_constant bits 4 block_size 32
         codes dense<0> : tensor<4x32xui8> scales dense<1.0> : tensor<4xf32>
         : tensor<4x40xf32>
  return %w : tensor<4x40xf32>
}

// -----

// Tests that only a rank-2 weight is transposed.
func.func @quantized_transposed() -> tensor<2x4x32xf32> {
  // expected-error @+1 {{'moe.block_quantized_constant' op expects a rank-2 result when transposed, got 'tensor<2x4x32xf32>'}}
  %w = moe.block_quantized_constant bits 8 block_size 16 transposed
         codes dense<3> : tensor<256xui8> scales dense<0.25> : tensor<16xf32>
         : tensor<2x4x32xf32>
  return %w : tensor<2x4x32xf32>
}

// -----

// Tests that the causal convolution's state holds the kernel's K - 1
// previous inputs per channel.
func.func @causal_conv_history(%x: tensor<1x8x3xf32>, %w: tensor<8x4xf32>, %s: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'moe.causal_conv' op expects a state [batch, channels, 3] (the kernel's history), got 'tensor<1x8x2xf32>'}}
  %y, %n = moe.causal_conv %x, %w, %s silu false : tensor<1x8x3xf32>, tensor<8x4xf32>, tensor<1x8x2xf32> -> tensor<1x8x3xf32>, tensor<1x8x2xf32>
  return
}

// -----

// Tests that the input has the weight's channels.
func.func @causal_conv_channels(%x: tensor<1x6x3xf32>, %w: tensor<8x3xf32>, %s: tensor<1x8x2xf32>) {
  // expected-error @+1 {{'moe.causal_conv' op expects input and state of the weight's 8 channels}}
  %y, %n = moe.causal_conv %x, %w, %s silu false : tensor<1x6x3xf32>, tensor<8x3xf32>, tensor<1x8x2xf32> -> tensor<1x6x3xf32>, tensor<1x8x2xf32>
  return
}
