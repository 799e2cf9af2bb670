// A Qwen3-Next-style model from Megatron's flags, as a user trains one: three Gated DeltaNet
// layers then a gated full-attention layer, zero-centred norms, partial RoPE, a head dimension of
// its own, 8 experts top-2 with the gated shared expert; its loss falls. And its bad
// configurations: every broken rule in one line, a non-zero exit. Its multi-token prediction
// weights (mtp.*) through every Hugging Face family's layout and back, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/log_json.h"
#include "tessel/ckpt/safetensors.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::run_tessel;

// Without the four settings the bad cases below change (a flag is given once).
const std::string kBase =
    "--arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
    "--kv-channels 32 --experimental-attention-variant gdn --linear-num-key-heads 2 "
    "--linear-key-head-dim 16 --linear-value-head-dim 16 --attention-output-gate --qk-layernorm "
    "--apply-layernorm-1p --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
    "--moe-shared-expert-gate --moe-aux-loss-coeff 0.001 --seq-length 32 --threads 1 ";
const std::string kQwen3Next = kBase +
    "--linear-attention-freq 4 --linear-num-value-heads 4 --rotary-percent 0.25 "
    "--moe-shared-expert-intermediate-size 32 ";

// kQwen3Next without the two settings of training (export has neither).
std::string export_flags() {
  std::string model = kQwen3Next;
  for (const std::string run_flag : {"--moe-aux-loss-coeff 0.001 ", "--threads 1 "})
    model.erase(model.find(run_flag), run_flag.size());
  return model;
}

TEST(Qwen3NextCli, TinyModelTrainsAndItsLossFalls) {
  testing::TestDir dir;
  const testing::CommandResult r =
      run_tessel("train " + kQwen3Next +
                 "--micro-batch-size 2 --global-batch-size 4 --train-iters 40 --eval-iters 0 --lr 3e-3 --log-interval 1 "
                 "--log-json " + dir.path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> losses = testing::log_json_losses(dir.path("log.jsonl"));
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.1);  // the byte vocabulary, untrained
  auto mean = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / (last - first); };
  const double early = mean(losses.begin(), losses.begin() + 5), late = mean(losses.end() - 5, losses.end());
  EXPECT_LT(late, early - 1.0) << "first five " << early << ", last five " << late;
}

// One line naming every rule, exit 1.
void expect_rules(const std::string& args, const std::vector<std::string>& rules) {
  const testing::CommandResult r = run_tessel(args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  for (const std::string& rule : rules) EXPECT_NE(r.output.find(rule), std::string::npos) << rule << ": " << r.output;
}

TEST(Qwen3NextCli, BadConfigurationsListEveryRule) {
  const std::string train = "train --train-iters 1 --eval-iters 0 --micro-batch-size 2 --global-batch-size 4 ";
  expect_rules(train + kBase + "--linear-attention-freq 4 --linear-num-value-heads 5 --rotary-percent 0.3",
               {"--linear-num-value-heads 5 is not a multiple of --linear-num-key-heads 2",
                "RoPE needs an even rotary dimension: int(head dim 32 × --rotary-percent 0.3) = 9",
                "--moe-shared-expert-gate needs a shared expert"});
  // One process asked for TP 4: the layout and the GDN heads, in one message.
  expect_rules(train + kQwen3Next + "--tp 4 --sequence-parallel",
               {"the GDN heads (--linear-num-key-heads 2, --linear-num-value-heads 4) are not divisible by "
                "--tensor-model-parallel-size 4 × --context-parallel-size 1 = 4",
                "world size 1 is not divisible by TP × CP × PP"});
  // CP splits the heads as TP does (Megatron's head all-to-all): 2 key heads over CP 4.
  expect_rules(train + kQwen3Next + "--cp 4",
               {"the GDN heads (--linear-num-key-heads 2, --linear-num-value-heads 4) are not divisible by "
                "--tensor-model-parallel-size 1 × --context-parallel-size 4 = 4",
                "world size 1 is not divisible by TP × CP × PP"});
  expect_rules(train + kBase + "--linear-attention-freq '[1,1,0]'",
               {"--linear-attention-freq \"[1,1,0]\" has 3 entries for 4 layers"});
  expect_rules(train + "--arch llama --linear-attention-freq 4",
               {"--linear-attention-freq 4 needs --experimental-attention-variant gdn"});
  // MTP's layer is built as the last decoder layer: attention; its loss needs a weight.
  expect_rules(train + kBase +
                   "--linear-attention-freq '[1,0,1,1]' --linear-num-value-heads 4 --rotary-percent 0.25 "
                   "--moe-shared-expert-intermediate-size 32 --mtp-num-layers 1 --mtp-loss-scaling-factor 0",
               {"--mtp-loss-scaling-factor 0 must be positive with --mtp-num-layers",
                "--mtp-num-layers builds its layers as the last decoder layer, which --linear-attention-freq "
                "makes Gated DeltaNet (layer 3)"});
}

// --save-hf writes a GDN model in the family it came from (--init-from's config.json), or in the
// one --save-hf-model-type names; the rule for the flag without a GDN model is one line.
TEST(Qwen3NextCli, SaveHfKeepsTheFamilyOrTakesTheOneAskedFor) {
  testing::TestDir dir;
  const std::string init = dir.path("init");
  const testing::CommandResult exported =
      run_tessel("export " + export_flags() + "--hf-model-type qwen3_next --out " + init);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto model_type = [&](const std::string& folder) {
    std::ifstream f(folder + "/config.json");
    return nlohmann::json::parse(f).value("model_type", "");
  };
  const std::string train =
      "train " + kQwen3Next + "--micro-batch-size 2 --global-batch-size 2 --train-iters 1 --eval-iters 0 --init-from " + init;
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"", "qwen3_next"}, {"--save-hf-model-type qwen3_5_moe", "qwen3_5_moe"}}) {
    const std::string out = dir.path("out_" + want);
    const testing::CommandResult r = run_tessel(train + " --save-hf " + out + " " + flag);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(model_type(out), want) << flag;
  }
  expect_rules("train --arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 64 "
               "--seq-length 32 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --eval-iters 0 --save-hf " +
                   dir.path("x") + " --save-hf-model-type qwen3_next",
               {"--save-hf-model-type qwen3_next needs --save-hf and a model with Gated DeltaNet layers"});
}

// A model with MTP trained two steps (so that no norm is still its initial 0) and saved as
// Qwen3-Next, then exported in each family: Qwen3-Next (per-expert experts, MTP's too),
// Qwen3.5 (the decoder under model.language_model., packed experts, MTP's per expert) and
// Qwen3.5's text layout (packed, no prefix), each with every mtp.* tensor. Every folder
// exported again in any family is the bytes of that family's folder: import and export are exact
// inverses in all three layouts.
TEST(Qwen3NextCli, MtpWeightsRoundTripBitwiseInEveryFamily) {
  testing::TestDir dir;
  const std::string fresh = dir.path("fresh"), trained = dir.path("trained");
  const std::string mtp = "--mtp-num-layers 1 ";
  testing::CommandResult r = run_tessel("export " + export_flags() + mtp + "--hf-model-type qwen3_next --out " + fresh);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel("train " + kQwen3Next + mtp + "--mtp-loss-scaling-factor 0.3 --micro-batch-size 2 "
                 "--global-batch-size 2 --train-iters 2 --eval-iters 0 --lr 1e-2 --init-from " + fresh + " --save-hf " + trained);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("mtp_1 loss"), std::string::npos) << r.output;

  struct Family {
    std::string type, decoder_expert, mtp_key;  // a main layer's expert tensor; config.json's MTP count
  };
  const std::vector<Family> families = {
      {"qwen3_next", "model.layers.0.mlp.experts.0.gate_proj.weight", "/num_nextn_predict_layers"},
      {"qwen3_5_moe", "model.language_model.layers.0.mlp.experts.gate_up_proj", "/text_config/mtp_num_hidden_layers"},
      {"qwen3_5_moe_text", "model.layers.0.mlp.experts.gate_up_proj", "/mtp_num_hidden_layers"}};
  const auto bytes = [](const std::string& folder) {
    std::ifstream f(folder + "/model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const auto convert = [&](const std::string& from, const std::string& type, const std::string& out) {
    const testing::CommandResult c = run_tessel("export --init-from " + from + " --hf-model-type " + type + " --out " + out);
    EXPECT_EQ(c.exit_code, 0) << from << " as " << type << ": " << c.output;
  };
  for (const Family& f : families) {
    SCOPED_TRACE(f.type);
    const std::string folder = dir.path(f.type);
    convert(trained, f.type, folder);
    const SafetensorsReader reader(folder + "/model.safetensors");
    EXPECT_TRUE(reader.has(f.decoder_expert));
    // The MTP module: fc [C, 2C] (embedding first), its two norms, one attention + MoE layer,
    // experts per expert in every family, and its final norm; each trained away from 0.
    EXPECT_EQ(reader.tensor("mtp.fc.weight").shape, (Shape{64, 128}));
    for (const std::string name :
         {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight",
          "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight",
          "mtp.layers.0.self_attn.q_proj.weight", "mtp.layers.0.self_attn.q_norm.weight",
          "mtp.layers.0.mlp.gate.weight", "mtp.layers.0.mlp.experts.7.down_proj.weight",
          "mtp.layers.0.mlp.shared_expert.up_proj.weight", "mtp.layers.0.mlp.shared_expert_gate.weight"}) {
      ASSERT_TRUE(reader.has(name)) << name;
      std::vector<float> v(reader.tensor(name).numel());
      reader.read(name, v.data());
      EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](float x) { return x != 0; })) << name;
    }
    std::ifstream config(folder + "/config.json");
    EXPECT_EQ(nlohmann::json::parse(config).at(nlohmann::json::json_pointer(f.mtp_key)), 1);
  }
  EXPECT_EQ(bytes(trained), bytes(dir.path("qwen3_next")));  // --save-hf kept the family
  for (const Family& from : families)
    for (const Family& to : families) {
      const std::string again = dir.path(from.type + "_as_" + to.type);
      convert(dir.path(from.type), to.type, again);
      EXPECT_EQ(bytes(again), bytes(dir.path(to.type))) << from.type << " exported as " << to.type;
    }
}

}  // namespace
}  // namespace tessel
