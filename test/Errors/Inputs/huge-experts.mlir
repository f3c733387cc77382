// A MoE layer with 2^40 experts (its weights are arguments, so nothing of
// that size exists): placing it would size arrays by the expert count.
module {
  func.func @main(%x: tensor<?x16xf32>, %logits: tensor<?x1099511627776xf32>,
                  %w1: tensor<1099511627776x32x16xf32>,
                  %w3: tensor<1099511627776x32x16xf32>,
                  %w2: tensor<1099511627776x16x32xf32>) -> tensor<?x16xf32> {
    %w, %i = moe.router %logits top 2 softmax normalize : tensor<?x1099511627776xf32>
    %rows, %offsets, %source = moe.dispatch %x, %i experts 1099511627776 : tensor<?x16xf32>, tensor<?x2xi64>
    %y = moe.experts silu_glu %rows, %offsets : tensor<?x16xf32>, tensor<1099511627777xi64>
           w1 %w1 : tensor<1099511627776x32x16xf32> w3 %w3 : tensor<1099511627776x32x16xf32>
           w2 %w2 : tensor<1099511627776x16x32xf32> layout out_in loc("experts")
    %out = moe.combine %y, %source, %w : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    return %out : tensor<?x16xf32>
  }
}
