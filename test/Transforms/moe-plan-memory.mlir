// RUN: moec-opt %s --split-input-file --moe-bound-shapes=max-tokens=4 --moe-plan-memory | FileCheck %s

// Tests that buffers whose lifetimes do not overlap share arena space: the
// input dies at the first matmul, so the second takes its bytes, and the third
// takes the first's.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME: moe.offset = 0
// CHECK-SAME: moe.arena_size = 256
// CHECK-SAME: moe.naive_size = 512
func.func @reuse(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w = moe.constant dense<1.0> : tensor<8x8xf32>
  // CHECK: moe.mat_mul {{.*}}moe.offsets = array<i64: 128>
  %0 = moe.mat_mul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // CHECK: moe.mat_mul {{.*}}moe.offsets = array<i64: 0>
  %1 = moe.mat_mul %0, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  // CHECK: moe.mat_mul {{.*}}moe.offsets = array<i64: 128>
  %2 = moe.mat_mul %1, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Tests that elementwise ops write in place over an operand that dies at them
// (the runtime copies graph inputs in at every run, so even the input's slot).
// CHECK-LABEL: func.func @in_place
// CHECK-SAME: moe.arena_size = 128
func.func @in_place(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: moe.exp {{.*}}moe.offsets = array<i64: 0>
  %0 = moe.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: moe.tanh {{.*}}moe.offsets = array<i64: 0>
  %1 = moe.tanh %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Tests that a binary op on dynamic shapes does not run in place: its `?`
// sizes could broadcast at run time, making the output larger than an operand.
// CHECK-LABEL: func.func @dynamic_binary
func.func @dynamic_binary(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // CHECK: moe.add {{.*}}moe.offsets = array<i64: 256>
  %0 = moe.add %x, %y : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// Tests that a view (reshape) reuses its input's buffer and that a value still
// used later is not overwritten.
// CHECK-LABEL: func.func @view_and_live_operand
func.func @view_and_live_operand(%x: tensor<4x8xf32>) -> (tensor<32xf32>, tensor<4x8xf32>) {
  %shape = moe.constant dense<32> : tensor<1xi64>
  // CHECK: moe.exp {{.*}}moe.offsets = array<i64: 128>
  %0 = moe.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: moe.reshape {{.*}}moe.offsets = array<i64: 128>
  %1 = moe.reshape %0, %shape : (tensor<4x8xf32>, tensor<1xi64>) -> tensor<32xf32>
  return %1, %x : tensor<32xf32>, tensor<4x8xf32>
}

// -----

// Tests that constants are weights outside the arena.
// CHECK-LABEL: func.func @constants
func.func @constants(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: moe.constant {{.*}}moe.offsets = array<i64: -1>
  %c = moe.constant dense<1.0> : tensor<8xf32>
  %0 = moe.add %x, %c : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Tests that a stack of constants is a weight, not an arena tensor: it gets
// no offset and no arena bytes (the plan stores it from its inputs' bytes),
// so only the input (128 bytes) and the sum (256) are planned.
// CHECK-LABEL: func.func @weight_stack
// CHECK-SAME: moe.offset = 256
// CHECK-SAME: moe.arena_size = 384
// CHECK-SAME: moe.naive_size = 384
func.func @weight_stack(%x: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %a = moe.constant dense<1.0> : tensor<4x8xf32>
  %b = moe.constant dense<2.0> : tensor<4x8xf32>
  // CHECK: moe.stack {{.*}}moe.offsets = array<i64: -1>
  %w = moe.stack %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.add {{.*}}moe.offsets = array<i64: 0>
  %0 = moe.add %w, %x : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}
