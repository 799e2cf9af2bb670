// The tessel binary as a user meets it: bad input gives one line naming the problem and a
// non-zero exit, never a crash; export, train --init-from, --save-hf and generate work together.
#include <gtest/gtest.h>
#include <unistd.h>

#include "support/run_command.h"
#include "tessel/kernels/kernels.h"
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;



using Result = tessel::testing::CommandResult;
using tessel::testing::run_command;
Result run(const std::string& args) { return tessel::testing::run_tessel(args); }

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tessel_cli_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

const std::string kTiny =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 ";

// One line, non-zero exit (1 or 2, not a signal), and the message mentions `expected`.
void expect_clean_error(const std::string& args, const std::string& expected) {
  Result r = run(args);
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << args << " -> " << r.exit_code << ": " << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << args << " -> " << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(Cli, UnknownFlag) { expect_clean_error("train --no-such-flag 3", "--no-such-flag"); }

// Without a CUDA device (or a build without CUDA), --device cuda says so before anything runs; an
// unknown device is refused by name. (On a GPU machine the first case skips.)
TEST(Cli, DeviceWithoutItsBackendIsAClearError) {
  if (tessel::available_kernels().size() > 1) GTEST_SKIP() << "a CUDA device is visible here";
  expect_clean_error("train --train-iters 1 " + kTiny + "--device cuda --attention-dropout 0", "--device cuda: ");
  expect_clean_error("train " + kTiny + "--device tpu", "--device: tpu not in {cpu,cuda}");
}

// Attention-probability dropout is built for the CPU only: on CUDA (Megatron's default 0.1) it is
// refused up front in one line, before any device is touched; hidden dropout runs there.
TEST(Cli, AttentionDropoutOnCudaIsRefusedInOneLine) {
  expect_clean_error("train " + kTiny + "--device cuda", "--attention-dropout 0.1 is built for the CPU only");
}

TEST(Cli, HeadsNotDividingHiddenListsEveryRule) {
  Result r = run("train --hidden-size 30 --num-attention-heads 4 --global-batch-size 6 "
                 "--micro-batch-size 4 --train-iters 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--hidden-size 30 is not divisible by --num-attention-heads 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--global-batch-size 6 is not divisible by --micro-batch-size 4"), std::string::npos) << r.output;
}

TEST(Cli, MissingAndEmptyDataFile) {
  expect_clean_error("train --train-iters 1 " + kTiny + "--data-path /nonexistent/corpus.txt", "/nonexistent/corpus.txt");
  fs::path dir = temp_dir("empty");
  std::ofstream(dir / "empty.txt");
  expect_clean_error("train --train-iters 1 " + kTiny + "--data-path " + (dir / "empty.txt").string(), "empty.txt");
}

TEST(Cli, BadSafetensorsFiles) {
  fs::path dir = temp_dir("badst");
  Result ok = run("export --out " + dir.string() + " " + kTiny.substr(0, kTiny.find("--micro")));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  fs::path file = dir / "model.safetensors";
  // Truncated: cut the last 100 bytes.
  fs::path trunc = temp_dir("trunc") / "model.safetensors";
  fs::copy_file(file, trunc);
  fs::resize_file(trunc, fs::file_size(trunc) - 100);
  expect_clean_error("train --train-iters 1 " + kTiny + "--init-from " + trunc.string(), "truncated");
  // Wrong shapes: a model of another size, sizes forced by flags (no config.json beside it).
  fs::path other = temp_dir("other");
  ASSERT_EQ(run("export --out " + other.string() + " --num-layers 2 --hidden-size 64 "
                "--num-attention-heads 4 --seq-length 16").exit_code, 0);
  fs::remove(other / "config.json");
  expect_clean_error("train --train-iters 1 " + kTiny + "--init-from " + (other / "model.safetensors").string(),
                     "shape");
  // Wrong names: a llama file for a gpt2 model.
  fs::path llama = temp_dir("llama");
  ASSERT_EQ(run("export --arch llama --out " + llama.string() + " --num-layers 2 --hidden-size 32 "
                "--num-attention-heads 4 --seq-length 16").exit_code, 0);
  fs::remove(llama / "config.json");
  expect_clean_error("train --train-iters 1 " + kTiny + "--init-from " + (llama / "model.safetensors").string(),
                     "unexpected tensor 'model.embed_tokens.weight'");
}

// The figures of each --log-json record that say what the run computed.
std::vector<std::string> trajectory(const fs::path& log) {
  std::vector<std::string> rows;
  std::ifstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    rows.push_back(j["loss"].dump() + " " + j["lr"].dump() + " " + j["grad_norm"].dump());
  }
  return rows;
}

// Megatron's scheduler counts samples whichever flags say so: --train-samples with the _samples
// flags, or --lr-warmup-fraction, is the iteration-based run, bit for bit.
TEST(Cli, SampleBasedTrainingIsTheIterationRun) {
  const fs::path dir = temp_dir("samples");
  const std::string train =
      "train " + kTiny + "--log-interval 1 --eval-iters 0 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine ";
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"iters", "--train-iters 6 --lr-warmup-iters 2 --lr-decay-iters 5"},
      {"samples", "--train-samples 24 --lr-warmup-samples 8 --lr-decay-samples 20"},
      {"fraction", "--train-samples 27 --lr-warmup-fraction 0.4 --lr-decay-samples 20"}};  // 27 / 4: 6
  std::vector<std::vector<std::string>> got;
  for (const auto& [name, flags] : runs) {
    const fs::path log = dir / (name + ".jsonl");
    const Result r = run(train + flags + " --log-json " + log.string());
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
    got.push_back(trajectory(log));
  }
  ASSERT_EQ(got[0].size(), 6u);
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]);
  // The first step runs at the warmup's start, 0; the second at 4 of 8 warmup samples.
  std::ifstream first(dir / "iters.jsonl");
  std::string line;
  std::getline(first, line);
  EXPECT_EQ(nlohmann::json::parse(line)["lr"].get<double>(), 0.0) << line;
  std::getline(first, line);
  EXPECT_FLOAT_EQ(nlohmann::json::parse(line)["lr"].get<float>(), 1.5e-3f) << line;
  expect_clean_error(train + "--train-iters 6 --train-samples 24",
                     "--train-iters with --train-samples: sample-based training takes");
}

// Megatron's step batch-size schedule by samples: thresholds of 64 and 128 tokens of 16 are samples
// 4 and 8, so the batches are 2, 2, 4, 8, 8, 8 (the last from 24 to 32: update_train_iters runs
// until --train-samples 30 are consumed), and the rate of each step is the scheduler's at the
// samples consumed before it (0, 2, 4, 8, 16, 24): warmup to 8 samples, then linear decay to 24.
// Stopped after iteration 3 and resumed, the run goes on as the uninterrupted one, bit for bit.
TEST(Cli, StepBatchSizeSchedule) {
  const fs::path dir = temp_dir("steps");
  const std::string train =
      "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 "
      "--threads 1 --log-interval 1 --eval-iters 0 --step-batch-size-schedule '0:2 64:4 128:8' --train-samples 30 "
      "--lr-warmup-samples 8 --lr-decay-samples 24 --lr 3e-3 --min-lr 3e-4 --lr-decay-style linear ";
  const Result r = run(train + "--rampup-batch-size 16 8 300000 --log-json " + (dir / "full.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--rampup-batch-size is deprecated and ignored"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("global batch 2 from sample 0 (0 tokens), 4 from sample 4 (64 tokens), 8 from sample 8 "
                          "(128 tokens)"),
            std::string::npos)
      << r.output;
  std::vector<int64_t> batches;
  std::vector<float> rates;
  std::ifstream log(dir / "full.jsonl");
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    batches.push_back(j["global_batch_size"].get<int64_t>());
    rates.push_back(j["lr"].get<float>());
  }
  EXPECT_EQ(batches, (std::vector<int64_t>{2, 2, 4, 8, 8, 8}));
  const std::vector<float> want = {0.0f, 7.5e-4f, 1.5e-3f, 3e-3f, 1.65e-3f, 3e-4f};
  ASSERT_EQ(rates.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(rates[i], want[i]) << "iteration " << i + 1;

  const std::string resumable = train + "--save " + (dir / "ckpt").string() + " --load " + (dir / "ckpt").string() +
                                " --log-json " + (dir / "resumed.jsonl").string();
  const Result stopped = run(resumable + " --exit-interval 3");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  const Result resumed = run(resumable);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("after iteration 3"), std::string::npos) << resumed.output;
  EXPECT_EQ(trajectory(dir / "resumed.jsonl"), trajectory(dir / "full.jsonl"));

  const std::string model = "train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 ";
  expect_clean_error(model + "--micro-batch-size 2 --global-batch-size 4 --step-batch-size-schedule 0:4",
                     "--step-batch-size-schedule and --global-batch-size: give one");
  expect_clean_error(model + "--micro-batch-size 2 --train-iters 3 --step-batch-size-schedule 0:6,16:3",
                     "--step-batch-size-schedule: global batch 3 (from sample 1) is not divisible by "
                     "--micro-batch-size 2 × DP 1 = 2; --step-batch-size-schedule: the global batch falls from 6 to "
                     "3 at sample 1; the number of microbatches must not decrease");
  expect_clean_error(model + "--micro-batch-size 2 --step-batch-size-schedule '0:2 1.5:x' --decrease-batch-size-if-needed",
                     "'x' in entry '1.5:x' is not a number");
}

// export -> train --init-from -> --save-hf -> generate: the weights travel, the sizes come from
// config.json, training continues from them and the result samples text.
TEST(Cli, ExportTrainGenerateRoundTrip) {
  fs::path init = temp_dir("init"), trained = temp_dir("trained"), log = temp_dir("log");
  ASSERT_EQ(run("export --arch llama --group-query-attention --num-query-groups 2 --out " + init.string() +
                " --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16").exit_code, 0);
  Result r = run("train --train-iters 3 --eval-iters 0 --log-interval 1 --micro-batch-size 2 --global-batch-size 4 "
                 "--threads 1 --init-from " + init.string() + " --save-hf " + trained.string() +
                 " --log-json " + (log / "log.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream lines(log / "log.jsonl");
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"iteration", "loss", "lr", "grad_norm", "tokens_per_s", "iteration_time_ms"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_NEAR(j["loss"].get<double>(), std::log(256.0), 0.1);
    ++count;
  }
  EXPECT_EQ(count, 3);
  Result g = run("generate --model " + trained.string() + " --prompt 'In the' --max-new-tokens 20 --seed 3");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_GE(g.output.size(), 20u);
  EXPECT_EQ(run("generate --model " + trained.string() + " --prompt 'In the' --max-new-tokens 20 --seed 3").output,
            g.output);
}

}  // namespace

// A JSON model file gives the sizes; a flag given on the command line overrides it.
TEST(Cli, ModelConfigFileAndFlagOverride) {
  fs::path dir = temp_dir("modelcfg");
  std::ofstream(dir / "model.json") << R"({"arch": "llama", "num_layers": 3, "hidden_size": 48,
    "num_attention_heads": 6, "num_query_groups": 3, "ffn_hidden_size": 64, "seq_length": 16})";
  ASSERT_EQ(run("export --out " + (dir / "out").string() + " --model-config " +
                (dir / "model.json").string() + " --num-layers 2").exit_code, 0);
  std::ifstream in(dir / "out" / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["hidden_size"], 48);
  EXPECT_EQ(j["num_key_value_heads"], 3);
  std::ofstream(dir / "bad.json") << R"({"arch": "llama", "hiden_size": 48})";
  expect_clean_error("export --out " + (dir / "x").string() + " --model-config " +
                     (dir / "bad.json").string(), "unknown model key 'hiden_size'");
}

// Llama's attention options: refused for gpt2 by name; an exported Qwen3 folder trains from its
// config.json alone, and a flag that contradicts that config.json is refused.
TEST(Cli, AttentionOptions) {
  expect_clean_error("train --arch gpt2 --add-qkv-bias --train-iters 1",
                     "--add-qkv-bias needs --arch llama");
  fs::path dir = temp_dir("qwen3");
  expect_clean_error("export --arch gpt2 --qk-layernorm --out " + (dir / "x").string(),
                     "--qk-layernorm needs --arch llama");
  ASSERT_EQ(run("export --arch llama --qk-layernorm --out " + dir.string() +
                " --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16").exit_code, 0);
  std::ifstream in(dir / "config.json");
  EXPECT_EQ(nlohmann::json::parse(in)["model_type"], "qwen3");
  Result r = run("train --train-iters 2 --micro-batch-size 2 --global-batch-size 4 --threads 1 "
                 "--init-from " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  expect_clean_error("train --train-iters 1 --add-qkv-bias --init-from " + dir.string(),
                     "--add-qkv-bias true but " + dir.string() + " has false");
  // No Hugging Face type has QK-norm and a shared expert: refused before training, not after.
  expect_clean_error("train --arch llama --qk-layernorm --num-experts 4 "
                     "--moe-shared-expert-intermediate-size 32 --train-iters 1 --save-hf " +
                         (dir / "y").string(),
                     "--save-hf: a --qk-layernorm MoE model exports as qwen3_moe");
}

// A bad parallel configuration under mpirun: every rule in one message, printed by one rank
// only, and the job exits non-zero (every rank returns 1; no rank is left waiting).
TEST(Cli, BadParallelConfigUnderMpirun) {
  Result r = run_command("timeout 60 mpirun --allow-run-as-root --oversubscribe -n 4 -x OMP_NUM_THREADS=1 " +
                     std::string(TESSEL_BINARY) +
                     " train --tp 3 --num-attention-heads 4 --global-batch-size 6 --micro-batch-size 4"
                     " --train-iters 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "timed out";
  const std::string rule = "world size 4 is not divisible by TP";
  const size_t first = r.output.find(rule);
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(rule, first + 1), std::string::npos) << "reported twice:\n" << r.output;
}

// Pipeline rules: layers that do not divide over the stages, microbatches that break the
// interleaved schedule's rules, a malformed layout string — each named in the one message.
TEST(Cli, BadPipelineConfigNamesTheRule) {
  const std::string mpirun = "timeout 60 mpirun --allow-run-as-root --oversubscribe -n 2 -x OMP_NUM_THREADS=1 " +
                             std::string(TESSEL_BINARY) + " train --train-iters 1 --pp 2 ";
  Result layers = run_command(mpirun + "--num-layers 3");
  EXPECT_NE(layers.exit_code, 0);
  EXPECT_NE(layers.output.find("--num-layers 3 is not divisible by --pipeline-model-parallel-size 2"),
            std::string::npos) << layers.output;
  Result interleaved = run_command(mpirun + "--vpp 2 --num-layers 4 --micro-batch-size 16 --global-batch-size 16");
  EXPECT_NE(interleaved.exit_code, 0);
  EXPECT_NE(interleaved.output.find("--global-batch-size 16 / (--micro-batch-size 16 × DP 1) = 1 microbatch is below "
                                    "--pp 2"), std::string::npos) << interleaved.output;
  Result layout = run_command(mpirun + "--num-layers 4 --pipeline-model-parallel-layout 'Ett|ttX'");
  EXPECT_NE(layout.exit_code, 0);
  EXPECT_NE(layout.output.find("unknown layer 'X'"), std::string::npos) << layout.output;
}

// Context parallel: a sequence that does not cut into 2·CP chunks is refused by name.
TEST(Cli, BadContextParallelSequence) {
  Result r = run_command("timeout 60 mpirun --allow-run-as-root --oversubscribe -n 2 -x OMP_NUM_THREADS=1 " +
                         std::string(TESSEL_BINARY) + " train --train-iters 1 --cp 2 --seq-length 30");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--seq-length 30"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2"), std::string::npos);
}
