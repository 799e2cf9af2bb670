// tessel train --pipeline-timeline FILE.svg, a real run drawn: on TP 2 · PP 2 · DP 2 over 8 ranks
// its boxes are the actions each rank executed (microbatches from 1), its arrows and collective
// marks are exactly the sends, receives and collectives --log-json's per-rank counters count, and
// the picture renders with nothing outside its canvas. A .json name keeps the Chrome trace, which
// holds the calls too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/log_json.h"
#include "support/run_command.h"
#include "support/svg_render.h"

namespace {

using tessel::testing::run_command;

const std::string kTinyRun =
    " train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 "
    "--global-batch-size 8 --threads 1 --train-iters 2 --log-interval 1 --data-path " TESSEL_SOURCE_DIR
    "/data/kjv-genesis-esther.txt ";

std::filesystem::path temp_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessel_timeline_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What the log's last record counts on each rank: sends, receives and collective calls.
struct Counted {
  std::map<int, int64_t> sends, recvs, collectives;
};

Counted counted_calls(const nlohmann::json& record) {
  Counted c;
  for (const nlohmann::json& rank : record.at("ranks")) {
    const int r = rank.at("rank").get<int>();
    c.sends[r] += 0, c.recvs[r] += 0, c.collectives[r] += 0;
    if (!rank.contains("comm")) continue;
    for (const auto& [group, ops] : rank.at("comm").items()) {
      for (const auto& [op, counter] : ops.items()) {
        const int64_t calls = counter.at("calls").get<int64_t>();
        (op == "send" ? c.sends : op == "recv" ? c.recvs : c.collectives)[r] += calls;
        int64_t with_peers = 0;  // a send's or receive's peers share its calls between them
        const nlohmann::json peers = counter.value("peers", nlohmann::json::object());
        for (const auto& [peer, per_peer] : peers.items())
          with_peers += per_peer.at("calls").get<int64_t>();
        if (op == "send" || op == "recv") {
          EXPECT_EQ(with_peers, calls) << "rank " << r << " " << group << " " << op;
        }
      }
    }
  }
  return c;
}

TEST(TimelineCli, TpPpDpRunIsDrawnCallForCall) {
  const std::filesystem::path dir = temp_dir("tp_pp_dp");
  const auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 8 " TESSEL_BINARY + kTinyRun +
                             "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --log-json " +
                             (dir / "log.jsonl").string() + " --pipeline-timeline " + (dir / "run.svg").string() +
                             " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The training records (evaluations' follow), each with every rank's communication.
  std::vector<nlohmann::json> records;
  for (const nlohmann::json& record : tessel::testing::log_json_records((dir / "log.jsonl").string()))
    if (!record.contains("split")) records.push_back(record);
  ASSERT_EQ(records.size(), 2u);
  ASSERT_EQ(records.back().at("iteration"), 2);
  ASSERT_EQ(records.back().at("ranks").size(), 8u) << records.back().dump();
  const Counted log = counted_calls(records.back());
  const std::string svg = read(dir / "run.svg");

  // Boxes: each rank ran F and B of its DP rank's 4 microbatches once each (1F1B), numbered 1 to 4.
  std::map<int, std::multiset<std::string>> boxes;
  const std::regex box("<rect class='[FBIW]'[^>]*><title>rank (\\d+) ([FBIW]\\d+) \\(iteration 2\\)");
  for (std::sregex_iterator it(svg.begin(), svg.end(), box), end; it != end; ++it)
    boxes[std::stoi((*it)[1])].insert((*it)[2]);
  const std::multiset<std::string> executed = {"F1", "F2", "F3", "F4", "B1", "B2", "B3", "B4"};
  ASSERT_EQ(boxes.size(), 8u) << svg;
  for (const auto& [rank, names] : boxes) EXPECT_EQ(names, executed) << "rank " << rank;

  Counted drawn;
  for (int rank = 0; rank < 8; ++rank) drawn.sends[rank] = drawn.recvs[rank] = drawn.collectives[rank] = 0;
  const std::regex arrow("<line class='message'[^>]*><title>rank (\\d+) → rank (\\d+): ");
  for (std::sregex_iterator it(svg.begin(), svg.end(), arrow), end; it != end; ++it) {
    ++drawn.sends[std::stoi((*it)[1])];
    ++drawn.recvs[std::stoi((*it)[2])];
  }
  const std::regex mark("<rect class='collective'[^>]*><title>rank (\\d+): ");
  for (std::sregex_iterator it(svg.begin(), svg.end(), mark), end; it != end; ++it)
    ++drawn.collectives[std::stoi((*it)[1])];
  EXPECT_EQ(drawn.sends, log.sends);
  EXPECT_EQ(drawn.recvs, log.recvs);
  EXPECT_EQ(drawn.collectives, log.collectives);
  EXPECT_GT(log.sends.at(0), 0);  // stage 0 sends its activations on
  EXPECT_GT(log.collectives.at(0), 0);  // and all-reduces over TP and DP

  // The layout's picture shaded by the same record's bytes: each box says what its rank moved.
  const auto layout = run_command(TESSEL_BINARY " layout --world 8 --tensor-model-parallel-size 2 "
                                  "--pipeline-model-parallel-size 2 --svg " + (dir / "layout.svg").string() +
                                  " --traffic " + (dir / "log.jsonl").string() + " 2>&1");
  ASSERT_EQ(layout.exit_code, 0) << layout.output;
  const std::string layout_svg = read(dir / "layout.svg");
  EXPECT_NE(layout_svg.find("bytes its rank sent, received and reduced in iteration 2 of"), std::string::npos);
  EXPECT_NE(layout_svg.find(" KiB</text>"), std::string::npos) << layout_svg;

  if (const std::string why = tessel::testing::svg_renderer_missing(); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(tessel::testing::ink_outside_canvas((dir / "run.svg").string()), "");
  EXPECT_EQ(tessel::testing::ink_outside_canvas((dir / "layout.svg").string()), "");
  std::filesystem::remove_all(dir);
}

// --traffic reads a --log-json file: one that is not, or of another world, is refused naming it.
TEST(TimelineCli, TrafficFileThatIsNotALogOfTheWorldIsRefused) {
  const std::filesystem::path dir = temp_dir("traffic");
  std::ofstream(dir / "notes.txt") << "not json\n";
  std::ofstream(dir / "two.jsonl") << R"({"iteration": 1, "ranks": [{"rank": 0}, {"rank": 1}]})" << "\n";
  const std::string layout = TESSEL_BINARY " layout --world 4 --svg " + (dir / "l.svg").string() + " --traffic ";
  const auto text = run_command(layout + (dir / "notes.txt").string() + " 2>&1");
  EXPECT_NE(text.exit_code, 0);
  EXPECT_NE(text.output.find("--traffic " + (dir / "notes.txt").string() + ": line 1 is not JSON"), std::string::npos)
      << text.output;
  const auto two = run_command(layout + (dir / "two.jsonl").string() + " 2>&1");
  EXPECT_NE(two.exit_code, 0);
  EXPECT_NE(two.output.find("its iteration 1 ran on 2 ranks, --world is 4"), std::string::npos) << two.output;
  std::filesystem::remove_all(dir);
}

// A .json name: the Chrome trace, its boxes numbered from 1 and the pipeline's sends and receives
// in it, each send joined to its receive by a flow arrow.
TEST(TimelineCli, ChromeTraceNumbersFromOneAndHoldsTheCalls) {
  const std::filesystem::path dir = temp_dir("trace");
  const auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 2 " TESSEL_BINARY + kTinyRun +
                             "--pipeline-model-parallel-size 2 --pipeline-timeline " + (dir / "trace.json").string() +
                             " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir / "trace.json");
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::set<int> microbatches;
  int sends = 0, recvs = 0, flows = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "s") ++flows;
    if (e.at("ph") != "X") continue;
    if (e.at("cat") == "comm") {
      const std::string op = e.at("args").at("op");
      sends += op == "send";
      recvs += op == "recv";
    } else {
      microbatches.insert(e.at("args").at("microbatch").get<int>());
    }
  }
  EXPECT_EQ(microbatches, (std::set<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(sends, 16);  // 8 activations forward, 8 gradients back
  EXPECT_EQ(recvs, 16);
  EXPECT_EQ(flows, 16);
  std::filesystem::remove_all(dir);
}

}  // namespace
