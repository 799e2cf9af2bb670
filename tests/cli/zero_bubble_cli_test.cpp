// `tessel schedule --json` for the zero-bubble schedules (the bubble beside its formula, per rank
// the idle time and peak in flight), per-action costs, and the bad schedule and recompute
// configurations of `tessel schedule` and `tessel train`, every rule in one message; what
// optimizer post-validation did with each step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/run_command.h"

namespace {

using tessel::testing::run_tessel;

// A file of this test process's own in the temporary folder.
std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("tessel_zero_bubble_" + std::to_string(getpid()) + "_" + name);
}

// tessel train on 2 ranks, PP 2, a 4-layer model of hidden 128, 4 microbatches, with `flags`.
tessel::testing::CommandResult train_pp2(const std::string& flags) {
  return tessel::testing::run_command("mpirun --allow-run-as-root --oversubscribe -n 2 " TESSEL_BINARY
                                      " train --pp 2 --num-layers 4 --hidden-size 128 --num-attention-heads 4 "
                                      "--seq-length 64 --micro-batch-size 2 --global-batch-size 8 --threads 1 " +
                                      flags + " 2>&1");
}

nlohmann::json schedule_json(const std::string& args) {
  const auto r = run_tessel("schedule --json " + args);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
  return nlohmann::json::parse(r.output);
}

// PP4, m = 8, T_F = T_I = T_W = 1: the bubble measured by the simulator equals the published
// formula for each schedule, 1F1B's the seed's bubble and the zero-bubble ones counted with
// iterations back to back; ZB-H1 idles a third of 1F1B's; ZB-V not at all; ZB-H1 and ZB-V hold
// no more than 1F1B (ZB-V's slots are half a stage each).
TEST(ZeroBubbleCli, JsonBubbleMatchesTheFormula) {
  double idle_1f1b = 0;
  for (const char* schedule : {"1f1b", "zb-h1", "zb-v", "dualpipev"}) {
    const nlohmann::json j = schedule_json(std::string("--pp 4 --microbatches 8 --schedule ") + schedule);
    const nlohmann::json& formula = j["formula"];
    ASSERT_FALSE(formula["value"].is_null()) << schedule;
    const std::string measures = formula["measures"];
    EXPECT_EQ(measures, std::string(schedule) == "1f1b" ? "bubble" : "back_to_back_bubble") << schedule;
    EXPECT_NEAR(j[measures].get<double>(), formula["value"].get<double>(), 1e-12) << schedule;
    ASSERT_EQ(j["ranks"].size(), 4u);
    double idle = 0;
    int peak = 0;
    for (const nlohmann::json& rank : j["ranks"]) {
      idle = std::max(idle, rank["idle_in_span"].get<double>());
      peak = std::max(peak, rank["peak_in_flight"].get<int>());
      EXPECT_FALSE(rank["actions"].empty());
    }
    const std::string s = schedule;
    if (s == "1f1b") {
      idle_1f1b = idle;
      EXPECT_NEAR(j["bubble"].get<double>(), 3.0 / 11.0, 1e-12);
      EXPECT_EQ(peak, 4);
    }
    if (s == "zb-h1") {
      EXPECT_DOUBLE_EQ(idle, idle_1f1b / 3);
      EXPECT_LE(peak, 4);
    }
    if (s == "zb-v") {
      EXPECT_EQ(j["back_to_back_bubble"].get<double>(), 0.0);
      EXPECT_LE(peak, 2 * 4);
    }
  }
}

// Unequal costs: no published value applies, and the JSON says so; the costs travel with it.
TEST(ZeroBubbleCli, CostsAreTheGivenOnes) {
  const nlohmann::json j = schedule_json(
      "--pp 2 --microbatches 4 --schedule zb-v --forward-cost 2 --backward-input-cost 3 --backward-weight-cost 1");
  EXPECT_TRUE(j["formula"]["value"].is_null());
  EXPECT_EQ(j["costs"]["forward"].get<double>(), 2);
  EXPECT_EQ(j["costs"]["backward_input"].get<double>(), 3);
  EXPECT_EQ(j["costs"]["backward_weight"].get<double>(), 1);
  for (const nlohmann::json& a : j["ranks"][0]["actions"]) {
    const std::string kind = a["kind"];
    const double length = a["end"].get<double>() - a["start"].get<double>();
    EXPECT_EQ(length, kind == "F" ? 2 : kind == "I" ? 3 : 1) << kind;
  }
}

void expect_one_line_error(const std::string& command, const std::vector<std::string>& rules) {
  const auto r = run_tessel(command);
  EXPECT_NE(r.exit_code, 0) << command;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  for (const std::string& rule : rules) EXPECT_NE(r.output.find(rule), std::string::npos) << rule << "\n" << r.output;
}

TEST(ZeroBubbleCli, BadConfigsListEveryRule) {
  expect_one_line_error("schedule --pp 4 --microbatches 4 --schedule dualpipev --vpp 3 --backward-input-cost 0",
                        {"--vpp must be 2 or left out (got 3)", "dualpipev needs at least 2 × --pp = 8 microbatches",
                         "--backward-input-cost must be at least 1"});
  expect_one_line_error("schedule --pp 1 --microbatches 4 --schedule zb-v", {"--schedule zb-v needs --pp 2 or more"});
  expect_one_line_error(
      "train --pp 2 --schedule zb-v --num-layers 3 --recompute-granularity full --recompute-modules mlp "
      "--train-iters 1 --eval-iters 0",
      {"--num-layers 3 does not split into the 2 × --pipeline-model-parallel-size 2 = 4 model chunks",
       "--recompute-granularity full needs --recompute-method", "--recompute-num-layers between 1 and",
       "--recompute-modules needs --recompute-granularity selective"});
  // Two ranks, so that the layout holds and the schedule's rules (which need the microbatch
  // count) are checked: both rules on the one error line.
  const auto r = tessel::testing::run_command(
      "mpirun --allow-run-as-root --oversubscribe -n 2 " TESSEL_BINARY
      " train --pp 2 --schedule dualpipev --num-layers 4 --micro-batch-size 2 --global-batch-size 4 "
      "--recompute-granularity selective --recompute-method block --train-iters 1 --eval-iters 0 2>&1");
  EXPECT_NE(r.exit_code, 0);
  const size_t line = r.output.find("tessel: error: invalid configuration");
  ASSERT_NE(line, std::string::npos) << r.output;
  const std::string message = r.output.substr(line, r.output.find('\n', line) - line);
  EXPECT_NE(message.find("dualpipev needs at least 2 × --pp = 4 microbatches (got --global-batch-size 4 / "
                         "(--micro-batch-size 2 × DP 1) = 2 microbatches)"), std::string::npos) << message;
  EXPECT_NE(message.find("--recompute-method block needs --recompute-granularity full"), std::string::npos) << message;
}

// tessel train's end report gives each pipeline rank its mean time per compute action: F and B
// under 1F1B, F, I and W where the schedule splits the backward.
TEST(ZeroBubbleCli, TrainReportsTheCostOfEachAction) {
  for (const auto& [schedule, kinds] : std::vector<std::pair<std::string, std::string>>{{"1f1b", "FB"}, {"zb-h1", "FIW"}}) {
    const auto r = tessel::testing::run_command(
        "mpirun --allow-run-as-root --oversubscribe -n 2 " TESSEL_BINARY
        " train --pp 2 --schedule " + schedule + " --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
        "--seq-length 16 --micro-batch-size 1 --global-batch-size 4 --train-iters 2 --eval-iters 0 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (int rank = 0; rank < 2; ++rank) {
      const size_t line = r.output.find("pipeline: rank " + std::to_string(rank));
      ASSERT_NE(line, std::string::npos) << r.output;
      const std::string text = r.output.substr(line, r.output.find('\n', line) - line);
      const size_t at = text.find("ms per action ");
      ASSERT_NE(at, std::string::npos) << text;
      std::string seen;  // the kinds listed, each with a positive time
      std::istringstream in(text.substr(at + 14));
      for (std::string kind, ms; in >> kind >> ms;) {
        seen += kind;
        EXPECT_GT(std::stod(ms), 0) << text;
      }
      EXPECT_EQ(seen, kinds) << text;
    }
  }
}

// Optimizer post-validation steps before the norm only after a step the norm left as it was: with
// --clip-grad 3 the first iterations clip (norms about 6.5) and the later ones do not. The counts
// the end report gives follow from the logged norms by that rule: the first step is taken before
// its norm; one the norm changes is redone and, unless it is the last, its next iteration runs
// again to a plain step; plain steps go on until a norm under the threshold.
TEST(ZeroBubbleCli, PostValidationStepsBeforeTheNormAfterAKeptStep) {
  const std::filesystem::path log = temp_file("post_validation.jsonl");
  const auto r = train_pp2("--schedule zb-h1 --train-iters 10 --eval-iters 0 --log-interval 1 --enable-optimizer-post-validation "
                           "--clip-grad 3 --log-json " + log.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> norms;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) norms.push_back(nlohmann::json::parse(line).at("grad_norm"));
  std::filesystem::remove(log);
  ASSERT_EQ(norms.size(), 10u);
  int kept = 0, redone = 0, rerun = 0, after_norm = 0;
  bool before_norm = true;  // iteration i's step is taken before its norm
  for (size_t i = 0; i < norms.size(); ++i) {
    const bool plain = norms[i] <= 3.0;
    if (!before_norm) ++after_norm;
    else if (plain) ++kept;
    else ++redone, rerun += i + 1 < norms.size();
    before_norm = plain;
  }
  ASSERT_GT(redone, 0) << "no norm over 3: the test no longer covers a redone step";
  ASSERT_GT(kept, 0) << "no norm under 3 after: the test no longer covers the return to stepping early";
  const std::string expected = "optimizer post-validation: " + std::to_string(kept) +
                               " steps taken before their gradient norm and kept, " + std::to_string(redone) +
                               " redone (" + std::to_string(rerun) + " iterations run again), " +
                               std::to_string(after_norm) + " taken after the norm";
  EXPECT_NE(r.output.find(expected), std::string::npos) << expected << "\n" << r.output;
}


// tessel train --pipeline-timeline: a Chrome trace of the last iteration with, per rank, one box
// per compute action of each microbatch, none overlapping another on its rank, and across ranks
// the pipeline's dependencies in time (on one host the clocks agree): stage 1's F of a microbatch
// after stage 0's, stage 0's I after stage 1's. A file that cannot be written fails the run.
TEST(ZeroBubbleCli, PipelineTimelineHoldsEveryActionInDependencyOrder) {
  const std::filesystem::path trace = temp_file("timeline.json");
  const std::string run = "mpirun --allow-run-as-root --oversubscribe -n 2 " TESSEL_BINARY
                          " train --pp 2 --schedule zb-h1 --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
                          "--seq-length 16 --micro-batch-size 1 --global-batch-size 4 --train-iters 2 --eval-iters 0 --pipeline-timeline ";
  const auto r = tessel::testing::run_command(run + trace.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline timeline of iteration 2: " + trace.string()), std::string::npos) << r.output;
  std::ifstream in(trace);
  const nlohmann::json json = nlohmann::json::parse(in);
  std::filesystem::remove(trace);
  EXPECT_EQ(json.at("otherData").at("iterations"), nlohmann::json({2, 2}));
  // (rank, kind, microbatch) → [start, end] in µs
  std::map<std::tuple<int, std::string, int>, std::pair<double, double>> box;
  std::map<int, std::vector<std::pair<double, double>>> by_rank;
  for (const nlohmann::json& e : json.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") == "comm") continue;  // the compute boxes, not the calls
    const double ts = e.at("ts"), dur = e.at("dur");
    EXPECT_GT(dur, 0) << e;
    const int rank = e.at("tid"), microbatch = e.at("args").at("microbatch");
    EXPECT_EQ(e.at("name"), e.at("cat").get<std::string>() + std::to_string(microbatch)) << e;
    EXPECT_TRUE(box.emplace(std::tuple{rank, e.at("cat"), microbatch}, std::pair{ts, ts + dur}).second) << e;
    by_rank[rank].emplace_back(ts, ts + dur);
  }
  ASSERT_EQ(box.size(), 2u * 3u * 4u) << json.dump();  // 2 ranks × F, I, W × 4 microbatches
  for (auto& [rank, boxes] : by_rank) {
    std::sort(boxes.begin(), boxes.end());
    for (size_t i = 1; i < boxes.size(); ++i) EXPECT_LE(boxes[i - 1].second, boxes[i].first) << "rank " << rank;
  }
  for (int m = 1; m <= 4; ++m) {  // numbered from 1, as the seed
    EXPECT_LE(box.at({0, "F", m}).second, box.at({1, "F", m}).first) << "microbatch " << m;
    EXPECT_LE(box.at({1, "I", m}).second, box.at({0, "I", m}).first) << "microbatch " << m;
    EXPECT_LE(box.at({0, "I", m}).second, box.at({0, "W", m}).first) << "microbatch " << m;
  }
  const auto bad = tessel::testing::run_command(run + "/nonexistent/dir/trace.json 2>&1");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("--pipeline-timeline /nonexistent/dir/trace.json: cannot write into its folder "
                            "/nonexistent/dir (No such file or directory)"),
            std::string::npos)
      << bad.output;
}

// The end report's idle is the timeline's: each rank's share of the iteration's span over all
// ranks (first action to last, on any rank) it did not compute in, as `tessel schedule` counts
// it; the bubble is their mean. Under 1F1B the last stage idles at the end while the first
// finishes its last backward, which time blocked on receives alone would miss. One counted
// iteration (the second), the one the timeline holds.
TEST(ZeroBubbleCli, ReportedIdleIsTheTimelines) {
  const std::filesystem::path trace = temp_file("idle.json");
  const auto r = train_pp2("--schedule 1f1b --train-iters 2 --eval-iters 0 --pipeline-timeline " + trace.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(trace);
  const nlohmann::json json = nlohmann::json::parse(in);
  std::filesystem::remove(trace);
  double first = 1e300, last = 0;
  std::map<int, double> busy;
  for (const nlohmann::json& e : json.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") == "comm") continue;  // the compute boxes, not the calls
    const double ts = e.at("ts"), dur = e.at("dur");
    first = std::min(first, ts);
    last = std::max(last, ts + dur);
    busy[e.at("tid").get<int>()] += dur;
  }
  ASSERT_EQ(busy.size(), 2u);
  double idle_sum = 0;
  for (const auto& [rank, compute] : busy) {
    const size_t at = r.output.find("pipeline: rank " + std::to_string(rank) + " ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const size_t idle_at = r.output.find("idle ", at);
    ASSERT_NE(idle_at, std::string::npos) << r.output;
    const double reported = std::stod(r.output.substr(idle_at + 5));
    const double from_trace = 100 * (1 - compute / (last - first));
    EXPECT_NEAR(reported, from_trace, 0.1) << "rank " << rank << "\n" << r.output;
    idle_sum += reported;
  }
  // The one bubble: the ranks' idle share of the iteration, as `tessel schedule` and `plan` have it.
  const size_t bubble = r.output.find("pipeline: bubble ");
  ASSERT_NE(bubble, std::string::npos) << r.output;
  EXPECT_NEAR(std::stod(r.output.substr(bubble + 17)), idle_sum / 2, 0.1) << r.output;
}

}  // namespace
