// RUN: moec-opt %s --split-input-file --moe-refine-shapes | FileCheck %s

// Tests that a Reshape whose shape is assembled from moe.dim and constants
// gets the static sizes, the refinement flows on to users, and the function
// signature follows the returned type.
// CHECK-LABEL: func.func @reshape_chain
// CHECK-SAME: -> tensor<?x4x4xf32>
// CHECK: moe.reshape {{.*}} -> tensor<?x4x4xf32>
// CHECK: moe.relu {{.*}} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
// CHECK: return {{.*}} : tensor<?x4x4xf32>
func.func @reshape_chain(%x: tensor<?x16xf32>) -> tensor<?x?x?xf32> {
  %d = moe.dim %x, 0 : tensor<?x16xf32>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %t = moe.unsqueeze %d, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %rest = moe.constant dense<[4, 4]> : tensor<2xi64>
  %shape = moe.concat %t, %rest {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  %r = moe.reshape %x, %shape : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x?x?xf32>
  %y = moe.relu %r : (tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  return %y : tensor<?x?x?xf32>
}

// -----

// Tests that Reshape's -1 is solved symbolically: the token dimension of the
// input cancels against the moe.dim entry, leaving 4 * 16 = 64.
// CHECK-LABEL: func.func @reshape_infer_minus_one
// CHECK: moe.reshape {{.*}} -> tensor<?x64xf32>
func.func @reshape_infer_minus_one(%x: tensor<?x4x16xf32>) -> tensor<?x?xf32> {
  %d = moe.dim %x, 0 : tensor<?x4x16xf32>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %t = moe.unsqueeze %d, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %shape = moe.concat %t, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %r = moe.reshape %x, %shape : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// -----

// Tests that ConstantOfShape, Expand and Tile read the sizes of a shape
// vector built from dims and constants.
// CHECK-LABEL: func.func @shape_consumers
// CHECK: moe.constant_of_shape {{.*}} -> tensor<?x16xi64>
// CHECK: moe.expand {{.*}} -> tensor<?x16xf32>
// CHECK: moe.tile {{.*}} -> tensor<?x32xf32>
func.func @shape_consumers(%x: tensor<?x1xf32>, %y: tensor<?x16xf32>) -> (tensor<?x?xi64>, tensor<?x?xf32>, tensor<?x?xf32>) {
  %s = moe.shape %y : (tensor<?x16xf32>) -> tensor<2xi64>
  %0 = moe.constant_of_shape %s {value = dense<0> : tensor<1xi64>} : (tensor<2xi64>) -> tensor<?x?xi64>
  %1 = moe.expand %x, %s : (tensor<?x1xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  %reps = moe.constant dense<[1, 2]> : tensor<2xi64>
  %2 = moe.tile %y, %reps : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  return %0, %1, %2 : tensor<?x?xi64>, tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// Tests that TopK with a constant k and Slice with constant bounds get static
// sizes.
// CHECK-LABEL: func.func @top_k_and_slice
// CHECK: moe.top_k {{.*}} -> (tensor<?x2xf32>, tensor<?x2xi64>)
// CHECK: moe.slice {{.*}} -> tensor<?x64xf32>
func.func @top_k_and_slice(%p: tensor<?x8xf32>, %h: tensor<?x128xf32>) -> (tensor<?x?xf32>, tensor<?x?xi64>, tensor<?x?xf32>) {
  %k = moe.constant dense<2> : tensor<1xi64>
  %v, %i = moe.top_k %p, %k : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  %start = moe.constant dense<64> : tensor<1xi64>
  %end = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %axis = moe.constant dense<-1> : tensor<1xi64>
  %s = moe.slice %h, %start, %end axes %axis : (tensor<?x128xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?xf32>
  return %v, %i, %s : tensor<?x?xf32>, tensor<?x?xi64>, tensor<?x?xf32>
}

// -----

// Tests that refinement never makes a type less precise: a declared static
// size that inference cannot see stays, joined with the sizes it can see.
// CHECK-LABEL: func.func @joins_declared
// CHECK-SAME: -> tensor<8x16xf32>
// CHECK: moe.reshape {{.*}} -> tensor<8x16xf32>
func.func @joins_declared(%x: tensor<?x16xf32>, %lead: tensor<1xi64>) -> tensor<8x?xf32> {
  %c16 = moe.constant dense<16> : tensor<1xi64>
  %s = moe.concat %lead, %c16 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %r = moe.reshape %x, %s : (tensor<?x16xf32>, tensor<2xi64>) -> tensor<8x?xf32>
  return %r : tensor<8x?xf32>
}

// -----

// Tests that Reshape's -1 is solved through Sign and IsNaN as through every
// op that keeps its operand's shape: their token dimension is the input's.
// CHECK-LABEL: func.func @reshape_minus_one_through_sign_and_is_nan
// CHECK: moe.reshape {{.*}} -> tensor<?x64xf32>
// CHECK: moe.reshape {{.*}} -> tensor<?x64xi1>
func.func @reshape_minus_one_through_sign_and_is_nan(%x: tensor<?x4x16xf32>) -> (tensor<?x?xf32>, tensor<?x?xi1>) {
  %d = moe.dim %x, 0 : tensor<?x4x16xf32>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %t = moe.unsqueeze %d, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %shape = moe.concat %t, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %s = moe.sign %x : (tensor<?x4x16xf32>) -> tensor<?x4x16xf32>
  %n = moe.is_nan %x : (tensor<?x4x16xf32>) -> tensor<?x4x16xi1>
  %rs = moe.reshape %s, %shape : (tensor<?x4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  %rn = moe.reshape %n, %shape : (tensor<?x4x16xi1>, tensor<2xi64>) -> tensor<?x?xi1>
  return %rs, %rn : tensor<?x?xf32>, tensor<?x?xi1>
}
