// The machines a layout runs on: devices per node, their memory and rates, the links inside a
// node and between nodes, and the efficiency model that turns peak rates into achieved ones.
// Presets describe DGX nodes from their public specifications; `tessel plan --calibrate` writes
// one for this CPU machine from measured rates (plan/calibrate.h).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace tessel {

// Where the numbers of the efficiency model come from and what they mean:
//   GEMM time          = FLOPs / (peak_flops · gemm_efficiency)
//   memory-bound time  = bytes / (memory_bandwidth · memory_efficiency)
//   a collective's time = its ring volume / (link bandwidth · network_efficiency) + steps · latency
struct Cluster {
  std::string name;
  std::string device = "gpu";  // "gpu" | "cpu" (which engine runs on it is the run's: plan/run.h)
  int devices_per_node = 8;    // GPUs (CPU: cores, one rank per core) per node
  double memory_gib = 80;      // per device (CPU: the node's memory / devices_per_node)
  double peak_flops = 312e12;  // dense, per device, in the compute precision (bf16 / fp32)
  double memory_bandwidth = 2.0e12;  // bytes/s per device (HBM; CPU: per core, measured)
  double intra_bandwidth = 300e9;    // bytes/s per device and direction (NVLink / shared memory)
  double intra_latency = 5e-6;       // seconds per collective step
  double inter_bandwidth = 25e9;     // bytes/s per device and direction (its share of the NICs)
  double inter_latency = 10e-6;
  double gemm_efficiency = 0.8;
  double memory_efficiency = 0.8;
  double network_efficiency = 0.8;
  double runtime_memory_gib = 0;     // per process, outside the model (CUDA context; CPU: baseline RSS)
  std::string source;                // where the numbers come from

  bool cpu() const { return device == "cpu"; }
  std::vector<std::string> violations() const;
};

// "a100-80gb", "h100", "h200", "b200" (DGX nodes of 8), or "cpu" (this machine, with rates
// measured earlier by `tessel plan --calibrate` when its file exists, see cpu_cluster_file()).
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();
// A preset name or a JSON file written by --calibrate (or by hand, same keys as the struct).
Cluster load_cluster(const std::string& preset_or_file);
Cluster cluster_from_json(const nlohmann::json& j, const std::string& source);
nlohmann::json cluster_to_json(const Cluster& c);
// This machine before --calibrate, which measures every one of its rates.
Cluster uncalibrated_cpu();
// Where --calibrate writes by default: $TESSEL_CLUSTER_FILE, else ./tessel-cpu-cluster.json.
std::string cpu_cluster_file();

}  // namespace tessel
