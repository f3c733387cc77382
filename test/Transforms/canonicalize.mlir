// RUN: moec-opt %s --split-input-file --canonicalize | FileCheck %s

// Tests that Identity is removed.
// CHECK-LABEL: func.func @identity
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %0 = moe.identity %x : (tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// Tests that shape queries fold for static dimensions and keep dynamic ones
// symbolic.
// CHECK-LABEL: func.func @shape_queries
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>)
// CHECK-DAG: %[[C16V:.*]] = moe.constant dense<16> : tensor<1xi64>
// CHECK-DAG: %[[C16:.*]] = moe.constant dense<16> : tensor<i64>
// CHECK-DAG: %[[D0:.*]] = moe.dim %[[X]], 0 : tensor<?x16xf32>
// CHECK-DAG: %[[S:.*]] = moe.shape %[[X]] : (tensor<?x16xf32>) -> tensor<2xi64>
// CHECK-DAG: %[[N:.*]] = moe.size %[[X]]
// CHECK: return %[[D0]], %[[C16]], %[[S]], %[[C16V]], %[[N]]
func.func @shape_queries(%x: tensor<?x16xf32>) -> (tensor<i64>, tensor<i64>, tensor<2xi64>, tensor<1xi64>, tensor<i64>) {
  %0 = moe.dim %x, 0 : tensor<?x16xf32>
  %1 = moe.dim %x, 1 : tensor<?x16xf32>
  %2 = moe.shape %x : (tensor<?x16xf32>) -> tensor<2xi64>
  %3 = moe.shape %x {start = -1 : i64} : (tensor<?x16xf32>) -> tensor<1xi64>
  %4 = moe.size %x : (tensor<?x16xf32>) -> tensor<i64>
  return %0, %1, %2, %3, %4 : tensor<i64>, tensor<i64>, tensor<2xi64>, tensor<1xi64>, tensor<i64>
}

// -----

// Tests that Shape and Size of a static tensor fold to constants.
// CHECK-LABEL: func.func @static_shape
// CHECK-DAG: %[[S:.*]] = moe.constant dense<[4, 16]> : tensor<2xi64>
// CHECK-DAG: %[[N:.*]] = moe.constant dense<64> : tensor<i64>
// CHECK: return %[[S]], %[[N]]
func.func @static_shape(%x: tensor<4x16xf32>) -> (tensor<2xi64>, tensor<i64>) {
  %0 = moe.shape %x : (tensor<4x16xf32>) -> tensor<2xi64>
  %1 = moe.size %x : (tensor<4x16xf32>) -> tensor<i64>
  return %0, %1 : tensor<2xi64>, tensor<i64>
}

// -----

// Tests that Gather(Shape(x), i) becomes moe.dim for a dynamic dimension and a
// constant for a static one, with negative and 1-D indices.
// CHECK-LABEL: func.func @gather_of_shape
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>)
// CHECK-DAG: %[[C16V:.*]] = moe.constant dense<16> : tensor<1xi64>
// CHECK-DAG: %[[C16:.*]] = moe.constant dense<16> : tensor<i64>
// CHECK-DAG: %[[D0:.*]] = moe.dim %[[X]], 0 : tensor<?x16xf32>
// CHECK-NOT: moe.gather
// CHECK: return %[[D0]], %[[C16]], %[[C16V]]
func.func @gather_of_shape(%x: tensor<?x16xf32>) -> (tensor<i64>, tensor<i64>, tensor<1xi64>) {
  %s = moe.shape %x : (tensor<?x16xf32>) -> tensor<2xi64>
  %i0 = moe.constant dense<0> : tensor<i64>
  %im1 = moe.constant dense<-1> : tensor<i64>
  %i1 = moe.constant dense<[1]> : tensor<1xi64>
  %0 = moe.gather %s, %i0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %1 = moe.gather %s, %im1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %2 = moe.gather %s, %i1 : (tensor<2xi64>, tensor<1xi64>) -> tensor<1xi64>
  return %0, %1, %2 : tensor<i64>, tensor<i64>, tensor<1xi64>
}

// -----

// Tests that Gather of small constants folds along any axis.
// CHECK-LABEL: func.func @gather_constant
// CHECK: %[[R:.*]] = moe.constant dense<{{\[\[}}3, 1], [6, 4]]> : tensor<2x2xi64>
// CHECK: return %[[R]]
func.func @gather_constant() -> tensor<2x2xi64> {
  %d = moe.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %i = moe.constant dense<[2, 0]> : tensor<2xi64>
  %0 = moe.gather %d, %i {axis = 1 : i64} : (tensor<2x3xi64>, tensor<2xi64>) -> tensor<2x2xi64>
  return %0 : tensor<2x2xi64>
}

// -----

// Tests that Concat folds constants, flattens nested concats along its axis
// and disappears with a single input.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:.*]]: tensor<2xi64>, %[[B:.*]]: tensor<1xi64>)
// CHECK-DAG: %[[C:.*]] = moe.constant dense<{{\[\[}}1, 3, 4], [2, 5, 6]]> : tensor<2x3xi64>
// CHECK-DAG: %[[F:.*]] = moe.concat %[[B]], %[[A]], %[[A]] {axis = -1 : i64} : (tensor<1xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<5xi64>
// CHECK: return %[[C]], %[[F]], %[[A]]
func.func @concat(%a: tensor<2xi64>, %b: tensor<1xi64>) -> (tensor<2x3xi64>, tensor<5xi64>, tensor<2xi64>) {
  %c0 = moe.constant dense<[[1], [2]]> : tensor<2x1xi64>
  %c1 = moe.constant dense<[[3, 4], [5, 6]]> : tensor<2x2xi64>
  %0 = moe.concat %c0, %c1 {axis = 1 : i64} : (tensor<2x1xi64>, tensor<2x2xi64>) -> tensor<2x3xi64>
  %inner = moe.concat %b, %a {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  %1 = moe.concat %inner, %a {axis = -1 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<5xi64>
  %2 = moe.concat %a {axis = 0 : i64} : (tensor<2xi64>) -> tensor<2xi64>
  return %0, %1, %2 : tensor<2x3xi64>, tensor<5xi64>, tensor<2xi64>
}

// -----

// Tests that Slice folds on the static part of a shape and on small constants
// with negative starts, clamped ends and negative steps.
// CHECK-LABEL: func.func @slice
// CHECK-DAG: %[[S:.*]] = moe.constant dense<[16, 4]> : tensor<2xi64>
// CHECK-DAG: %[[C:.*]] = moe.constant dense<{{\[\[}}7, 9], [1, 3]]> : tensor<2x2xi64>
// CHECK-NOT: moe.slice
// CHECK: return %[[S]], %[[C]]
func.func @slice(%x: tensor<?x16x4xf32>) -> (tensor<2xi64>, tensor<2x2xi64>) {
  %s = moe.shape %x : (tensor<?x16x4xf32>) -> tensor<3xi64>
  %start = moe.constant dense<1> : tensor<1xi64>
  %end = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %0 = moe.slice %s, %start, %end : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %d = moe.constant dense<[[1, 2, 3], [4, 5, 6], [7, 8, 9]]> : tensor<3x3xi64>
  %starts = moe.constant dense<[-1, 0]> : tensor<2xi64>
  %ends = moe.constant dense<[-4, 3]> : tensor<2xi64>
  %axes = moe.constant dense<[0, 1]> : tensor<2xi64>
  %steps = moe.constant dense<[-2, 2]> : tensor<2xi64>
  %1 = moe.slice %d, %starts, %ends axes %axes steps %steps : (tensor<3x3xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<2x2xi64>
  return %0, %1 : tensor<2xi64>, tensor<2x2xi64>
}

// -----

// Tests that rank changes of small constants fold and that a scalar dim stays
// symbolic through Unsqueeze.
// CHECK-LABEL: func.func @rank_changes
// CHECK-DAG: %[[SQ:.*]] = moe.constant dense<[1, 2]> : tensor<2xi64>
// CHECK-DAG: %[[UN:.*]] = moe.constant dense<5> : tensor<1xi64>
// CHECK-DAG: %[[RE:.*]] = moe.constant dense<{{\[\[}}1], [2]]> : tensor<2x1xi64>
// CHECK-DAG: %[[D:.*]] = moe.dim
// CHECK-DAG: %[[UD:.*]] = moe.unsqueeze %[[D]]
// CHECK: return %[[SQ]], %[[UN]], %[[RE]], %[[UD]]
func.func @rank_changes(%x: tensor<?x16xf32>) -> (tensor<2xi64>, tensor<1xi64>, tensor<2x1xi64>, tensor<1xi64>) {
  %c = moe.constant dense<[[1, 2]]> : tensor<1x2xi64>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %0 = moe.squeeze %c, %zero : (tensor<1x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %five = moe.constant dense<5> : tensor<i64>
  %1 = moe.unsqueeze %five, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape = moe.constant dense<[-1, 1]> : tensor<2xi64>
  %2 = moe.reshape %c, %shape : (tensor<1x2xi64>, tensor<2xi64>) -> tensor<2x1xi64>
  %d = moe.dim %x, 0 : tensor<?x16xf32>
  %3 = moe.unsqueeze %d, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  return %0, %1, %2, %3 : tensor<2xi64>, tensor<1xi64>, tensor<2x1xi64>, tensor<1xi64>
}

// -----

// Tests that integer arithmetic folds with ONNX semantics: truncating Div,
// Python-style Mod (sign of the divisor) unless fmod = 1, and broadcasting.
// CHECK-LABEL: func.func @integer_arithmetic
// CHECK-DAG: %[[ADD:.*]] = moe.constant dense<[-4, 10, 9]> : tensor<3xi64>
// CHECK-DAG: %[[SUB:.*]] = moe.constant dense<[-10, 4, 3]> : tensor<3xi64>
// CHECK-DAG: %[[MUL:.*]] = moe.constant dense<[-21, 21, 18]> : tensor<3xi64>
// CHECK-DAG: %[[DIV:.*]] = moe.constant dense<[-2, 2, 2]> : tensor<3xi64>
// CHECK-DAG: %[[MOD:.*]] = moe.constant dense<[-1, 1, -2]> : tensor<3xi64>
// CHECK-DAG: %[[FMOD:.*]] = moe.constant dense<[-1, 1, 2]> : tensor<3xi64>
// CHECK-DAG: %[[POW:.*]] = moe.constant dense<[-343, 343, 216]> : tensor<3xi64>
// CHECK-DAG: %[[NEG:.*]] = moe.constant dense<[7, -7, -6]> : tensor<3xi64>
// CHECK-DAG: %[[ABS:.*]] = moe.constant dense<[7, 7, 6]> : tensor<3xi64>
// CHECK: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]], %[[MOD]], %[[FMOD]], %[[POW]], %[[NEG]], %[[ABS]]
func.func @integer_arithmetic() -> (tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>) {
  %a = moe.constant dense<[-7, 7, 6]> : tensor<3xi64>
  %b = moe.constant dense<3> : tensor<i64>
  %m = moe.constant dense<[-3, 3, -4]> : tensor<3xi64>
  %0 = moe.add %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %1 = moe.sub %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %2 = moe.mul %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %3 = moe.div %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %4 = moe.mod %a, %m : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %5 = moe.mod %a, %m {fmod = 1 : i64} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %6 = moe.pow %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  %7 = moe.neg %a : (tensor<3xi64>) -> tensor<3xi64>
  %8 = moe.abs %a : (tensor<3xi64>) -> tensor<3xi64>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>, tensor<3xi64>
}

// -----

// Tests that an integer division by zero is left for the runtime to report
// instead of being folded.
// CHECK-LABEL: func.func @division_by_zero
// CHECK: moe.div
func.func @division_by_zero() -> tensor<2xi64> {
  %a = moe.constant dense<[1, 2]> : tensor<2xi64>
  %z = moe.constant dense<[1, 0]> : tensor<2xi64>
  %0 = moe.div %a, %z : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

// Tests that float ops fold on small constants.
// CHECK-LABEL: func.func @float_arithmetic
// CHECK-DAG: %[[SQRT:.*]] = moe.constant dense<[2.000000e+00, 1.500000e+00]> : tensor<2xf32>
// CHECK-DAG: %[[MAX:.*]] = moe.constant dense<[4.000000e+00, 2.250000e+00]> : tensor<2xf32>
// CHECK-DAG: %[[FLOOR:.*]] = moe.constant dense<[4.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: return %[[SQRT]], %[[MAX]], %[[FLOOR]]
func.func @float_arithmetic() -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %f = moe.constant dense<[4.0, 2.25]> : tensor<2xf32>
  %half = moe.constant dense<0.5> : tensor<f32>
  %0 = moe.sqrt %f : (tensor<2xf32>) -> tensor<2xf32>
  %1 = moe.max %f, %half : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  %2 = moe.floor %f : (tensor<2xf32>) -> tensor<2xf32>
  return %0, %1, %2 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}

// -----

// Tests that additive and multiplicative identities disappear, except x + 0.0
// on floats, which turns -0.0 into +0.0.
// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[I:.*]]: tensor<?x16xi64>, %[[F:.*]]: tensor<?x16xf32>)
// CHECK: %[[ADD:.*]] = moe.add %[[F]]
// CHECK: return %[[I]], %[[F]], %[[ADD]]
func.func @identities(%x: tensor<?x16xi64>, %f: tensor<?x16xf32>) -> (tensor<?x16xi64>, tensor<?x16xf32>, tensor<?x16xf32>) {
  %zero = moe.constant dense<0> : tensor<i64>
  %one = moe.constant dense<1.0> : tensor<f32>
  %fzero = moe.constant dense<0.0> : tensor<f32>
  %0 = moe.add %x, %zero : (tensor<?x16xi64>, tensor<i64>) -> tensor<?x16xi64>
  %1 = moe.mul %f, %one : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  %2 = moe.add %f, %fzero : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
  return %0, %1, %2 : tensor<?x16xi64>, tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// Tests that comparisons, logical ops and Where fold on constants.
// CHECK-LABEL: func.func @predicates
// CHECK-DAG: %[[LT:.*]] = moe.constant dense<[true, false, false]> : tensor<3xi1>
// CHECK-DAG: %[[GE:.*]] = moe.constant dense<[false, true, true]> : tensor<3xi1>
// CHECK-DAG: %[[AND:.*]] = moe.constant dense<false> : tensor<3xi1>
// CHECK-DAG: %[[NOT:.*]] = moe.constant dense<true> : tensor<3xi1>
// CHECK-DAG: %[[SEL:.*]] = moe.constant dense<[1, 2, 2]> : tensor<3xi64>
// CHECK: return %[[LT]], %[[GE]], %[[AND]], %[[NOT]], %[[SEL]]
func.func @predicates() -> (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi64>) {
  %a = moe.constant dense<[1, 2, 3]> : tensor<3xi64>
  %b = moe.constant dense<2> : tensor<1xi64>
  %0 = moe.less %a, %b : (tensor<3xi64>, tensor<1xi64>) -> tensor<3xi1>
  %1 = moe.greater_or_equal %a, %b : (tensor<3xi64>, tensor<1xi64>) -> tensor<3xi1>
  %2 = moe.and %0, %1 : (tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  %3 = moe.not %2 : (tensor<3xi1>) -> tensor<3xi1>
  %4 = moe.where %0, %a, %b : (tensor<3xi1>, tensor<3xi64>, tensor<1xi64>) -> tensor<3xi64>
  return %0, %1, %2, %3, %4 : tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi64>
}

// -----

// Tests that Cast folds constants (floats truncate toward zero, non-zero is
// true), disappears when it changes nothing, and that CastLike becomes Cast.
// CHECK-LABEL: func.func @casts
// CHECK-SAME: (%[[X:.*]]: tensor<?xi64>, %{{.*}}: tensor<f16>)
// CHECK-DAG: %[[I:.*]] = moe.constant dense<[-2, 0, 3]> : tensor<3xi32>
// CHECK-DAG: %[[B:.*]] = moe.constant dense<[true, false, true]> : tensor<3xi1>
// CHECK-DAG: %[[F:.*]] = moe.constant dense<[-1.000000e+00, 2.550000e+02]> : tensor<2xf32>
// CHECK-DAG: %[[H:.*]] = moe.cast %[[X]] {to = f16} : (tensor<?xi64>) -> tensor<?xf16>
// CHECK: return %[[I]], %[[B]], %[[X]], %[[H]], %[[F]]
func.func @casts(%x: tensor<?xi64>, %t: tensor<f16>) -> (tensor<3xi32>, tensor<3xi1>, tensor<?xi64>, tensor<?xf16>, tensor<2xf32>) {
  %f = moe.constant dense<[-2.7, 0.0, 3.9]> : tensor<3xf32>
  %0 = moe.cast %f {to = i32} : (tensor<3xf32>) -> tensor<3xi32>
  %1 = moe.cast %f {to = i1} : (tensor<3xf32>) -> tensor<3xi1>
  %2 = moe.cast %x {to = i64} : (tensor<?xi64>) -> tensor<?xi64>
  %3 = moe.cast_like %x, %t : (tensor<?xi64>, tensor<f16>) -> tensor<?xf16>
  %i = moe.constant dense<[-1, 255]> : tensor<2xi64>
  %4 = moe.cast %i {to = f32} : (tensor<2xi64>) -> tensor<2xf32>
  return %0, %1, %2, %3, %4 : tensor<3xi32>, tensor<3xi1>, tensor<?xi64>, tensor<?xf16>, tensor<2xf32>
}

// -----

// Tests that Range folds, counting down and with float steps.
// CHECK-LABEL: func.func @range
// CHECK-DAG: %[[I:.*]] = moe.constant dense<[10, 8, 6, 4]> : tensor<4xi64>
// CHECK-DAG: %[[F:.*]] = moe.constant dense<[0.000000e+00, 4.000000e-01, 8.000000e-01]> : tensor<3xf32>
// CHECK: return %[[I]], %[[F]]
func.func @range() -> (tensor<4xi64>, tensor<3xf32>) {
  %s = moe.constant dense<10> : tensor<i64>
  %l = moe.constant dense<2> : tensor<i64>
  %d = moe.constant dense<-2> : tensor<i64>
  %0 = moe.range %s, %l, %d : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<4xi64>
  %fs = moe.constant dense<0.0> : tensor<f32>
  %fl = moe.constant dense<1.0> : tensor<f32>
  %fd = moe.constant dense<0.4> : tensor<f32>
  %1 = moe.range %fs, %fl, %fd : (tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  return %0, %1 : tensor<4xi64>, tensor<3xf32>
}

// -----

// Tests that ConstantOfShape folds to a splat, which is O(1) in memory even
// for a 64 MiB tensor, and that Sum folds variadic constants.
// CHECK-LABEL: func.func @splats
// CHECK-DAG: %[[BIG:.*]] = moe.constant dense<1.000000e+00> : tensor<4096x4096xf32>
// CHECK-DAG: %[[SMALL:.*]] = moe.constant dense<7> : tensor<2x3xi64>
// CHECK-DAG: %[[SUM:.*]] = moe.constant dense<[8, 11]> : tensor<2xi64>
// CHECK-DAG: %[[NEG:.*]] = moe.constant dense<-1.000000e+00> : tensor<4096x4096xf32>
// CHECK: return %[[BIG]], %[[SMALL]], %[[SUM]], %[[NEG]]
func.func @splats() -> (tensor<4096x4096xf32>, tensor<2x3xi64>, tensor<2xi64>, tensor<4096x4096xf32>) {
  %shape = moe.constant dense<4096> : tensor<2xi64>
  %0 = moe.constant_of_shape %shape {value = dense<1.0> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<4096x4096xf32>
  %small = moe.constant dense<[2, 3]> : tensor<2xi64>
  %1 = moe.constant_of_shape %small {value = dense<7> : tensor<1xi64>} : (tensor<2xi64>) -> tensor<2x3xi64>
  %a = moe.constant dense<[1, 5]> : tensor<2xi64>
  %b = moe.constant dense<[3, 2]> : tensor<2xi64>
  %c = moe.constant dense<4> : tensor<i64>
  %2 = moe.sum %a, %b, %c : (tensor<2xi64>, tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %3 = moe.neg %0 : (tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0, %1, %2, %3 : tensor<4096x4096xf32>, tensor<2x3xi64>, tensor<2xi64>, tensor<4096x4096xf32>
}

// -----

// Tests that Transpose with the identity permutation and Expand to the
// input's own shape disappear.
// CHECK-LABEL: func.func @no_op_layout
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>)
// CHECK-NEXT: return %[[X]], %[[X]]
func.func @no_op_layout(%x: tensor<?x16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %0 = moe.transpose %x {perm = array<i64: 0, 1>} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %1 = moe.expand %x, %ones : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  return %0, %1 : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// Tests that Reshape of a Reshape only keeps the last shape, and that a
// Reshape to the tensor's own (symbolic) shape disappears.
// CHECK-LABEL: func.func @reshapes
// CHECK-SAME: (%[[X:.*]]: tensor<?x4x16xf32>)
// CHECK: %[[R:.*]] = moe.reshape %[[X]], %{{.*}} : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x64xf32>
// CHECK: return %[[R]], %[[X]]
func.func @reshapes(%x: tensor<?x4x16xf32>) -> (tensor<?x64xf32>, tensor<?x4x16xf32>) {
  %s1 = moe.constant dense<[-1, 16]> : tensor<2xi64>
  %0 = moe.reshape %x, %s1 : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  %s2 = moe.constant dense<[-1, 64]> : tensor<2xi64>
  %1 = moe.reshape %0, %s2 : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x64xf32>
  %d = moe.dim %x, 0 : tensor<?x4x16xf32>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %t = moe.unsqueeze %d, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %rest = moe.constant dense<[0, 16]> : tensor<2xi64>
  %s3 = moe.concat %t, %rest {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  %2 = moe.reshape %x, %s3 : (tensor<?x4x16xf32>, tensor<3xi64>) -> tensor<?x4x16xf32>
  return %1, %2 : tensor<?x64xf32>, tensor<?x4x16xf32>
}

// -----

// Tests that a torch-style shape chain on a token tensor
// (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, then the
// Where(Equal(shape, -1), 1, shape) guard of Expand) folds to moe.dim of the
// token dimension: a size is never -1, so the guard is false, and Expand to
// the tensor's own shape disappears.
// CHECK-LABEL: func.func @torch_shape_chain
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>)
// CHECK-DAG: %[[C4:.*]] = moe.constant dense<4> : tensor<2xi64>
// CHECK-DAG: %[[ZERO:.*]] = moe.constant dense<0> : tensor<1xi64>
// CHECK-DAG: %[[T:.*]] = moe.dim %[[X]], 0 : tensor<?x16xf32>
// CHECK: %[[TV:.*]] = moe.unsqueeze %[[T]], %[[ZERO]] : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
// CHECK: %[[SHAPE:.*]] = moe.concat %[[TV]], %[[C4]] {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
// CHECK: %[[R:.*]] = moe.reshape %[[X]], %[[SHAPE]] : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x4x4xf32>
// CHECK-NOT: moe.gather
// CHECK-NOT: moe.equal
// CHECK-NOT: moe.where
// CHECK-NOT: moe.expand
// CHECK: return %[[R]]
func.func @torch_shape_chain(%x: tensor<?x16xf32>) -> tensor<?x4x4xf32> {
  %shape = moe.shape %x : (tensor<?x16xf32>) -> tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i64>
  %tokens = moe.gather %shape, %zero : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %axes = moe.constant dense<0> : tensor<1xi64>
  %tokens_v = moe.unsqueeze %tokens, %axes : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %rest = moe.constant dense<[4, 4]> : tensor<2xi64>
  %new_shape = moe.concat %tokens_v, %rest {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  %r = moe.reshape %x, %new_shape : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x4x4xf32>
  %minus_one = moe.constant dense<-1> : tensor<3xi64>
  %is_neg = moe.equal %new_shape, %minus_one : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  %ones = moe.constant dense<1> : tensor<3xi64>
  %guarded = moe.where %is_neg, %ones, %new_shape : (tensor<3xi1>, tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %e = moe.expand %r, %guarded : (tensor<?x4x4xf32>, tensor<3xi64>) -> tensor<?x4x4xf32>
  return %e : tensor<?x4x4xf32>
}

// -----

// Tests that shape arithmetic on static dimensions folds to a constant shape:
// Reshape(x, [Shape(x)[1] * Shape(x)[2]]) needs no run-time computation.
// CHECK-LABEL: func.func @static_shape_arithmetic
// CHECK: %[[S:.*]] = moe.constant dense<[-1, 64]> : tensor<2xi64>
// CHECK: moe.reshape %{{.*}}, %[[S]]
func.func @static_shape_arithmetic(%x: tensor<?x4x16xf32>) -> tensor<?x64xf32> {
  %shape = moe.shape %x : (tensor<?x4x16xf32>) -> tensor<3xi64>
  %i1 = moe.constant dense<1> : tensor<i64>
  %i2 = moe.constant dense<2> : tensor<i64>
  %a = moe.gather %shape, %i1 : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %b = moe.gather %shape, %i2 : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %prod = moe.mul %a, %b : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %axes = moe.constant dense<0> : tensor<1xi64>
  %prod_v = moe.unsqueeze %prod, %axes : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %minus_one = moe.constant dense<-1> : tensor<1xi64>
  %s = moe.concat %minus_one, %prod_v {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %r = moe.reshape %x, %s : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

// Tests that weights are never folded: a dense_resource blob stays a
// reference to the model's memory-mapped data whatever op consumes it.
// CHECK-LABEL: func.func @resource_not_folded
// CHECK: %[[W:.*]] = moe.constant dense_resource<w_big> : tensor<2x2048xf32>
// CHECK: moe.neg %[[W]]
// CHECK: moe.reshape %[[W]]
// CHECK: moe.gather %[[W]]
// CHECK: moe.transpose %[[W]]
func.func @resource_not_folded() -> (tensor<2x2048xf32>, tensor<4096xf32>, tensor<2x2048xf32>, tensor<2048x2xf32>) {
  %w = moe.constant dense_resource<w_big> : tensor<2x2048xf32>
  %0 = moe.neg %w : (tensor<2x2048xf32>) -> tensor<2x2048xf32>
  %s = moe.constant dense<4096> : tensor<1xi64>
  %1 = moe.reshape %w, %s : (tensor<2x2048xf32>, tensor<1xi64>) -> tensor<4096xf32>
  %i = moe.constant dense<[1, 0]> : tensor<2xi64>
  %2 = moe.gather %w, %i : (tensor<2x2048xf32>, tensor<2xi64>) -> tensor<2x2048xf32>
  %3 = moe.transpose %w : (tensor<2x2048xf32>) -> tensor<2048x2xf32>
  return %0, %1, %2, %3 : tensor<2x2048xf32>, tensor<4096xf32>, tensor<2x2048xf32>, tensor<2048x2xf32>
}
{-#
  dialect_resources: {
    builtin: {
      w_big: "0x04000000"
    }
  }
#-}

// -----

// Tests that a dense constant over the folding limit (1024 elements) is not
// computed on: only shape-sized constants are, so a weight given as dense
// elements is never copied either.
// CHECK-LABEL: func.func @large_dense_not_folded
// CHECK: moe.neg
func.func @large_dense_not_folded() -> tensor<1025xi8> {
  %w = moe.constant dense<"0x4420823cfde6f1c26b30f90ec7dd01e4887534a20f0b0d04c36ed80e71e0fd77b07670eb940bd5335f973daad8619b91ffc911f57cced458bbbf2ce03753c9bdfa0ff0169dc9575674066676cfb0b4eb8902c44269da1cf6ba66d3f8b6d4b100a9ea0e755a5c2e8210242a08e7078f7f89385eb09423555182568b96e8a4fef23a0c9fc5afd7608437816bdd0a7309cb4a1252e4da70e6720fcaa4da1e98406c189c24279e9851d5814204136feb5713c166b13269dd63fc35c797ff08a6cd90095066a745addb6d8831c2b0f87821142b4456556d89aa82bcadae3a9578fa4535a414d025c24b40ae3ac127722988ba973aea8d37179706072ed33a14607ad7523be6557b5134dec19681f4a1336aa2140d0597a3e6c8a0cc2020a2e939806ef0b6845d6a9d657eb8298f2de52ead74c79d15a75fa29b7dab332f7d700a7ccd258924260b0594b7fcf04e33a727585b4c48a39c369640694810a1695b99dd50187e8120e4dc80e0e805caad5784f80cd5091fb5464046848dcbcd582d77f8035aa2e0737aa0fdf573d3ac8c701824bc51689f9899be54ed2b3fc15a4f80da6f1afdc9b2c454142e8233882a4729e37bc3ddcb54a6e040f96c3ddcd13c978e7fc10261e00a0f7c856958914b668b9f80e456b6fbd73e6ac46891370c3c06974526bf9fdfb6a5003fe2e6b39cccadfc39c1c368018e65ecd19c57e665b801c7dacfac22fc7e940ad04fcb8a5b2505b287d29b4dec84f856ef178a32d823b522e20a54522fcd8d9b6a6a79aa892326bcef1956988ab676c8cc58f784a871847d0fcea2dd7f89612554e34b86eb534646e1b89ecd7b3b699c223674cba4fc335f171c0b6e11fde2af8c3c583071cc77fde6c156767891ecc76ce784a9fe386d28170702f5a3c49364cc514d0f07c64a1dc2824228ec9b07121f42158c3cdd2e610eff428e62e5c7a889857c7d1e59b3db1fb4d366d9238825805a314d1e68db161b2ef0bd32a0144010e241cae40c8a2e80a62b9a11c41d85a04285c23b9b30d97d69a9adc8f63542e50f955066bdc7a631d1b040211699a0d598a3b48ba6043e4ca2a6a723e78ff5e8bac2281c4418fb807dadb9bdce9dedae550e4b807144395ed21932883668852228256f58dd0bbcf9917066fc78d9e7bb60f62583d06704c2f927ced914b4ea036199023d9aa190d2d19de79a43e347538104d912bcd7cd90092e2e02c489ed8bbef6acc6e93bf7b54ad44b095885bc4193d38493d78cddabf86efbcdd92e2042694c750d34814ff532cc5f012dda1a6fd8b11834d63c878e5bf5186d2cc73fe596fec93bf5364cc5675583d593fc6dacf83404b1881ce19933758c8a7ed24b428363d01d4cd38a8ff59c88fb6dffbcf07bad5a5ce64c1da6456da1fcf5a83c414783732d19583b73669dd8a7020a9c702b728fae89c20b3ea8"> : tensor<1025xi8>
  %0 = moe.neg %w : (tensor<1025xi8>) -> tensor<1025xi8>
  return %0 : tensor<1025xi8>
}

// -----

// Tests that Sign folds on constants, for integers and floats alike.
// CHECK-LABEL: func.func @fold_sign
func.func @fold_sign() -> (tensor<3xi64>, tensor<3xf32>) {
  // CHECK-DAG: moe.constant dense<[-1, 0, 1]> : tensor<3xi64>
  // CHECK-DAG: moe.constant dense<[-1.000000e+00, 0.000000e+00, 1.000000e+00]> : tensor<3xf32>
  %i = moe.constant dense<[-7, 0, 3]> : tensor<3xi64>
  %f = moe.constant dense<[-2.5, 0.0, 0.25]> : tensor<3xf32>
  %0 = moe.sign %i : (tensor<3xi64>) -> tensor<3xi64>
  %1 = moe.sign %f : (tensor<3xf32>) -> tensor<3xf32>
  return %0, %1 : tensor<3xi64>, tensor<3xf32>
}

// -----

// Tests that a stack of constants is kept, not folded into a copied
// constant: the plan writes it as one weight from its inputs' bytes.
// CHECK-LABEL: func.func @stack_of_constants_kept
// CHECK-DAG: %[[A:.*]] = moe.constant dense<1.000000e+00> : tensor<2x3xf32>
// CHECK-DAG: %[[B:.*]] = moe.constant dense<2.000000e+00> : tensor<2x3xf32>
// CHECK: moe.stack %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2x3xf32>
func.func @stack_of_constants_kept() -> tensor<2x2x3xf32> {
  %a = moe.constant dense<1.0> : tensor<2x3xf32>
  %b = moe.constant dense<2.0> : tensor<2x3xf32>
  %0 = moe.stack %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2x3xf32>
  return %0 : tensor<2x2x3xf32>
}

// -----

// Tests that a stack of computed tensors becomes the concat of the inputs
// unsqueezed at axis 0, the step the runtime runs.
// CHECK-LABEL: func.func @stack_to_concat
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>, %[[Y:.*]]: tensor<?x4xf32>)
// CHECK: %[[AXES:.*]] = moe.constant dense<0> : tensor<1xi64>
// CHECK: %[[U0:.*]] = moe.unsqueeze %[[X]], %[[AXES]] : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
// CHECK: %[[U1:.*]] = moe.unsqueeze %[[Y]], %[[AXES]] : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<1x?x4xf32>
// CHECK: moe.concat %[[U0]], %[[U1]] {axis = 0 : i64} : (tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<2x?x4xf32>
// CHECK-NOT: moe.stack
func.func @stack_to_concat(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<2x?x4xf32> {
  %0 = moe.stack %x, %y : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<2x?x4xf32>
  return %0 : tensor<2x?x4xf32>
}
