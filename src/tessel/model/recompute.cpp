#include "tessel/model/recompute.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessel {

namespace {

const std::vector<std::string> kModules = {"core_attn",      "layernorm",   "mlp",         "moe", "moe_act",
                                           "shared_experts", "mla_up_proj", "gdn_norm_out"};

bool has(const std::vector<std::string>& list, const char* name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

}  // namespace

std::vector<std::string> recompute_violations(const RecomputeOptions& o, int chunk_layers, bool moe,
                                              bool shared_expert, bool gdn) {
  std::vector<std::string> v;
  const std::string g = o.effective_granularity();
  if (o.activations && !o.granularity.empty() && o.granularity != "selective")
    v.push_back(fmt::format("--recompute-activations (selective recompute) contradicts --recompute-granularity {}",
                            o.granularity));
  if (!g.empty() && g != "full" && g != "selective")
    v.push_back(fmt::format("--recompute-granularity must be full or selective (got '{}')", g));
  if (!o.method.empty() && o.method != "uniform" && o.method != "block")
    v.push_back(fmt::format("--recompute-method must be uniform or block (got '{}')", o.method));
  if (g == "full") {
    if (o.method.empty()) v.push_back("--recompute-granularity full needs --recompute-method uniform or block");
    if (o.num_layers < 1 || o.num_layers > chunk_layers)
      v.push_back(fmt::format("--recompute-granularity full needs --recompute-num-layers between 1 and the "
                              "layers of a model chunk, {} (got {})", chunk_layers, o.num_layers));
  } else {
    if (!o.method.empty())
      v.push_back(fmt::format("--recompute-method {} needs --recompute-granularity full{}", o.method,
                              g == "selective" ? " (selective recomputes modules, not layers)" : ""));
    if (o.num_layers != 0)
      v.push_back(fmt::format("--recompute-num-layers {} needs --recompute-granularity full", o.num_layers));
  }
  if (!o.modules.empty() && g != "selective")
    v.push_back("--recompute-modules needs --recompute-granularity selective");
  for (const std::string& m : o.modules) {
    if (std::find(kModules.begin(), kModules.end(), m) == kModules.end())
      v.push_back(fmt::format("--recompute-modules: unknown module '{}' (core_attn, layernorm, mlp, moe, "
                              "moe_act, shared_experts, gdn_norm_out)", m));
    else if (m == "mla_up_proj")
      v.push_back("--recompute-modules mla_up_proj needs multi-latent attention, which tessel does not have");
    else if ((m == "moe" || m == "moe_act") && !moe)
      v.push_back(fmt::format("--recompute-modules {} needs --num-experts (a Mixture-of-Experts model)", m));
    else if (m == "shared_experts" && !shared_expert)
      v.push_back("--recompute-modules shared_experts needs --moe-shared-expert-intermediate-size");
    else if (m == "gdn_norm_out" && !gdn)
      v.push_back("--recompute-modules gdn_norm_out needs Gated DeltaNet layers (--experimental-attention-variant gdn)");
  }
  return v;
}

LayerRecompute layer_recompute(const RecomputeOptions& o, int layer, int chunk_layers) {
  LayerRecompute r;
  const std::string g = o.effective_granularity();
  if (g == "full") {
    r.full = o.method == "uniform" || layer < std::min(o.num_layers, chunk_layers);
  } else if (g == "selective") {
    const std::vector<std::string> modules = o.modules.empty() ? std::vector<std::string>{"core_attn"} : o.modules;
    r.core_attn = has(modules, "core_attn");
    r.layernorm = has(modules, "layernorm");
    r.mlp = has(modules, "mlp");
    r.moe = has(modules, "moe");
    r.moe_act = has(modules, "moe_act");
    r.shared_experts = has(modules, "shared_experts");
    r.gdn_norm_out = has(modules, "gdn_norm_out");
  }
  return r;
}

int recompute_group_start(const RecomputeOptions& o, int layer) {
  if (o.effective_granularity() == "full" && o.method == "uniform") return layer / o.num_layers * o.num_layers;
  return layer;
}

}  // namespace tessel
