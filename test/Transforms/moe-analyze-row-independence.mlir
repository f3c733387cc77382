// RUN: moec-opt %s --split-input-file --moe-analyze-row-independence | FileCheck %s

// Tests that a [batch, seq] block keeps the batch rows apart: a projection,
// softmax and a mean over the last axis, a reshape to tokens with -1 and back
// with the batch's own size, and a MoE layer on the tokens.
// CHECK-LABEL: module attributes {moe.row_split = {axis = 0 : i64, inputs = ["ids"], outputs = ["#0"], symbol = "batch"}}
module {
  func.func @main(%ids: tensor<?x?x16xf32> {moe.name = "ids", moe.dim_params = ["batch", "seq", ""]})
      -> (tensor<?x?x16xf32> {moe.dim_params = ["batch", "seq", ""]}) {
    %w = moe.constant dense<1.0> : tensor<16x16xf32>
    %wr = moe.constant dense<1.0> : tensor<16x4xf32>
    %w1 = moe.constant dense<1.0> : tensor<4x8x16xf32>
    %w2 = moe.constant dense<1.0> : tensor<4x16x8xf32>
    %flat = moe.constant dense<[-1, 16]> : tensor<2xi64>
    %last = moe.constant dense<-1> : tensor<1xi64>
    %c16 = moe.constant dense<16> : tensor<1xi64>
    %zero = moe.constant dense<0> : tensor<1xi64>
    %h = moe.mat_mul %ids, %w : (tensor<?x?x16xf32>, tensor<16x16xf32>) -> tensor<?x?x16xf32>
    %p = moe.softmax %h : (tensor<?x?x16xf32>) -> tensor<?x?x16xf32>
    %m = moe.reduce_mean %p, %last : (tensor<?x?x16xf32>, tensor<1xi64>) -> tensor<?x?x1xf32>
    %s = moe.mul %p, %m : (tensor<?x?x16xf32>, tensor<?x?x1xf32>) -> tensor<?x?x16xf32>
    %tok = moe.reshape %s, %flat : (tensor<?x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
    %logits = moe.mat_mul %tok, %wr : (tensor<?x16xf32>, tensor<16x4xf32>) -> tensor<?x4xf32>
    %rw, %ri = moe.router %logits top 2 softmax normalize : tensor<?x4xf32>
    %rows, %offsets, %source = moe.dispatch %tok, %ri experts 4 : tensor<?x16xf32>, tensor<?x2xi64>
    %y = moe.experts relu %rows, %offsets : tensor<?x16xf32>, tensor<5xi64>
           w1 %w1 : tensor<4x8x16xf32> w2 %w2 : tensor<4x16x8xf32> layout out_in
    %out = moe.combine %y, %source, %rw : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
    %b = moe.dim %s, 0 : tensor<?x?x16xf32>
    %q = moe.dim %s, 1 : tensor<?x?x16xf32>
    %b1 = moe.unsqueeze %b, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
    %q1 = moe.unsqueeze %q, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
    %shape = moe.concat %b1, %q1, %c16 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
    %back = moe.reshape %out, %shape : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x?x16xf32>
    return %back : tensor<?x?x16xf32>
  }
}

// -----

// Tests that attention within each sequence keeps the batch: q k^T is a
// batched product (the rows are a batch axis of both operands), the causal
// mask is built from the sequence length (replicated) and broadcast.
// CHECK-LABEL: module attributes {moe.row_split = {axis = 0 : i64, inputs = ["seqs"], outputs = ["#0"], symbol = "b"}}
module {
  func.func @main(%x: tensor<?x?x8xf32> {moe.name = "seqs", moe.dim_params = ["b", "s", ""]})
      -> (tensor<?x?x8xf32> {moe.dim_params = ["b", "s", ""]}) {
    %perm0 = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %ax0 = moe.constant dense<0> : tensor<1xi64>
    %ax1 = moe.constant dense<1> : tensor<1xi64>
    %neg = moe.constant dense<-1.0e9> : tensor<f32>
    %s = moe.dim %x, 1 : tensor<?x?x8xf32>
    %pos = moe.range %perm0, %s, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %row = moe.unsqueeze %pos, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
    %col = moe.unsqueeze %pos, %ax0 : (tensor<?xi64>, tensor<1xi64>) -> tensor<1x?xi64>
    %future = moe.greater %col, %row : (tensor<1x?xi64>, tensor<?x1xi64>) -> tensor<?x?xi1>
    %kt = moe.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<?x?x8xf32>) -> tensor<?x8x?xf32>
    %scores = moe.mat_mul %x, %kt : (tensor<?x?x8xf32>, tensor<?x8x?xf32>) -> tensor<?x?x?xf32>
    %masked = moe.where %future, %neg, %scores : (tensor<?x?xi1>, tensor<f32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %p = moe.softmax %masked : (tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %a = moe.mat_mul %p, %x : (tensor<?x?x?xf32>, tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
    return %a : tensor<?x?x8xf32>
  }
}

// -----

// Tests that fused attention keeps the batch rows apart with sinks: the
// sinks are per head ([H], replicated on every device), not a whole batch of
// keys, so they do not stop the split.
// CHECK-LABEL: module attributes {moe.row_split = {axis = 0 : i64, inputs = ["seqs"], outputs = ["#0"], symbol = "b"}}
module {
  func.func @main(%x: tensor<?x4x?x8xf32> {moe.name = "seqs", moe.dim_params = ["b", "", "s", ""]})
      -> (tensor<?x4x?x8xf32> {moe.dim_params = ["b", "", "s", ""]}) {
    %sinks = moe.constant dense<[0.5, 1.0, -1.0, 2.0]> : tensor<4xf32>
    %a = moe.attention %x, %x, %x sinks %sinks scale 0.25 softcap 30.0 : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<4xf32> -> tensor<?x4x?x8xf32>
    return %a : tensor<?x4x?x8xf32>
  }
}

// -----

// Tests that a replicated value expanded to the rows (positions broadcast to
// every token of the device) keeps them: the target names the row count.
// CHECK-LABEL: module attributes {moe.row_split = {axis = 0 : i64, inputs = ["tokens"], outputs = ["#0"], symbol = "T"}}
module {
  func.func @main(%x: tensor<?x4xf32> {moe.name = "tokens", moe.dim_params = ["T", ""]})
      -> (tensor<?x4xf32> {moe.dim_params = ["T", ""]}) {
    %bias = moe.constant dense<1.0> : tensor<1x4xf32>
    %zero = moe.constant dense<0> : tensor<1xi64>
    %c4 = moe.constant dense<4> : tensor<1xi64>
    %t = moe.dim %x, 0 : tensor<?x4xf32>
    %t1 = moe.unsqueeze %t, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
    %shape = moe.concat %t1, %c4 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
    %e = moe.expand %bias, %shape : (tensor<1x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
    %y = moe.add %x, %e : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
    return %y : tensor<?x4xf32>
  }
}

// -----

// Tests that attention over the tokens of a [T] sequence is caught: q k^T
// multiplies rows by rows (the rows lie on both axes of the product).
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.mat_mul", reason = "mat_mul multiplies rows by other rows (they lie on axes 0 and 1 of the product)"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t1", moe.dim_params = ["T", ""]})
      -> (tensor<?x?xf32> {moe.dim_params = ["T", ""]}) {
    %kt = moe.transpose %x {perm = array<i64: 1, 0>} : (tensor<?x8xf32>) -> tensor<8x?xf32>
    %scores = moe.mat_mul %x, %kt : (tensor<?x8xf32>, tensor<8x?xf32>) -> tensor<?x?xf32>
    return %scores : tensor<?x?xf32>
  }
}

// -----

// Tests that a product contracting the rows (A's last axis) is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.mat_mul", reason = "mat_mul contracts axis 1, which carries the rows of 'T' (the last axis of A)"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t2", moe.dim_params = ["T", ""]})
      -> (tensor<8x8xf32>) {
    %xt = moe.transpose %x {perm = array<i64: 1, 0>} : (tensor<?x8xf32>) -> tensor<8x?xf32>
    %g = moe.mat_mul %xt, %x : (tensor<8x?xf32>, tensor<?x8xf32>) -> tensor<8x8xf32>
    return %g : tensor<8x8xf32>
  }
}

// -----

// Tests that a softmax along the rows is caught (and one along another axis
// is not).
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.softmax", reason = "moe.softmax normalises along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t3", moe.dim_params = ["T", ""]})
      -> (tensor<?x8xf32> {moe.dim_params = ["T", ""]}) {
    %a = moe.softmax %x {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
    %b = moe.softmax %a {axis = 0 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
    return %b : tensor<?x8xf32>
  }
}

// -----

// Tests that a reduction along the rows is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.reduce_sum", reason = "moe.reduce_sum reduces along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t4", moe.dim_params = ["T", ""]})
      -> (tensor<1x8xf32>) {
    %ax = moe.constant dense<0> : tensor<1xi64>
    %s = moe.reduce_sum %x, %ax : (tensor<?x8xf32>, tensor<1xi64>) -> tensor<1x8xf32>
    return %s : tensor<1x8xf32>
  }
}

// -----

// Tests that a cumulative sum along the rows is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.cum_sum", reason = "moe.cum_sum accumulates along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t5", moe.dim_params = ["T", ""]})
      -> (tensor<?x8xf32> {moe.dim_params = ["T", ""]}) {
    %ax = moe.constant dense<0> : tensor<i64>
    %s = moe.cum_sum %x, %ax : (tensor<?x8xf32>, tensor<i64>) -> tensor<?x8xf32>
    return %s : tensor<?x8xf32>
  }
}

// -----

// Tests that a top-k along the rows is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.top_k", reason = "moe.top_k ranks along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t6", moe.dim_params = ["T", ""]})
      -> (tensor<2x8xf32>) {
    %k = moe.constant dense<2> : tensor<1xi64>
    %v, %i = moe.top_k %x, %k {axis = 0 : i64} : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<2x8xf32>, tensor<2x8xi64>)
    return %v : tensor<2x8xf32>
  }
}

// -----

// Tests that a layer norm over every axis, the rows included, is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.layer_normalization", reason = "moe.layer_normalization normalises over axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t7", moe.dim_params = ["T", ""]})
      -> (tensor<?x8xf32> {moe.dim_params = ["T", ""]}) {
    %g = moe.constant dense<1.0> : tensor<8xf32>
    %0:3 = moe.layer_normalization %x, %g {axis = 0 : i64} : (tensor<?x8xf32>, tensor<8xf32>) -> (tensor<?x8xf32>, tensor<1x1xf32>, tensor<1x1xf32>)
    return %0#0 : tensor<?x8xf32>
  }
}

// -----

// Tests that a gather along the rows (picking other devices' rows) is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.gather", reason = "gathers along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t8", moe.dim_params = ["T", ""]})
      -> (tensor<2x8xf32>) {
    %i = moe.constant dense<[0, 1]> : tensor<2xi64>
    %g = moe.gather %x, %i : (tensor<?x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
    return %g : tensor<2x8xf32>
  }
}

// -----

// Tests that a concat along the rows is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.concat", reason = "concatenates along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t9", moe.dim_params = ["T", ""]})
      -> (tensor<?x8xf32> {moe.dim_params = ["T", ""]}) {
    %c = moe.concat %x, %x {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
    return %c : tensor<?x8xf32>
  }
}

// -----

// Tests that a slice along the rows (the first rows) is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.slice", reason = "slices along axis 0, which carries the rows of 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t10", moe.dim_params = ["T", ""]})
      -> (tensor<?x8xf32>) {
    %b = moe.constant dense<0> : tensor<1xi64>
    %e = moe.constant dense<1> : tensor<1xi64>
    %s = moe.slice %x, %b, %e : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x8xf32>
    return %s : tensor<?x8xf32>
  }
}

// -----

// Tests that a reshape merging the rows with an axis before them is caught:
// after the transpose the batch is axis 1 of [S, B, H], and [-1, H] would
// interleave the devices' rows.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.reshape", reason = "reshapes across axis 1, which carries the rows of 'b' (it merges or splits the rows with the axes before them)"}}
module {
  func.func @main(%x: tensor<?x?x8xf32> {moe.name = "t11", moe.dim_params = ["b", "s", ""]})
      -> (tensor<?x8xf32>) {
    %flat = moe.constant dense<[-1, 8]> : tensor<2xi64>
    %t = moe.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
    %r = moe.reshape %t, %flat : (tensor<?x?x8xf32>, tensor<2xi64>) -> tensor<?x8xf32>
    return %r : tensor<?x8xf32>
  }
}

// -----

// Tests that a reshape whose -1 slabs may straddle two rows is caught: each
// row has 6 elements, the result's rows 4.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.reshape", reason = "reshapes across axis 0, which carries the rows of 'T' (a slab of the result may span two rows)"}}
module {
  func.func @main(%x: tensor<?x6xf32> {moe.name = "t12", moe.dim_params = ["T", ""]})
      -> (tensor<?x4xf32>) {
    %shape = moe.constant dense<[-1, 4]> : tensor<2xi64>
    %r = moe.reshape %x, %shape : (tensor<?x6xf32>, tensor<2xi64>) -> tensor<?x4xf32>
    return %r : tensor<?x4xf32>
  }
}

// -----

// Tests that positions counted to a device's row count are caught (each
// device would count from 0).
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.range", reason = "moe.range counts to a device's row count (the positions of the rows)"}}
module {
  func.func @main(%x: tensor<?xi64> {moe.name = "t13", moe.dim_params = ["T"]})
      -> (tensor<?xi64> {moe.dim_params = ["T"]}) {
    %zero = moe.constant dense<0> : tensor<i64>
    %one = moe.constant dense<1> : tensor<i64>
    %t = moe.dim %x, 0 : tensor<?xi64>
    %pos = moe.range %zero, %t, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
    %y = moe.add %x, %pos : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
    return %y : tensor<?xi64>
  }
}

// -----

// Tests that arithmetic on the rows with a device's row count (a mean over
// the tokens by hand) is caught.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.div", reason = "combines rows with a device's row count"}}
module {
  func.func @main(%x: tensor<?xi64> {moe.name = "t14", moe.dim_params = ["T"]})
      -> (tensor<?xi64> {moe.dim_params = ["T"]}) {
    %t = moe.dim %x, 0 : tensor<?xi64>
    %y = moe.div %x, %t : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
    return %y : tensor<?xi64>
  }
}

// -----

// Tests that an op the analysis does not know kills the proof.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.non_zero", reason = "moe.non_zero is not known to keep rows apart"}}
module {
  func.func @main(%x: tensor<?xi64> {moe.name = "t15", moe.dim_params = ["T"]})
      -> (tensor<1x?xi64>) {
    %n = moe.non_zero %x : (tensor<?xi64>) -> tensor<1x?xi64>
    return %n : tensor<1x?xi64>
  }
}

// -----

// Tests that a replicated operand as long as the rows cannot broadcast
// against them (it would only match one device's share).
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "moe.add", reason = "broadcasts a replicated operand of size 4 against the rows"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t16", moe.dim_params = ["T", ""]})
      -> (tensor<4x8xf32>) {
    %c = moe.constant dense<1.0> : tensor<4x8xf32>
    %y = moe.add %x, %c : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// Tests that an output with the rows on dimension 0 must be named with the
// split symbol, or the runtime would return device 0's part alone.
// CHECK-LABEL: module attributes {moe.row_split = {loc = "{{.*}}", op = "func.return", reason = "output 'y' has the rows on dimension 0 but the model does not name it 'T'"}}
module {
  func.func @main(%x: tensor<?x8xf32> {moe.name = "t17", moe.dim_params = ["T", ""]})
      -> (tensor<?x8xf32> {moe.name = "y"}) {
    %y = moe.relu %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }
}

// -----

// Tests that only the outputs with the split rows on dimension 0 are listed
// as joined over the devices: a replicated value whose dimension 0 the model
// names with another input's symbol ('S', the transposed [4, S] mask) is the
// same on every device and must not be concatenated.
// CHECK-LABEL: module attributes {moe.row_split = {axis = 0 : i64, inputs = ["x"], outputs = ["y"], symbol = "T"}}
module {
  func.func @main(%x: tensor<?x?xf32> {moe.name = "x", moe.dim_params = ["T", "S"]},
                  %m: tensor<4x?xf32> {moe.name = "mask", moe.dim_params = ["", "S"]})
      -> (tensor<?x?xf32> {moe.name = "y", moe.dim_params = ["T", "S"]},
          tensor<?x4xf32> {moe.name = "mask_t", moe.dim_params = ["S", ""]}) {
    %y = moe.relu %x : (tensor<?x?xf32>) -> tensor<?x?xf32>
    %t = moe.transpose %m {perm = array<i64: 1, 0>} : (tensor<4x?xf32>) -> tensor<?x4xf32>
    return %y, %t : tensor<?x?xf32>, tensor<?x4xf32>
  }
}

// -----

// Tests that inputs split over different dimensions cannot be proven.
// CHECK-LABEL: module attributes {moe.row_split = {reason = "inputs 'a' and 'b' have different dimensions 0 ('T' and 'U')"}}
module {
  func.func @main(%a: tensor<?x8xf32> {moe.name = "a", moe.dim_params = ["T", ""]},
                  %b: tensor<?x8xf32> {moe.name = "b", moe.dim_params = ["U", ""]})
      -> (tensor<?x8xf32> {moe.dim_params = ["T", ""]}) {
    return %a : tensor<?x8xf32>
  }
}

// -----

// Tests that IsNaN keeps the rows apart like every elementwise op: torch's
// SDPA export masks fully masked rows with Where(IsNaN(x), 0, x).
// CHECK-LABEL: module attributes {moe.row_split = {axis = 0 : i64, inputs = ["x"], outputs = ["#0"], symbol = "T"}}
module {
  func.func @main(%x: tensor<?x4xf32> {moe.name = "x", moe.dim_params = ["T", ""]})
      -> (tensor<?x4xf32> {moe.dim_params = ["T", ""]}) {
    %zero = moe.constant dense<0.0> : tensor<f32>
    %nan = moe.is_nan %x : (tensor<?x4xf32>) -> tensor<?x4xi1>
    %y = moe.where %nan, %zero, %x : (tensor<?x4xi1>, tensor<f32>, tensor<?x4xf32>) -> tensor<?x4xf32>
    return %y : tensor<?x4xf32>
  }
}
