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

// -----

// Tests that value ranges bound the per-expert segments of a grouped matmul:
// a histogram of the T*k top-k ids (ReduceSum of a OneHot) sums to at most
// T*k = 128, its CumSum never exceeds that total, so a Range between two of
// its entries has at most 128 elements, and a remark says which bound was
// used.
// CHECK-LABEL: func.func @one_hot_histogram
func.func @one_hot_histogram(%ids: tensor<?x2xi64>, %x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %flat_shape = moe.constant dense<-1> : tensor<1xi64>
  %flat = moe.reshape %ids, %flat_shape : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %depth = moe.constant dense<4> : tensor<i64>
  %values = moe.constant dense<[0, 1]> : tensor<2xi64>
  // CHECK: moe.one_hot {{.*}} {moe.bounds = [array<i64: 128, 4>]}
  %hot = moe.one_hot %flat, %depth, %values : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x4xi64>
  %axis0 = moe.constant dense<0> : tensor<1xi64>
  %counts = moe.reduce_sum %hot, %axis0 {keepdims = 0 : i64} : (tensor<?x4xi64>, tensor<1xi64>) -> tensor<4xi64>
  %zero = moe.constant dense<0> : tensor<i64>
  %ends = moe.cum_sum %counts, %zero : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  %e:4 = moe.split %ends {axis = 0 : i64, num_outputs = 4 : i64} : (tensor<4xi64>) -> (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>)
  %end0 = moe.squeeze %e#0, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %end1 = moe.squeeze %e#1, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+2 {{dimension 0 of result #0 bounded by 128 from value ranges: the range runs from start >= 0 (a cumulative sum of counts totalling at most 128) to limit <= 128 (a cumulative sum of counts totalling at most 128) in steps of at least 1}}
  // CHECK: moe.range {{.*}} {moe.bounds = [array<i64: 128>]}
  %rows = moe.range %end0, %end1, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  // CHECK: moe.gather {{.*}}moe.bounds = [array<i64: 128, 16>]
  %picked = moe.gather %x, %rows {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  return %picked : tensor<?x16xf32>
}

// -----

// Tests the form torch.histc takes in transformers' exporter: the ids
// computed in floats and clipped to [0, E - 1], a ScatterElements-add of
// float ones into float zeros, cast to int32 and summed: the float counts are
// integers (exact in f32), so the totals still bound the Range.
// CHECK-LABEL: func.func @scatter_add_histogram
func.func @scatter_add_histogram(%fids: tensor<?xf32>) -> tensor<?xi64> {
  %i = moe.cast %fids {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %lo = moe.constant dense<0> : tensor<i64>
  %hi = moe.constant dense<3> : tensor<i64>
  %bin = moe.clip %i min %lo max %hi : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %shape = moe.shape %bin : (tensor<?xi64>) -> tensor<1xi64>
  %onef = moe.constant dense<1.0> : tensor<f32>
  %ones = moe.expand %onef, %shape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %zeros = moe.constant dense<0.0> : tensor<4xf32>
  %hist = moe.scatter_elements %zeros, %bin, %ones {reduction = "add"} : (tensor<4xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<4xf32>
  %counts = moe.cast %hist {to = i32} : (tensor<4xf32>) -> tensor<4xi32>
  %zero = moe.constant dense<0> : tensor<i64>
  %ends32 = moe.cum_sum %counts, %zero : (tensor<4xi32>, tensor<i64>) -> tensor<4xi32>
  %ends = moe.cast %ends32 {to = i64} : (tensor<4xi32>) -> tensor<4xi64>
  %axis0 = moe.constant dense<0> : tensor<1xi64>
  %idx = moe.constant dense<2> : tensor<1xi64>
  %e2 = moe.gather %ends, %idx {axis = 0 : i64} : (tensor<4xi64>, tensor<1xi64>) -> tensor<1xi64>
  %end2 = moe.squeeze %e2, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+2 {{bounded by 64 from value ranges: the range runs from start >= 0 (a constant) to limit <= 64 (a cumulative sum of counts totalling at most 64)}}
  // CHECK: moe.range {{.*}} {moe.bounds = [array<i64: 64>]}
  %rows = moe.range %zero, %end2, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return %rows : tensor<?xi64>
}

// -----

// Tests the counts of Megatron-Core and JetMoE: a [T, E] routing map, float
// ones scattered at the [T, k] top-k ids into a ConstantOfShape of float
// zeros, summed over the tokens: the float fill is an integer, so the map
// totals at most T*k = 128 and bounds the Range.
// CHECK-LABEL: func.func @routing_map_histogram
func.func @routing_map_histogram(%ids: tensor<?x2xi64>, %logits: tensor<?x4xf32>) -> tensor<?xi64> {
  %lshape = moe.shape %logits : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %onef = moe.constant dense<1.0> : tensor<f32>
  %ones = moe.expand %onef, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %axis0 = moe.constant dense<0> : tensor<1xi64>
  %sum = moe.reduce_sum %map, %axis0 {keepdims = 0 : i64} : (tensor<?x4xf32>, tensor<1xi64>) -> tensor<4xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<4xf32>) -> tensor<4xi64>
  %zero = moe.constant dense<0> : tensor<i64>
  %ends = moe.cum_sum %counts, %zero : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  %idx = moe.constant dense<2> : tensor<i64>
  %end2 = moe.gather %ends, %idx {axis = 0 : i64} : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+2 {{bounded by 128 from value ranges: the range runs from start >= 0 (a constant) to limit <= 128 (a cumulative sum of counts totalling at most 128)}}
  // CHECK: moe.range {{.*}} {moe.bounds = [array<i64: 128>]}
  %rows = moe.range %zero, %end2, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return %rows : tensor<?xi64>
}

// -----

// Tests that a cumulative sum of values whose range nothing proves (a graph
// input's) bounds nothing: a Range up to it stays unbounded, an error rather
// than a guess.
func.func @unknown_cumsum(%d: tensor<?xi64>) -> tensor<?xi64> {
  %zero = moe.constant dense<0> : tensor<i64>
  %sums = moe.cum_sum %d, %zero : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %axes = moe.constant dense<0> : tensor<1xi64>
  %last = moe.reduce_max %sums, %axes {keepdims = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-error @+1 {{cannot bound dimension 0 of result #0}}
  %0 = moe.range %zero, %last, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  return %0 : tensor<?xi64>
}

// -----

// Tests that a Range whose limit is clipped from an index computed in floats
// is bounded by the clip, and that a ConstantOfShape to a data-dependent
// size is bounded by its shape's largest value.
// CHECK-LABEL: func.func @clipped_limit
func.func @clipped_limit(%f: tensor<f32>) -> tensor<?xi64> {
  %n = moe.cast %f {to = i64} : (tensor<f32>) -> tensor<i64>
  %lo = moe.constant dense<0> : tensor<i64>
  %hi = moe.constant dense<10> : tensor<i64>
  %limit = moe.clip %n min %lo max %hi : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+2 {{bounded by 10 from value ranges}}
  // CHECK: moe.range {{.*}} {moe.bounds = [array<i64: 10>]}
  %0 = moe.range %lo, %limit, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %axes = moe.constant dense<0> : tensor<1xi64>
  %shape = moe.unsqueeze %limit, %axes : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  // expected-remark @+2 {{dimension 0 of result #0 bounded by 10 from value ranges: every size of the shape is at most 10 (clipped to [0, 10])}}
  // CHECK: moe.constant_of_shape {{.*}}moe.bounds = [array<i64: 10>]
  %1 = moe.constant_of_shape %shape {value = dense<0> : tensor<1xi64>} : (tensor<1xi64>) -> tensor<?xi64>
  %2 = moe.add %0, %1 : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  return %2 : tensor<?xi64>
}

// -----

// Tests that the rows of consecutive segments Range(ends[e-1], ends[e]) over
// a CumSum of counts, each through a Gather and a MatMul, concatenate to at
// most the counts' total (64 = T * k here) rather than the sum of the
// segments' bounds (2 * 64), and that a remark says so.
// CHECK-LABEL: func.func @segment_concat
func.func @segment_concat(%ids: tensor<?xi64>, %x: tensor<?x16xf32>, %w0: tensor<16x8xf32>, %w1: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %depth = moe.constant dense<2> : tensor<i64>
  %values = moe.constant dense<[0, 1]> : tensor<2xi64>
  %hot = moe.one_hot %ids, %depth, %values : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %axis0 = moe.constant dense<0> : tensor<1xi64>
  %counts = moe.reduce_sum %hot, %axis0 {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i64>
  %ends = moe.cum_sum %counts, %zero : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e:2 = moe.split %ends {axis = 0 : i64, num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %end0 = moe.squeeze %e#0, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %end1 = moe.squeeze %e#1, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+1 {{bounded by 64 from value ranges}}
  %r0 = moe.range %zero, %end0, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  // expected-remark @+1 {{bounded by 64 from value ranges}}
  %r1 = moe.range %end0, %end1, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %x0 = moe.gather %x, %r0 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  %x1 = moe.gather %x, %r1 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  %y0 = moe.mat_mul %x0, %w0 : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %y1 = moe.mat_mul %x1, %w1 : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  // expected-remark @+2 {{dimension 0 of result #0 bounded by 64 instead of 128 from value ranges: the 2 segments are consecutive ranges}}
  // CHECK: moe.concat {{.*}} {axis = 0 : i64, moe.bounds = [array<i64: 64, 8>]}
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that segments keep their Range's length through any elementwise op
// of the expert body, here the Reciprocal and Floor that an exporter's
// x * 1 / (1 + exp(-x)) or a rounding leaves, not only through Add or Relu.
// CHECK-LABEL: func.func @segment_concat_through_elementwise
func.func @segment_concat_through_elementwise(%ids: tensor<?xi64>, %x: tensor<?x16xf32>, %w0: tensor<16x8xf32>, %w1: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %depth = moe.constant dense<2> : tensor<i64>
  %values = moe.constant dense<[0, 1]> : tensor<2xi64>
  %hot = moe.one_hot %ids, %depth, %values : (tensor<?xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2xi64>
  %axis0 = moe.constant dense<0> : tensor<1xi64>
  %counts = moe.reduce_sum %hot, %axis0 {keepdims = 0 : i64} : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %zero = moe.constant dense<0> : tensor<i64>
  %ends = moe.cum_sum %counts, %zero : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e:2 = moe.split %ends {axis = 0 : i64, num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %end0 = moe.squeeze %e#0, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %end1 = moe.squeeze %e#1, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+1 {{bounded by 64 from value ranges}}
  %r0 = moe.range %zero, %end0, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  // expected-remark @+1 {{bounded by 64 from value ranges}}
  %r1 = moe.range %end0, %end1, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %x0 = moe.gather %x, %r0 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  %x1 = moe.gather %x, %r1 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  %y0 = moe.mat_mul %x0, %w0 : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %y1 = moe.mat_mul %x1, %w1 : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %z0 = moe.reciprocal %y0 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %z1 = moe.floor %y1 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  // expected-remark @+2 {{dimension 0 of result #0 bounded by 64 instead of 128 from value ranges: the 2 segments are consecutive ranges}}
  // CHECK: moe.concat {{.*}} {axis = 0 : i64, moe.bounds = [array<i64: 64, 8>]}
  %y = moe.concat %z0, %z1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Tests that segments that are not consecutive ends of one vector in order
// (the second starts at ends[1] and ends at ends[0]) keep the sum of their
// bounds: their lengths need not add up to one span.
// CHECK-LABEL: func.func @segments_out_of_order
func.func @segments_out_of_order(%ends: tensor<2xi64>, %x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %lo = moe.constant dense<0> : tensor<i64>
  %hi = moe.constant dense<10> : tensor<i64>
  %axis0 = moe.constant dense<0> : tensor<1xi64>
  %e:2 = moe.split %ends {axis = 0 : i64, num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %s0 = moe.squeeze %e#0, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %s1 = moe.squeeze %e#1, %axis0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %end0 = moe.clip %s0 min %lo max %hi : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<i64>
  %end1 = moe.clip %s1 min %lo max %hi : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<i64>
  %one = moe.constant dense<1> : tensor<i64>
  // expected-remark @+1 {{bounded by 10 from value ranges}}
  %r0 = moe.range %end1, %end0, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  // expected-remark @+1 {{bounded by 10 from value ranges}}
  %r1 = moe.range %end0, %end1, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %x0 = moe.gather %x, %r0 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  %x1 = moe.gather %x, %r1 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?xi64>) -> tensor<?x16xf32>
  // CHECK: moe.concat {{.*}} {axis = 0 : i64, moe.bounds = [array<i64: 20, 16>]}
  %y = moe.concat %x0, %x1 {axis = 0 : i64} : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
