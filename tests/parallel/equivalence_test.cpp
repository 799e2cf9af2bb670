// The equivalence suite (DESIGN invariant 1): every parallel layout trains the same model on the
// same data as one process, and must follow the same trajectory — each iteration's loss within
// 1e-4 relative (the first within 1e-6) and the final weights within 1e-4 — for both
// architectures. Each case runs `tessel train` under mpirun (with a time limit: nothing may hang)
// and compares its --log-json and --save-hf output with the single process's. Most cases train on
// the bundled text's bytes; the real-data cases on a blend of two preprocessed datasets with a
// trained BPE tokenizer, validation and test losses compared too, and with packed documents.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/run_command.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

struct Layout {
  const char* name;
  int ranks;
  const char* flags;
  bool odd_model = false;  // a parameter count that no DP size divides evenly
  int layers = 2;
  const char* model_extra = "";  // flags for the reference too (the MoE settings, the batch)
  bool real_data = false;  // the blend of preprocessed datasets (real_data_flags), with evaluation
  double weight_tolerance = 1e-4;  // the final weights' largest difference
};

// What a case runs, for test listings and failure messages.
void PrintTo(const Layout& layout, std::ostream* os) {
  *os << layout.name << ": " << layout.ranks << " ranks, " << layout.layers << " layers"
      << (layout.odd_model ? ", odd parameter count" : "") << ", flags \"" << layout.flags << "\"";
  if (*layout.model_extra != '\0') *os << ", model \"" << layout.model_extra << "\"";
  if (layout.real_data) *os << ", preprocessed blend";
}

// Small enough for CI's two cores, large enough that every split is real: 8 heads (4 query
// groups for llama) split over TP up to 4, 2 layers, a byte vocabulary.
std::string model_flags(const std::string& arch, bool odd, int layers) {
  if (!odd) {
    return "--arch " + arch + " --num-layers " + std::to_string(layers) +
           " --hidden-size 64 --num-attention-heads 8 " +
           "--ffn-hidden-size 128 " + (arch == "llama" ? "--num-query-groups 4 " : "");
  }
  // gpt2: 63 · 33 positions makes the count odd; llama (even head dim for RoPE): hidden 66 = 2 ·
  // 33 makes it 2 mod 4. Llama's case is grouped-query attention with a single kv head.
  return arch == "gpt2" ? "--arch gpt2 --num-layers 2 --hidden-size 63 --num-attention-heads 7 "
                          "--ffn-hidden-size 128 --max-position-embeddings 33 "
                        : "--arch llama --num-layers 2 --hidden-size 66 --num-attention-heads 3 "
                          "--num-query-groups 1 --ffn-hidden-size 128 ";
}

// The microbatch size is the layout's (default 2): the trajectory must not depend on it.
const char* kTraining =
    "--seq-length 32 --train-iters 10 "
    "--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 2 --lr-decay-style cosine --log-interval 1 "
    "--seed 11 --threads 1 ";

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::string> evaluations;  // "split@iteration" of each evaluation, in order
  std::vector<double> evaluation_losses;
  fs::path weights;
};

fs::path work_dir() {
  fs::path dir = fs::temp_directory_path() / ("tessel_equivalence_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

void run_or_fail(const std::string& cmd) {
  const testing::CommandResult result = testing::run_command("timeout 120 " + cmd);
  if (result.exit_code != 0) throw std::runtime_error(cmd + "\n" + result.output);
}

// Made once per test process: a byte-level BPE tokenizer of 512 tokens trained on the bundled
// corpus, the corpus preprocessed (paragraphs, an eod after each) and a JSONL of its first 3,000
// lines preprocessed (one document per line), blended 0.7 / 0.3 and split 90,6,4. Validation
// every 5 iterations, 2 batches each; the test split's 2 batches at the end.
const std::string& real_data_flags() {
  static const std::string flags = [] {
    const fs::path dir = work_dir() / "data";
    fs::create_directories(dir);
    const std::string tessel = TESSEL_BINARY,
                      corpus = TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt";
    run_or_fail(tessel + " tokenizer train --input " + corpus +
                " --vocab-size 512 --model-type byte-bpe --output " + (dir / "tok").string());
    const std::string tokenizer =
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model " + (dir / "tok").string();
    std::ifstream in(corpus);
    std::ofstream jsonl(dir / "lines.jsonl");
    std::string line;
    for (int i = 0; i < 3000 && std::getline(in, line); ++i)
      jsonl << nlohmann::json{{"text", line + "\n"}}.dump() << "\n";
    jsonl.close();
    run_or_fail(tessel + " preprocess --input " + corpus + " --output-prefix " +
                (dir / "corpus").string() + " --append-eod " + tokenizer);
    run_or_fail(tessel + " preprocess --input " + (dir / "lines.jsonl").string() +
                " --json-keys text --output-prefix " + (dir / "lines").string() + " --append-eod " +
                tokenizer);
    return tokenizer + " --vocab-size 512 --data-path 0.7 " +
           (dir / "corpus_text_document").string() + " 0.3 " +
           (dir / "lines_text_document").string() +
           " --split 90,6,4 --eval-interval 5 --eval-iters 2";
  }();
  return flags;
}

// Runs tessel on `ranks` processes (1: no mpirun) and reads what it wrote.
TrainRun run_tessel(const std::string& arch, const Layout& layout, const std::string& name,
                    int ranks, const std::string& flags) {
  const fs::path dir = work_dir() / (arch + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string train =
      std::string(TESSEL_BINARY) + " train " + model_flags(arch, layout.odd_model, layout.layers) +
      layout.model_extra + " " + kTraining + flags +
      (std::string(layout.model_extra).find("--global-batch-size") == std::string::npos
           ? " --global-batch-size 8"
           : "") +
      (layout.real_data ? " " + real_data_flags() + " --data-cache-path " + (dir / "cache").string()
                        : std::string()) +
      " --log-json " + (dir / "log.jsonl").string() + " --save-hf " + (dir / "model").string();
  const std::string cmd = ranks == 1
                              ? "timeout 120 " + train
                              : "timeout 240 mpirun --allow-run-as-root --oversubscribe -n " +
                                    std::to_string(ranks) + " -x OMP_NUM_THREADS=1 " + train;
  const testing::CommandResult result = testing::run_command(cmd);
  EXPECT_EQ(result.exit_code, 0) << cmd << "\n" << result.output;
  TrainRun r;
  std::ifstream log(dir / "log.jsonl");
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("split")) {
      r.evaluations.push_back(j["split"].get<std::string>() + "@" +
                              std::to_string(j["iteration"].get<int64_t>()));
      r.evaluation_losses.push_back(j["loss"].get<double>());
    } else {
      r.losses.push_back(j["loss"].get<double>());
    }
  }
  r.weights = dir / "model" / "model.safetensors";
  return r;
}

// The reference, run afresh for each case so that cases can run side by side.
TrainRun single_process(const std::string& arch, const Layout& layout) {
  return run_tessel(arch, layout, std::string(layout.name) + "_single", 1, "--micro-batch-size 2");
}

class Equivalence : public ::testing::TestWithParam<std::tuple<std::string, Layout>> {};

TEST_P(Equivalence, FollowsTheSingleProcess) {
  const auto& [arch, layout] = GetParam();
  const TrainRun want = single_process(arch, layout);
  ASSERT_EQ(want.losses.size(), 10u);
  std::string flags = layout.flags;
  if (flags.find("--micro-batch-size") == std::string::npos) flags += " --micro-batch-size 2";
  const TrainRun got = run_tessel(arch, layout, layout.name, layout.ranks, flags);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    const double rel = std::abs(got.losses[i] - want.losses[i]) / want.losses[i];
    EXPECT_LT(rel, i == 0 ? 1e-6 : 1e-4)
        << "iteration " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i];
  }
  // Forward only, through the same layout: the same losses.
  EXPECT_EQ(got.evaluations, want.evaluations);
  if (layout.real_data)  // as Megatron: at each interval, again after training, then the test split
    EXPECT_EQ(want.evaluations,
              (std::vector<std::string>{"valid@5", "valid@10", "valid@10", "test@10"}));
  for (size_t i = 0; i < std::min(want.evaluations.size(), got.evaluations.size()); ++i) {
    const double rel =
        std::abs(got.evaluation_losses[i] - want.evaluation_losses[i]) / want.evaluation_losses[i];
    EXPECT_LT(rel, 1e-4) << want.evaluations[i] << ": " << got.evaluation_losses[i] << " vs "
                         << want.evaluation_losses[i];
  }
  const SafetensorsReader a(want.weights.string()), b(got.weights.string());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const SafetensorsTensor& t : a.tensors()) {
    ASSERT_TRUE(b.has(t.name)) << t.name;
    std::vector<float> x(t.numel()), y(t.numel());
    a.read(t.name, x.data());
    b.read(t.name, y.data());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])));
    EXPECT_LT(worst, layout.weight_tolerance) << t.name;
  }
}

const Layout kLayouts[] = {
    {"dp2", 2, ""},
    {"tp2", 2, "--tp 2"},
    {"tp4", 4, "--tp 4"},
    {"tp2_sp", 2, "--tp 2 --sequence-parallel"},
    {"tp2_dp2", 4, "--tp 2"},
    {"dp2_distopt", 2, "--use-distributed-optimizer"},
    // Uneven DP slices (padding in every bucket) and small buckets whose reductions start while
    // the backward pass goes on.
    {"dp4_distopt_odd", 4,
     "--use-distributed-optimizer --ddp-bucket-size 5000 --overlap-grad-reduce", true},
    {"dp2_small_buckets", 2, "--ddp-bucket-size 3000 --overlap-grad-reduce"},
    {"dp2_distopt_small_buckets", 2, "--use-distributed-optimizer --ddp-bucket-size 3000"},
    // Pipeline: 1F1B, interleaved virtual stages, GPipe, an uneven split, all axes at once. GPT-2
    // ties its LM head to the embedding across the first and last stages.
    {"pp2", 2, "--pp 2"},
    {"pp4", 4, "--pp 4", false, 4},
    {"pp2_vpp2", 2, "--pp 2 --vpp 2", false, 4},
    {"pp4_vpp2_8mb", 4, "--pp 4 --vpp 2 --micro-batch-size 1", false, 8},
    {"pp2_gpipe", 2, "--pp 2 --schedule gpipe", false, 4},
    {"pp2_uneven_7", 2, "--pp 2 --decoder-first-pipeline-num-layers 3", false, 7},
    {"tp2_pp2_dp2", 8, "--tp 2 --pp 2", false, 4},
    // Context parallel: every sequence's positions split over CP (ring attention), with the
    // other axes, and the all-gather variant.
    {"cp2", 2, "--cp 2"},
    {"cp4", 4, "--cp 4"},
    {"cp2_allgather", 2, "--cp 2 --cp-comm-type all-gather"},
    {"cp2_tp2", 4, "--cp 2 --tp 2"},
    {"cp2_dp2", 4, "--cp 2"},
    {"cp2_pp2", 4, "--cp 2 --pp 2", false, 4},
};

// Real data: the preprocessed blend with its tokenizer under each axis, and packed documents
// (positions restart and attention stops at each eod, no loss on the eod's target) split over
// TP (with sequence parallel), CP (the ring and the all-gather) and PP.
const char* kPacked = "--reset-position-ids --reset-attention-mask --eod-mask-loss";
const Layout kRealDataLayouts[] = {
    {"data_dp2", 2, "", false, 2, "", true},
    {"data_tp2", 2, "--tp 2", false, 2, "", true},
    {"data_pp2", 2, "--pp 2", false, 4, "", true},
    {"data_cp2", 2, "--cp 2", false, 2, "", true},
    {"packed_tp2", 2, "--tp 2", false, 2, kPacked, true},
    {"packed_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 2, kPacked, true},
    {"packed_cp2", 2, "--cp 2", false, 2, kPacked, true},
    {"packed_cp2_allgather", 2, "--cp 2 --cp-comm-type all-gather", false, 2, kPacked, true},
    {"packed_pp2_dp2", 4, "--pp 2", false, 4, kPacked, true},
};

INSTANTIATE_TEST_SUITE_P(RealData, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::ValuesIn(kRealDataLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

INSTANTIATE_TEST_SUITE_P(Layouts, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::ValuesIn(kLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

// Zero-bubble schedules, each on PP2 and PP4, alone, with TP2 and with DP2 (the DP2 ones with
// optimizer post-validation, which at the default --clip-grad 1 undoes and redoes the first step
// and takes the plain step after); post-validation where clipping triggers only in the first
// iterations (--clip-grad 2: it steps before the norm again once one is under 2); MoE
// under ZB-V; recompute (full uniform and block, selective) under 1F1B, interleaved and ZB-V,
// and selective with TP, SP and CP. A V holds 2·PP model chunks; DualPipeV needs 2·PP
// microbatches per DP rank.
#define TESSEL_POST_VALIDATION " --enable-optimizer-post-validation"
#define TESSEL_FULL_UNIFORM " --recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
#define TESSEL_FULL_BLOCK " --recompute-granularity full --recompute-method block --recompute-num-layers 1"
#define TESSEL_SELECTIVE " --recompute-granularity selective --recompute-modules core_attn layernorm mlp"
const Layout kScheduleLayouts[] = {
    {"pp2_zbh1", 2, "--pp 2 --schedule zb-h1", false, 4},
    {"pp4_zbh1", 4, "--pp 4 --schedule zb-h1 --micro-batch-size 1", false, 4},
    {"tp2_pp2_zbh1", 4, "--tp 2 --pp 2 --schedule zb-h1", false, 4},
    {"tp2_pp4_zbh1", 8, "--tp 2 --pp 4 --schedule zb-h1 --micro-batch-size 1", false, 4},
    {"dp2_pp2_zbh1", 4, "--pp 2 --schedule zb-h1" TESSEL_POST_VALIDATION, false, 4},
    {"dp2_pp4_zbh1", 8, "--pp 4 --schedule zb-h1 --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 4},
    {"pp2_zbv", 2, "--pp 2 --schedule zb-v", false, 4},
    {"pp4_zbv", 4, "--pp 4 --schedule zb-v --micro-batch-size 1", false, 8},
    {"tp2_pp2_zbv", 4, "--tp 2 --pp 2 --schedule zb-v", false, 4},
    {"tp2_pp4_zbv", 8, "--tp 2 --pp 4 --schedule zb-v --micro-batch-size 1", false, 8},
    {"dp2_pp2_zbv", 4, "--pp 2 --schedule zb-v" TESSEL_POST_VALIDATION, false, 4},
    {"dp2_pp4_zbv", 8, "--pp 4 --schedule zb-v --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 8},
    {"pp2_dualpipev", 2, "--pp 2 --schedule dualpipev --micro-batch-size 1", false, 4},
    {"pp4_dualpipev", 4, "--pp 4 --schedule dualpipev --micro-batch-size 1", false, 8},
    {"tp2_pp2_dualpipev", 4, "--tp 2 --pp 2 --schedule dualpipev --micro-batch-size 1", false, 4},
    {"tp2_pp4_dualpipev", 8, "--tp 2 --pp 4 --schedule dualpipev --micro-batch-size 1", false, 8},
    {"dp2_pp2_dualpipev", 4, "--pp 2 --schedule dualpipev --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 4},
    {"dp2_pp4_dualpipev", 8, "--pp 4 --schedule dualpipev --micro-batch-size 1" TESSEL_POST_VALIDATION, false, 8,
     "--global-batch-size 16"},
    {"pp2_zbv_post_validation_clip2", 2, "--pp 2 --schedule zb-v" TESSEL_POST_VALIDATION, false, 4, "--clip-grad 2"},
    {"pp2_recompute_uniform", 2, "--pp 2" TESSEL_FULL_UNIFORM, false, 4},
    {"pp2_recompute_block", 2, "--pp 2" TESSEL_FULL_BLOCK, false, 4},
    {"pp2_recompute_selective", 2, "--pp 2" TESSEL_SELECTIVE, false, 4},
    {"pp2_vpp2_recompute_uniform", 2, "--pp 2 --vpp 2" TESSEL_FULL_UNIFORM, false, 8},
    {"pp2_vpp2_recompute_block", 2, "--pp 2 --vpp 2" TESSEL_FULL_BLOCK, false, 8},
    {"pp2_vpp2_recompute_selective", 2, "--pp 2 --vpp 2 --recompute-granularity selective", false, 8},
    {"pp2_zbv_recompute_uniform", 2, "--pp 2 --schedule zb-v" TESSEL_FULL_UNIFORM, false, 8},
    {"pp2_zbv_recompute_block", 2, "--pp 2 --schedule zb-v" TESSEL_FULL_BLOCK, false, 8},
    {"pp2_zbv_recompute_selective", 2, "--pp 2 --schedule zb-v" TESSEL_SELECTIVE, false, 8},
    {"tp2_sp_cp2_recompute_selective", 4, "--tp 2 --sequence-parallel --cp 2" TESSEL_SELECTIVE},
};

INSTANTIATE_TEST_SUITE_P(Schedules, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::ValuesIn(kScheduleLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

// bf16 mixed precision: the layouts under --bf16 follow the single process's --bf16 run, the
// losses within the suite's tolerance. The rounding is elementwise, so a split GEMM rounds the
// same operands, but where a layout regroups an fp32 sum (TP's partial products, PP's tied
// embedding gradient) an element that lands on the other side of a bf16 rounding boundary moves
// by one bf16 step in the next GEMM: the final weights agree within 2e-3 (fp32: 1e-4).
constexpr double kBf16WeightTolerance = 2e-3;
const Layout kBf16Layouts[] = {
    {"bf16_dp2", 2, "", false, 2, "--bf16", false, kBf16WeightTolerance},
    {"bf16_tp2", 2, "--tp 2", false, 2, "--bf16", false, kBf16WeightTolerance},
    {"bf16_pp2", 2, "--pp 2", false, 4, "--bf16", false, kBf16WeightTolerance},
};

INSTANTIATE_TEST_SUITE_P(Bf16, Equivalence,
                         ::testing::Combine(::testing::Values("gpt2"), ::testing::ValuesIn(kBf16Layouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// --bf16 against fp32 from the same initial weights on the same data: every iteration's loss
// within 5e-3 relative (bf16 keeps 8 significant bits: each GEMM operand moves by up to 2^-9;
// measured: 7e-5 for gpt2, 1.3e-4 for llama), yet not the fp32 trajectory itself (the rounding is
// on). One process, 10 iterations.
TEST(Bf16Equivalence, StaysWithinBf16OfFp32) {
  for (const char* arch : {"gpt2", "llama"}) {
    SCOPED_TRACE(arch);
    const char* flags = "--micro-batch-size 2";
    const TrainRun fp32 = run_tessel(arch, Layout{"fp32", 1, ""}, "fp32_reference", 1, flags);
    const TrainRun bf16 =
        run_tessel(arch, Layout{"bf16", 1, "", false, 2, "--bf16"}, "bf16_single", 1, flags);
    ASSERT_EQ(fp32.losses.size(), 10u);
    ASSERT_EQ(bf16.losses.size(), fp32.losses.size());
    double furthest = 0;
    for (size_t i = 0; i < fp32.losses.size(); ++i) {
      const double rel = std::abs(bf16.losses[i] - fp32.losses[i]) / fp32.losses[i];
      EXPECT_LT(rel, 5e-3) << "iteration " << i + 1 << ": " << bf16.losses[i] << " vs "
                           << fp32.losses[i];
      furthest = std::max(furthest, rel);
    }
    EXPECT_GT(furthest, 1e-6) << "--bf16 follows fp32 exactly: no rounding happened";
  }
}

// Llama's attention options (Qwen's q/k/v biases and QK-norm) under tensor parallelism: the biases
// split with their weights' output rows, the QK-norm weights replicated with gradients summed over
// TP — by the model without sequence parallel, by the trainer with it.
const char* kAttentionOptions = "--add-qkv-bias --qk-layernorm";
const Layout kAttentionOptionLayouts[] = {
    {"qkv_bias_qk_layernorm_tp2", 2, "--tp 2", false, 2, kAttentionOptions},
    {"qkv_bias_qk_layernorm_tp2_sp", 2, "--tp 2 --sequence-parallel", false, 2, kAttentionOptions},
};

INSTANTIATE_TEST_SUITE_P(AttentionOptions, Equivalence,
                         ::testing::Combine(::testing::Values("llama"),
                                            ::testing::ValuesIn(kAttentionOptionLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// Mixture of Experts (Llama-style experts): 8 experts, top-2, load-balancing and z losses, split
// over EP — with DP, with PP, every other layer dense, a shared expert, a capacity that drops,
// with TP (sequence parallel) and whole experts (ETP 1) or experts split over TP (ETP 2).
#define TESSEL_MOE_FLAGS \
  "--num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
const char* kMoe = TESSEL_MOE_FLAGS;
const char* kMoeShared = TESSEL_MOE_FLAGS " --moe-shared-expert-intermediate-size 64";
const char* kMoeCapacity =
    "--num-experts 8 --moe-router-topk 2 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff "
    "0.01";
const char* kMoeCapacityPadded =
    "--num-experts 8 --moe-router-topk 2 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff "
    "0.01 "
    "--moe-pad-expert-input-to-capacity";

const Layout kMoeLayouts[] = {
    {"moe_ep2", 2, "--ep 2", false, 2, kMoe},
    {"moe_ep4", 4, "--ep 4", false, 2, kMoe},
    {"moe_ep2_dp2", 4, "--ep 2", false, 2, kMoe},
    {"moe_ep2_pp2", 4, "--ep 2 --pp 2", false, 2, kMoe},
    {"moe_ep2_distopt", 2, "--ep 2 --use-distributed-optimizer", false, 2, kMoe},
    {"moe_mixed_ep2", 2, "--ep 2", false, 4,
     "--num-experts 8 --moe-router-topk 2 --moe-layer-freq [1,0,1,0] --moe-aux-loss-coeff 0.01"},
    {"moe_shared_ep2", 2, "--ep 2", false, 2,
     "--num-experts 8 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64 "
     "--moe-aux-loss-coeff 0.01"},
    {"moe_capacity_ep2", 2, "--ep 2", false, 2, kMoeCapacity},
    // The rows split over TP (sequence parallel) or CP: the drop still sees the whole microbatch.
    {"moe_capacity_padded_ep2_tp2", 4, "--ep 2 --tp 2 --sequence-parallel", false, 2,
     kMoeCapacityPadded},
    {"moe_capacity_cp2", 2, "--cp 2", false, 2, kMoeCapacity},
    {"moe_ep2_tp2_etp1", 4, "--ep 2 --tp 2 --sequence-parallel --etp 1", false, 2, kMoe},
    {"moe_shared_ep2_tp2_etp2", 4, "--ep 2 --tp 2 --sequence-parallel --etp 2", false, 2, kMoeShared},
    {"moe_ep2_tp2_etp2_distopt", 4,
     "--ep 2 --tp 2 --sequence-parallel --etp 2 --use-distributed-optimizer", false, 2, kMoe},
    // Every axis at once: 8 ranks = TP2 × PP2 × DP2, EP2 carved out of DP, experts split over ETP.
    {"moe_shared_pp2_ep2_tp2", 8, "--pp 2 --ep 2 --tp 2 --sequence-parallel", false, 2, kMoeShared},
    // Under ZB-V (EP2 × PP2, the V's four model chunks a layer each), and recomputed: the whole
    // layer under full recompute; its experts' activations, the shared expert and the norms
    // selectively.
    {"moe_ep2_pp2_zbv", 4, "--ep 2 --pp 2 --schedule zb-v", false, 4, kMoe},
    {"moe_ep2_pp2_zbv_recompute_uniform", 4, "--ep 2 --pp 2 --schedule zb-v --recompute-granularity full "
     "--recompute-method uniform --recompute-num-layers 1", false, 4, kMoeShared},
    {"moe_shared_ep2_recompute_selective", 2, "--ep 2 --recompute-granularity selective --recompute-modules "
     "moe_act shared_experts layernorm core_attn", false, 2, kMoeShared},
    {"moe_ep2_recompute_moe", 2, "--ep 2 --recompute-granularity selective --recompute-modules moe", false, 2,
     kMoe},
};

INSTANTIATE_TEST_SUITE_P(Moe, Equivalence,
                         ::testing::Combine(::testing::Values("llama"), ::testing::ValuesIn(kMoeLayouts)),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

}  // namespace
}  // namespace tessel
