#include "unbuilt_flags.h"

#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {

namespace {

// A flag as Megatron-LM declares it (arguments.py and the config dataclasses its
// ArgumentGroupFactory turns into flags). `asks`: given (with a value other than `off`), it turns
// the feature on; otherwise it is one of the feature's settings. `help`: where `tessel plan` has
// the flag too (it models the feature), its help there.
struct Flag {
  const char* flag;
  bool takes_value = false;
  std::vector<std::string> choices = {};
  bool asks = false;
  const char* off = nullptr;
  const char* help = nullptr;
};

struct Feature {
  const char* name;
  const char* here;
  std::vector<Flag> flags;
};

// A value given equals the flag's `off`: as numbers when both read as numbers (0, 0.0 and 0e0 alike),
// else as text.
bool is_off(const std::string& value, const char* off) {
  char *value_end = nullptr, *off_end = nullptr;
  const double a = std::strtod(value.c_str(), &value_end), b = std::strtod(off, &off_end);
  if (!value.empty() && *value_end == '\0' && *off != '\0' && *off_end == '\0') return a == b;
  return value == off;
}

const std::vector<Feature>& features() {
  static const std::vector<std::string> kDtypes = {"fp32", "bf16", "fp16", "auto"};
  static const std::vector<Feature> table = {
      {"FP8's MXFP8 buffer reuse and MoE router padding", "not built yet",
       {{"--reuse-grad-buf-for-mxfp8-param-ag", false, {}, true},
        {"--moe-router-padding-for-fp8", false, {}, true},
        {"--moe-router-padding-for-quantization", false, {}, true}}},
      {"hybrid sharded data parallelism (HSDP)",
       "not built yet: --use-megatron-fsdp shards over the whole DP × CP group",
       {{"--num-distributed-optimizer-instances", true, {}, true, "1"},
        {"--outer-dp-sharding-strategy", true, {"no_shard", "optim"}, true, "no_shard"}}},
      {"Megatron-FSDP's communication buffers and precisions",
       "tessel's fully sharded data parallelism gathers into the model's own buffers and reduces in fp32; "
       "NCCL user buffers are not built",
       {{"--fsdp-double-buffer"},
        {"--fsdp-manual-registration"},
        {"--fsdp-db-use-persist-buf-on-alloc-fail"},
        {"--megatron-fsdp-grad-comm-dtype", true},
        {"--megatron-fsdp-main-grads-dtype", true, kDtypes},
        {"--megatron-fsdp-main-params-dtype", true, kDtypes},
        {"--megatron-fsdp-max-pool-double-buffer"},
        {"--init-model-with-meta-device"}}},
      {"optimizer states below fp32 (Transformer Engine's precision-aware optimizer)",
       "tessel's AdamW keeps fp32 master weights, gradients and moments (with fp32 states "
       "--use-precision-aware-optimizer is the same Adam)",
       {{"--main-grads-dtype", true, {"fp32", "bf16"}, true, "fp32"},
        {"--main-params-dtype", true, {"fp32", "fp16"}, true, "fp32"},
        {"--exp-avg-dtype", true, {"fp32", "fp16", "bf16", "fp8"}, true, "fp32"},
        {"--exp-avg-sq-dtype", true, {"fp32", "fp16", "bf16", "fp8"}, true, "fp32"},
        {"--use-precision-aware-optimizer"}}},
      {"multi-latent attention (DeepSeek-V2/V3)",
       "not built yet for training (tessel plan models its memory and time)",
       {{"--multi-latent-attention", false, {}, true, nullptr, "MLA (DeepSeek-V2/V3)"},
        {"--q-lora-rank", true, {}, false, nullptr, "MLA query latent"},
        {"--kv-lora-rank", true, {}, false, nullptr, "MLA key/value latent"},
        {"--qk-head-dim", true, {}, false, nullptr, "MLA query/key head dimension"},
        {"--qk-pos-emb-head-dim", true, {}, false, nullptr, "MLA RoPE dimension"},
        {"--v-head-dim", true, {}, false, nullptr, "MLA value head dimension"},
        {"--rotary-scaling-factor", true},
        {"--mscale", true},
        {"--mscale-all-dim", true}}},
      {"DeepSeek-V3's router (expert bias, group-limited top-k, scaled top-k weights)", "not built yet",
       {{"--moe-router-enable-expert-bias", false, {}, true},
        {"--moe-router-num-groups", true, {}, true},
        {"--moe-router-group-topk", true, {}, true},
        {"--moe-router-topk-scaling-factor", true, {}, true},
        {"--moe-router-bias-update-rate", true}}},
      {"gpt-oss's attention and MLP (softmax sinks, sliding windows, clamped GLU with an offset)",
       "not built yet",
       {{"--enable-gpt-oss", false, {}, true},
        {"--softmax-type", true, {"vanilla", "off-by-one", "learnable"}, true, "vanilla"},
        {"--window-size", true, {}, true},
        {"--activation-func-clamp-value", true, {}, true},
        {"--glu-linear-offset", true, {}, true, "0.0"},
        {"--window-attn-skip-freq", true},
        {"--export-force-local-attention"}}},
  };
  return table;
}

}  // namespace

void UnbuiltFlags::add_to(CLI::App& app) {
  size_t count = 0;
  for (const Feature& f : features()) count += f.flags.size();
  values_.resize(count);  // before any option holds a reference into it
  size_t i = 0;
  for (const Feature& f : features()) {
    const std::string group = fmt::format("Megatron-LM's flags for {} (not built)", f.name);
    for (const Flag& flag : f.flags) {
      const std::string help = flag.help != nullptr ? flag.help
                               : flag.asks          ? "refused: " + std::string(f.here)
                                                    : std::string("a setting of ") + f.name;
      CLI::Option* o = flag.takes_value ? app.add_option(flag.flag, values_[i], help) : app.add_flag(flag.flag, help);
      if (!flag.choices.empty()) o->check(CLI::IsMember(flag.choices));
      options_.push_back(o->group(group));
      ++i;
    }
  }
}

void UnbuiltFlags::check(std::vector<std::string>& notes, std::vector<std::string>& v) const {
  size_t i = 0;
  for (const Feature& f : features()) {
    std::vector<std::string> given;
    bool asked = false;
    for (const Flag& flag : f.flags) {
      if (options_[i]->count() > 0) {
        given.push_back(flag.takes_value ? fmt::format("{} {}", flag.flag, values_[i]) : flag.flag);
        asked = asked || (flag.asks && (flag.off == nullptr || !is_off(values_[i], flag.off)));
      }
      ++i;
    }
    if (asked)
      v.push_back(fmt::format("{} is not built ({}): {}", f.name, fmt::join(given, " "), f.here));
    else if (!given.empty())
      notes.push_back(fmt::format("{}: no effect, as in Megatron-LM without {} on", fmt::join(given, ", "), f.name));
  }
}

}  // namespace tessel
