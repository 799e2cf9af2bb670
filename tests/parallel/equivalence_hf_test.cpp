// The equivalence suite's layouts started from a Hugging Face folder (the test itself:
// equivalence_test.cpp): every layout reads its part of the folder — its stage's or V's chunks,
// its experts, its TP and ETP slices, MTP and the embedding copy on the last stage — and must
// follow the single process started from the same folder. For each family tessel reads: GPT-2
// (its tied head), Llama (dense), Llama with experts (written as qwen2_moe), Qwen3-MoE, and the Qwen3-Next hybrid in
// Qwen3-Next's published layout (grouped GDN projections, experts one by one) and Qwen3.5's
// (flat projections, packed experts, the decoder under model.language_model.).
#include <deque>
#include <string>
#include <vector>

#include "parallel/equivalence.h"

namespace tessel::equivalence {
namespace {

struct Family {
  const char* name;
  const char* model;       // its model flags
  const char* model_mb1;   // the same for the microbatch-1 layouts: no aux loss, which balances
                           // each microbatch and so would train another objective than the
                           // reference's microbatch 2
  const char* model_mtp;   // with one MTP depth, as model_mb1
  const char* export_flags;
  int layers;              // the layers of the layouts that need no pipeline
};

#define TESSEL_MOE_NO_AUX "--num-experts 8 --moe-router-topk 2 --moe-z-loss-coeff 0.001 "
#define TESSEL_MTP "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.3 "
const Family kFamilies[] = {
    {"llama", "", "", TESSEL_MTP, "", 2},
    {"llama_moe", TESSEL_MOE_FLAGS, TESSEL_MOE_NO_AUX, TESSEL_MOE_NO_AUX TESSEL_MTP, "", 2},
    {"qwen3_moe", TESSEL_MOE_FLAGS " --qk-layernorm", TESSEL_MOE_NO_AUX "--qk-layernorm",
     TESSEL_MOE_NO_AUX TESSEL_MTP "--qk-layernorm", "", 2},
    {"qwen3_next", TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01", TESSEL_GDN_FLAGS, TESSEL_GDN_FLAGS TESSEL_MTP,
     "--hf-model-type qwen3_next", 4},
    {"qwen3_5", TESSEL_GDN_FLAGS "--moe-aux-loss-coeff 0.01", TESSEL_GDN_FLAGS, TESSEL_GDN_FLAGS TESSEL_MTP,
     "--hf-model-type qwen3_5_moe", 4},
};

// Each family under PP 2 (1F1B, interleaved, ZB-V, DualPipeV), EP 2 alone and with TP 2, SP and
// ETP 2, CP 2, and PP 4 × DP 2 with MTP and the distributed optimizer; the dense model under TP 2
// with SP too, and under PP 4 from a folder of several shards.
std::vector<Layout> hf_layouts() {
  static std::deque<std::string> names;  // the layouts' names live as long as the test program
  std::vector<Layout> layouts;
  for (const Family& f : kFamilies) {
    const bool moe = std::string(f.model).find("--num-experts") != std::string::npos;
    const auto add = [&](const char* name, int ranks, const char* flags, int layers, const char* model) {
      names.push_back(std::string(f.name) + "_" + name);
      layouts.push_back({.name = names.back().c_str(), .ranks = ranks, .flags = flags, .layers = layers,
                         .model_extra = model, .init_from = f.export_flags});
    };
    add("pp2", 2, "--pp 2", 4, f.model);
    add("pp2_vpp2", 2, "--pp 2 --vpp 2", 4, f.model);
    add("pp2_zbv", 2, "--pp 2 --schedule zb-v", 4, f.model);
    add("pp2_dualpipev", 2, "--pp 2 --schedule dualpipev --micro-batch-size 1", 4, f.model_mb1);
    if (moe) {
      add("ep2", 2, "--ep 2", f.layers, f.model);
      add("ep2_tp2_sp_etp2", 4, "--ep 2 --tp 2 --sequence-parallel --etp 2", f.layers, f.model);
    } else {
      add("tp2_sp", 2, "--tp 2 --sequence-parallel", f.layers, f.model);
    }
    add("cp2", 2, "--cp 2", f.layers, f.model);
    add("pp4_dp2_mtp_distopt", 8, "--pp 4 --use-distributed-optimizer --micro-batch-size 1", 4, f.model_mtp);
  }
  names.push_back("llama_pp4_sharded");
  layouts.push_back({.name = names.back().c_str(), .ranks = 4, .flags = "--pp 4", .layers = 4,
                     .init_from = "--max-shard-size 40KB"});
  return layouts;
}

INSTANTIATE_TEST_SUITE_P(FromHuggingFace, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(hf_layouts())),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// GPT-2 ties its head to the embedding: the last stage's copy, or under ZB-V the first rank's one
// embedding serving both, read from the file's one tensor.
const Layout kGpt2Layouts[] = {
    {.name = "gpt2_pp2", .ranks = 2, .flags = "--pp 2", .layers = 4, .init_from = ""},
    {.name = "gpt2_pp2_zbv", .ranks = 2, .flags = "--pp 2 --schedule zb-v", .layers = 4, .init_from = ""},
    {.name = "gpt2_tp2_sp_pp2", .ranks = 4, .flags = "--tp 2 --sequence-parallel --pp 2", .layers = 4, .init_from = ""},
};

INSTANTIATE_TEST_SUITE_P(FromHuggingFaceGpt2, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2"), ::testing::ValuesIn(kGpt2Layouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel::equivalence
