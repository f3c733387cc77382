// RUN: moec-opt %s --split-input-file --moe-fuse-attention | FileCheck %s

// Tests the transformers form: scores scaled by a mul, an additive mask the
// graph computes, then softmax and the product with V: one moe.attention
// with the mask as an operand.
// CHECK-LABEL: func.func @scaled_masked
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x?x8xf32>, %[[K:.*]]: tensor<1x4x?x8xf32>, %[[V:.*]]: tensor<1x4x?x8xf32>, %[[M:.*]]: tensor<1x1x?x?xf32>)
func.func @scaled_masked(%q: tensor<1x4x?x8xf32>, %k: tensor<1x4x?x8xf32>,
                         %v: tensor<1x4x?x8xf32>, %m: tensor<1x1x?x?xf32>)
    -> tensor<1x4x?x8xf32> {
  // CHECK: %[[O:.*]] = moe.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] scale 0.353553385 : tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x1x?x?xf32> -> tensor<1x4x?x8xf32>
  // CHECK-NOT: moe.softmax
  // CHECK-NOT: moe.transpose
  // CHECK: return %[[O]]
  %c = moe.constant dense<0.353553385> : tensor<f32>
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x?x8xf32>) -> tensor<1x4x8x?xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x4x?x8xf32>, tensor<1x4x8x?xf32>) -> tensor<1x4x?x?xf32>
  %t = moe.mul %s, %c : (tensor<1x4x?x?xf32>, tensor<f32>) -> tensor<1x4x?x?xf32>
  %u = moe.add %t, %m : (tensor<1x4x?x?xf32>, tensor<1x1x?x?xf32>) -> tensor<1x4x?x?xf32>
  %p = moe.softmax %u : (tensor<1x4x?x?xf32>) -> tensor<1x4x?x?xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x4x?x?xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32>
  return %o : tensor<1x4x?x8xf32>
}

// -----

// Tests a division of the scores without a mask, the mask on the left of
// the add in no case: the scale is 1 / 4.
// CHECK-LABEL: func.func @divided_unmasked
func.func @divided_unmasked(%q: tensor<2x2x5x16xf32>, %k: tensor<2x2x7x16xf32>,
                            %v: tensor<2x2x7x4xf32>) -> tensor<2x2x5x4xf32> {
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} scale 2.500000e-01 : tensor<2x2x5x16xf32>, tensor<2x2x7x16xf32>, tensor<2x2x7x4xf32> -> tensor<2x2x5x4xf32>
  // CHECK-NOT: moe.div
  %c = moe.constant dense<4.0> : tensor<1xf32>
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x2x7x16xf32>) -> tensor<2x2x16x7xf32>
  %s = moe.mat_mul %q, %kt : (tensor<2x2x5x16xf32>, tensor<2x2x16x7xf32>) -> tensor<2x2x5x7xf32>
  %t = moe.div %s, %c : (tensor<2x2x5x7xf32>, tensor<1xf32>) -> tensor<2x2x5x7xf32>
  %p = moe.softmax %t {axis = 3 : i64} : (tensor<2x2x5x7xf32>) -> tensor<2x2x5x7xf32>
  %o = moe.mat_mul %p, %v : (tensor<2x2x5x7xf32>, tensor<2x2x7x4xf32>) -> tensor<2x2x5x4xf32>
  return %o : tensor<2x2x5x4xf32>
}

// -----

// Tests the SDPA decomposition that scales Q and the transposed K by
// sqrt(scale) each, with the mask on the left of the add: the factors
// multiply into one scale.
// CHECK-LABEL: func.func @split_scale
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x3x4xf32>, %[[K:.*]]: tensor<1x2x3x4xf32>, %[[V:.*]]: tensor<1x2x3x4xf32>, %[[M:.*]]: tensor<1x1x3x3xf32>)
func.func @split_scale(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>,
                       %v: tensor<1x2x3x4xf32>, %m: tensor<1x1x3x3xf32>)
    -> tensor<1x2x3x4xf32> {
  // CHECK: moe.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] scale 0.49999997
  // CHECK-NOT: moe.mul
  %c = moe.constant dense<0.707106769> : tensor<f32>
  %qs = moe.mul %q, %c : (tensor<1x2x3x4xf32>, tensor<f32>) -> tensor<1x2x3x4xf32>
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %ks = moe.mul %c, %kt : (tensor<f32>, tensor<1x2x4x3xf32>) -> tensor<1x2x4x3xf32>
  %s = moe.mat_mul %qs, %ks : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %u = moe.add %m, %s : (tensor<1x1x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = moe.softmax %u : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Tests grouped-query attention in the exporters' dynamic form: K and V are
// repeat_kv copies, reshape(expand(unsqueeze(x, 2), [b, kvh, 2, s, d]),
// [b, kvh * 2, s, d]) with every size taken from x by moe.dim; the op reads
// the unrepeated heads and the copies are gone.
// CHECK-LABEL: func.func @grouped_query
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x?x8xf32>, %[[K:.*]]: tensor<?x?x?x8xf32>, %[[V:.*]]: tensor<?x?x?x8xf32>)
func.func @grouped_query(%q: tensor<?x?x?x8xf32>, %k: tensor<?x?x?x8xf32>,
                         %v: tensor<?x?x?x8xf32>) -> tensor<?x?x?x8xf32> {
  // CHECK: moe.attention %[[Q]], %[[K]], %[[V]] scale 1.000000e+00
  // CHECK-NOT: moe.expand
  // CHECK-NOT: moe.reshape
  %axis = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %rep = moe.constant dense<2> : tensor<1xi64>
  %rep_s = moe.constant dense<2> : tensor<i64>
  %d = moe.constant dense<8> : tensor<1xi64>
  %b0 = moe.dim %k, 0 : tensor<?x?x?x8xf32>
  %h0 = moe.dim %k, 1 : tensor<?x?x?x8xf32>
  %s0 = moe.dim %k, 2 : tensor<?x?x?x8xf32>
  %b1 = moe.unsqueeze %b0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %h1 = moe.unsqueeze %h0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.unsqueeze %s0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape5 = moe.concat %b1, %h1, %rep, %s1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %hr = moe.mul %h0, %rep_s : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %hr1 = moe.unsqueeze %hr, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape4 = moe.concat %b1, %hr1, %s1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %ku = moe.unsqueeze %k, %axis : (tensor<?x?x?x8xf32>, tensor<1xi64>) -> tensor<?x?x1x?x8xf32>
  %ke = moe.expand %ku, %shape5 : (tensor<?x?x1x?x8xf32>, tensor<5xi64>) -> tensor<?x?x2x?x8xf32>
  %kr = moe.reshape %ke, %shape4 : (tensor<?x?x2x?x8xf32>, tensor<4xi64>) -> tensor<?x?x?x8xf32>
  // V's sizes are its own: nothing says they are K's.
  %vb0 = moe.dim %v, 0 : tensor<?x?x?x8xf32>
  %vh0 = moe.dim %v, 1 : tensor<?x?x?x8xf32>
  %vs0 = moe.dim %v, 2 : tensor<?x?x?x8xf32>
  %vb1 = moe.unsqueeze %vb0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vh1 = moe.unsqueeze %vh0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vs1 = moe.unsqueeze %vs0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vshape5 = moe.concat %vb1, %vh1, %rep, %vs1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %vhr = moe.mul %rep_s, %vh0 : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %vhr1 = moe.unsqueeze %vhr, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vshape4 = moe.concat %vb1, %vhr1, %vs1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %vu = moe.unsqueeze %v, %axis : (tensor<?x?x?x8xf32>, tensor<1xi64>) -> tensor<?x?x1x?x8xf32>
  %ve = moe.expand %vu, %vshape5 : (tensor<?x?x1x?x8xf32>, tensor<5xi64>) -> tensor<?x?x2x?x8xf32>
  %vr = moe.reshape %ve, %vshape4 : (tensor<?x?x2x?x8xf32>, tensor<4xi64>) -> tensor<?x?x?x8xf32>
  %kt = moe.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x?x?x8xf32>) -> tensor<?x?x8x?xf32>
  %s = moe.mat_mul %q, %kt : (tensor<?x?x?x8xf32>, tensor<?x?x8x?xf32>) -> tensor<?x?x?x?xf32>
  %p = moe.softmax %s : (tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
  %o = moe.mat_mul %p, %vr : (tensor<?x?x?x?xf32>, tensor<?x?x?x8xf32>) -> tensor<?x?x?x8xf32>
  return %o : tensor<?x?x?x8xf32>
}

// -----

// Tests that the repeat_kv sizes are followed back through any op that keeps
// its operand's shape: OLMo's clip_qkv clamps K and V, and the copies' sizes
// come from the unclamped tensors.
// CHECK-LABEL: func.func @grouped_query_clipped_kv
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<?x?x?x8xf32>,
func.func @grouped_query_clipped_kv(%q: tensor<?x?x?x8xf32>, %k0: tensor<?x?x?x8xf32>,
                                    %v0: tensor<?x?x?x8xf32>) -> tensor<?x?x?x8xf32> {
  // CHECK: %[[K:.*]] = moe.clip
  // CHECK: %[[V:.*]] = moe.clip
  // CHECK: moe.attention %[[Q]], %[[K]], %[[V]] scale 1.000000e+00
  // CHECK-NOT: moe.expand
  // CHECK-NOT: moe.reshape
  %lo = moe.constant dense<-8.0> : tensor<f32>
  %hi = moe.constant dense<8.0> : tensor<f32>
  %k = moe.clip %k0 min %lo max %hi : (tensor<?x?x?x8xf32>, tensor<f32>, tensor<f32>) -> tensor<?x?x?x8xf32>
  %v = moe.clip %v0 min %lo max %hi : (tensor<?x?x?x8xf32>, tensor<f32>, tensor<f32>) -> tensor<?x?x?x8xf32>
  %axis = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %rep = moe.constant dense<2> : tensor<1xi64>
  %rep_s = moe.constant dense<2> : tensor<i64>
  %d = moe.constant dense<8> : tensor<1xi64>
  %b0 = moe.dim %k0, 0 : tensor<?x?x?x8xf32>
  %h0 = moe.dim %k0, 1 : tensor<?x?x?x8xf32>
  %s0 = moe.dim %k0, 2 : tensor<?x?x?x8xf32>
  %b1 = moe.unsqueeze %b0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %h1 = moe.unsqueeze %h0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %s1 = moe.unsqueeze %s0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape5 = moe.concat %b1, %h1, %rep, %s1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %hr = moe.mul %h0, %rep_s : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %hr1 = moe.unsqueeze %hr, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape4 = moe.concat %b1, %hr1, %s1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %ku = moe.unsqueeze %k, %axis : (tensor<?x?x?x8xf32>, tensor<1xi64>) -> tensor<?x?x1x?x8xf32>
  %ke = moe.expand %ku, %shape5 : (tensor<?x?x1x?x8xf32>, tensor<5xi64>) -> tensor<?x?x2x?x8xf32>
  %kr = moe.reshape %ke, %shape4 : (tensor<?x?x2x?x8xf32>, tensor<4xi64>) -> tensor<?x?x?x8xf32>
  %vb0 = moe.dim %v0, 0 : tensor<?x?x?x8xf32>
  %vh0 = moe.dim %v0, 1 : tensor<?x?x?x8xf32>
  %vs0 = moe.dim %v0, 2 : tensor<?x?x?x8xf32>
  %vb1 = moe.unsqueeze %vb0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vh1 = moe.unsqueeze %vh0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vs1 = moe.unsqueeze %vs0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vshape5 = moe.concat %vb1, %vh1, %rep, %vs1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %vhr = moe.mul %rep_s, %vh0 : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %vhr1 = moe.unsqueeze %vhr, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vshape4 = moe.concat %vb1, %vhr1, %vs1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %vu = moe.unsqueeze %v, %axis : (tensor<?x?x?x8xf32>, tensor<1xi64>) -> tensor<?x?x1x?x8xf32>
  %ve = moe.expand %vu, %vshape5 : (tensor<?x?x1x?x8xf32>, tensor<5xi64>) -> tensor<?x?x2x?x8xf32>
  %vr = moe.reshape %ve, %vshape4 : (tensor<?x?x2x?x8xf32>, tensor<4xi64>) -> tensor<?x?x?x8xf32>
  %kt = moe.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x?x?x8xf32>) -> tensor<?x?x8x?xf32>
  %s = moe.mat_mul %q, %kt : (tensor<?x?x?x8xf32>, tensor<?x?x8x?xf32>) -> tensor<?x?x?x?xf32>
  %p = moe.softmax %s : (tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
  %o = moe.mat_mul %p, %vr : (tensor<?x?x?x?xf32>, tensor<?x?x?x8xf32>) -> tensor<?x?x?x8xf32>
  return %o : tensor<?x?x?x8xf32>
}

// -----

// Tests the repeat_kv proof of a later layer, whose keys' sizes come back
// through the layer before it: K is a reshape of a MoE layer's output
// (moe.combine rows = the router's rows = the gate's Gemm rows = x's
// tokens), V the output of that layer's fused attention (the query's
// positions); the expand and reshape take their sizes from x and from the
// earlier query by moe.dim.
// CHECK-LABEL: func.func @sizes_through_moe_and_attention
// CHECK: %[[KT:.*]] = moe.transpose
// CHECK: %[[V0:.*]] = moe.attention
// CHECK: moe.attention %{{.*}}, %[[KT]], %[[V0]] scale 1.000000e+00
// CHECK-NOT: moe.expand
func.func @sizes_through_moe_and_attention(
    %x: tensor<?x16xf32>, %wr: tensor<4x16xf32>, %out: tensor<?x16xf32>,
    %source: tensor<?xi64>, %q0: tensor<1x2x?x8xf32>, %k0: tensor<1x2x?x8xf32>,
    %q: tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32> {
  %logits = moe.gemm %x, %wr {transB = 1 : i64} : (tensor<?x16xf32>, tensor<4x16xf32>) -> tensor<?x4xf32>
  %rw, %ri = moe.router %logits top 2 softmax normalize : tensor<?x4xf32>
  %y = moe.combine %out, %source, %rw : tensor<?x16xf32>, tensor<?xi64>, tensor<?x2xf32>
  %split = moe.constant dense<[1, -1, 2, 8]> : tensor<4xi64>
  %y4 = moe.reshape %y, %split : (tensor<?x16xf32>, tensor<4xi64>) -> tensor<1x?x2x8xf32>
  %k = moe.transpose %y4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x2x8xf32>) -> tensor<1x2x?x8xf32>
  %v = moe.attention %q0, %k0, %k0 scale 1.0 : tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x2x?x8xf32>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %axis = moe.constant dense<2> : tensor<1xi64>
  %head = moe.constant dense<[1, 2, 2]> : tensor<3xi64>
  %d = moe.constant dense<8> : tensor<1xi64>
  %heads = moe.constant dense<[1, 4]> : tensor<2xi64>
  %t0 = moe.dim %x, 0 : tensor<?x16xf32>
  %t1 = moe.unsqueeze %t0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %kshape5 = moe.concat %head, %t1, %d {axis = 0 : i64} : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %kshape4 = moe.concat %heads, %t1, %d {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %ku = moe.unsqueeze %k, %axis : (tensor<1x2x?x8xf32>, tensor<1xi64>) -> tensor<1x2x1x?x8xf32>
  %ke = moe.expand %ku, %kshape5 : (tensor<1x2x1x?x8xf32>, tensor<5xi64>) -> tensor<1x2x2x?x8xf32>
  %kr = moe.reshape %ke, %kshape4 : (tensor<1x2x2x?x8xf32>, tensor<4xi64>) -> tensor<1x4x?x8xf32>
  %p0 = moe.dim %q0, 2 : tensor<1x2x?x8xf32>
  %p1 = moe.unsqueeze %p0, %zero : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %vshape5 = moe.concat %head, %p1, %d {axis = 0 : i64} : (tensor<3xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %vshape4 = moe.concat %heads, %p1, %d {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %vu = moe.unsqueeze %v, %axis : (tensor<1x2x?x8xf32>, tensor<1xi64>) -> tensor<1x2x1x?x8xf32>
  %ve = moe.expand %vu, %vshape5 : (tensor<1x2x1x?x8xf32>, tensor<5xi64>) -> tensor<1x2x2x?x8xf32>
  %vr = moe.reshape %ve, %vshape4 : (tensor<1x2x2x?x8xf32>, tensor<4xi64>) -> tensor<1x4x?x8xf32>
  %kt = moe.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x?x8xf32>) -> tensor<1x4x8x?xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x4x?x8xf32>, tensor<1x4x8x?xf32>) -> tensor<1x4x?x?xf32>
  %p = moe.softmax %s : (tensor<1x4x?x?xf32>) -> tensor<1x4x?x?xf32>
  %o = moe.mat_mul %p, %vr : (tensor<1x4x?x?xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32>
  return %o : tensor<1x4x?x8xf32>
}

// -----

// Tests that a copy whose reshape target is not provably [b, kvh * rep, s,
// d] (its head count comes from another tensor) is not mapped by index: the
// op reads the copies, which is exact whatever the sizes are.
// CHECK-LABEL: func.func @unproven_repeat
// CHECK-SAME: (%[[Q:.*]]: tensor<1x?x?x8xf32>, %[[K:.*]]: tensor<1x2x?x8xf32>, %[[V:.*]]: tensor<1x2x?x8xf32>, %[[H:.*]]: tensor<1xi64>)
func.func @unproven_repeat(%q: tensor<1x?x?x8xf32>, %k: tensor<1x2x?x8xf32>,
                           %v: tensor<1x2x?x8xf32>, %heads: tensor<1xi64>)
    -> tensor<1x?x?x8xf32> {
  // CHECK: %[[KE:.*]] = moe.expand
  // CHECK: %[[KR:.*]] = moe.reshape %[[KE]]
  // CHECK: %[[VE:.*]] = moe.expand
  // CHECK: %[[VR:.*]] = moe.reshape %[[VE]]
  // CHECK: moe.attention %[[Q]], %[[KR]], %[[VR]] scale
  %axis = moe.constant dense<2> : tensor<1xi64>
  %zero = moe.constant dense<0> : tensor<1xi64>
  %one = moe.constant dense<1> : tensor<1xi64>
  %rep = moe.constant dense<2> : tensor<1xi64>
  %d = moe.constant dense<8> : tensor<1xi64>
  %minus = moe.constant dense<-1> : tensor<1xi64>
  %shape5 = moe.concat %one, %one, %rep, %one, %one {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %shape4 = moe.concat %one, %heads, %minus, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %ku = moe.unsqueeze %k, %axis : (tensor<1x2x?x8xf32>, tensor<1xi64>) -> tensor<1x2x1x?x8xf32>
  %ke = moe.expand %ku, %shape5 : (tensor<1x2x1x?x8xf32>, tensor<5xi64>) -> tensor<1x2x2x?x8xf32>
  %kr = moe.reshape %ke, %shape4 : (tensor<1x2x2x?x8xf32>, tensor<4xi64>) -> tensor<1x?x?x8xf32>
  %vu = moe.unsqueeze %v, %axis : (tensor<1x2x?x8xf32>, tensor<1xi64>) -> tensor<1x2x1x?x8xf32>
  %ve = moe.expand %vu, %shape5 : (tensor<1x2x1x?x8xf32>, tensor<5xi64>) -> tensor<1x2x2x?x8xf32>
  %vr = moe.reshape %ve, %shape4 : (tensor<1x2x2x?x8xf32>, tensor<4xi64>) -> tensor<1x?x?x8xf32>
  %kt = moe.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x?x?x8xf32>) -> tensor<1x?x8x?xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x?x?x8xf32>, tensor<1x?x8x?xf32>) -> tensor<1x?x?x?xf32>
  %p = moe.softmax %s : (tensor<1x?x?x?xf32>) -> tensor<1x?x?x?xf32>
  %o = moe.mat_mul %p, %vr : (tensor<1x?x?x?xf32>, tensor<1x?x?x8xf32>) -> tensor<1x?x?x8xf32>
  return %o : tensor<1x?x?x8xf32>
}

// -----

// Tests that a softmax over another axis than the keys' is not attention.
// CHECK-LABEL: func.func @softmax_other_axis
func.func @softmax_other_axis(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>,
                              %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  // CHECK-NOT: moe.attention
  // CHECK: moe.softmax
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %p = moe.softmax %s {axis = 2 : i64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Tests that scores the graph also returns are not fused away.
// CHECK-LABEL: func.func @scores_used_twice
func.func @scores_used_twice(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>,
                             %v: tensor<1x2x3x4xf32>)
    -> (tensor<1x2x3x4xf32>, tensor<1x2x3x3xf32>) {
  // CHECK-NOT: moe.attention
  // CHECK: moe.softmax
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %p = moe.softmax %s : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o, %s : tensor<1x2x3x4xf32>, tensor<1x2x3x3xf32>
}

// -----

// Tests that a scale the graph computes (not a constant) is not peeled: the
// product under the softmax is then not a mat_mul and nothing is fused.
// CHECK-LABEL: func.func @computed_scale
func.func @computed_scale(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>,
                          %v: tensor<1x2x3x4xf32>, %c: tensor<f32>)
    -> tensor<1x2x3x4xf32> {
  // CHECK-NOT: moe.attention
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %t = moe.mul %s, %c : (tensor<1x2x3x3xf32>, tensor<f32>) -> tensor<1x2x3x3xf32>
  %p = moe.softmax %t : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Tests that a mask of rank 2 (broadcast from [Sq, Skv]) is left alone: the
// op takes rank-4 masks only.
// CHECK-LABEL: func.func @mask_rank_two
func.func @mask_rank_two(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>,
                         %v: tensor<1x2x3x4xf32>, %m: tensor<3x3xf32>)
    -> tensor<1x2x3x4xf32> {
  // CHECK-NOT: moe.attention
  %kt = moe.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x3xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>) -> tensor<1x2x3x3xf32>
  %u = moe.add %s, %m : (tensor<1x2x3x3xf32>, tensor<3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = moe.softmax %u : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Tests the decode form of grouped-query attention: the keys are the past
// (a graph input of the named size "past") concatenated with one new row,
// and the exporter sizes the copy from the *values'* past, shape(pv)[2] + 1.
// Inputs sharing a dim_param share one size, so the copy is proven and the
// op reads the concatenated heads directly.
// CHECK-LABEL: func.func @decode_cache
// CHECK: %[[K:.*]] = moe.concat %arg1, %arg3
// CHECK: %[[V:.*]] = moe.concat %arg2, %arg4
// CHECK: moe.attention %arg0, %[[K]], %[[V]] scale
// CHECK-NOT: moe.expand
func.func @decode_cache(%q: tensor<1x4x1x8xf32>,
                        %pk: tensor<1x2x?x8xf32> {moe.dim_params = ["", "", "past", ""]},
                        %pv: tensor<1x2x?x8xf32> {moe.dim_params = ["", "", "past", ""]},
                        %nk: tensor<1x2x1x8xf32>, %nv: tensor<1x2x1x8xf32>)
    -> tensor<1x4x1x8xf32> {
  %axis = moe.constant dense<2> : tensor<1xi64>
  %one = moe.constant dense<1> : tensor<1xi64>
  %one_s = moe.constant dense<1> : tensor<i64>
  %rep = moe.constant dense<2> : tensor<1xi64>
  %d = moe.constant dense<8> : tensor<1xi64>
  %shape4 = moe.constant dense<[1, 4, -1, 8]> : tensor<4xi64>
  %k = moe.concat %pk, %nk {axis = -2 : i64} : (tensor<1x2x?x8xf32>, tensor<1x2x1x8xf32>) -> tensor<1x2x?x8xf32>
  %v = moe.concat %pv, %nv {axis = -2 : i64} : (tensor<1x2x?x8xf32>, tensor<1x2x1x8xf32>) -> tensor<1x2x?x8xf32>
  %past = moe.shape %pv {end = 3 : i64, start = 2 : i64} : (tensor<1x2x?x8xf32>) -> tensor<1xi64>
  %past_s = moe.squeeze %past : (tensor<1xi64>) -> tensor<i64>
  %total = moe.add %past_s, %one_s : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %total1 = moe.reshape %total, %one : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %shape5 = moe.concat %one, %rep, %rep, %total1, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %ku = moe.unsqueeze %k, %axis : (tensor<1x2x?x8xf32>, tensor<1xi64>) -> tensor<1x2x1x?x8xf32>
  %ke = moe.expand %ku, %shape5 : (tensor<1x2x1x?x8xf32>, tensor<5xi64>) -> tensor<1x2x2x?x8xf32>
  %kr = moe.reshape %ke, %shape4 {allowzero = 1 : i64} : (tensor<1x2x2x?x8xf32>, tensor<4xi64>) -> tensor<1x4x?x8xf32>
  %vu = moe.unsqueeze %v, %axis : (tensor<1x2x?x8xf32>, tensor<1xi64>) -> tensor<1x2x1x?x8xf32>
  %ve = moe.expand %vu, %shape5 : (tensor<1x2x1x?x8xf32>, tensor<5xi64>) -> tensor<1x2x2x?x8xf32>
  %vr = moe.reshape %ve, %shape4 {allowzero = 1 : i64} : (tensor<1x2x2x?x8xf32>, tensor<4xi64>) -> tensor<1x4x?x8xf32>
  %kt = moe.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x?x8xf32>) -> tensor<1x4x8x?xf32>
  %s = moe.mat_mul %q, %kt : (tensor<1x4x1x8xf32>, tensor<1x4x8x?xf32>) -> tensor<1x4x1x?xf32>
  %p = moe.softmax %s : (tensor<1x4x1x?xf32>) -> tensor<1x4x1x?xf32>
  %o = moe.mat_mul %p, %vr : (tensor<1x4x1x?xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

// -----

// Tests the K^T of vision encoders, exported with their batch of one
// dropped around a rank-3 transpose, the sizes read from K's own shape:
// reshape(transpose(reshape(K, [-1, s, d]), [0, 2, 1]), [1, h, d, s]) is
// transpose(K, [0, 1, 3, 2]), and the three ops go with the chain.
// CHECK-LABEL: func.func @unbatched_key_transpose
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x?x16xf32>, %[[K:.*]]: tensor<1x2x?x16xf32>, %[[V:.*]]: tensor<1x2x?x16xf32>)
func.func @unbatched_key_transpose(%q: tensor<1x2x?x16xf32>,
                                   %k: tensor<1x2x?x16xf32>,
                                   %v: tensor<1x2x?x16xf32>)
    -> tensor<1x2x?x16xf32> {
  // CHECK: %[[O:.*]] = moe.attention %[[Q]], %[[K]], %[[V]] scale 2.500000e-01
  // CHECK-NOT: moe.transpose
  // CHECK-NOT: moe.reshape
  // CHECK: return %[[O]]
  %c = moe.constant dense<0.5> : tensor<f32>
  %minus1 = moe.constant dense<-1> : tensor<1xi64>
  %minus2 = moe.constant dense<-2> : tensor<1xi64>
  %d = moe.constant dense<16> : tensor<1xi64>
  %bh = moe.constant dense<[1, 2]> : tensor<2xi64>
  %shape = moe.shape %k : (tensor<1x2x?x16xf32>) -> tensor<4xi64>
  %s = moe.slice %shape, %minus2, %minus1 : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %inner = moe.concat %minus1, %s, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %r = moe.reshape %k, %inner : (tensor<1x2x?x16xf32>, tensor<3xi64>) -> tensor<2x?x16xf32>
  %t = moe.transpose %r {perm = array<i64: 0, 2, 1>} : (tensor<2x?x16xf32>) -> tensor<2x16x?xf32>
  %outer = moe.concat %bh, %d, %s {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %kt = moe.reshape %t, %outer : (tensor<2x16x?xf32>, tensor<4xi64>) -> tensor<1x2x16x?xf32>
  %qs = moe.mul %q, %c : (tensor<1x2x?x16xf32>, tensor<f32>) -> tensor<1x2x?x16xf32>
  %ks = moe.mul %kt, %c : (tensor<1x2x16x?xf32>, tensor<f32>) -> tensor<1x2x16x?xf32>
  %scores = moe.mat_mul %qs, %ks : (tensor<1x2x?x16xf32>, tensor<1x2x16x?xf32>) -> tensor<1x2x?x?xf32>
  %p = moe.softmax %scores : (tensor<1x2x?x?xf32>) -> tensor<1x2x?x?xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x?x?xf32>, tensor<1x2x?x16xf32>) -> tensor<1x2x?x16xf32>
  return %o : tensor<1x2x?x16xf32>
}

// -----

// Tests that the same chain is left alone when the restored shape takes
// its positions from another tensor (V's, not provably K's): the result
// need not be K's transpose.
// CHECK-LABEL: func.func @unbatched_key_transpose_unproven
func.func @unbatched_key_transpose_unproven(%q: tensor<1x2x?x16xf32>,
                                            %k: tensor<1x2x?x16xf32>,
                                            %v: tensor<1x2x?x16xf32>)
    -> tensor<1x2x?x16xf32> {
  // CHECK-NOT: moe.attention
  // CHECK: moe.softmax
  %minus1 = moe.constant dense<-1> : tensor<1xi64>
  %minus2 = moe.constant dense<-2> : tensor<1xi64>
  %d = moe.constant dense<16> : tensor<1xi64>
  %bh = moe.constant dense<[1, 2]> : tensor<2xi64>
  %shape = moe.shape %k : (tensor<1x2x?x16xf32>) -> tensor<4xi64>
  %s = moe.slice %shape, %minus2, %minus1 : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %vshape = moe.shape %v : (tensor<1x2x?x16xf32>) -> tensor<4xi64>
  %vs = moe.slice %vshape, %minus2, %minus1 : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %inner = moe.concat %minus1, %s, %d {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %r = moe.reshape %k, %inner : (tensor<1x2x?x16xf32>, tensor<3xi64>) -> tensor<2x?x16xf32>
  %t = moe.transpose %r {perm = array<i64: 0, 2, 1>} : (tensor<2x?x16xf32>) -> tensor<2x16x?xf32>
  %outer = moe.concat %bh, %d, %vs {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %kt = moe.reshape %t, %outer : (tensor<2x16x?xf32>, tensor<4xi64>) -> tensor<1x2x16x?xf32>
  %scores = moe.mat_mul %q, %kt : (tensor<1x2x?x16xf32>, tensor<1x2x16x?xf32>) -> tensor<1x2x?x?xf32>
  %p = moe.softmax %scores : (tensor<1x2x?x?xf32>) -> tensor<1x2x?x?xf32>
  %o = moe.mat_mul %p, %v : (tensor<1x2x?x?xf32>, tensor<1x2x?x16xf32>) -> tensor<1x2x?x16xf32>
  return %o : tensor<1x2x?x16xf32>
}
