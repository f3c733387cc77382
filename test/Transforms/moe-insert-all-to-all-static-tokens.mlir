// RUN: moec-opt %s --moe-place-experts=devices=2 --moe-insert-all-to-all | FileCheck %s

// Tests that a layer of a static token count (T = 1, a decode step) with a
// replicated dense part gets per-device types: device 0's share of the one
// token is 0 rows, so its re-run router, dispatch and combine are typed for
// 0 rows, while its experts and the dispatch exchange are sized for the
// T * k = 2 rows device 1 may send it (a [2] `like` capacity), not for N
// times its own 0 rows; the all-gather restores the layer's [1, 16].
// CHECK-LABEL: func.func @main_d0(
// CHECK-SAME: moe.replicated
// CHECK: %[[L:.*]] = moe.slice %arg1, {{.*}} -> tensor<0x8xf32>
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[L]] top 2 softmax normalize : tensor<0x8xf32>
// CHECK: %[[ROWS:.*]], %{{.*}}, %[[SRC:.*]] = moe.dispatch %{{.*}}, %{{.*}} experts 8 : tensor<0x16xf32>, tensor<0x2xi64>
// CHECK: %[[CAP:.*]] = moe.constant dense<0> : tensor<2xi64>
// CHECK-NEXT: %[[RECV:.*]], %[[RCNT:.*]] = moe.all_to_all %[[ROWS]], %{{.*}} group "ep" devices 2 like %[[CAP]] : tensor<0x16xf32>, tensor<2xi64>, tensor<2xi64>
// CHECK-NEXT: %[[G:.*]], %{{.*}}, %{{.*}} = moe.regroup %[[RECV]], %{{.*}} sources 2 slots 4 : tensor<2x16xf32>, tensor<8xi64>
// CHECK: moe.experts silu_glu %[[G]], %{{.*}} : tensor<2x16xf32>, tensor<5xi64>
// CHECK: %[[BACK:.*]], %{{.*}} = moe.all_to_all %{{.*}}, %[[RCNT]] group "ep" devices 2 like %[[ROWS]] : tensor<2x16xf32>, tensor<2xi64>, tensor<0x16xf32>
// CHECK-NEXT: %[[Y:.*]] = moe.combine %[[BACK]], %[[SRC]], %[[W]] : tensor<0x16xf32>, tensor<0xi64>, tensor<0x2xf32>
// CHECK: %[[ALL:.*]], %{{.*}} = moe.all_to_all %{{.*}}, %{{.*}} group "ep" devices 2 like %arg0 : tensor<0x16xf32>, tensor<2xi64>, tensor<1x16xf32>
// CHECK-NEXT: return %[[ALL]] : tensor<1x16xf32>
module {
  func.func @main(%x: tensor<1x16xf32>, %logits: tensor<1x8xf32>)
      -> tensor<1x16xf32> {
    %w1 = moe.constant dense<1.0> : tensor<8x32x16xf32>
    %w3 = moe.constant dense<1.0> : tensor<8x32x16xf32>
    %w2 = moe.constant dense<1.0> : tensor<8x16x32xf32>
    %w, %i = moe.router %logits top 2 softmax normalize : tensor<1x8xf32>
    %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<1x16xf32>, tensor<1x2xi64>
    %y = moe.experts silu_glu %rows, %offsets : tensor<2x16xf32>, tensor<9xi64>
           w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
           w2 %w2 : tensor<8x16x32xf32> layout out_in
    %out = moe.combine %y, %source, %w : tensor<2x16xf32>, tensor<2xi64>, tensor<1x2xf32>
    return %out : tensor<1x16xf32>
  }
}
