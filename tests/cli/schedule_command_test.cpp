// `tessel schedule`: the seed's example-8 tables, the interleaved table against the simulator,
// the SVG drawing and the errors.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/run_command.h"
#include "support/schedules.h"
#include "support/svg_render.h"
#include "tessel/core/svg.h"

namespace {

using tessel::ScheduleConfig;
using tessel::ScheduleKind;
using tessel::testing::config;
using tessel::testing::run;



using Result = tessel::testing::CommandResult;

Result tessel_schedule(const std::string& args) { return tessel::testing::run_tessel("schedule " + args); }

// The printed table as cells[rank]["T3"], joining the blocks a long table wraps into.
std::map<int, std::map<std::string, std::string>> parse_table(const std::string& output) {
  std::map<int, std::map<std::string, std::string>> cells;
  std::vector<std::string> header;
  std::istringstream lines(output);
  std::string line;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    if (w[0].size() > 1 && w[0][0] == 'T' && digit(w[0][1])) {
      header = w;  // "T1 T2 …" or, in a later block, "T21 T22 …"
    } else if (w[0] == "rank" && w.size() >= 2 && digit(w[1][0])) {
      for (size_t i = 2; i < w.size() && i - 2 < header.size(); ++i) cells[std::stoi(w[1])][header[i - 2]] = w[i];
    } else if (w[0] == "rank") {
      header.clear();  // the statistics table follows
    }
  }
  return cells;
}

void expect_row(const std::map<std::string, std::string>& row, const std::vector<std::string>& want,
                const std::string& what) {
  for (size_t t = 0; t < want.size(); ++t) {
    std::string col = "T";  // (not "T" + to_string: GCC 12 warns falsely on that)
    col += std::to_string(t + 1);
    auto it = row.find(col);
    // Trailing idle cells are printed too; a missing one is a wrong table.
    ASSERT_NE(it, row.end()) << what << " has no " << col;
    EXPECT_EQ(it->second, want[t]) << what << " at " << col;
  }
  EXPECT_EQ(row.size(), want.size()) << what;
}

// Seed example 8 (九/十): PP 2, 4 microbatches, forward only — T1..T5 with rank 1 idle at T1 and
// rank 0 idle at T5.
TEST(ScheduleCli, SeedExample8ForwardTable) {
  Result r = tessel_schedule("--pp 2 --microbatches 4 --schedule gpipe --forward-only");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto cells = parse_table(r.output);
  expect_row(cells[0], {"F1", "F2", "F3", "F4", "·"}, "rank 0");
  expect_row(cells[1], {"·", "F1", "F2", "F3", "F4"}, "rank 1");
  // The bubble is the seed's: 2 idle cells of 10. Megatron's paper's idle over compute is named so.
  EXPECT_NE(r.output.find("measured: idle ÷ (ranks × makespan) = 2 ÷ (2 × 5) = 0.2\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("formula:  (p − 1)/(m + p − 1) = (2 − 1)/(4 + 2 − 1) = 0.2\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("divides the same idle time by the compute time instead: (p − 1)/m = 0.25"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iteration bubble"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bubble/ideal"), std::string::npos) << r.output;
}

// The same forward table opens the full GPipe iteration; with backward cost 1 the backwards
// mirror it (rank 0 waits for rank 1's first backward).
TEST(ScheduleCli, SeedExample8GpipeFullTable) {
  Result r = tessel_schedule("--pp 2 --microbatches 4 --schedule gpipe --backward-cost 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto cells = parse_table(r.output);
  expect_row(cells[0], {"F1", "F2", "F3", "F4", "·", "·", "B1", "B2", "B3", "B4"}, "rank 0");
  expect_row(cells[1], {"·", "F1", "F2", "F3", "F4", "B1", "B2", "B3", "B4", "·"}, "rank 1");
  EXPECT_NE(r.output.find("= 4 ÷ (2 × 10) = 0.2\n"), std::string::npos) << r.output;
}

// 1F1B with equal costs: rank 0 warms up with one forward, then alternates.
TEST(ScheduleCli, SeedExample8OneFOneBTable) {
  Result r = tessel_schedule("--pp 2 --microbatches 4 --forward-cost 1 --backward-cost 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto cells = parse_table(r.output);
  expect_row(cells[0], {"F1", "F2", "·", "B1", "F3", "B2", "F4", "B3", "·", "B4"}, "rank 0");
  expect_row(cells[1], {"·", "F1", "B1", "F2", "B2", "F3", "B3", "F4", "B4", "·"}, "rank 1");
  EXPECT_NE(r.output.find("1f1b: pp 2, 4 microbatches"), std::string::npos) << r.output;
}

// The printed table is the simulator's time line, wrapped into blocks, with chunk suffixes.
TEST(ScheduleCli, InterleavedTableIsTheSimulation) {
  Result r = tessel_schedule("--pp 4 --microbatches 8 --vpp 2 --columns 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ScheduleConfig c = config(ScheduleKind::Interleaved, 4, 8, 2);
  tessel::Simulation sim = run(c, 1, 2);
  auto cells = parse_table(r.output);
  for (int rank = 0; rank < 4; ++rank) {
    std::vector<std::string> want(static_cast<size_t>(sim.makespan), "·");
    for (const tessel::TimedAction& t : sim.ranks[rank].compute)
      for (int s = static_cast<int>(t.start); s < static_cast<int>(t.end); ++s)
        want[s] = tessel::action_label(t.action, 2);
    expect_row(cells[rank], want, "rank " + std::to_string(rank));
  }
  EXPECT_EQ(cells[0]["T1"], "F1.0");
  EXPECT_NE(r.output.find("(p − 1)/(v·m + p − 1) = (4 − 1)/(2·8 + 4 − 1) = 0.1579"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("= 36 ÷ (4 × 57) = 0.1579"), std::string::npos) << r.output;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) n++;
  return n;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `tessel schedule ARGS --svg FILE`, which must succeed; the SVG's text.
std::string schedule_picture(const std::string& args) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tessel_schedule_test_" + std::to_string(::getpid()) + ".svg");
  std::filesystem::remove(path);
  Result r = tessel_schedule(args + " --svg " + path.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string svg = read_text(path);
  if (tessel::testing::svg_renderer_missing().empty()) {
    EXPECT_EQ(tessel::testing::ink_outside_canvas(path.string()), "") << args;
  }
  std::filesystem::remove(path);
  return svg;
}

// The sends lower() adds to the schedule from one rank to another: one arrow each (a V's last
// rank also sends to itself, which no arrow shows).
int messages(const ScheduleConfig& c) {
  int n = 0;
  const std::vector<tessel::RankSchedule> lowered = tessel::lower(tessel::generate_schedule(c), c);
  for (int r = 0; r < static_cast<int>(lowered.size()); ++r)
    for (const tessel::Action& a : lowered[r])
      n += (a.kind == tessel::ActionKind::SendForward || a.kind == tessel::ActionKind::SendBackward) && a.peer != r;
  return n;
}

TEST(ScheduleCli, WritesSvg) {
  const std::string svg = schedule_picture("--pp 4 --microbatches 8 --vpp 2");
  ASSERT_EQ(svg.rfind("<svg xmlns='http://www.w3.org/2000/svg'", 0), 0u) << svg.substr(0, 200);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<svg"), 1);
  EXPECT_EQ(count(svg, "<rect class='F'"), 4 * 8 * 2);  // one box per forward of every rank
  EXPECT_EQ(count(svg, "<rect class='B'"), 4 * 8 * 2);
  EXPECT_EQ(count(svg, "<line class='send'"), messages(config(ScheduleKind::Interleaved, 4, 8, 2)));
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_NE(svg.find("<title>rank 3 B8.0</title>"), std::string::npos);
  EXPECT_NE(svg.find(">bubble 0.158: the ranks' idle share of the iteration"), std::string::npos);
  // The title, once clipped at about 330 pixels, fits.
  EXPECT_NE(svg.find(">interleaved: pp 4, 8 microbatches, vpp 2, microbatch group 4</text>"), std::string::npos);
}

// The seed's example 8: PP 2, 4 microbatches. Its forward table's two idle cells are drawn as bubble.
TEST(ScheduleCli, SvgMarksTheSeedsBubbles) {
  const std::string svg = schedule_picture("--pp 2 --microbatches 4 --schedule gpipe --forward-only");
  EXPECT_EQ(count(svg, "<rect class='bubble'"), 2) << svg;
  EXPECT_EQ(count(svg, "<line class='send'"), 4);  // each microbatch's activation, rank 0 to rank 1
  EXPECT_NE(svg.find("<title>rank 1 idle 1</title>"), std::string::npos);
  EXPECT_NE(svg.find(">bubble 0.2: "), std::string::npos);
  const std::string zbv = schedule_picture("--pp 2 --microbatches 4 --schedule zb-v");
  EXPECT_EQ(count(zbv, "<line class='send'"), messages(config(ScheduleKind::ZeroBubbleV, 2, 4, 2)));
}

// PP 8 × VPP 2 × 32 microbatches: every box holds its label ("32" once spilled over 8-pixel
// boxes), and the picture renders inside its canvas.
TEST(ScheduleCli, SvgLabelsFitTheirBoxesAtPp8Vpp2With32Microbatches) {
  const std::string svg = schedule_picture("--pp 8 --vpp 2 --microbatches 32");
  const std::regex box("<rect class='[FBIW]' x='[0-9.]+' y='[0-9.]+' width='([0-9.]+)'[^\n]*\n"
                       "<text x='[0-9.]+' y='[0-9.]+' font-size='([0-9.]+)' text-anchor='middle'>([0-9]+)</text>");
  int boxes = 0;
  for (std::sregex_iterator it(svg.begin(), svg.end(), box), end; it != end; ++it, ++boxes) {
    const double width = std::stod((*it)[1]), font = std::stod((*it)[2]);
    EXPECT_LE(tessel::svg_text_width((*it)[3].str(), font), width) << (*it)[0];
  }
  EXPECT_EQ(boxes, 2 * 8 * 32 * 2);  // F and B of every microbatch and chunk on each of the 8 ranks
  EXPECT_EQ(count(svg, "<line class='send'"), messages(config(ScheduleKind::Interleaved, 8, 32, 2)));
}

void expect_one_line_error(const std::string& args, const std::vector<std::string>& expected) {
  Result r = tessel_schedule(args);
  EXPECT_EQ(r.exit_code, 1) << args << ": " << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  for (const std::string& e : expected) EXPECT_NE(r.output.find(e), std::string::npos) << args << " -> " << r.output;
}

TEST(ScheduleCli, BadInputNamesEveryRule) {
  expect_one_line_error("--pp 4 --microbatches 6 --vpp 2",
                        {"--microbatches 6 leaves a final group of 2", "must be 0 or at least pp"});
  expect_one_line_error("--pp 0 --microbatches 0 --forward-cost 0",
                        {"--pp must be at least 1", "--microbatches 0 must be at least 1",
                         "--forward-cost must be at least 1"});
  expect_one_line_error("--pp 2 --microbatches 4 --vpp 2 --schedule 1f1b", {"--vpp 2 needs --schedule interleaved"});
  expect_one_line_error("--pp 2 --microbatches 4 --schedule zigzag", {"unknown --schedule 'zigzag'"});
  expect_one_line_error("--pp 4 --microbatches 8 --vpp 2 --microbatch-group-size-per-virtual-pipeline-stage 2",
                        {"--microbatch-group-size-per-virtual-pipeline-stage 2 is below --pp 4"});
}

}  // namespace
