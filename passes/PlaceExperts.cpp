//===- PlaceExperts.cpp - assign routed experts to devices ----------------===//
//
// moe-place-experts: the placement half of expert parallelism. Every
// `moe.experts` op of @main gets a `moe.placement` that maps the devices'
// slots to experts; moe-insert-all-to-all then rewrites the layers from it.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/PlacementLimits.h"
#include "passes/RoutingProfile.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace moec {
#define GEN_PASS_DEF_MOEPLACEEXPERTS
#include "passes/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

/// Where the slots of one layer live: `slotExperts[s]` is the expert of slot
/// s; device d owns slots [slotBegin[d], slotBegin[d + 1]).
struct Placement {
  SmallVector<int64_t> slotExperts;
  SmallVector<int64_t> slotBegin;
};

/// Contiguous blocks of near-equal size: balanced by parameter bytes, since
/// the experts of one layer have equal sizes.
Placement placeByBytes(int64_t numExperts, int64_t numDevices) {
  Placement placement;
  for (int64_t d = 0; d <= numDevices; ++d)
    placement.slotBegin.push_back(numExperts * d / numDevices);
  for (int64_t e = 0; e < numExperts; ++e)
    placement.slotExperts.push_back(e);
  return placement;
}

/// Longest processing time first over the expected `loads`, where each of
/// the `replicas` most loaded experts counts as two items of half its load
/// (AssignSlots splits an expert's tokens evenly between its slots) that must
/// land on different devices. Placing the halves inside the greedy, rather
/// than after it, keeps the balance the greedy found.
Placement placeByLoad(ArrayRef<double> loads, int64_t numDevices,
                      int64_t replicas) {
  int64_t numExperts = loads.size();
  SmallVector<int64_t> byLoad(numExperts);
  std::iota(byLoad.begin(), byLoad.end(), 0);
  // Ties keep expert order, so that equal loads give a deterministic result.
  std::stable_sort(byLoad.begin(), byLoad.end(),
                   [&](int64_t a, int64_t b) { return loads[a] > loads[b]; });

  struct Item {
    int64_t expert;
    double load;
  };
  SmallVector<Item> items;
  int64_t numReplicated =
      numDevices > 1 ? std::min(replicas, numExperts) : int64_t(0);
  for (int64_t i = 0; i < numExperts; ++i) {
    int64_t e = byLoad[i];
    int64_t copies = i < numReplicated ? 2 : 1;
    for (int64_t c = 0; c < copies; ++c)
      items.push_back({e, loads[e] / copies});
  }
  std::stable_sort(
      items.begin(), items.end(),
      [](const Item &a, const Item &b) { return a.load > b.load; });

  SmallVector<SmallVector<int64_t>> experts(numDevices);
  SmallVector<double> deviceLoad(numDevices, 0.0);
  // The device of an expert's first slot, so that its replica goes elsewhere.
  SmallVector<int64_t> home(numExperts, -1);
  for (const Item &item : items) {
    int64_t best = -1;
    for (int64_t d = 0; d < numDevices; ++d) {
      if (d == home[item.expert])
        continue;
      // Equal loads: the device with fewer experts, so that experts without
      // load (absent from the profile's runs) still spread out.
      if (best < 0 || deviceLoad[d] < deviceLoad[best] ||
          (deviceLoad[d] == deviceLoad[best] &&
           experts[d].size() < experts[best].size()))
        best = d;
    }
    experts[best].push_back(item.expert);
    deviceLoad[best] += item.load;
    home[item.expert] = best;
  }

  Placement placement;
  placement.slotBegin.push_back(0);
  for (SmallVector<int64_t> &list : experts) {
    llvm::sort(list);
    llvm::append_range(placement.slotExperts, list);
    placement.slotBegin.push_back(placement.slotExperts.size());
  }
  return placement;
}

struct PlaceExpertsPass : public impl::MoePlaceExpertsBase<PlaceExpertsPass> {
  using MoePlaceExpertsBase::MoePlaceExpertsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (devices < 1) {
      module.emitError("moe-place-experts: devices must be at least 1, got ")
          << devices.getValue();
      return signalPassFailure();
    }
    if (replicateHot < 0 || (replicateHot > 0 && routingProfile.empty())) {
      module.emitError("moe-place-experts: replicate-hot needs a routing "
                       "profile (which experts are hot) and a count >= 0, "
                       "got ")
          << replicateHot.getValue();
      return signalPassFailure();
    }
    if (devices > static_cast<int64_t>(moert::kMaxDevices)) {
      module.emitError("moe-place-experts: devices must be at most ")
          << moert::kMaxDevices << " (a plan's limit), got "
          << devices.getValue();
      return signalPassFailure();
    }
    if (devices == 1)
      return;
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("moe-place-experts: no @main function");
      return signalPassFailure();
    }
    RoutingProfile profile;
    if (!routingProfile.empty()) {
      FailureOr<RoutingProfile> read =
          readRoutingProfile(module, routingProfile);
      if (failed(read))
        return signalPassFailure();
      profile = std::move(*read);
    }

    SmallVector<moe::ExpertsOp> layers;
    main.walk([&](moe::ExpertsOp op) { layers.push_back(op); });
    if (!routingProfile.empty() && profile.size() != layers.size()) {
      module.emitError("routing profile '")
          << routingProfile.getValue() << "': field 'moe_layers' has "
          << profile.size() << " entries; the model has " << layers.size()
          << " MoE layers";
      return signalPassFailure();
    }

    Builder builder(module.getContext());
    for (auto [index, experts] : llvm::enumerate(layers)) {
      int64_t numExperts = experts.getW1().getType().getDimSize(0);
      if (ShapedType::isDynamic(numExperts)) {
        experts.emitError("cannot place experts whose count is not static");
        return signalPassFailure();
      }
      // Every expert has a slot and the hot ones a second: the placement
      // and the slot counts each device exchanges hold devices x slots
      // entries. Bounded before anything is sized by them.
      int64_t slots = numExperts;
      if (!profile.empty() &&
          llvm::AddOverflow(numExperts,
                            std::min<int64_t>(replicateHot, numExperts), slots))
        slots = std::numeric_limits<int64_t>::max();
      if (failed(checkDeviceSlots(experts, index, numExperts, slots, devices)))
        return signalPassFailure();
      Placement placement;
      if (profile.empty()) {
        placement = placeByBytes(numExperts, devices);
      } else {
        if (static_cast<int64_t>(profile[index].size()) != numExperts) {
          experts.emitError("routing profile '")
              << routingProfile.getValue() << "': field 'moe_layers[" << index
              << "].tokens_per_expert' has " << profile[index].size()
              << " entries; layer " << index << " has " << numExperts
              << " experts";
          return signalPassFailure();
        }
        placement = placeByLoad(profile[index], devices, replicateHot);
      }
      experts->setAttr(
          "moe.placement",
          builder.getDictionaryAttr(
              {builder.getNamedAttr("slot_begin", builder.getDenseI64ArrayAttr(
                                                      placement.slotBegin)),
               builder.getNamedAttr(
                   "slot_experts",
                   builder.getDenseI64ArrayAttr(placement.slotExperts))}));
    }
    module->setAttr("moe.devices", builder.getI64IntegerAttr(devices));
  }
};

} // namespace
} // namespace moec
