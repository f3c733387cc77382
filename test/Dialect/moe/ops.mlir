// RUN: moec-opt %s --split-input-file | moec-opt --split-input-file | FileCheck %s

// Tests that constants and dims round-trip.
// CHECK-LABEL: func.func @constant_and_dim
func.func @constant_and_dim(%x: tensor<?x16xf32>) -> tensor<1xi64> {
  // CHECK: moe.constant dense<[1, 2]> : tensor<2xi64>
  %0 = moe.constant dense<[1, 2]> : tensor<2xi64>
  // CHECK: moe.dim %{{.*}}, 0 : tensor<?x16xf32>
  %1 = moe.dim %x, 0 : tensor<?x16xf32>
  return %1 : tensor<1xi64>
}
