// RUN: moec-opt %s --split-input-file --moe-canonicalize-experts --moe-detect-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that DeepSeek-V3's own gate, as TorchScript exports its inference
// code (the choice scores viewed as [x.size(0), 2, -1], the groups not kept
// filled with -inf through a [T, 2, 1] mask of ones with zeros scattered at
// the kept group, flattened back), meets the loop detector as one router
// with the gate's semantics, after moe-canonicalize-experts.
// CHECK-LABEL: func.func @deepseek_v3_reference
// CHECK: %[[LOGITS:.*]] = moe.mat_mul
// CHECK: moe.router %[[LOGITS]] bias %{{.*}} top 2 sigmoid groups 2 keep 1 normalize scale 2.500000e+00 : tensor<?x4xf32>, tensor<4xf32>
// CHECK: moe.dispatch
// CHECK: moe.experts silu_glu
// CHECK: moe.combine
// CHECK: moe.shared_expert silu_glu
// CHECK-NOT: moe.top_k
// CHECK-NOT: moe.where
func.func @deepseek_v3_reference(%x3: tensor<?x?x4xf32>) -> tensor<?x?x4xf32> {
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %wr = moe.constant dense<0.5> : tensor<4x4xf32>
  %bias = moe.constant dense<[[0.1, 0.2, 0.3, 0.4]]> : tensor<1x4xf32>
  %c0g = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %two = moe.constant dense<2> : tensor<1xi64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m = moe.constant dense<1> : tensor<1xi64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-20> : tensor<f32>
  %scale = moe.constant dense<2.5> : tensor<f32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %choice = moe.add %scores, %bias : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  %tg = moe.dim %x, 0 : tensor<?x4xf32>
  %tg1 = moe.unsqueeze %tg, %c0g : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %viewShape = moe.concat %tg1, %two, %last {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %byGroup = moe.reshape %choice, %viewShape : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x?xf32>
  %best, %bestIdx = moe.top_k %byGroup, %k : (tensor<?x2x?xf32>, tensor<1xi64>) -> (tensor<?x2x2xf32>, tensor<?x2x2xi64>)
  %groupScores = moe.reduce_sum %best, %last {keepdims = 0 : i64} : (tensor<?x2x2xf32>, tensor<1xi64>) -> tensor<?x2xf32>
  %topGroups, %topGroupIdx = moe.top_k %groupScores, %m {sorted = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %t = moe.dim %x, 0 : tensor<?x4xf32>
  %t1 = moe.unsqueeze %t, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %onesShape = moe.concat %t1, %two {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %gones = moe.constant_of_shape %onesShape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %idxShape = moe.shape %topGroupIdx : (tensor<?x1xi64>) -> tensor<2xi64>
  %gzeros = moe.expand %zero, %idxShape : (tensor<f32>, tensor<2xi64>) -> tensor<?x1xf32>
  %dropGroups = moe.scatter_elements %gones, %topGroupIdx, %gzeros {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %dropBool = moe.cast %dropGroups {to = i1} : (tensor<?x2xf32>) -> tensor<?x2xi1>
  %drop3 = moe.unsqueeze %dropBool, %last : (tensor<?x2xi1>, tensor<1xi64>) -> tensor<?x2x1xi1>
  %masked3 = moe.where %drop3, %ninf, %byGroup : (tensor<?x2x1xi1>, tensor<f32>, tensor<?x2x?xf32>) -> tensor<?x2x?xf32>
  %masked = moe.flatten %masked3 : (tensor<?x2x?xf32>) -> tensor<?x?xf32>
  %values, %indices = moe.top_k %masked, %k {sorted = 0 : i64} : (tensor<?x?xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %chosen = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %chosen, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %denom = moe.add %sum, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %norm = moe.div %chosen, %denom : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %weights = moe.mul %norm, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x4xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} : (tensor<?x2x4xi64>) -> tensor<4x?x2xi64>
  %wflat = moe.flatten %weights {axis = 2 : i64} : (tensor<?x2xf32>) -> tensor<?x1xf32>
  %acc = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %acc {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<?x2xi64>) -> tensor<?x2xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1tok = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1slot = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tk = moe.mul %e1tok, %k : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1rw1 = moe.reshape %e1rw, %last : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?xf32>
  %e1in = moe.gather %x, %e1tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1rwc = moe.unsqueeze %e1rw1, %last : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %zeros : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %zeros, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %routed = moe.reshape %e1acc, %shape3 : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x3, %sw1 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %x3, %sw3 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x?x6xf32>, tensor<6x4xf32>) -> tensor<?x?x4xf32>
  %out = moe.add %routed, %sy : (tensor<?x?x4xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}

// -----

// Tests that the same gate whose mask of dropped groups has the rows of
// another tensor (which may broadcast over more rows than the tokens') stays
// generic, with one remark.
// CHECK-LABEL: func.func @deepseek_v3_reference_other_rows
// CHECK-NOT: moe.router
// CHECK: moe.top_k
func.func @deepseek_v3_reference_other_rows(%x3: tensor<?x?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x?x4xf32> {
  %rows = moe.constant dense<[-1, 4]> : tensor<2xi64>
  %wr = moe.constant dense<0.5> : tensor<4x4xf32>
  %bias = moe.constant dense<[[0.1, 0.2, 0.3, 0.4]]> : tensor<1x4xf32>
  %c0g = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<1xi64>
  %two = moe.constant dense<2> : tensor<1xi64>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m = moe.constant dense<1> : tensor<1xi64>
  %last = moe.constant dense<-1> : tensor<1xi64>
  %zero = moe.constant dense<0.0> : tensor<f32>
  %one = moe.constant dense<1.0> : tensor<f32>
  %eps = moe.constant dense<1.0e-20> : tensor<f32>
  %scale = moe.constant dense<2.5> : tensor<f32>
  %depth = moe.constant dense<4> : tensor<i64>
  %onoff = moe.constant dense<[0, 1]> : tensor<2xi64>
  %c1v = moe.constant dense<1> : tensor<1xi64>
  %ones = moe.constant dense<1> : tensor<2xi64>
  %x = moe.reshape %x3, %rows : (tensor<?x?x4xf32>, tensor<2xi64>) -> tensor<?x4xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %scores = moe.sigmoid %logits : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %choice = moe.add %scores, %bias : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  %tg = moe.dim %x, 0 : tensor<?x4xf32>
  %tg1 = moe.unsqueeze %tg, %c0g : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %viewShape = moe.concat %tg1, %two, %last {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<3xi64>
  %byGroup = moe.reshape %choice, %viewShape : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x?xf32>
  %best, %bestIdx = moe.top_k %byGroup, %k : (tensor<?x2x?xf32>, tensor<1xi64>) -> (tensor<?x2x2xf32>, tensor<?x2x2xi64>)
  %groupScores = moe.reduce_sum %best, %last {keepdims = 0 : i64} : (tensor<?x2x2xf32>, tensor<1xi64>) -> tensor<?x2xf32>
  %topGroups, %topGroupIdx = moe.top_k %groupScores, %m {sorted = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x1xf32>, tensor<?x1xi64>)
  %ninf = moe.constant dense<0xFF800000> : tensor<f32>
  %t = moe.dim %y, 0 : tensor<?x4xf32>
  %t1 = moe.unsqueeze %t, %c0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %onesShape = moe.concat %t1, %two {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %gones = moe.constant_of_shape %onesShape {value = dense<1.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %idxShape = moe.shape %topGroupIdx : (tensor<?x1xi64>) -> tensor<2xi64>
  %gzeros = moe.expand %zero, %idxShape : (tensor<f32>, tensor<2xi64>) -> tensor<?x1xf32>
  %dropGroups = moe.scatter_elements %gones, %topGroupIdx, %gzeros {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x1xi64>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %dropBool = moe.cast %dropGroups {to = i1} : (tensor<?x2xf32>) -> tensor<?x2xi1>
  %drop3 = moe.unsqueeze %dropBool, %last : (tensor<?x2xi1>, tensor<1xi64>) -> tensor<?x2x1xi1>
  %masked3 = moe.where %drop3, %ninf, %byGroup : (tensor<?x2x1xi1>, tensor<f32>, tensor<?x2x?xf32>) -> tensor<?x2x?xf32>
  %masked = moe.flatten %masked3 : (tensor<?x2x?xf32>) -> tensor<?x?xf32>
  // expected-remark @+1 {{MoE per-expert loop not detected: grouped selection: the groups of [T, n, E / n] scores are masked by a value not proven to be ones with zeros at the kept groups, of the tokens' rows}}
  %values, %indices = moe.top_k %masked, %k {sorted = 0 : i64} : (tensor<?x?xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %chosen = moe.gather_elements %scores, %indices {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x2xi64>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %chosen, %last : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %denom = moe.add %sum, %eps : (tensor<?x1xf32>, tensor<f32>) -> tensor<?x1xf32>
  %norm = moe.div %chosen, %denom : (tensor<?x2xf32>, tensor<?x1xf32>) -> tensor<?x2xf32>
  %weights = moe.mul %norm, %scale : (tensor<?x2xf32>, tensor<f32>) -> tensor<?x2xf32>
  %onehot = moe.one_hot %indices, %depth, %onoff : (tensor<?x2xi64>, tensor<i64>, tensor<2xi64>) -> tensor<?x2x4xi64>
  %mask = moe.transpose %onehot {perm = array<i64: 2, 0, 1>} : (tensor<?x2x4xi64>) -> tensor<4x?x2xi64>
  %wflat = moe.flatten %weights {axis = 2 : i64} : (tensor<?x2xf32>) -> tensor<?x1xf32>
  %acc = moe.shape %x : (tensor<?x4xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %acc {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1id = moe.constant dense<1> : tensor<i64>
  %e1w1 = moe.constant dense<0.2> : tensor<4x8xf32>
  %e1w3 = moe.constant dense<0.4> : tensor<4x8xf32>
  %e1w2 = moe.constant dense<0.6> : tensor<8x4xf32>
  %e1sel = moe.gather %mask, %e1id : (tensor<4x?x2xi64>, tensor<i64>) -> tensor<?x2xi64>
  %e1bool = moe.cast %e1sel {to = i1} : (tensor<?x2xi64>) -> tensor<?x2xi1>
  %e1nz = moe.non_zero %e1bool : (tensor<?x2xi1>) -> tensor<2x?xi64>
  %e1nzt = moe.transpose %e1nz {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> tensor<?x2xi64>
  %e1split:2 = moe.split %e1nzt, %ones {axis = 1 : i64} : (tensor<?x2xi64>, tensor<2xi64>) -> (tensor<?x1xi64>, tensor<?x1xi64>)
  %e1tok = moe.squeeze %e1split#0, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1slot = moe.squeeze %e1split#1, %c1v : (tensor<?x1xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1tk = moe.mul %e1tok, %k : (tensor<?xi64>, tensor<1xi64>) -> tensor<?xi64>
  %e1flat = moe.add %e1slot, %e1tk : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %e1rw = moe.gather %wflat, %e1flat : (tensor<?x1xf32>, tensor<?xi64>) -> tensor<?x1xf32>
  %e1rw1 = moe.reshape %e1rw, %last : (tensor<?x1xf32>, tensor<1xi64>) -> tensor<?xf32>
  %e1in = moe.gather %x, %e1tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %e1h = moe.mat_mul %e1in, %e1w1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1sig = moe.sigmoid %e1h : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1silu = moe.mul %e1h, %e1sig : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1up = moe.mat_mul %e1in, %e1w3 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %e1act = moe.mul %e1silu, %e1up : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %e1y = moe.mat_mul %e1act, %e1w2 : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  %e1rwc = moe.unsqueeze %e1rw1, %last : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %e1yw = moe.mul %e1y, %e1rwc : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %e1t1 = moe.unsqueeze %e1tok, %c1v : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %e1ys = moe.shape %e1yw : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1idx = moe.expand %e1t1, %e1ys : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %e1as = moe.shape %zeros : (tensor<?x4xf32>) -> tensor<2xi64>
  %e1z = moe.constant_of_shape %e1as {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %e1sc = moe.scatter_elements %e1z, %e1idx, %e1yw : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e1acc = moe.add %zeros, %e1sc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %shape3 = moe.shape %x3 : (tensor<?x?x4xf32>) -> tensor<3xi64>
  %routed = moe.reshape %e1acc, %shape3 : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x?x4xf32>
  %sw1 = moe.constant dense<0.7> : tensor<4x6xf32>
  %sw3 = moe.constant dense<0.8> : tensor<4x6xf32>
  %sw2 = moe.constant dense<0.9> : tensor<6x4xf32>
  %sh = moe.mat_mul %x3, %sw1 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %ssig = moe.sigmoid %sh : (tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %ssilu = moe.mul %sh, %ssig : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sup = moe.mat_mul %x3, %sw3 : (tensor<?x?x4xf32>, tensor<4x6xf32>) -> tensor<?x?x6xf32>
  %sact = moe.mul %ssilu, %sup : (tensor<?x?x6xf32>, tensor<?x?x6xf32>) -> tensor<?x?x6xf32>
  %sy = moe.mat_mul %sact, %sw2 : (tensor<?x?x6xf32>, tensor<6x4xf32>) -> tensor<?x?x4xf32>
  %out = moe.add %routed, %sy : (tensor<?x?x4xf32>, tensor<?x?x4xf32>) -> tensor<?x?x4xf32>
  return %out : tensor<?x?x4xf32>
}
