// The pictures of a real run (train/run_timeline.h) from a timeline made by hand: each send paired
// with the receive posted in the same order on its route, an arrow per pair and a mark per
// collective in the SVG, microbatches from 1 in both files, and nothing outside the canvas.
#include "tessel/train/run_timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "support/svg_render.h"

namespace tessel {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Two stages, two microbatches: stage 0 sends each activation on, stage 1 each gradient back, and
// both all-reduce over DP at the end.
RunTimeline two_stages() {
  RunTimeline t;
  t.lanes = {"rank 0 (pp 0, tp 0, dp 0, cp 0)", "rank 1 (pp 1, tp 0, dp 0, cp 0)"};
  t.first_iteration = t.last_iteration = 3;
  using K = ActionKind;
  t.boxes = {{0, K::Forward, 0, 0, 3, 0, 1},  {0, K::Forward, 0, 1, 3, 1, 2},  {1, K::Forward, 1, 0, 3, 1.2, 2.2},
             {1, K::Backward, 1, 0, 3, 2.2, 4}, {1, K::Forward, 1, 1, 3, 4, 5},  {1, K::Backward, 1, 1, 3, 5, 7},
             {0, K::Backward, 0, 0, 3, 4.2, 6}, {0, K::Backward, 0, 1, 3, 7.2, 9}};
  t.calls = {{0, GroupKind::PP, CommOp::Send, 1, 3, 256, 1, 1},     {0, GroupKind::PP, CommOp::Send, 1, 3, 256, 2, 2},
             {1, GroupKind::PP, CommOp::Recv, 0, 3, 256, 0, 1.2},   {1, GroupKind::PP, CommOp::Recv, 0, 3, 256, 0.5, 4},
             {1, GroupKind::PP, CommOp::Send, 0, 3, 256, 4, 4},     {1, GroupKind::PP, CommOp::Send, 0, 3, 256, 7, 7},
             {0, GroupKind::PP, CommOp::Recv, 1, 3, 256, 2, 4.2},   {0, GroupKind::PP, CommOp::Recv, 1, 3, 256, 2, 7.2},
             {0, GroupKind::DP, CommOp::AllReduce, -1, 3, 4096, 9, 9.5},
             {1, GroupKind::DP, CommOp::AllReduce, -1, 3, 4096, 7, 9.5}};
  return t;
}

TEST(RunTimeline, EachSendPairsWithTheReceiveOfTheSameOrderOnItsRoute) {
  const RunTimeline t = two_stages();
  std::vector<std::pair<size_t, size_t>> pairs;
  for (const RunMessage& m : pair_messages(t)) pairs.push_back({m.send, m.recv});
  std::sort(pairs.begin(), pairs.end());
  EXPECT_EQ(pairs, (std::vector<std::pair<size_t, size_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(RunTimeline, SvgDrawsAnArrowPerMessageAndAMarkPerCollective) {
  const std::string svg = run_timeline_svg(two_stages(), "two stages");
  EXPECT_EQ(count(svg, "<line class='message'"), 4u);
  EXPECT_EQ(count(svg, "<rect class='collective'"), 2u);
  EXPECT_EQ(count(svg, "<rect class='F'"), 4u);
  EXPECT_EQ(count(svg, "<rect class='B'"), 4u);
  EXPECT_NE(svg.find("<title>rank 1 F2 (iteration 3)"), std::string::npos);  // microbatches from 1
  EXPECT_EQ(svg.find("F0"), std::string::npos);
  EXPECT_GT(count(svg, "class='bubble'"), 0u);
  EXPECT_NE(svg.find("rank 0 → rank 1: pp 256 B"), std::string::npos);
  EXPECT_NE(svg.find("dp all_reduce 4.0 KiB"), std::string::npos);

  if (const std::string why = testing::svg_renderer_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tessel_run_timeline_" + std::to_string(getpid()) + ".svg");
  std::ofstream(path) << svg;
  EXPECT_EQ(testing::ink_outside_canvas(path.string()), "");
  std::filesystem::remove(path);
}

TEST(RunTimeline, ChromeTraceNumbersMicrobatchesFromOneAndJoinsEachMessage) {
  const nlohmann::json trace = nlohmann::json::parse(run_timeline_chrome_trace(two_stages(), "test"));
  std::set<int> microbatches;
  int calls = 0, flows = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "s") ++flows;
    if (e.at("ph") != "X") continue;
    if (e.at("cat") == "comm") ++calls;
    else microbatches.insert(e.at("args").at("microbatch").get<int>());
  }
  EXPECT_EQ(microbatches, (std::set<int>{1, 2}));
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(flows, 4);
}

}  // namespace
}  // namespace tessel
