// `tessel plan` as a user runs it: bad input gets one clear message and a non-zero exit, the
// JSON carries the promised figures, --explain prints formulas, the SVGs are written.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "support/run_command.h"
#include "support/svg_render.h"

namespace tessel {
namespace {

using testing::run_tessel;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void expect_error(const std::string& args, const std::string& message) {
  const testing::CommandResult r = run_tessel("plan " + args);
  EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  EXPECT_EQ(r.output.find("Segmentation"), std::string::npos);
}

TEST(PlanCli, BadInputIsRefusedClearly) {
  expect_error("--num-gpus 0", "--num-gpus must be positive");
  expect_error("--num-gpus -4 --tp 1", "--num-gpus must be positive");
  expect_error("--model llama3-8b --cluster h100 --num-gpus 12", "not a whole number of 8-GPU nodes");
  expect_error("--model gpt-5", "unknown --model preset 'gpt-5'");
  expect_error("--cluster tpu-v9", "unknown --cluster 'tpu-v9'");
  expect_error("--hidden-size -5 --tp 1", "--hidden-size must be positive");
  expect_error("--model llama3-8b --cluster h100 --num-gpus 8 --tp 3", "not divisible");
  expect_error("--model llama3-405b --cluster a100-80gb --num-gpus 8 --global-batch-size 8", "no layout of llama3-405b fits");
  expect_error("--model-config /nonexistent.json", "/nonexistent.json: cannot open");
  expect_error("--tp 1 --recompute-granularity full --recompute-method block", "models full recompute as --recompute-method uniform");
  expect_error("--tp 1 --recompute-method uniform", "need --recompute-granularity full");
  expect_error("--model llama3-8b --cluster h100 --memory-margin 1.5", "--memory-margin is a fraction of the limit in [0, 1)");
  for (const char* gib : {"-1", "inf", "nan"})
    expect_error(std::string("--model llama3-8b --cluster h100 --tp 1 --runtime-memory-gib ") + gib,
                 std::string("--runtime-memory-gib ") + gib + " must be a finite number ≥ 0");
}

// The layout Llama 3 405B ran on 16384 H100s (TP 8, PP 16, VPP 4 of one-layer-short ends): the
// planner predicts it as given, says by how much it is over and what makes it fit; the runtime
// allowance is stated and settable.
TEST(PlanCli, ALayoutOverTheLimitShowsItsMarginAndTheFix) {
  std::string layout = "Et*1";
  for (int i = 1; i < 63; ++i) layout += "|t*2";
  layout += "|t*1L";
  // The layout's 64 entries over PP 16 are VPP 4, as Megatron derives it (no --vpp beside it).
  const std::string args = "plan --model llama3-405b --cluster h100 --num-gpus 16384 --tp 8 --pp 16 "
                           "--pipeline-model-parallel-layout \"" + layout + "\" --micro-batch-size 1 --global-batch-size 2048 "
                           "--use-distributed-optimizer --sequence-parallel";
  const testing::CommandResult r = run_tessel(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text : {"PP16 VPP4", "does NOT fit: over by", "% of 80.0 GiB)", "a runtime allowance of 1.00 GiB",
                           "fits with --recompute-granularity full", "step time"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  const testing::CommandResult less = run_tessel(args + " --runtime-memory-gib 0.25");
  ASSERT_EQ(less.exit_code, 0) << less.output;
  EXPECT_NE(less.output.find("a runtime allowance of 0.25 GiB"), std::string::npos) << less.output;
}

TEST(PlanCli, JsonCarriesTheFigures) {
  const testing::CommandResult r = run_tessel(
      "plan --model gpt3-175b --cluster a100-80gb --num-gpus 64 --tp 8 --pp 8 --vpp 3 --sequence-parallel "
      "--recompute-granularity selective --micro-batch-size 1 --global-batch-size 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_NE(j["flop_convention"].get<std::string>().find("72"), std::string::npos);
  const nlohmann::json& l = j["layouts"][0];
  for (const char* kind : {"first", "middle", "last"}) EXPECT_GT(l["memory_gib"][kind].get<double>(), 10);
  EXPECT_EQ(l["memory_gib"]["per_stage"].size(), 8u);
  for (const char* key : {"step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu"}) EXPECT_GT(l[key].get<double>(), 0) << key;
  EXPECT_LT(l["mfu"].get<double>(), 1);
}

TEST(PlanCli, SearchExplainAndDrawings) {
  const std::string dir = ::testing::TempDir();
  const testing::CommandResult search = run_tessel(
      "plan --model llama3-8b --cluster h100 --num-gpus 16 --global-batch-size 64 --top 3 "
      "--svg-memory " + dir + "mem.svg --svg-time " + dir + "time.svg");
  ASSERT_EQ(search.exit_code, 0) << search.output;
  EXPECT_NE(search.output.find("tok/s/GPU"), std::string::npos) << search.output;
  EXPECT_NE(search.output.find("rejected layouts"), std::string::npos) << search.output;
  for (const char* file : {"mem.svg", "time.svg"}) {
    EXPECT_EQ(read_text(dir + file).rfind("<svg", 0), 0u) << file;
    // The memory drawing of one stage was 298 px wide, its title twice that.
    if (testing::svg_renderer_missing().empty()) {
      EXPECT_EQ(testing::ink_outside_canvas(dir + file), "");
    }
  }
  const testing::CommandResult explain = run_tessel("plan --model llama3-8b --cluster h100 --num-gpus 8 --tp 2 "
                                                    "--micro-batch-size 1 --global-batch-size 32 --explain");
  ASSERT_EQ(explain.exit_code, 0) << explain.output;
  for (const char* formula : {"weights = params × 2 B", "Q, K, V", "e·(q + 2·kv)/t", "MFU = model FLOPs / (step · GPUs · peak)"})
    EXPECT_NE(explain.output.find(formula), std::string::npos) << formula << "\n" << explain.output;
}

// The seed's example 7 model (8 layers over PP 2, 4 microbatches) on a CPU cluster: its pictures
// name it by its size (not "tessel default"), scale bytes and seconds to their magnitude (not
// "0.00 GiB"), tick at round values, explain a CPU's allowance as a CPU's, and give the one
// bubble, the stages' idle share (not "bubble 57 %").
TEST(PlanCli, TeachingSizedDrawings) {
  const std::string dir = ::testing::TempDir();
  const testing::CommandResult r = run_tessel(
      "plan --cluster cpu --num-gpus 2 --pp 2 --num-layers 8 --hidden-size 8 --num-attention-heads 2 --seq-length 4 "
      "--micro-batch-size 4 --global-batch-size 16 --svg-memory " + dir + "small-mem.svg --svg-time " + dir +
      "small-time.svg");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: custom (8 layers, 8 hidden)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the process's baseline resident memory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("CUDA"), std::string::npos) << r.output;
  const size_t bubble = r.output.find("pipeline bubble ");
  ASSERT_NE(bubble, std::string::npos) << r.output;
  // (2 − 1)/(4 + 2 − 1) = 20 % were the stages alike; the last one's head makes the first wait more.
  const double percent = std::stod(r.output.substr(bubble + 16));
  EXPECT_GE(percent, 20) << r.output;
  EXPECT_LT(percent, 50) << r.output;
  for (const char* file : {"small-mem.svg", "small-time.svg"}) {
    const std::string svg = read_text(dir + file);
    EXPECT_NE(svg.find("custom (8 layers, 8 hidden) | "), std::string::npos) << file;
    EXPECT_EQ(svg.find("tessel default"), std::string::npos) << file;
    EXPECT_EQ(svg.find("0.00 GiB"), std::string::npos) << file;
    EXPECT_EQ(svg.find("CUDA"), std::string::npos) << file;
    if (testing::svg_renderer_missing().empty()) {
      EXPECT_EQ(testing::ink_outside_canvas(dir + file), "") << file;
    }
  }
  const std::string memory = read_text(dir + "small-mem.svg");
  // The axis: 0 and round steps (1, 2 or 5 × 10^k) in KiB or MiB, the first above 0 being the step.
  const std::regex tick(">([0-9.]+) (B|KiB|MiB)</text>");
  std::vector<double> ticks;
  for (std::sregex_iterator it(memory.begin(), memory.end(), tick), end; it != end; ++it)
    ticks.push_back(std::stod((*it)[1]));
  ASSERT_GE(ticks.size(), 3u) << memory;
  EXPECT_EQ(ticks[0], 0);
  const double step = ticks[1], magnitude = std::pow(10, std::floor(std::log10(step)));
  EXPECT_TRUE(step == magnitude || step == 2 * magnitude || step == 5 * magnitude) << step;
  for (size_t i = 1; i < ticks.size(); ++i) EXPECT_NEAR(ticks[i], i * step, 1e-9 * step) << memory;
  const std::string time = read_text(dir + "small-time.svg");
  EXPECT_NE(time.find("; pipeline bubble "), std::string::npos) << time;
  EXPECT_EQ(time.find(">bubble "), std::string::npos) << time;
}

// A preset keeps its name; flags that change its depth or width say so.
TEST(PlanCli, ModelNamesSayWhatIsPlanned) {
  const std::string layout = " --cluster h100 --num-gpus 8 --tp 8 --micro-batch-size 1 --global-batch-size 8";
  const testing::CommandResult preset = run_tessel("plan --model llama3-8b" + layout);
  ASSERT_EQ(preset.exit_code, 0) << preset.output;
  EXPECT_NE(preset.output.find("model: llama3-8b |"), std::string::npos) << preset.output;
  const testing::CommandResult resized = run_tessel("plan --model llama3-8b --num-layers 4" + layout);
  ASSERT_EQ(resized.exit_code, 0) << resized.output;
  EXPECT_NE(resized.output.find("model: llama3-8b resized (4 layers, 4096 hidden) |"), std::string::npos)
      << resized.output;
}

// --calibrate measures this machine (GEMM, copy, MPI and a short tessel train) and writes a
// cluster that plans a CPU run: the calibration run's own step and peak RSS come back. A damaged
// cluster file where `--cluster cpu` looks (TESSEL_CLUSTER_FILE) is not read: it measures anew.
TEST(PlanCli, CalibrateWritesAClusterForThisMachine) {
  const std::string file = ::testing::TempDir() + "/calibrated-cpu.json";
  const std::string damaged = ::testing::TempDir() + "/damaged-cpu.json";
  std::ofstream(damaged) << R"({"device": "cpu", "peak_flops": -1})";
  const testing::CommandResult c = testing::run_command("TESSEL_CLUSTER_FILE=" + damaged + " " + TESSEL_BINARY +
                                                        " plan --calibrate --out " + file);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  std::ifstream in(file);
  const nlohmann::json cluster = nlohmann::json::parse(in);
  const nlohmann::json& measured = cluster["measured"];
  for (const char* key : {"train_step_s", "train_peak_rss_mib", "train_gemm_gflops"}) EXPECT_GT(measured[key].get<double>(), 0) << key;
  const testing::CommandResult r = run_tessel("plan --cluster " + file + " --num-gpus 1 --micro-batch-size 8 --global-batch-size 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output);
  const nlohmann::json& l = plan["layouts"][0];
  EXPECT_NEAR(l["step_time_s"].get<double>() / measured["train_step_s"].get<double>(), 1.0, 0.01);
  EXPECT_NEAR(l["memory_gib"]["per_stage"][0]["total_gib"].get<double>() * 1024 / measured["train_peak_rss_mib"].get<double>(), 1.0, 0.01);
}

}  // namespace
}  // namespace tessel
