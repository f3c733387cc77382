// RUN: moec-opt %s --split-input-file --moe-canonicalize-segments --moe-detect-segment-experts --moe-report-near-misses -verify-diagnostics | FileCheck %s

// Tests that transformers' grouped_mm form with a softmax gate (top-2 of 2
// experts; the flattened ids sorted by a whole-length top-k, largest 0; the
// tokens gathered at perm // k in torch's floor-division form; torch.histc's
// histogram, cum_sum, and a range per expert; a fused [E, H, 2F] gate/up and
// an [E, F, H] down projection used as x @ W[e]; SwiGLU on the halves; the
// rows scaled by the sorted weights, put back by the inverse permutation and
// summed over k) becomes router -> dispatch -> experts -> combine over the
// exported weights, and that the segments' ops are erased.
// CHECK-LABEL: func.func @softmax_gate
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>)
// CHECK-DAG: %[[WR:.*]] = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
// CHECK-DAG: %[[W13:.*]] = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
// CHECK-DAG: %[[W2:.*]] = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
// CHECK: %[[LOGITS:.*]] = moe.mat_mul %[[X]], %[[WR]]
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %[[LOGITS]] top 2 softmax : tensor<?x2xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 2
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x8xf32>, tensor<3xi64> w1 %[[W13]] : tensor<2x8x8xf32> w2 %[[W2]] : tensor<2x4x8xf32> layout in_out glu concatenated
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.range
// CHECK-NOT: moe.top_k
// CHECK: return %[[OUT]]
func.func @softmax_gate(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.softmax %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hb = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %gu:2 = moe.split %hb {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sig = moe.sigmoid %gu#0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %gu#0, %sig : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yb = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %empty = moe.expand %c0, %pshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %inv, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that the gate is matched apart from the experts (matchLayerGate):
// sigmoid scores selected by top-k, without renormalisation, are a known
// gate and become moe.router ... sigmoid.
// CHECK-LABEL: func.func @sigmoid_gate
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %{{.*}} top 2 sigmoid
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %{{.*}}, %[[I]] experts 2
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]]
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.range
// CHECK: return %[[OUT]]
func.func @sigmoid_gate(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.sigmoid %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hb = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %gu:2 = moe.split %hb {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sig = moe.sigmoid %gu#0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %gu#0, %sig : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yb = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %empty = moe.expand %c0, %pshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %inv, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that GPT-OSS's form (expert biases gathered at the sorted ids and
// added to each concatenated projection, a clamped SwiGLU on the even / odd
// columns) becomes moe.experts clamped_swiglu with both biases, glu
// interleaved and GPT-OSS's alpha, beta and limit.
// CHECK-LABEL: func.func @clamped_swiglu_biases
// CHECK-DAG: %[[B13:.*]] = moe.constant dense<1.000000e-01> : tensor<2x8xf32>
// CHECK-DAG: %[[B2:.*]] = moe.constant dense<2.000000e-01> : tensor<2x8xf32>
// CHECK: moe.router
// CHECK: moe.experts clamped_swiglu {{.*}} b1 %[[B13]] : tensor<2x8xf32> {{.*}} b2 %[[B2]] : tensor<2x8xf32> layout in_out glu interleaved alpha 1.702000e+00 beta 1.000000e+00 limit 7.000000e+00
// CHECK-NOT: moe.range
func.func @clamped_swiglu_biases(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %b13 = moe.constant dense<1.000000e-01> : tensor<2x8xf32>
  %b2 = moe.constant dense<2.000000e-01> : tensor<2x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.softmax %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hc = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %hbias = moe.gather %b13, %sorted : (tensor<2x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hb = moe.add %hc, %hbias : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %s0 = moe.constant dense<0> : tensor<1xi64>
  %s1 = moe.constant dense<1> : tensor<1xi64>
  %sbig = moe.constant dense<9223372036854775807> : tensor<1xi64>
  %sstep = moe.constant dense<2> : tensor<1xi64>
  %limit = moe.constant dense<7.000000e+00> : tensor<f32>
  %nlimit = moe.constant dense<-7.000000e+00> : tensor<f32>
  %alpha = moe.constant dense<1.702000e+00> : tensor<f32>
  %g = moe.slice %hb, %s0, %sbig axes %s1 steps %sstep : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %gc = moe.clip %g max %limit : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %u = moe.slice %hb, %s1, %sbig axes %s1 steps %sstep : (tensor<?x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %uc = moe.clip %u min %nlimit max %limit : (tensor<?x4xf32>, tensor<f32>, tensor<f32>) -> tensor<?x4xf32>
  %ga = moe.mul %gc, %alpha : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %gs = moe.sigmoid %ga : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %glu = moe.mul %gc, %gs : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %up1 = moe.add %uc, %one : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
  %act = moe.mul %up1, %glu : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yc = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %ybias = moe.gather %b2, %sorted : (tensor<2x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %yb = moe.add %yc, %ybias : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %empty = moe.expand %c0, %pshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %inv, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a layer whose second segment starts at 0 rather than where the
// first ends (rows of expert 0 would also go through expert 1) stays
// generic, with a remark, and that the segment the first range became is
// the exporter's range again.
// CHECK-LABEL: func.func @overlapping_segments
// CHECK-NOT: moe.dispatch
// CHECK-NOT: moe.segment
// CHECK: moe.range
func.func @overlapping_segments(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.softmax %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @below {{MoE segment experts not detected: the rows of expert 1 are not the moe.segment of expert 1 of the sorted ids (the exporter's ranges over a histogram of them)}}
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %c0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hb = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %gu:2 = moe.split %hb {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sig = moe.sigmoid %gu#0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %gu#0, %sig : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yb = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %empty = moe.expand %c0, %pshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %inv, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that a histogram whose bin width sends expert 1 to bin 0 (so that
// the segments are not the experts' rows) stays generic, with a remark.
// CHECK-LABEL: func.func @wrong_bins
// CHECK-NOT: moe.dispatch
func.func @wrong_bins(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<2.000000e+00> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.softmax %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @below {{MoE segment experts not detected: the rows of expert 0 are not the moe.segment of expert 0 of the sorted ids (the exporter's ranges over a histogram of them)}}
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hb = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %gu:2 = moe.split %hb {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sig = moe.sigmoid %gu#0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %gu#0, %sig : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yb = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %empty = moe.expand %c0, %pshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %inv, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that rows gathered at the permutation itself rather than at its
// inverse (expert outputs left in a scrambled order) stay generic, with a
// remark.
// CHECK-LABEL: func.func @not_inverted
// CHECK-NOT: moe.dispatch
func.func @not_inverted(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.softmax %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @below {{MoE segment experts not detected: the sorted order is not inverted by scattering range(0, N) at the permutation into a vector of its length}}
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hb = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %gu:2 = moe.split %hb {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sig = moe.sigmoid %gu#0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %gu#0, %sig : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yb = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %empty = moe.expand %c0, %pshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests that an inverse permutation scattered into a vector of the token
// count rather than of the T*k sorted rows (rows past it never written, or
// some rows lost) stays generic, with a remark.
// CHECK-LABEL: func.func @short_inverse
// CHECK-NOT: moe.dispatch
func.func @short_inverse(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<8x2xf32>
  %w13 = moe.constant dense<1.250000e-01> : tensor<2x8x8xf32>
  %w2 = moe.constant dense<2.500000e-01> : tensor<2x4x8xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %true = moe.constant dense<true> : tensor<i1>
  %width = moe.constant dense<5.000000e-01> : tensor<f32>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %zeros = moe.constant dense<0.000000e+00> : tensor<2xf32>
  %logits = moe.mat_mul %x, %wr : (tensor<?x8xf32>, tensor<8x2xf32>) -> tensor<?x2xf32>
  %probs = moe.softmax %logits : (tensor<?x2xf32>) -> tensor<?x2xf32>
  // expected-remark @below {{MoE segment experts not detected: the sorted order is not inverted by scattering range(0, N) at the permutation into a vector of its length}}
  %w, %ids = moe.top_k %probs, %k : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %neg = moe.less %perm, %c0 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi1>
  %negt = moe.equal %neg, %true : (tensor<?xi1>, tensor<i1>) -> tensor<?xi1>
  %rem = moe.mod %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %remb = moe.cast %rem {to = i1} : (tensor<?xi64>) -> tensor<?xi1>
  %both = moe.and %negt, %remb : (tensor<?xi1>, tensor<?xi1>) -> tensor<?xi1>
  %corr = moe.cast %both {to = i64} : (tensor<?xi1>) -> tensor<?xi64>
  %quot = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %tok = moe.sub %quot, %corr : (tensor<?xi64>, tensor<?xi64>) -> tensor<?xi64>
  %tok1 = moe.unsqueeze %tok, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %rows = moe.gather_nd %x, %tok1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %wflat = moe.reshape %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?xf32>
  %perm1 = moe.unsqueeze %perm, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %wsorted = moe.gather_nd %wflat, %perm1 : (tensor<?xf32>, tensor<?x1xi64>) -> tensor<?xf32>
  %fids = moe.cast %sorted {to = f32} : (tensor<?xi64>) -> tensor<?xf32>
  %scaled = moe.div %fids, %width : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
  %bins0 = moe.cast %scaled {to = i64} : (tensor<?xf32>) -> tensor<?xi64>
  %bins = moe.clip %bins0 min %c0 max %c1 : (tensor<?xi64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %bshape = moe.shape %bins : (tensor<?xi64>) -> tensor<1xi64>
  %ones = moe.expand %one, %bshape : (tensor<f32>, tensor<1xi64>) -> tensor<?xf32>
  %hist = moe.scatter_elements %zeros, %bins, %ones {reduction = "add"} : (tensor<2xf32>, tensor<?xi64>, tensor<?xf32>) -> tensor<2xf32>
  %hist32 = moe.cast %hist {to = i32} : (tensor<2xf32>) -> tensor<2xi32>
  %cum = moe.cum_sum %hist32, %c0 : (tensor<2xi32>, tensor<i64>) -> tensor<2xi32>
  %ends = moe.cast %cum {to = i64} : (tensor<2xi32>) -> tensor<2xi64>
  %endv:2 = moe.split %ends {num_outputs = 2 : i64} : (tensor<2xi64>) -> (tensor<1xi64>, tensor<1xi64>)
  %e0 = moe.squeeze %endv#0, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %e1 = moe.squeeze %endv#1, %ax0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<i64>
  %seg0 = moe.range %c0, %e0, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %seg1 = moe.range %e0, %e1, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %hws:2 = moe.split %w13 {num_outputs = 2 : i64} : (tensor<2x8x8xf32>) -> (tensor<1x8x8xf32>, tensor<1x8x8xf32>)
  %hr0 = moe.gather %rows, %seg0 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm0 = moe.squeeze %hws#0, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp0 = moe.mat_mul %hr0, %hm0 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hr1 = moe.gather %rows, %seg1 : (tensor<?x8xf32>, tensor<?xi64>) -> tensor<?x8xf32>
  %hm1 = moe.squeeze %hws#1, %ax0 : (tensor<1x8x8xf32>, tensor<1xi64>) -> tensor<8x8xf32>
  %hp1 = moe.mat_mul %hr1, %hm1 : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %hb = moe.concat %hp0, %hp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %gu:2 = moe.split %hb {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x8xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>)
  %sig = moe.sigmoid %gu#0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %silu = moe.mul %gu#0, %sig : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %act = moe.mul %silu, %gu#1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yws:2 = moe.split %w2 {num_outputs = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  %yr0 = moe.gather %act, %seg0 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym0 = moe.squeeze %yws#0, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp0 = moe.mat_mul %yr0, %ym0 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yr1 = moe.gather %act, %seg1 : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ym1 = moe.squeeze %yws#1, %ax0 : (tensor<1x4x8xf32>, tensor<1xi64>) -> tensor<4x8xf32>
  %yp1 = moe.mat_mul %yr1, %ym1 : (tensor<?x4xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  %yb = moe.concat %yp0, %yp1 {axis = 0 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %wcol = moe.unsqueeze %wsorted, %m1 : (tensor<?xf32>, tensor<1xi64>) -> tensor<?x1xf32>
  %yw = moe.mul %yb, %wcol : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %pshape = moe.shape %perm : (tensor<?xi64>) -> tensor<1xi64>
  %xshape = moe.shape %x {end = 1 : i64} : (tensor<?x8xf32>) -> tensor<1xi64>
  %empty = moe.expand %c0, %xshape : (tensor<i64>, tensor<1xi64>) -> tensor<?xi64>
  %arange = moe.range %c0, %n, %c1 : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %inv = moe.scatter_nd %empty, %perm1, %arange : (tensor<?xi64>, tensor<?x1xi64>, tensor<?xi64>) -> tensor<?xi64>
  %inv1 = moe.unsqueeze %inv, %m1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %z = moe.gather_nd %yw, %inv1 : (tensor<?x8xf32>, tensor<?x1xi64>) -> tensor<?x8xf32>
  %tk = moe.constant dense<[-1, 2, 8]> : tensor<3xi64>
  %z3 = moe.reshape %z, %tk : (tensor<?x8xf32>, tensor<3xi64>) -> tensor<?x2x8xf32>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %out = moe.reduce_sum %z3, %ax1 {keepdims = 0 : i64} : (tensor<?x2x8xf32>, tensor<1xi64>) -> tensor<?x8xf32>
  return %out : tensor<?x8xf32>
}

// -----

// Tests Megatron-Core's dropless form, as moe-canonicalize-segments leaves
// it: the top-k of the logits, softmax over the k; the routing map's counts;
// per expert one network on its slice of the sorted tokens (a fused [2F, H]
// fc1 used as gemm transB, SwiGLU on its halves, fc2 [H, F]); the outputs
// concatenated once, unpermuted by scatter-add into the T*k slots, then
// scaled by the weights and summed over k. It becomes router -> dispatch ->
// experts (the [out, in] matrices stacked, layout out_in) -> combine.
// CHECK-LABEL: func.func @per_expert_networks
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-DAG: %[[A0:.*]] = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
// CHECK-DAG: %[[A1:.*]] = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
// CHECK-DAG: %[[B0:.*]] = moe.constant dense<3.750000e-01> : tensor<4x2xf32>
// CHECK-DAG: %[[B1:.*]] = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
// CHECK: %[[W13:.*]] = moe.stack %[[A0]], %[[A1]]
// CHECK: %[[W2:.*]] = moe.stack %[[B0]], %[[B1]]
// CHECK: %[[W:.*]], %[[I:.*]] = moe.router %{{.*}} top 2 softmax after_topk : tensor<?x2xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %[[X]], %[[I]] experts 2
// CHECK: %[[Y:.*]] = moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x4xf32>, tensor<3xi64> w1 %[[W13]] : tensor<2x4x4xf32> w2 %[[W2]] : tensor<2x4x2xf32> layout out_in glu concatenated
// CHECK: %[[OUT:.*]] = moe.combine %[[Y]], %[[SRC]], %[[W]]
// CHECK-NOT: moe.top_k
// CHECK-NOT: moe.scatter_elements
// CHECK: return %[[OUT]]
func.func @per_expert_networks(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<3.750000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %top, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %top : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %h0 = moe.gemm %r0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %gu0:2 = moe.split %h0 {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %s0 = moe.sigmoid %gu0#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu0 = moe.mul %gu0#0, %s0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act0 = moe.mul %silu0, %gu0#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y0 = moe.gemm %act0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %h1 = moe.gemm %r1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %gu1:2 = moe.split %h1 {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %s1 = moe.sigmoid %gu1#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu1 = moe.mul %gu1#0, %s1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act1 = moe.mul %silu1, %gu1#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y1 = moe.gemm %act1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %un, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %wcol = moe.unsqueeze %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %scaled = moe.mul %un3, %wcol : (tensor<?x2x4xf32>, tensor<?x2x1xf32>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %scaled, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that when expert 1 gates the second half by the first (its halves
// swapped: not the gate and up of a fused projection in the first expert's
// order), the layer stays generic with a remark naming the expert.
// CHECK-LABEL: func.func @per_expert_networks_mixed
// CHECK-NOT: moe.dispatch
func.func @per_expert_networks_mixed(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<4x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<4x4xf32>
  %b0 = moe.constant dense<3.750000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  // expected-remark @below {{MoE segment experts not detected: expert 1's network is not act(rows[segment] @ W1) @ W2 with a gated activation}}
  %top, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %top : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %h0 = moe.gemm %r0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %gu0:2 = moe.split %h0 {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %s0 = moe.sigmoid %gu0#0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu0 = moe.mul %gu0#0, %s0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act0 = moe.mul %silu0, %gu0#1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y0 = moe.gemm %act0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %h1 = moe.gemm %r1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %gu1:2 = moe.split %h1 {axis = 1 : i64, num_outputs = 2 : i64} : (tensor<?x4xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>)
  %s1 = moe.sigmoid %gu1#1 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu1 = moe.mul %gu1#1, %s1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act1 = moe.mul %silu1, %gu1#0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y1 = moe.gemm %act1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %un, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %wcol = moe.unsqueeze %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %scaled = moe.mul %un3, %wcol : (tensor<?x2x4xf32>, tensor<?x2x1xf32>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %scaled, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests the same layer with the gate and up projections apart (DeepSeek's
// SwiGLU experts: silu(x @ W1) * (x @ W3), here [out, in] matrices): it
// becomes moe.experts silu_glu with w1 and w3 stacked, without a glu
// layout.
// CHECK-LABEL: func.func @unfused_expert_networks
// CHECK-DAG: %[[A0:.*]] = moe.constant dense<1.250000e-01> : tensor<2x4xf32>
// CHECK-DAG: %[[A1:.*]] = moe.constant dense<2.500000e-01> : tensor<2x4xf32>
// CHECK-DAG: %[[U0:.*]] = moe.constant dense<6.250000e-01> : tensor<2x4xf32>
// CHECK-DAG: %[[U1:.*]] = moe.constant dense<8.750000e-01> : tensor<2x4xf32>
// CHECK: %[[W1:.*]] = moe.stack %[[A0]], %[[A1]]
// CHECK: %[[W2:.*]] = moe.stack
// CHECK: %[[W3:.*]] = moe.stack %[[U0]], %[[U1]]
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch
// CHECK: moe.experts silu_glu %[[ROWS]], %[[OFF]] : tensor<?x4xf32>, tensor<3xi64> w1 %[[W1]] : tensor<2x2x4xf32> w3 %[[W3]] : tensor<2x2x4xf32> w2 %[[W2]] : tensor<2x4x2xf32> layout out_in {
// CHECK: moe.combine
func.func @unfused_expert_networks(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<2x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<2x4xf32>
  %u0 = moe.constant dense<6.250000e-01> : tensor<2x4xf32>
  %u1 = moe.constant dense<8.750000e-01> : tensor<2x4xf32>
  %b0 = moe.constant dense<3.750000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  %top, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %top : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %g0 = moe.gemm %r0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %p0 = moe.gemm %r0, %u0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %s0 = moe.sigmoid %g0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu0 = moe.mul %g0, %s0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act0 = moe.mul %silu0, %p0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y0 = moe.gemm %act0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %g1 = moe.gemm %r1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %p1 = moe.gemm %r1, %u1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %s1 = moe.sigmoid %g1 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu1 = moe.mul %g1, %s1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act1 = moe.mul %silu1, %p1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y1 = moe.gemm %act1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %un, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %wcol = moe.unsqueeze %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %scaled = moe.mul %un3, %wcol : (tensor<?x2x4xf32>, tensor<?x2x1xf32>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %scaled, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}

// -----

// Tests that when expert 1 gates with sigmoid(x @ W1) instead of its SiLU,
// the layer stays generic with a remark naming expert 1.
// CHECK-LABEL: func.func @unfused_expert_networks_sigmoid_gate
// CHECK-NOT: moe.dispatch
func.func @unfused_expert_networks_sigmoid_gate(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wr = moe.constant dense<5.000000e-01> : tensor<4x2xf32>
  %a0 = moe.constant dense<1.250000e-01> : tensor<2x4xf32>
  %a1 = moe.constant dense<2.500000e-01> : tensor<2x4xf32>
  %u0 = moe.constant dense<6.250000e-01> : tensor<2x4xf32>
  %u1 = moe.constant dense<8.750000e-01> : tensor<2x4xf32>
  %b0 = moe.constant dense<3.750000e-01> : tensor<4x2xf32>
  %b1 = moe.constant dense<7.500000e-01> : tensor<4x2xf32>
  %k = moe.constant dense<2> : tensor<1xi64>
  %m1 = moe.constant dense<-1> : tensor<1xi64>
  %ax0 = moe.constant dense<0> : tensor<1xi64>
  %ax1 = moe.constant dense<1> : tensor<1xi64>
  %c0 = moe.constant dense<0> : tensor<i64>
  %c1 = moe.constant dense<1> : tensor<i64>
  %c2 = moe.constant dense<2> : tensor<i64>
  %one = moe.constant dense<1.000000e+00> : tensor<f32>
  %rep = moe.constant dense<[1, 4]> : tensor<2xi64>
  %tkh = moe.constant dense<[-1, 2, 4]> : tensor<3xi64>
  %logits = moe.mat_mul %x, %wr : (tensor<?x4xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>
  // expected-remark @below {{MoE segment experts not detected: expert 1's network is not act(rows[segment] @ W1) @ W2 with a gated activation}}
  %top, %ids = moe.top_k %logits, %k {axis = 1 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> (tensor<?x2xf32>, tensor<?x2xi64>)
  %w = moe.softmax %top : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %lshape = moe.shape %logits : (tensor<?x2xf32>) -> tensor<2xi64>
  %zeros = moe.constant_of_shape %lshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x2xf32>
  %ishape = moe.shape %ids : (tensor<?x2xi64>) -> tensor<2xi64>
  %ones = moe.expand %one, %ishape : (tensor<f32>, tensor<2xi64>) -> tensor<?x2xf32>
  %map = moe.scatter_elements %zeros, %ids, %ones {axis = 1 : i64} : (tensor<?x2xf32>, tensor<?x2xi64>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %sum = moe.reduce_sum %map, %ax0 {keepdims = 0 : i64} : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<2xf32>
  %counts = moe.cast %sum {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  %flat = moe.reshape %ids, %m1 : (tensor<?x2xi64>, tensor<1xi64>) -> tensor<?xi64>
  %n = moe.dim %flat, 0 : tensor<?xi64>
  %n1 = moe.reshape %n, %m1 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %sorted, %perm = moe.top_k %flat, %n1 {largest = 0 : i64} : (tensor<?xi64>, tensor<1xi64>) -> (tensor<?xi64>, tensor<?xi64>)
  %tok = moe.div %perm, %c2 : (tensor<?xi64>, tensor<i64>) -> tensor<?xi64>
  %rows = moe.gather %x, %tok : (tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %ends = moe.cum_sum %counts, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %e0 = moe.gather %ends, %c0 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e0v = moe.unsqueeze %e0, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %e1 = moe.gather %ends, %c1 : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %e1v = moe.unsqueeze %e1, %ax0 : (tensor<i64>, tensor<1xi64>) -> tensor<1xi64>
  %r0 = moe.slice %rows, %ax0, %e0v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %g0 = moe.gemm %r0, %a0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %p0 = moe.gemm %r0, %u0 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %s0 = moe.sigmoid %g0 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu0 = moe.mul %g0, %s0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act0 = moe.mul %silu0, %p0 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y0 = moe.gemm %act0, %b0 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %r1 = moe.slice %rows, %e0v, %e1v axes %ax0 : (tensor<?x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x4xf32>
  %g1 = moe.gemm %r1, %a1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %p1 = moe.gemm %r1, %u1 {transB = 1 : i64} : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %s1 = moe.sigmoid %g1 : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %silu1 = moe.mul %g1, %s1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %act1 = moe.mul %s1, %p1 : (tensor<?x2xf32>, tensor<?x2xf32>) -> tensor<?x2xf32>
  %y1 = moe.gemm %act1, %b1 {transB = 1 : i64} : (tensor<?x2xf32>, tensor<4x2xf32>) -> tensor<?x4xf32>
  %y = moe.concat %y0, %y1 {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %yshape = moe.shape %y : (tensor<?x4xf32>) -> tensor<2xi64>
  %yzeros = moe.constant_of_shape %yshape {value = dense<0.000000e+00> : tensor<1xf32>} : (tensor<2xi64>) -> tensor<?x4xf32>
  %pcol = moe.unsqueeze %perm, %ax1 : (tensor<?xi64>, tensor<1xi64>) -> tensor<?x1xi64>
  %pidx = moe.tile %pcol, %rep : (tensor<?x1xi64>, tensor<2xi64>) -> tensor<?x4xi64>
  %un = moe.scatter_elements %yzeros, %pidx, %y {reduction = "add"} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %un3 = moe.reshape %un, %tkh : (tensor<?x4xf32>, tensor<3xi64>) -> tensor<?x2x4xf32>
  %wcol = moe.unsqueeze %w, %m1 : (tensor<?x2xf32>, tensor<1xi64>) -> tensor<?x2x1xf32>
  %scaled = moe.mul %un3, %wcol : (tensor<?x2x4xf32>, tensor<?x2x1xf32>) -> tensor<?x2x4xf32>
  %out = moe.reduce_sum %scaled, %ax1 {keepdims = 0 : i64} : (tensor<?x2x4xf32>, tensor<1xi64>) -> tensor<?x4xf32>
  return %out : tensor<?x4xf32>
}
