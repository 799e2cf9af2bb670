#include "tessel/plan/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "tessel/core/error.h"
#include "tessel/parallel/layout.h"

namespace tessel {

namespace {

// The efficiency model fitted by `tessel plan --published` on three rows of Korthikanti et al.
// 2022, Table 5 (the 22B model with full recompute and with SP + selective on one DGX A100
// node, the 530B model with SP + selective on 35 nodes): see bench/RESULTS.md. The other GPUs
// keep the same efficiencies, an assumption until a run on them calibrates its own.
constexpr double kGemmEfficiency = 0.74, kMemoryEfficiency = 0.6725, kNetworkEfficiency = 1.0;

// One DGX node of 8 GPUs with NVSwitch, and one 400 Gb/s (A100: 200 Gb/s) InfiniBand NIC per
// GPU. Peak = dense bf16 tensor-core FLOP/s; memory as nvidia-smi reports it.
Cluster dgx(const std::string& name, double memory_gib, double tflops, double hbm_tb_s,
            double nvlink_gb_s, double nic_gb_s, const std::string& source) {
  Cluster c;
  c.name = name;
  c.memory_gib = memory_gib;
  c.peak_flops = tflops * 1e12;
  c.memory_bandwidth = hbm_tb_s * 1e12;
  c.intra_bandwidth = nvlink_gb_s * 1e9;
  c.inter_bandwidth = nic_gb_s * 1e9;
  c.gemm_efficiency = kGemmEfficiency;
  c.memory_efficiency = kMemoryEfficiency;
  c.network_efficiency = kNetworkEfficiency;
  c.runtime_memory_gib = 1.0;  // CUDA context, cuBLAS workspace, NCCL buffers: an estimate
  c.source = source;
  return c;
}


// The file's keys are the struct's fields: one table serves reading and writing.
struct Field {
  const char* key;
  std::function<void(Cluster&, const nlohmann::json&)> read;
  std::function<nlohmann::json(const Cluster&)> write;
};

template <typename T>
Field field(const char* key, T Cluster::*member) {
  return {key,
          [member, key](Cluster& c, const nlohmann::json& v) {
            // A whole number is range-checked before it is narrowed: nlohmann's get<int> wraps
            // 2147483648 to -2147483648, and 4294967297 to 1, which would pass.
            if constexpr (std::is_integral_v<T>) {
              const double wide = v.get<double>();
              if (!(wide >= std::numeric_limits<T>::min() && wide <= std::numeric_limits<T>::max()) ||
                  wide != std::trunc(wide))
                throw ConfigError(fmt::format("{} {} is not a whole number from {} to {}", key, v.dump(),
                                              std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
            }
            c.*member = v.get<T>();
          },
          [member](const Cluster& c) { return nlohmann::json(c.*member); }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      field("name", &Cluster::name), field("device", &Cluster::device),
      field("devices_per_node", &Cluster::devices_per_node), field("memory_gib", &Cluster::memory_gib),
      field("peak_flops", &Cluster::peak_flops), field("memory_bandwidth", &Cluster::memory_bandwidth),
      field("intra_bandwidth", &Cluster::intra_bandwidth), field("intra_latency", &Cluster::intra_latency),
      field("inter_bandwidth", &Cluster::inter_bandwidth), field("inter_latency", &Cluster::inter_latency),
      field("gemm_efficiency", &Cluster::gemm_efficiency), field("memory_efficiency", &Cluster::memory_efficiency),
      field("network_efficiency", &Cluster::network_efficiency),
      field("runtime_memory_gib", &Cluster::runtime_memory_gib), field("source", &Cluster::source)};
  return table;
}

}  // namespace

// This machine before --calibrate: MACHINE.md's measured rates (oneDNN sgemm on one core,
// memcpy of large buffers, Open MPI shared-memory send/recv), one node.
Cluster uncalibrated_cpu() {
  Cluster c;
  c.name = "cpu";
  c.device = "cpu";
  c.devices_per_node = 2;
  c.memory_gib = 12;
  c.peak_flops = 150e9;
  c.memory_bandwidth = 17e9;
  c.intra_bandwidth = c.inter_bandwidth = 5e9;
  c.intra_latency = c.inter_latency = 2e-6;
  c.gemm_efficiency = c.memory_efficiency = c.network_efficiency = 1.0;
  c.runtime_memory_gib = 0.08;
  c.source = "not calibrated (MACHINE.md's rates): run `tessel plan --calibrate` first";
  return c;
}

std::vector<std::string> Cluster::violations() const {
  std::vector<std::string> v;
  if (device != "gpu" && device != "cpu") v.push_back(fmt::format("cluster device '{}' is not gpu or cpu", device));
  if (devices_per_node < 1) v.push_back(fmt::format("devices_per_node must be positive (got {})", devices_per_node));
  // A node holds no more devices than a job's world (the planner doubles it for TP's search).
  if (devices_per_node > kMaxWorld)
    v.push_back(fmt::format("devices_per_node {} is past tessel's bound of {}", devices_per_node, kMaxWorld));
  for (auto [key, value] : {std::pair{"memory_gib", memory_gib}, {"peak_flops", peak_flops},
                            {"memory_bandwidth", memory_bandwidth}, {"intra_bandwidth", intra_bandwidth},
                            {"inter_bandwidth", inter_bandwidth}, {"gemm_efficiency", gemm_efficiency},
                            {"memory_efficiency", memory_efficiency},
                            {"network_efficiency", network_efficiency}})
    if (!(value > 0)) v.push_back(fmt::format("{} must be positive (got {})", key, value));
  if (intra_latency < 0 || inter_latency < 0 || runtime_memory_gib < 0)
    v.push_back("latencies and runtime_memory_gib must not be negative");
  return v;
}

std::vector<std::string> cluster_preset_names() { return {"a100-80gb", "h100", "h200", "b200", "cpu"}; }

Cluster cluster_preset(const std::string& name) {
  if (name == "a100-80gb")
    return dgx(name, 80, 312, 2.039, 300, 25,
               "DGX A100 80GB: 312 TFLOP/s bf16, 2.04 TB/s HBM2e, NVLink 3 600 GB/s, 8x HDR 200 Gb/s");
  if (name == "h100")
    return dgx(name, 80, 989, 3.35, 450, 50,
               "DGX H100: 989 TFLOP/s bf16, 3.35 TB/s HBM3, NVLink 4 900 GB/s, 8x NDR 400 Gb/s");
  if (name == "h200")
    return dgx(name, 140, 989, 4.8, 450, 50,
               "DGX H200: 989 TFLOP/s bf16, 141 GB at 4.8 TB/s HBM3e, NVLink 4 900 GB/s, 8x NDR 400 Gb/s");
  if (name == "b200")
    return dgx(name, 179, 2250, 8.0, 900, 50,
               "DGX B200: 2.25 PFLOP/s bf16 dense, 180 GB at 8 TB/s HBM3e, NVLink 5 1.8 TB/s, 8x 400 Gb/s");
  if (name == "cpu") {
    const std::string file = cpu_cluster_file();
    return std::filesystem::exists(file) ? load_cluster(file) : uncalibrated_cpu();
  }
  std::string known;
  for (const std::string& n : cluster_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(fmt::format("unknown --cluster '{}' (a preset: {}; or a JSON file)", name, known));
}

std::string cpu_cluster_file() {
  const char* env = std::getenv("TESSEL_CLUSTER_FILE");
  return env != nullptr && *env != '\0' ? env : "tessel-cpu-cluster.json";
}

Cluster cluster_from_json(const nlohmann::json& j, const std::string& source) {
  TESSEL_CHECK(j.is_object(), "{}: expected a JSON object", source);
  Cluster c = j.value("device", "gpu") == "cpu" ? uncalibrated_cpu() : dgx("", 80, 312, 2.039, 300, 25, "");
  c.source = source;
  for (auto& [key, value] : j.items()) {
    if (key == "measured") continue;  // --calibrate's record of what it measured
    auto f = std::find_if(fields().begin(), fields().end(), [&](const Field& x) { return key == x.key; });
    TESSEL_CHECK(f != fields().end(), "{}: unknown cluster key '{}'", source, key);
    try {
      f->read(c, value);
    } catch (const nlohmann::json::exception&) {  // its words name neither the key nor the value
      fail("{}: {} {} is not of the key's type (a {})", source, key, value.dump(),
           f->write(c).is_string() ? "string" : f->write(c).is_boolean() ? "true or false" : "number");
    } catch (const ConfigError& e) {  // a whole number out of its range, named by the key
      throw ConfigError(fmt::format("{}: {}", source, e.what()));
    }
  }
  if (c.name.empty()) c.name = source;
  std::vector<std::string> v = c.violations();
  if (!v.empty()) {
    std::string msg = source + ": " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw ConfigError(msg);
  }
  return c;
}

Cluster load_cluster(const std::string& preset_or_file) {
  for (const std::string& n : cluster_preset_names())
    if (n == preset_or_file) return cluster_preset(n);
  if (!std::filesystem::exists(preset_or_file)) cluster_preset(preset_or_file);  // names the presets
  std::ifstream in(preset_or_file);
  TESSEL_CHECK(in.good(), "{}: cannot open cluster file", preset_or_file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not valid JSON ({})", preset_or_file, e.what()));
  }
  return cluster_from_json(j, preset_or_file);
}

nlohmann::json cluster_to_json(const Cluster& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : fields()) j[f.key] = f.write(c);
  return j;
}

}  // namespace tessel
