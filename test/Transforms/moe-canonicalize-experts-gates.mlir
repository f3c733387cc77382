// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts | FileCheck %s

// Tests that TorchScript's `scores.view(x.size(0), 4, -1)`, the row count
// read from the tokens the scores are a projection of, becomes a reshape to
// the constant [-1, 4, 2], and that the flatten after it gets [T, 8].
// CHECK-LABEL: func.func @row_count_reshape
// CHECK: %[[SHAPE:.*]] = moe.constant dense<[-1, 4, 2]> : tensor<3xi64>
// CHECK: %[[GROUPED:.*]] = moe.reshape %{{.*}}, %[[SHAPE]] : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x4x2xf32>
// CHECK: moe.flatten %[[GROUPED]] : (tensor<?x4x2xf32>) -> tensor<?x8xf32>
func.func @row_count_reshape(%x: tensor<?x32xf32>, %w: tensor<32x8xf32>, %b: tensor<8xf32>) -> tensor<?x?xf32> {
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c4 = moe.constant dense<4> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %logits = moe.mat_mul %x, %w : (tensor<?x32xf32>, tensor<32x8xf32>) -> tensor<?x8xf32>
  %s = moe.sigmoid %logits : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c = moe.add %s, %b : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %t = moe.dim %x, 0 : tensor<?x32xf32>
  %t1 = moe.unsqueeze %t, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape = moe.concat %t1, %c4, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %g = moe.reshape %c, %shape : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x4x?xf32>
  %f = moe.flatten %g : (tensor<?x4x?xf32>) -> tensor<?x?xf32>
  return %f : tensor<?x?xf32>
}

// -----

// Tests that the row count of `[B, S, H]` tokens viewed as `[B * S, H]`,
// dynamo's product of the two dimensions, is the tokens' row count too.
// CHECK-LABEL: func.func @row_count_product
// CHECK: %[[SHAPE:.*]] = moe.constant dense<[-1, 4, 2]> : tensor<3xi64>
// CHECK: moe.reshape %{{.*}}, %[[SHAPE]] {{.*}} -> tensor<?x4x2xf32>
func.func @row_count_product(%h: tensor<?x?x32xf32>, %w: tensor<8x32xf32>) -> tensor<?x4x?xf32> {
  %flat = moe.constant dense<[-1, 32]> : tensor<2xi64>
  %c1 = moe.constant dense<1> : tensor<1xi64>
  %c4 = moe.constant dense<4> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %x = moe.reshape %h, %flat : (tensor<?x?x32xf32>, tensor<2xi64>) -> tensor<?x32xf32>
  %logits = moe.gemm %x, %w {transB = 1 : i64} : (tensor<?x32xf32>, tensor<8x32xf32>) -> tensor<?x8xf32>
  %b0 = moe.shape %h {end = 1 : i64} : (tensor<?x?x32xf32>) -> tensor<1xi64>
  %b = moe.squeeze %b0 : (tensor<1xi64>) -> tensor<i64>
  %s0 = moe.shape %h {end = 2 : i64, start = 1 : i64} : (tensor<?x?x32xf32>) -> tensor<1xi64>
  %s = moe.squeeze %s0 : (tensor<1xi64>) -> tensor<i64>
  %t = moe.mul %b, %s : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %t1 = moe.reshape %t, %c1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape = moe.concat %t1, %c4, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %g = moe.reshape %logits, %shape : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x4x?xf32>
  return %g : tensor<?x4x?xf32>
}

// -----

// Tests that a row count read from another tensor (which may have other
// rows), or sizes that do not split the row's elements, leave the reshape
// as it is.
// CHECK-LABEL: func.func @row_count_near_miss
// CHECK-NOT: dense<[-1, 4, 2]>
// CHECK-NOT: dense<[-1, 3, 
// CHECK: moe.reshape %{{.*}} -> tensor<?x4x?xf32>
// CHECK: moe.reshape %{{.*}} -> tensor<?x3x?xf32>
func.func @row_count_near_miss(%x: tensor<?x32xf32>, %y: tensor<?x32xf32>, %w: tensor<32x8xf32>) -> (tensor<?x4x?xf32>, tensor<?x3x?xf32>) {
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c3 = moe.constant dense<3> : tensor<1xi64>
  %c4 = moe.constant dense<4> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %logits = moe.mat_mul %x, %w : (tensor<?x32xf32>, tensor<32x8xf32>) -> tensor<?x8xf32>
  %ty = moe.dim %y, 0 : tensor<?x32xf32>
  %ty1 = moe.unsqueeze %ty, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %other = moe.concat %ty1, %c4, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %g = moe.reshape %logits, %other : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x4x?xf32>
  %tx = moe.dim %x, 0 : tensor<?x32xf32>
  %tx1 = moe.unsqueeze %tx, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %odd = moe.concat %tx1, %c3, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %h = moe.reshape %logits, %odd : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x3x?xf32>
  return %g, %h : tensor<?x4x?xf32>, tensor<?x3x?xf32>
}

// -----

// Tests that DeepSeek-V3's own group masking, `masked_fill(-inf)` of the
// groups of `[T, 4, 2]` choice scores whose `[T, 4, 1]` mask is ones with
// zeros scattered at the kept groups, becomes transformers' form: ones
// scattered at the kept groups into zeros of the group scores' shape,
// repeated over each group's experts, negated, selecting the fill over the
// `[T, 8]` scores themselves.
// CHECK-LABEL: func.func @group_fill
// CHECK-SAME: (%[[X:.*]]: tensor<?x32xf32>
// CHECK: %[[C:.*]] = moe.add
// CHECK: %[[G:.*]] = moe.reduce_sum
// CHECK: %{{.*}}, %[[KEEP:.*]] = moe.top_k %[[G]],
// CHECK: %[[GSHAPE:.*]] = moe.shape %[[G]]
// CHECK: %[[ZEROS:.*]] = moe.constant_of_shape %[[GSHAPE]] {value = dense<0.000000e+00> : tensor<1xf32>}
// CHECK: %[[KSHAPE:.*]] = moe.shape %[[KEEP]]
// CHECK: %[[ONES:.*]] = moe.expand %{{.*}}, %[[KSHAPE]]
// CHECK: %[[MASK:.*]] = moe.scatter_elements %[[ZEROS]], %[[KEEP]], %[[ONES]] {axis = 1 : i64}
// CHECK: %[[U:.*]] = moe.unsqueeze %[[MASK]]
// CHECK: %[[R:.*]] = moe.expand %[[U]], %{{.*}} -> tensor<?x4x2xf32>
// CHECK: %[[FLAT:.*]] = moe.reshape %[[R]], %{{.*}} -> tensor<?x8xf32>
// CHECK: %[[B:.*]] = moe.cast %[[FLAT]] {to = i1}
// CHECK: %[[N:.*]] = moe.not %[[B]]
// CHECK: %[[SEL:.*]] = moe.where %[[N]], %{{.*}}, %[[C]] : (tensor<?x8xi1>, tensor<f32>, tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK: moe.top_k %[[SEL]]
func.func @group_fill(%x: tensor<?x32xf32>, %w: tensor<32x8xf32>, %b: tensor<8xf32>) -> tensor<?x2xi64> {
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c4 = moe.constant dense<4> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %groups = moe.constant dense<[-1, 4, 2]> : tensor<3xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %logits = moe.mat_mul %x, %w : (tensor<?x32xf32>, tensor<32x8xf32>) -> tensor<?x8xf32>
  %s = moe.sigmoid %logits : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c = moe.add %s, %b : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %sg = moe.reshape %c, %groups : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x4x2xf32>
  %v2, %i2 = moe.top_k %sg, %c2 : (tensor<?x4x2xf32>, tensor<1xi64>) -> (tensor<?x4x2xf32>, tensor<?x4x2xi64>)
  %g = moe.reduce_sum %v2, %m1 {keepdims = 0 : i64} : (tensor<?x4x2xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  %gv, %keep = moe.top_k %g, %c2 : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %t = moe.dim %x, 0 : tensor<?x32xf32>
  %t1 = moe.unsqueeze %t, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %oshape = moe.concat %t1, %c4 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %ones = moe.constant_of_shape %oshape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %kshape = moe.shape %keep : (tensor<?x2xi64>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %kshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %drop = moe.scatter_elements %ones, %keep, %zeros {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %dropb = moe.cast %drop {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %drop3 = moe.unsqueeze %dropb, %m1 : (tensor<?x4xi1>, tensor<1xi64>) -> tensor<?x4x1xi1>
  %masked = moe.where %drop3, %ninf, %sg : (tensor<?x4x1xi1>, tensor<f32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %sel = moe.flatten %masked : (tensor<?x4x2xf32>) -> tensor<?x8xf32>
  %v, %ids = moe.top_k %sel, %c2 : (tensor<?x8xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  return %ids : tensor<?x2xi64>
}

// -----

// Tests that group masks that are not DeepSeek-V3's stay as they are: ones
// whose row count is another tensor's (they may broadcast over more rows
// than the tokens'), and a mask that scatters ones (keeps the kept groups
// at the fill).
// CHECK-LABEL: func.func @group_fill_near_miss
// CHECK-NOT: moe.not
// CHECK-COUNT-2: moe.flatten
func.func @group_fill_near_miss(%x: tensor<?x32xf32>, %y: tensor<?x32xf32>, %w: tensor<32x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %c2 = moe.constant dense<2> : tensor<1xi64>
  %c4 = moe.constant dense<4> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %groups = moe.constant dense<[-1, 4, 2]> : tensor<3xi64>
  %zero = moe.constant dense<0.000000e+00> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %logits = moe.mat_mul %x, %w : (tensor<?x32xf32>, tensor<32x8xf32>) -> tensor<?x8xf32>
  %c = moe.sigmoid %logits : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %sg = moe.reshape %c, %groups : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x4x2xf32>
  %v2, %i2 = moe.top_k %sg, %c2 : (tensor<?x4x2xf32>, tensor<1xi64>) -> (tensor<?x4x2xf32>, tensor<?x4x2xi64>)
  %g = moe.reduce_sum %v2, %m1 {keepdims = 0 : i64} : (tensor<?x4x2xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  %gv, %keep = moe.top_k %g, %c2 : (tensor<?x4xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %kshape = moe.shape %keep : (tensor<?x2xi64>) -> tensor<2xi64>
  %zeros = moe.expand %zero, %kshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %onesk = moe.expand %one, %kshape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %ty = moe.dim %y, 0 : tensor<?x32xf32>
  %ty1 = moe.unsqueeze %ty, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %yshape = moe.concat %ty1, %c4 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %yones = moe.constant_of_shape %yshape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %drop = moe.scatter_elements %yones, %keep, %zeros {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %dropb = moe.cast %drop {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %drop3 = moe.unsqueeze %dropb, %m1 : (tensor<?x4xi1>, tensor<1xi64>) -> tensor<?x4x1xi1>
  %masked = moe.where %drop3, %ninf, %sg : (tensor<?x4x1xi1>, tensor<f32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %sel = moe.flatten %masked : (tensor<?x4x2xf32>) -> tensor<?x8xf32>
  %tx = moe.dim %x, 0 : tensor<?x32xf32>
  %tx1 = moe.unsqueeze %tx, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %xshape = moe.concat %tx1, %c4 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %xones = moe.constant_of_shape %xshape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %keepb = moe.scatter_elements %xones, %keep, %onesk {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x4xf32>
  %keepc = moe.cast %keepb {to = i1} : (tensor<?x4xf32>) -> tensor<?x4xi1>
  %keep3 = moe.unsqueeze %keepc, %m1 : (tensor<?x4xi1>, tensor<1xi64>) -> tensor<?x4x1xi1>
  %masked2 = moe.where %keep3, %ninf, %sg : (tensor<?x4x1xi1>, tensor<f32>, tensor<?x4x2xf32>) -> tensor<?x4x2xf32>
  %sel2 = moe.flatten %masked2 : (tensor<?x4x2xf32>) -> tensor<?x8xf32>
  return %sel, %sel2 : tensor<?x8xf32>, tensor<?x8xf32>
}
