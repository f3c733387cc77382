//===- group_session.h - moe-run's view of a multi-device run ---*- C++ -*-===//
//
// Presents a moert::DeviceGroup with the interface moe-run drives a single
// session through (setInput, run, output, stats), plus the two hooks that
// differ: whether this process reports (writes outputs and stats; rank 0
// under MPI) and the per-device section of the --stats JSON.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_GROUP_SESSION_H
#define MOE_RUN_GROUP_SESSION_H

#include "moert/device_group.h"
#include "stats_json.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <map>
#include <string>

namespace moe_run {

/// Appends `{"device": D, ...` with the device's exchanges, the rows and
/// bytes it sent to and received from other devices, the rows it kept, its
/// time in collective steps vs the others and its experts' rows, without
/// the closing brace.
inline void appendDeviceTraffic(std::string &json,
                                const moert::DeviceStats &d) {
  absl::StrAppend(
      &json, "{\"device\": ", d.device, ", \"exchanges\": ", d.comm.exchanges,
      ", \"rows_sent\": ", d.comm.rowsSent,
      ", \"rows_received\": ", d.comm.rowsReceived,
      ", \"rows_kept\": ", d.comm.rowsKept,
      ", \"bytes_sent\": ", d.comm.bytesSent,
      ", \"bytes_received\": ", d.comm.bytesReceived,
      ", \"comm_ms\": ", absl::StrFormat("%.6f", d.comm.commSeconds * 1e3),
      ", \"compute_ms\": ",
      absl::StrFormat("%.6f", d.comm.computeSeconds * 1e3),
      ", \"expert_rows\": ", d.expertRows);
}

/// Appends "moe_layers": the MoE layers of `devices` merged over them (the
/// model's layers, as one device reports them).
inline absl::Status
appendMergedLayers(std::string &json,
                   const std::vector<moert::DeviceStats> &devices) {
  std::vector<std::vector<moert::MoeLayerStats>> layers;
  for (const moert::DeviceStats &d : devices)
    layers.push_back(d.moeLayers);
  MOERT_ASSIGN_OR_RETURN(std::vector<moert::MoeLayerStats> merged,
                         moert::mergeDeviceLayerStats(layers));
  appendMoeLayers(json, "moe_layers", merged, 2);
  return absl::OkStatus();
}

class GroupSession {
public:
  GroupSession(std::unique_ptr<moert::DeviceGroup> group, std::string backend)
      : group_(std::move(group)), backend_(std::move(backend)) {}

  absl::Status setInput(std::string_view name, moert::DType dtype,
                        const std::vector<int64_t> &shape, const void *data,
                        size_t bytes) {
    return group_->setInput(name, dtype, shape, data, bytes);
  }
  absl::Status run() { return group_->run(); }
  void resetStats() { group_->resetStats(); }
  /// This process's first device's steps (device 0 on the reporting one).
  std::vector<moert::StepStats> stepStats() const {
    return group_->localSessions()[0]->stepStats();
  }
  int threads() const { return group_->localSessions()[0]->threads(); }
  /// Collective under MPI; the data is meaningful where `reports()`.
  absl::StatusOr<moert::TensorData> output(const std::string &name) {
    absl::StatusOr<moert::HostTensor> result = group_->output(name);
    if (!result.ok())
      return result.status();
    moert::HostTensor &value = outputs_[name];
    value = std::move(*result);
    moert::TensorData view;
    view.dtype = value.dtype;
    view.shape = value.shape;
    view.data = value.bytes.data();
    view.bytes = value.bytes.size();
    return view;
  }
  bool reports() const { return group_->isRoot(); }
  /// The device group (moe-run's --trace and --report-html attach to its
  /// sessions and gather over it).
  moert::DeviceGroup &group() { return *group_; }
  /// How the devices exchange rows: "in-process", "mpi" or "nccl".
  const std::string &exchange() const { return backend_; }

  /// Appends the MoE layers merged over the devices ("moe_layers"),
  /// ",\n  \"devices\": [...]" and the group summary: per device the rows
  /// and bytes it sent to and received from other devices, the rows it
  /// kept, its time in collective steps vs the others, its experts' rows and
  /// its own MoE layers; then the load imbalance over devices (largest
  /// expert rows over the mean). Collective under MPI.
  absl::Status appendDevices(std::string &json) {
    MOERT_ASSIGN_OR_RETURN(std::vector<moert::DeviceStats> devices,
                           group_->deviceStats());
    MOERT_RETURN_IF_ERROR(appendMergedLayers(json, devices));
    uint64_t total = 0, most = 0;
    double comm = 0, compute = 0;
    absl::StrAppend(&json, ",\n  \"devices\": [");
    for (size_t i = 0; i < devices.size(); ++i) {
      const moert::DeviceStats &d = devices[i];
      total += d.expertRows;
      most = std::max(most, d.expertRows);
      comm += d.comm.commSeconds;
      compute += d.comm.computeSeconds;
      absl::StrAppend(&json, i ? "," : "", "\n    ");
      appendDeviceTraffic(json, d);
      appendMoeLayers(json, "moe_layers", d.moeLayers, 6);
      absl::StrAppend(&json, "}");
    }
    std::string imbalance =
        total ? absl::StrFormat("%.4f", double(most) * devices.size() / total)
              : "null";
    absl::StrAppend(
        &json, "\n  ],\n  \"expert_parallel\": {\"devices\": ", devices.size(),
        ", \"backend\": \"", backend_,
        "\", \"padding_rows\": ", group_->paddingRows(),
        ", \"load_imbalance\": ", imbalance, ", \"comm_fraction\": ",
        comm + compute > 0 ? absl::StrFormat("%.4f", comm / (comm + compute))
                           : "null",
        "}");
    return absl::OkStatus();
  }

private:
  std::unique_ptr<moert::DeviceGroup> group_;
  std::string backend_;
  std::map<std::string, moert::HostTensor> outputs_;
};

/// The hooks for single sessions: they always report, without devices.
template <typename SessionT> bool reports(const SessionT &) { return true; }
inline bool reports(const GroupSession &session) { return session.reports(); }
/// Appends the "moe_layers" of a single session's schedule (from its `steps`)
/// or, for a group, the devices and the layers merged over them.
template <typename SessionT>
absl::Status appendDevices(std::string &json, const moert::Plan &plan,
                           const std::vector<moert::StepStats> &steps,
                           SessionT &) {
  appendMoeLayers(json, "moe_layers", moert::moeLayerStats(plan, steps), 2);
  return absl::OkStatus();
}
inline absl::Status appendDevices(std::string &json, const moert::Plan &,
                                  const std::vector<moert::StepStats> &,
                                  GroupSession &session) {
  return session.appendDevices(json);
}

} // namespace moe_run

#endif // MOE_RUN_GROUP_SESSION_H
