// Hand-written placements for 2 devices of an 8-expert layer: 8 slots that
// hold experts 0..3 twice (experts 4..7 have none), and 4 slots.
module attributes {moe.devices = 2 : i64} {
  func.func @main(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>,
                  %w1: tensor<8x32x16xf32>, %w3: tensor<8x32x16xf32>,
                  %w2: tensor<8x16x32xf32>) -> tensor<?x16xf32> {
    %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x8xf32>
    %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
    %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
           w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
           w2 %w2 : tensor<8x16x32xf32> layout out_in
           {moe.placement = {slot_begin = array<i64: 0, 4, 8>, slot_experts = array<i64: 0, 1, 2, 3, 0, 1, 2, 3>}}
           loc("experts")
    %out = moe.combine %y, %source, %w : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    return %out : tensor<?x16xf32>
  }
}

// -----

module attributes {moe.devices = 2 : i64} {
  func.func @main(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>,
                  %w1: tensor<8x32x16xf32>, %w3: tensor<8x32x16xf32>,
                  %w2: tensor<8x16x32xf32>) -> tensor<?x16xf32> {
    %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x8xf32>
    %rows, %offsets, %source = moe.dispatch %x, %i experts 8 : tensor<?x16xf32>, tensor<?x2xi64>
    %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<9xi64>
           w1 %w1 : tensor<8x32x16xf32> w3 %w3 : tensor<8x32x16xf32>
           w2 %w2 : tensor<8x16x32xf32> layout out_in
           {moe.placement = {slot_begin = array<i64: 0, 2, 4>, slot_experts = array<i64: 0, 1, 2, 3>}}
           loc("experts")
    %out = moe.combine %y, %source, %w : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    return %out : tensor<?x16xf32>
  }
}
