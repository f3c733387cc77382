// RUN: moec-opt %s --split-input-file --verify-diagnostics --moe-bound-shapes=max-tokens=64 | FileCheck %s

// Tests that the token dimension takes the bound on arguments and flows
// through inference to every result, while the types stay dynamic.
// CHECK-LABEL: func.func @tokens
// CHECK-SAME: moe.bound = array<i64: 64, 16>
func.func @tokens(%x: tensor<?x16xf32>, %w: tensor<16x32xf32>) -> tensor<?x32xf32> {
  // CHECK: moe.mat_mul {{.*}} {moe.bounds = [array<i64: 64, 32>]} : (tensor<?x16xf32>, tensor<16x32xf32>) -> tensor<?x32xf32>
  %0 = moe.mat_mul %x, %w : (tensor<?x16xf32>, tensor<16x32xf32>) -> tensor<?x32xf32>
  // CHECK: moe.relu {{.*}} {moe.bounds = [array<i64: 64, 32>]}
  %1 = moe.relu %0 : (tensor<?x32xf32>) -> tensor<?x32xf32>
  return %1 : tensor<?x32xf32>
}

// -----

// Tests that a data-dependent size (NonZero) is bounded by its input's
// element count, and that the bound flows on through Gather.
// CHECK-LABEL: func.func @non_zero
func.func @non_zero(%mask: tensor<?xi1>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // CHECK: moe.non_zero {{.*}} {moe.bounds = [array<i64: 1, 64>]}
  %0 = moe.non_zero %mask : (tensor<?xi1>) -> tensor<1x?xi64>
  %zero = moe.constant dense<0> : tensor<1xi64>
  // CHECK: moe.squeeze {{.*}} {moe.bounds = [array<i64: 64>]}
  %1 = moe.squeeze %0, %zero : (tensor<1x?xi64>, tensor<1xi64>) -> tensor<?xi64>
  // CHECK: moe.gather {{.*}}moe.bounds = [array<i64: 64, 8>]
  %2 = moe.gather %x, %1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  return %2 : tensor<?x8xf32>
}

// -----

// Tests that a reshape to a shape computed from the token count is bounded
// through the shape arithmetic.
// CHECK-LABEL: func.func @reshape_by_dim
func.func @reshape_by_dim(%x: tensor<1x?x16xf32>) -> tensor<?x16xf32> {
  %t = moe.dim %x, 1 : tensor<1x?x16xf32>
  %axes = moe.constant dense<0> : tensor<1xi64>
  %t1 = moe.unsqueeze %t, %axes : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %h = moe.constant dense<16> : tensor<1xi64>
  %shape = moe.concat %t1, %h {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  // CHECK: moe.reshape {{.*}} {moe.bounds = [array<i64: 64, 16>]}
  %0 = moe.reshape %x, %shape : (tensor<1x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// -----

// Tests that a size computed from data cannot be bounded, and that this is an
// error naming the op rather than a guess.
func.func @unbounded(%n: tensor<i64>) -> tensor<?xi64> {
  %zero = moe.constant dense<0> : tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-error @+1 {{cannot bound dimension 0 of result #0}}
  %0 = moe.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return %0 : tensor<?xi64>
}

// -----

// Tests that a named dimension takes its dim-bounds entry and the others
// max-tokens, so a whole model's batch need not be planned at the token bound.
// RUN: moec-opt %s --split-input-file --verify-diagnostics --moe-bound-shapes="max-tokens=64 dim-bounds=batch=2" | FileCheck %s --check-prefix=NAMED
// NAMED-LABEL: func.func @named
// NAMED-SAME: moe.bound = array<i64: 2, 64>
func.func @named(%ids: tensor<?x?xi64> {moe.dim_params = ["batch", "seq"]}) -> tensor<?x?xi64> {
  return %ids : tensor<?x?xi64>
}

// -----

// Tests that a reshape whose bounded input and shape disagree on the element
// count (rows of a [B, S, H] input restored from a separately bounded token
// count) is bounded by its shape entries instead of failing inference.
// CHECK-LABEL: func.func @restore
func.func @restore(%x: tensor<?x?x8xf32>, %rows: tensor<?x8xf32>) -> tensor<?x?x8xf32> {
  %shape = moe.shape %x : (tensor<?x?x8xf32>) -> tensor<3xi64>
  // CHECK: moe.reshape {{.*}} {moe.bounds = [array<i64: 64, 64, 8>]}
  %0 = moe.reshape %rows, %shape : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x?x8xf32>
  return %0 : tensor<?x?x8xf32>
}
