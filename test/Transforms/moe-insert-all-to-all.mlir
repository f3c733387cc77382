// RUN: moec-opt %s --moe-analyze-row-independence --moe-place-experts=devices=1 --moe-insert-all-to-all | FileCheck %s --check-prefix=ONE
// RUN: moec-opt %s --moe-analyze-row-independence --moe-place-experts=devices=2 --moe-insert-all-to-all | FileCheck %s --check-prefix=TWO
// RUN: moec-opt %s --moe-analyze-row-independence --moe-place-experts=devices=4 --moe-insert-all-to-all | FileCheck %s --check-prefix=FOUR
// RUN: moec-opt %s --moe-analyze-row-independence --moe-place-experts="devices=4 routing-profile=%S/Inputs/routing-profile.json replicate-hot=2" --moe-insert-all-to-all | FileCheck %s --check-prefix=HOT
// RUN: moec-opt %s --moe-analyze-row-independence --moe-place-experts=devices=16 --moe-insert-all-to-all | FileCheck %s --check-prefix=EMPTY
// RUN: moec-opt %s --moe-analyze-row-independence --moe-place-experts=devices=2 --moe-insert-all-to-all=micro-batches=2 | FileCheck %s --check-prefix=MICRO
// RUN: moec-opt %s --moe-place-experts=devices=2 --moe-insert-all-to-all | FileCheck %s --check-prefix=REP

// Tests the exchanges inserted around an 8-expert Mixtral layer.
//
// One device: nothing changes.
// ONE-LABEL: func.func @main(
// ONE-NOT: moe.all_to_all
// ONE-NOT: moe.assign_slots
//
// Two devices: one function per device. Routed experts become slots,
// the rows are dispatched by slot, their counts per device sent first, the
// rows exchanged, regrouped by local slot for the experts on the device's
// shards, put back in received order and returned to their home device,
// where they are combined as before.
// TWO-NOT: func.func @main(
// TWO-LABEL: func.func @main_d0(
// TWO-SAME: moe.device = 0
// TWO: %[[W:.*]], %[[I:.*]] = moe.router
// TWO: %[[S:.*]] = moe.assign_slots %[[I]] offsets [0, 1, 2, 3, 4, 5, 6, 7, 8] slots [0, 1, 2, 3, 4, 5, 6, 7]
// TWO: %[[ROWS:.*]], %[[OFF:.*]], %[[SRC:.*]] = moe.dispatch %{{.*}}, %[[S]] experts 8
// TWO: moe.constant dense<[0, 4]> : tensor<2xi64>
// TWO: moe.constant dense<[4, 8]> : tensor<2xi64>
// TWO: %[[SEND:.*]] = moe.sub
// TWO: %[[CNT:.*]] = moe.sub
// TWO: moe.constant dense<4> : tensor<2xi64>
// TWO: %[[CR:.*]], %{{.*}} = moe.all_to_all %[[CNT]], %{{.*}} group "ep" devices 2 : tensor<8xi64>, tensor<2xi64>
// TWO: moe.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>
// TWO: %[[MINE:.*]] = moe.gather %[[CR]]
// TWO: %[[RECV:.*]], %[[RCNT:.*]] = moe.all_to_all %[[ROWS]], %[[SEND]] group "ep" devices 2 : tensor<?x16xf32>, tensor<2xi64>
// TWO: %[[G:.*]], %[[LOFF:.*]], %[[PERM:.*]] = moe.regroup %[[RECV]], %[[MINE]] sources 2 slots 4
// TWO: %[[W1:.*]] = moe.shard %{{.*}} rows [0, 1, 2, 3] : tensor<8x32x16xf32>
// TWO: %[[Y:.*]] = moe.experts silu_glu %[[G]], %[[LOFF]] : tensor<?x16xf32>, tensor<5xi64> w1 %[[W1]] : tensor<4x32x16xf32>
// TWO: %[[BACK:.*]] = moe.ungroup %[[Y]], %[[PERM]]
// TWO: %[[OUT:.*]], %{{.*}} = moe.all_to_all %[[BACK]], %[[RCNT]] group "ep" devices 2 like %[[ROWS]]
// TWO: moe.combine %[[OUT]], %[[SRC]], %[[W]]
// TWO-LABEL: func.func @main_d1(
// TWO-SAME: moe.device = 1
// TWO: moe.shard %{{.*}} rows [4, 5, 6, 7] : tensor<8x32x16xf32>
//
// Four devices: two slots each; a device takes 2 counts from each of 4
// sources.
// FOUR-LABEL: func.func @main_d1(
// FOUR: moe.constant dense<[0, 2, 4, 6]> : tensor<4xi64>
// FOUR: moe.constant dense<[2, 4, 6, 8]> : tensor<4xi64>
// FOUR: moe.constant dense<2> : tensor<4xi64>
// FOUR: moe.all_to_all {{.*}} : tensor<8xi64>, tensor<4xi64>
// FOUR: moe.regroup {{.*}} sources 4 slots 2
// FOUR: moe.shard %{{.*}} rows [2, 3] : tensor<8x32x16xf32>
// FOUR: moe.experts {{.*}} w1 %{{.*}} : tensor<2x32x16xf32>
// FOUR-LABEL: func.func @main_d3(
//
// Replicas: experts 0 and 4 have two slots each (10 slots), and device 3
// holds the second slot of expert 4 next to experts 1, 2 and 7.
// HOT-LABEL: func.func @main_d3(
// HOT: moe.assign_slots %{{.*}} offsets [0, 2, 3, 4, 5, 7, 8, 9, 10] slots [0, 2, 6, 7, 1, 4, 8, 3, 5, 9]
// HOT: moe.dispatch %{{.*}}, %{{.*}} experts 10
// HOT: moe.constant dense<[2, 2, 2, 4]> : tensor<4xi64>
// HOT: moe.regroup {{.*}} sources 4 slots 4
// HOT: moe.shard %{{.*}} rows [1, 2, 4, 7] : tensor<8x32x16xf32>
//
// More devices than experts: device 0 holds no slot, so it runs no experts
// and returns the (empty) rows it received.
// EMPTY-LABEL: func.func @main_d0(
// EMPTY: %[[RECV:.*]], %[[RCNT:.*]] = moe.all_to_all %[[ROWS:.*]], %{{.*}} group "ep" devices 16 : tensor<?x16xf32>
// EMPTY-NOT: moe.experts
// EMPTY: moe.all_to_all %[[RECV]], %[[RCNT]] group "ep" devices 16 like %[[ROWS]]
// EMPTY-LABEL: func.func @main_d1(
// EMPTY: moe.regroup {{.*}} sources 16 slots 1
// EMPTY: moe.shard %{{.*}} rows [0] : tensor<8x32x16xf32>
//
// Micro-batches: the tokens are sliced in two; chunk 1's rows travel while
// chunk 0's experts run, chunk 0's results travel back while chunk 1's run;
// the two chunks share the shards and their outputs are concatenated.
// MICRO-LABEL: func.func @main_d0(
// MICRO: moe.slice
// MICRO: %[[ROWS0:.*]], %{{.*}}, %[[SRC0:.*]] = moe.dispatch
// MICRO: moe.slice
// MICRO: %[[ROWS1:.*]], %{{.*}}, %[[SRC1:.*]] = moe.dispatch
// MICRO: %[[R0:.*]], %[[C0:.*]] = moe.all_to_all_start %[[ROWS0]], %[[S0:[^ ]*]] group "ep"
// MICRO-NEXT: %[[R1:.*]], %[[C1:.*]] = moe.all_to_all_start %[[ROWS1]], %[[S1:[^ ]*]] group "ep"
// MICRO-NEXT: moe.all_to_all_wait %[[ROWS0]], %[[S0]], %[[R0]], %[[C0]] :
// MICRO-NEXT: moe.regroup %[[R0]]
// MICRO: moe.experts
// MICRO: %[[B0:.*]] = moe.ungroup
// MICRO-NEXT: %[[O0:.*]], %[[N0:.*]] = moe.all_to_all_start %[[B0]], %[[C0]] group "ep" devices 2 like %[[ROWS0]]
// MICRO-NEXT: moe.all_to_all_wait %[[ROWS1]], %[[S1]], %[[R1]], %[[C1]] :
// MICRO-NEXT: moe.regroup %[[R1]]
// MICRO-NOT: moe.shard
// MICRO: %[[B1:.*]] = moe.ungroup
// MICRO-NEXT: %[[O1:.*]], %[[N1:.*]] = moe.all_to_all_start %[[B1]], %[[C1]] group "ep" devices 2 like %[[ROWS1]]
// MICRO-NEXT: moe.all_to_all_wait %[[B0]], %[[C0]], %[[O0]], %[[N0]] like %[[ROWS0]]
// MICRO-NEXT: %[[Y0:.*]] = moe.combine %[[O0]], %[[SRC0]]
// MICRO-NEXT: moe.all_to_all_wait %[[B1]], %[[C1]], %[[O1]], %[[N1]] like %[[ROWS1]]
// MICRO-NEXT: %[[Y1:.*]] = moe.combine %[[O1]], %[[SRC1]]
// MICRO-NEXT: moe.concat %[[Y0]], %[[Y1]] {axis = 0 : i64}
//
// Without a proof that the rows of dim 0 are independent
// (moe-analyze-row-independence's moe.row_split), every device runs the
// dense part on all rows: device 1 of 2 routes rows [T/2, T) of the logits
// (the router re-runs on its share), dispatches the same rows of the
// tokens, exchanges as before, and all-gathers the combined rows: each
// device sends its T_d rows to every device, received in device order like
// the layer's T tokens.
// REP-LABEL: func.func @main_d1(
// REP-SAME: moe.replicated
// REP: %[[T:.*]] = moe.dim %arg0, 0
// REP: %[[TR:.*]] = moe.reshape %[[T]]
// REP: %[[M1:.*]] = moe.mul %[[TR]], %{{.*}}
// REP: %[[B:.*]] = moe.div %[[M1]], %{{.*}}
// REP: %[[M2:.*]] = moe.mul %[[TR]], %{{.*}}
// REP: %[[E:.*]] = moe.div %[[M2]], %{{.*}}
// REP: %[[L:.*]] = moe.slice %arg1, %[[B]], %[[E]] axes
// REP: %[[W:.*]], %[[I:.*]] = moe.router %[[L]] top 2
// REP: %[[X:.*]] = moe.slice %arg0, %[[B]], %[[E]] axes
// REP: %[[S:.*]] = moe.assign_slots %[[I]]
// REP: moe.dispatch %[[X]], %[[S]] experts 8
// REP: %[[Y:.*]] = moe.combine %{{.*}}, %{{.*}}, %[[W]]
// REP-NEXT: %[[COPIES:.*]] = moe.concat %[[Y]], %[[Y]] {axis = 0 : i64}
// REP-NEXT: %[[N:.*]] = moe.dim %[[Y]], 0
// REP: %[[N1:.*]] = moe.reshape %[[N]]
// REP-NEXT: %[[SEND:.*]] = moe.concat %[[N1]], %[[N1]] {axis = 0 : i64}
// REP-NEXT: %[[ALL:.*]], %{{.*}} = moe.all_to_all %[[COPIES]], %[[SEND]] group "ep" devices 2 like %arg0
// REP-NEXT: return %[[ALL]]
module {
  func.func @main(%x: tensor<?x16xf32> {moe.dim_params = ["T", ""]},
                  %logits: tensor<?x8xf32> {moe.dim_params = ["T", ""]})
      -> (tensor<?x16xf32> {moe.dim_params = ["T", ""]}) {
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
