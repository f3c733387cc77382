// RUN: moec-opt %s --split-input-file --moe-analyze-batch-rows="row-inputs=input_ids,position_ids" | FileCheck %s

// Tests that a prefill graph batches: the embedding, projections, RoPE from
// the positions input, a causal attention over the rows (the zoo's mask:
// range(0, n) on the last two axes, where(keys <= queries, 0, min)) and a
// MoE layer on the tokens keep the rows apart; the logits and the caches
// (the attention's keys and values) carry them on their 's' dimension.
// CHECK-LABEL: module attributes {moe.batch_rows = {inputs = ["input_ids", "position_ids"], outputs = ["logits", "keys", "values"], symbol = "s", windows = array<i64: 0>}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x?x8xf32> {moe.name = "logits", moe.dim_params = ["", "s", ""]},
          tensor<1x1x?x16xf32> {moe.name = "keys", moe.dim_params = ["", "", "s", ""]},
          tensor<1x1x?x16xf32> {moe.name = "values", moe.dim_params = ["", "", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %wq = moe.constant dense<1.0> : tensor<16x32xf32>
    %wk = moe.constant dense<1.0> : tensor<16x16xf32>
    %wr = moe.constant dense<1.0> : tensor<16x4xf32>
    %w1 = moe.constant dense<1.0> : tensor<4x8x16xf32>
    %w2 = moe.constant dense<1.0> : tensor<4x16x8xf32>
    %wo = moe.constant dense<1.0> : tensor<16x8xf32>
    %freq = moe.constant dense<0.5> : tensor<16xf32>
    %min = moe.constant dense<-3.40282347E+38> : tensor<f32>
    %zerof = moe.constant dense<0.0> : tensor<f32>
    %zero = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %ax01 = moe.constant dense<[0, 1]> : tensor<2xi64>
    %ax2 = moe.constant dense<2> : tensor<1xi64>
    %ax3 = moe.constant dense<3> : tensor<1xi64>
    %heads2 = moe.constant dense<[1, -1, 2, 16]> : tensor<4xi64>
    %heads1 = moe.constant dense<[1, -1, 1, 16]> : tensor<4xi64>
    %flat32 = moe.constant dense<[1, -1, 32]> : tensor<3xi64>
    %tokens = moe.constant dense<[-1, 16]> : tensor<2xi64>
    %back = moe.constant dense<[1, -1, 16]> : tensor<3xi64>
    %n1 = moe.shape %ids {start = 1 : i64, end = 2 : i64} : (tensor<1x?xi64>) -> tensor<1xi64>
    %n = moe.squeeze %n1 : (tensor<1xi64>) -> tensor<i64>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %r = moe.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %r3 = moe.unsqueeze %r, %ax01 : (tensor<?xi64>, tensor<2xi64>) -> tensor<1x1x?xi64>
    %queries = moe.unsqueeze %r3, %ax3 : (tensor<1x1x?xi64>, tensor<1xi64>) -> tensor<1x1x?x1xi64>
    %keys_at = moe.unsqueeze %r3, %ax2 : (tensor<1x1x?xi64>, tensor<1xi64>) -> tensor<1x1x1x?xi64>
    %seen = moe.less_or_equal %keys_at, %queries : (tensor<1x1x1x?xi64>, tensor<1x1x?x1xi64>) -> tensor<1x1x?x?xi1>
    %mask = moe.where %seen, %zerof, %min : (tensor<1x1x?x?xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x?x?xf32>
    %p3 = moe.unsqueeze %pos, %ax2 : (tensor<1x?xi64>, tensor<1xi64>) -> tensor<1x?x1xi64>
    %pf = moe.cast %p3 {to = f32} : (tensor<1x?x1xi64>) -> tensor<1x?x1xf32>
    %angle = moe.mul %pf, %freq : (tensor<1x?x1xf32>, tensor<16xf32>) -> tensor<1x?x16xf32>
    %cos = moe.cos %angle : (tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
    %q0 = moe.mat_mul %x, %wq : (tensor<1x?x16xf32>, tensor<16x32xf32>) -> tensor<1x?x32xf32>
    %q1 = moe.reshape %q0, %heads2 : (tensor<1x?x32xf32>, tensor<4xi64>) -> tensor<1x?x2x16xf32>
    %q = moe.transpose %q1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x2x16xf32>) -> tensor<1x2x?x16xf32>
    %k0 = moe.mat_mul %x, %wk : (tensor<1x?x16xf32>, tensor<16x16xf32>) -> tensor<1x?x16xf32>
    %k1 = moe.mul %k0, %cos : (tensor<1x?x16xf32>, tensor<1x?x16xf32>) -> tensor<1x?x16xf32>
    %k2 = moe.reshape %k1, %heads1 : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x?x1x16xf32>
    %k = moe.transpose %k2 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x1x16xf32>) -> tensor<1x1x?x16xf32>
    %a = moe.attention %q, %k, %k mask %mask scale 0.25 : tensor<1x2x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x?xf32> -> tensor<1x2x?x16xf32>
    %a1 = moe.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x?x16xf32>) -> tensor<1x?x2x16xf32>
    %a2 = moe.reshape %a1, %flat32 : (tensor<1x?x2x16xf32>, tensor<3xi64>) -> tensor<1x?x32xf32>
    %tok = moe.reshape %x, %tokens : (tensor<1x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
    %logits = moe.mat_mul %tok, %wr : (tensor<?x16xf32>, tensor<16x4xf32>) -> tensor<?x4xf32>
    %rw, %ri = moe.router %logits top 2 softmax normalize : tensor<?x4xf32>
    %rows, %offsets, %source = moe.dispatch %tok, %ri experts 4 : tensor<?x16xf32>, tensor<?x2xi64>
    %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
           w1 %w1 : tensor<4x8x16xf32> w2 %w2 : tensor<4x16x8xf32> layout out_in
    %out = moe.combine %y, %source, %rw : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    %out3 = moe.reshape %out, %back : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<1x?x16xf32>
    %vocab = moe.mat_mul %out3, %wo : (tensor<1x?x16xf32>, tensor<16x8xf32>) -> tensor<1x?x8xf32>
    return %vocab, %k, %k : tensor<1x?x8xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>
  }
}

// -----

// Tests that a mean over the token axis mixes rows: one sequence's tokens
// would read the others'.
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.reduce_mean", reason = "moe.reduce_mean reduces along axis 1, which carries the rows of 's'"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %ax1 = moe.constant dense<1> : tensor<1xi64>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %m = moe.reduce_mean %x, %ax1 : (tensor<1x?x16xf32>, tensor<1xi64>) -> tensor<1x1x16xf32>
    %y = moe.add %x, %m : (tensor<1x?x16xf32>, tensor<1x1x16xf32>) -> tensor<1x?x16xf32>
    return %y : tensor<1x?x16xf32>
  }
}

// -----

// Tests that attention without a mask is refused: every row would see the
// rows after it, which a sequence's own cache does not hold.
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.attention", reason = "attention without a mask proven causal over the rows (key j visible to query i exactly when j <= i, or i - W < j <= i in a window of W)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %heads1 = moe.constant dense<[1, 1, -1, 16]> : tensor<4xi64>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %k = moe.reshape %x, %heads1 : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x1x?x16xf32>
    %a = moe.attention %k, %k, %k scale 0.25 : tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32> -> tensor<1x1x?x16xf32>
    return %a : tensor<1x1x?x16xf32>
  }
}

// -----

// Tests that a mask other than the causal one is refused: the queries'
// positions shifted by 4 (keys more than 4 rows back visible only) are not
// range(0, n).
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.attention", reason = "attention without a mask proven causal over the rows (key j visible to query i exactly when j <= i, or i - W < j <= i in a window of W)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %heads1 = moe.constant dense<[1, 1, -1, 16]> : tensor<4xi64>
    %min = moe.constant dense<-3.40282347E+38> : tensor<f32>
    %zerof = moe.constant dense<0.0> : tensor<f32>
    %zero = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %window = moe.constant dense<4> : tensor<i64>
    %ax01 = moe.constant dense<[0, 1]> : tensor<2xi64>
    %ax2 = moe.constant dense<2> : tensor<1xi64>
    %ax3 = moe.constant dense<3> : tensor<1xi64>
    %n1 = moe.shape %ids {start = 1 : i64, end = 2 : i64} : (tensor<1x?xi64>) -> tensor<1xi64>
    %n = moe.squeeze %n1 : (tensor<1xi64>) -> tensor<i64>
    %r = moe.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %r3 = moe.unsqueeze %r, %ax01 : (tensor<?xi64>, tensor<2xi64>) -> tensor<1x1x?xi64>
    %q0 = moe.unsqueeze %r3, %ax3 : (tensor<1x1x?xi64>, tensor<1xi64>) -> tensor<1x1x?x1xi64>
    %queries = moe.sub %q0, %window : (tensor<1x1x?x1xi64>, tensor<i64>) -> tensor<1x1x?x1xi64>
    %keys_at = moe.unsqueeze %r3, %ax2 : (tensor<1x1x?xi64>, tensor<1xi64>) -> tensor<1x1x1x?xi64>
    %seen = moe.less_or_equal %keys_at, %queries : (tensor<1x1x1x?xi64>, tensor<1x1x?x1xi64>) -> tensor<1x1x?x?xi1>
    %mask = moe.where %seen, %zerof, %min : (tensor<1x1x?x?xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x?x?xf32>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %k = moe.reshape %x, %heads1 : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x1x?x16xf32>
    %a = moe.attention %k, %k, %k mask %mask scale 0.25 : tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x?xf32> -> tensor<1x1x?x16xf32>
    return %a : tensor<1x1x?x16xf32>
  }
}

// -----

// Tests that positions counted from the rows (a Range over their number
// used for RoPE, rather than the positions input) are refused: a row's
// index in a step is not its position in its sequence.
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.mul", reason = "moe.mul combines the rows with positions computed from their count (only a causal attention mask may read those)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %zero = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %ax1 = moe.constant dense<1> : tensor<1xi64>
    %n1 = moe.shape %ids {start = 1 : i64, end = 2 : i64} : (tensor<1x?xi64>) -> tensor<1xi64>
    %n = moe.squeeze %n1 : (tensor<1xi64>) -> tensor<i64>
    %r = moe.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %r2 = moe.unsqueeze %r, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
    %rf = moe.cast %r2 {to = f32} : (tensor<?x1xi64>) -> tensor<?x1xf32>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %y = moe.mul %x, %rf : (tensor<1x?x16xf32>, tensor<?x1xf32>) -> tensor<1x?x16xf32>
    return %y : tensor<1x?x16xf32>
  }
}

// -----

// Tests that a graph with a past cache input is refused (a decode graph:
// the past is one sequence's).
// CHECK-LABEL: module attributes {moe.batch_rows = {reason = "input 'past' is not one of the token rows (a past cache or a mask spans a sequence)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]},
                  %past: tensor<1x1x?x16xf32> {moe.name = "past", moe.dim_params = ["", "", "p", ""]})
      -> (tensor<1x1x?x16xf32> {moe.name = "present", moe.dim_params = ["", "", "p", ""]}) {
    return %past : tensor<1x1x?x16xf32>
  }
}

// -----

// Tests that a sliding-window causal mask batches, and that the verdict
// records its window for the runtime's attention over the KV pool: the
// GroupQueryAttention first-prompt form, where(keys <= queries and keys >
// queries - 8, 0, -inf), and the plain causal mask of a second layer.
// CHECK-LABEL: module attributes {moe.batch_rows = {inputs = ["input_ids", "position_ids"], outputs = ["logits"], symbol = "s", windows = array<i64: 8, 0>}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %heads1 = moe.constant dense<[1, 1, -1, 16]> : tensor<4xi64>
    %inf = moe.constant dense<0xFF800000> : tensor<f32>
    %zerof = moe.constant dense<0.0> : tensor<f32>
    %zero = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %window = moe.constant dense<8> : tensor<i64>
    %ax0 = moe.constant dense<0> : tensor<1xi64>
    %keys_shape = moe.constant dense<[1, 1, 1, -1]> : tensor<4xi64>
    %queries_shape = moe.constant dense<[1, 1, -1, 1]> : tensor<4xi64>
    %n1 = moe.shape %ids {start = 1 : i64, end = 2 : i64} : (tensor<1x?xi64>) -> tensor<1xi64>
    %n = moe.squeeze %n1 : (tensor<1xi64>) -> tensor<i64>
    %r = moe.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %steps = moe.unsqueeze %r, %ax0 : (tensor<?xi64>, tensor<1xi64>) -> tensor<1x?xi64>
    %keys_at = moe.reshape %steps, %keys_shape : (tensor<1x?xi64>, tensor<4xi64>) -> tensor<1x1x1x?xi64>
    %queries = moe.reshape %steps, %queries_shape : (tensor<1x?xi64>, tensor<4xi64>) -> tensor<1x1x?x1xi64>
    %causal = moe.less_or_equal %keys_at, %queries : (tensor<1x1x1x?xi64>, tensor<1x1x?x1xi64>) -> tensor<1x1x?x?xi1>
    %first = moe.sub %queries, %window : (tensor<1x1x?x1xi64>, tensor<i64>) -> tensor<1x1x?x1xi64>
    %inside = moe.greater %keys_at, %first : (tensor<1x1x1x?xi64>, tensor<1x1x?x1xi64>) -> tensor<1x1x?x?xi1>
    %seen = moe.and %causal, %inside : (tensor<1x1x?x?xi1>, tensor<1x1x?x?xi1>) -> tensor<1x1x?x?xi1>
    %mask = moe.where %seen, %zerof, %inf : (tensor<1x1x?x?xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x?x?xf32>
    %full = moe.where %causal, %zerof, %inf : (tensor<1x1x?x?xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x?x?xf32>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %k = moe.reshape %x, %heads1 : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x1x?x16xf32>
    %a = moe.attention %k, %k, %k mask %mask scale 0.25 : tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x?xf32> -> tensor<1x1x?x16xf32>
    %b = moe.attention %a, %a, %a mask %full scale 0.25 : tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x?xf32> -> tensor<1x1x?x16xf32>
    return %b : tensor<1x1x?x16xf32>
  }
}

// -----

// Tests that a window not subtracted from the queries' own positions is
// refused (here from the keys': no sliding window).
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.attention", reason = "attention without a mask proven causal over the rows (key j visible to query i exactly when j <= i, or i - W < j <= i in a window of W)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %heads1 = moe.constant dense<[1, 1, -1, 16]> : tensor<4xi64>
    %inf = moe.constant dense<0xFF800000> : tensor<f32>
    %zerof = moe.constant dense<0.0> : tensor<f32>
    %zero = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %window = moe.constant dense<8> : tensor<i64>
    %ax0 = moe.constant dense<0> : tensor<1xi64>
    %keys_shape = moe.constant dense<[1, 1, 1, -1]> : tensor<4xi64>
    %queries_shape = moe.constant dense<[1, 1, -1, 1]> : tensor<4xi64>
    %n1 = moe.shape %ids {start = 1 : i64, end = 2 : i64} : (tensor<1x?xi64>) -> tensor<1xi64>
    %n = moe.squeeze %n1 : (tensor<1xi64>) -> tensor<i64>
    %r = moe.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %steps = moe.unsqueeze %r, %ax0 : (tensor<?xi64>, tensor<1xi64>) -> tensor<1x?xi64>
    %keys_at = moe.reshape %steps, %keys_shape : (tensor<1x?xi64>, tensor<4xi64>) -> tensor<1x1x1x?xi64>
    %queries = moe.reshape %steps, %queries_shape : (tensor<1x?xi64>, tensor<4xi64>) -> tensor<1x1x?x1xi64>
    %causal = moe.less_or_equal %keys_at, %queries : (tensor<1x1x1x?xi64>, tensor<1x1x?x1xi64>) -> tensor<1x1x?x?xi1>
    %first = moe.sub %keys_at, %window : (tensor<1x1x1x?xi64>, tensor<i64>) -> tensor<1x1x1x?xi64>
    %inside = moe.greater %queries, %first : (tensor<1x1x?x1xi64>, tensor<1x1x1x?xi64>) -> tensor<1x1x?x?xi1>
    %seen = moe.and %causal, %inside : (tensor<1x1x?x?xi1>, tensor<1x1x?x?xi1>) -> tensor<1x1x?x?xi1>
    %mask = moe.where %seen, %zerof, %inf : (tensor<1x1x?x?xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x?x?xf32>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %k = moe.reshape %x, %heads1 : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x1x?x16xf32>
    %a = moe.attention %k, %k, %k mask %mask scale 0.25 : tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x16xf32>, tensor<1x1x?x?xf32> -> tensor<1x1x?x16xf32>
    return %a : tensor<1x1x?x16xf32>
  }
}

// -----

// Tests that the recurrences of hybrid layers batch: a causal convolution
// over the rows on axis 2 and a gated delta rule over them on axis 1, each
// from a zero state (a constant, and a constant_of_shape of 0), whose new
// states are outputs (state pairs the runtime keeps per sequence).
// CHECK-LABEL: module attributes {moe.batch_rows = {inputs = ["input_ids", "position_ids"], outputs = ["logits"], states = ["conv_state", "delta_state"], symbol = "s", windows = array<i64>}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x?x4x4xf32> {moe.name = "logits", moe.dim_params = ["", "s", "", ""]},
          tensor<1x16x2xf32> {moe.name = "conv_state"},
          tensor<1x4x4x4xf32> {moe.name = "delta_state"}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %w = moe.constant dense<0.5> : tensor<16x3xf32>
    %zeros = moe.constant dense<0.0> : tensor<1x16x2xf32>
    %shape = moe.constant dense<[1, 4, 4, 4]> : tensor<4xi64>
    %start = moe.constant_of_shape %shape {value = dense<0.0> : tensor<1xf32>} : (tensor<4xi64>) -> tensor<1x4x4x4xf32>
    %perm = moe.constant dense<[1, -1, 4, 4]> : tensor<4xi64>
    %s0 = moe.constant dense<0> : tensor<1xi64>
    %s4 = moe.constant dense<4> : tensor<1xi64>
    %ax2 = moe.constant dense<2> : tensor<1xi64>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %xt = moe.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<1x?x16xf32>) -> tensor<1x16x?xf32>
    %c, %cs = moe.causal_conv %xt, %w, %zeros silu true : tensor<1x16x?xf32>, tensor<16x3xf32>, tensor<1x16x2xf32> -> tensor<1x16x?xf32>, tensor<1x16x2xf32>
    %ct = moe.transpose %c {perm = array<i64: 0, 2, 1>} : (tensor<1x16x?xf32>) -> tensor<1x?x16xf32>
    %q = moe.reshape %ct, %perm : (tensor<1x?x16xf32>, tensor<4xi64>) -> tensor<1x?x4x4xf32>
    %g4 = moe.slice %ct, %s0, %s4 axes %ax2 : (tensor<1x?x16xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x?x4xf32>
    %o, %ds = moe.gated_delta_rule %q, %q, %q, %start, %g4, %g4 scale 0.5 : tensor<1x?x4x4xf32>, tensor<1x?x4x4xf32>, tensor<1x?x4x4xf32>, tensor<1x4x4x4xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32> -> tensor<1x?x4x4xf32>, tensor<1x4x4x4xf32>
    return %o, %cs, %ds : tensor<1x?x4x4xf32>, tensor<1x16x2xf32>, tensor<1x4x4x4xf32>
  }
}

// -----

// Tests that a recurrence from a state other than zeros is refused: the
// runtime starts every sequence from zeros.
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.causal_conv", reason = "moe.causal_conv that does not start from a zero state (the runtime starts each sequence from zeros)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x16x?xf32> {moe.name = "logits", moe.dim_params = ["", "", "s"]},
          tensor<1x16x2xf32> {moe.name = "conv_state"}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %w = moe.constant dense<0.5> : tensor<16x3xf32>
    %ones = moe.constant dense<1.0> : tensor<1x16x2xf32>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %xt = moe.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<1x?x16xf32>) -> tensor<1x16x?xf32>
    %c, %cs = moe.causal_conv %xt, %w, %ones silu false : tensor<1x16x?xf32>, tensor<16x3xf32>, tensor<1x16x2xf32> -> tensor<1x16x?xf32>, tensor<1x16x2xf32>
    return %c, %cs : tensor<1x16x?xf32>, tensor<1x16x2xf32>
  }
}

// -----

// Tests that a recurrence's new state read by another op is refused: in a
// batched step it is no one sequence's.
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.add", reason = "moe.add reads the state a recurrence leaves after the rows (only the graph's outputs may)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x16x?xf32> {moe.name = "logits", moe.dim_params = ["", "", "s"]},
          tensor<1x16x2xf32> {moe.name = "conv_state"}) {
    %embed = moe.constant dense<1.0> : tensor<8x16xf32>
    %w = moe.constant dense<0.5> : tensor<16x3xf32>
    %zeros = moe.constant dense<0.0> : tensor<1x16x2xf32>
    %x = moe.gather %embed, %ids : (tensor<8x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
    %xt = moe.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<1x?x16xf32>) -> tensor<1x16x?xf32>
    %c, %cs = moe.causal_conv %xt, %w, %zeros silu false : tensor<1x16x?xf32>, tensor<16x3xf32>, tensor<1x16x2xf32> -> tensor<1x16x?xf32>, tensor<1x16x2xf32>
    %twice = moe.add %cs, %cs : (tensor<1x16x2xf32>, tensor<1x16x2xf32>) -> tensor<1x16x2xf32>
    return %c, %twice : tensor<1x16x?xf32>, tensor<1x16x2xf32>
  }
}

// -----

// Tests that a reshape may split each row along the token axis and merge it
// back (a per-head norm: [1, n, 8] -> [1, n * 2, 4] -> [1, n, 8]), since
// each row's span of 2 indices along the token axis is tracked.
// CHECK-LABEL: module attributes {moe.batch_rows = {inputs = ["input_ids", "position_ids"], outputs = ["logits"], symbol = "s", windows = array<i64>}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x?x8xf32> {moe.name = "logits", moe.dim_params = ["", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x8xf32>
    %heads = moe.constant dense<[0, -1, 4]> : tensor<3xi64>
    %whole = moe.constant dense<[0, -1, 8]> : tensor<3xi64>
    %x = moe.gather %embed, %ids : (tensor<8x8xf32>, tensor<1x?xi64>) -> tensor<1x?x8xf32>
    %split = moe.reshape %x, %heads : (tensor<1x?x8xf32>, tensor<3xi64>) -> tensor<1x?x4xf32>
    %sq = moe.mul %split, %split : (tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<1x?x4xf32>
    %back = moe.reshape %sq, %whole : (tensor<1x?x4xf32>, tensor<3xi64>) -> tensor<1x?x8xf32>
    return %back : tensor<1x?x8xf32>
  }
}

// -----

// Tests that a slab wider than a row is still refused after a split: [1, n,
// 8] -> [1, n * 2, 4] -> [1, -1, 16] would put two rows in one.
// CHECK-LABEL: module attributes {moe.batch_rows = {loc = {{.*}}, op = "moe.reshape", reason = "reshapes across axis 1, which carries the rows of 's' (a slab of the result may span two rows)"}}
module {
  func.func @main(%ids: tensor<1x?xi64> {moe.name = "input_ids", moe.dim_params = ["", "s"]},
                  %pos: tensor<1x?xi64> {moe.name = "position_ids", moe.dim_params = ["", "s"]})
      -> (tensor<1x?x16xf32> {moe.name = "logits", moe.dim_params = ["", "s", ""]}) {
    %embed = moe.constant dense<1.0> : tensor<8x8xf32>
    %heads = moe.constant dense<[0, -1, 4]> : tensor<3xi64>
    %pairs = moe.constant dense<[0, -1, 16]> : tensor<3xi64>
    %x = moe.gather %embed, %ids : (tensor<8x8xf32>, tensor<1x?xi64>) -> tensor<1x?x8xf32>
    %split = moe.reshape %x, %heads : (tensor<1x?x8xf32>, tensor<3xi64>) -> tensor<1x?x4xf32>
    %two = moe.reshape %split, %pairs : (tensor<1x?x4xf32>, tensor<3xi64>) -> tensor<1x?x16xf32>
    return %two : tensor<1x?x16xf32>
  }
}
