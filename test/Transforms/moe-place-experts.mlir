// RUN: moec-opt %s --split-input-file --moe-place-experts=devices=1 | FileCheck %s --check-prefix=ONE
// RUN: moec-opt %s --split-input-file --moe-place-experts=devices=2 | FileCheck %s --check-prefix=TWO
// RUN: moec-opt %s --split-input-file --moe-place-experts=devices=4 | FileCheck %s --check-prefix=FOUR
// RUN: moec-opt %s --split-input-file --moe-place-experts=devices=3 | FileCheck %s --check-prefix=THREE
// RUN: moec-opt %s --split-input-file --moe-place-experts=devices=16 | FileCheck %s --check-prefix=MANY
// RUN: moec-opt %s --split-input-file --moe-place-experts="devices=2 routing-profile=%S/Inputs/routing-profile.json" | FileCheck %s --check-prefix=LOAD
// RUN: moec-opt %s --split-input-file --moe-place-experts="devices=4 routing-profile=%S/Inputs/routing-profile.json replicate-hot=2" | FileCheck %s --check-prefix=HOT

// Tests the placement of an 8-expert Mixtral layer. One device changes
// nothing; by parameter bytes (experts of equal size) every device gets a
// contiguous block of near-equal size, and more devices than experts leave
// some devices without experts. With the profile's loads (e0 100, e4 60,
// e6 40, e1 e2 e3 e5 10, e7 0) experts go, most loaded first, to the least
// loaded device (ties: fewer experts): on 2 devices {0, 1, 3, 7} and
// {2, 4, 5, 6}, 120 each. Replicating the 2 hottest on 4 devices makes
// them two halves each (e0 50 + 50, e4 30 + 30) placed by the same greedy on
// different devices: {0, 3} {0, 5} {4, 6} {1, 2, 4, 7}, loads 60 60 70 50.
// ONE-LABEL: func.func @main
// ONE-NOT: moe.placement
// ONE-NOT: moe.devices
// TWO: module attributes {moe.devices = 2 : i64}
// TWO-LABEL: func.func @main
// TWO: moe.experts {{.*}}moe.placement = {slot_begin = array<i64: 0, 4, 8>, slot_experts = array<i64: 0, 1, 2, 3, 4, 5, 6, 7>}
// FOUR: moe.experts {{.*}}moe.placement = {slot_begin = array<i64: 0, 2, 4, 6, 8>, slot_experts = array<i64: 0, 1, 2, 3, 4, 5, 6, 7>}
// THREE: moe.experts {{.*}}moe.placement = {slot_begin = array<i64: 0, 2, 5, 8>, slot_experts = array<i64: 0, 1, 2, 3, 4, 5, 6, 7>}
// MANY: moe.experts {{.*}}moe.placement = {slot_begin = array<i64: 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8>, slot_experts = array<i64: 0, 1, 2, 3, 4, 5, 6, 7>}
// LOAD: moe.experts {{.*}}moe.placement = {slot_begin = array<i64: 0, 4, 8>, slot_experts = array<i64: 0, 1, 3, 7, 2, 4, 5, 6>}
// HOT: moe.experts {{.*}}moe.placement = {slot_begin = array<i64: 0, 2, 4, 6, 10>, slot_experts = array<i64: 0, 3, 0, 5, 4, 6, 1, 2, 4, 7>}
module {
  func.func @main(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>) -> tensor<?x16xf32> {
    %w1 = moe.constant dense<1.0> : tensor<8x32x16xf32>
    %w3 = moe.constant dense<1.0> : tensor<8x32x16xf32>
    %w2 = moe.constant dense<1.0> : tensor<8x16x32xf32>
    %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x8xf32>
    %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
    %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
           w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
           w2 %w2 : tensor<8x16x32xf32> layout out_in
    %out = moe.combine %y, %source, %w : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    return %out : tensor<?x16xf32>
  }
}
