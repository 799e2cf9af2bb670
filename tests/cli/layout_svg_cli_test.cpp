// `tessel layout --svg`: the seed's 8-GPU grid drawn with its TP, PP and DP groups, nodes as
// frames, the kinds --groups asks for, and every picture rendered by rsvg-convert with nothing
// outside its canvas (tests/support/svg_render.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "support/svg_render.h"

namespace tessel {
namespace {

using testing::CommandResult;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `tessel layout ARGS --svg FILE`, which must succeed; the SVG's text.
std::string draw(const testing::TestDir& dir, const std::string& args) {
  const std::string path = dir.path("layout.svg");
  const CommandResult r = testing::run_tessel("layout " + args + " --svg " + path);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
  EXPECT_NE(r.output.find("wrote " + path), std::string::npos) << r.output;
  return read_text(path);
}

// The seed's picture: 8 ranks, 4 TP, 4 PP and 4 DP groups, one line each, in three colours, and
// nothing of the kinds it does not ask about.
TEST(LayoutSvgCli, SeedGridHasItsThreeKindsOfGroups) {
  testing::TestDir dir;
  const std::string svg = draw(dir, "--world 8 --tp 2 --pp 2 --order tp-pp-dp");
  ASSERT_EQ(svg.rfind("<svg xmlns='http://www.w3.org/2000/svg'", 0), 0u) << svg.substr(0, 200);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(count(svg, ">rank " + std::to_string(r) + "<"), 1) << r;
  EXPECT_EQ(count(svg, "<path "), 12) << svg;
  EXPECT_EQ(count(svg, "<circle "), 3 * 8);  // every rank is in one group of each kind
  for (const char* legend : {">tp — tensor parallel", ">pp — pipeline", ">dp — data parallel"})
    EXPECT_EQ(count(svg, legend), 1) << legend;
  EXPECT_NE(svg.find(">(0,1) (2,3) (4,5) (6,7)<"), std::string::npos);  // TP's groups
  EXPECT_NE(svg.find(">(0,2) (1,3) (4,6) (5,7)<"), std::string::npos);  // PP's
  EXPECT_NE(svg.find(">(0,4) (1,5) (2,6) (3,7)<"), std::string::npos);  // DP's
  EXPECT_EQ(svg.find(">mp —"), std::string::npos);
  EXPECT_EQ(svg.find("node 0"), std::string::npos) << "no node size given, no frames";
}

TEST(LayoutSvgCli, NodesAreFramesAndGroupsAreChosen) {
  testing::TestDir dir;
  std::string svg = draw(dir, "--world 8 --tp 2 --pp 2 --gpus-per-node 4");
  EXPECT_EQ(count(svg, ">node 0<") + count(svg, ">node 1<"), 2);
  EXPECT_EQ(count(svg, ">node 2<"), 0);
  EXPECT_EQ(count(svg, "rx='8'"), 2) << "one frame per node";

  svg = draw(dir, "--world 8 --tp 2 --pp 2 --groups tp,pp");
  EXPECT_EQ(count(svg, "<path "), 8);
  EXPECT_EQ(svg.find(">dp —"), std::string::npos);
  svg = draw(dir, "--world 8 --tp 2 --pp 2 --groups mp");
  EXPECT_EQ(count(svg, "<path "), 2);  // (0,1,4,5) (2,3,6,7)
  EXPECT_NE(svg.find(">(0,1,4,5) (2,3,6,7)<"), std::string::npos);

  // The node size belongs to the picture: alone it is refused, with the other rules broken.
  const CommandResult alone = testing::run_tessel("layout --world 8 --gpus-per-node 0 --groups tp,xx");
  EXPECT_EQ(alone.exit_code, 1);
  for (const char* rule : {"--gpus-per-node must be at least 1 (got 0)", "--gpus-per-node draws the nodes in --svg",
                           "--groups tp,xx: no group kind 'xx'"})
    EXPECT_NE(alone.output.find(rule), std::string::npos) << rule << "\n" << alone.output;
}

// Layouts from the seed's to a 64-rank one with long group lists, nodes and every kind: all drawn
// inside their canvas.
TEST(LayoutSvgCli, EveryLayoutFitsItsCanvas) {
  if (const std::string why = testing::svg_renderer_missing(); !why.empty()) GTEST_SKIP() << why;
  testing::TestDir dir;
  for (const char* args : {"--world 8 --tp 2 --pp 2 --order tp-pp-dp", "--world 8 --tp 2 --pp 2 --gpus-per-node 4",
                           "--world 2 --tp 2", "--world 1", "--world 8 --cp 2 --pp 2 --ep 2 --groups all",
                           "--world 64 --tp 4 --pp 4 --gpus-per-node 8", "--world 256 --tp 2 --pp 2", "--world 64 --tp 64",
                           "--world 12 --pp 3 --gpus-per-node 8"}) {
    draw(dir, args);
    EXPECT_EQ(testing::ink_outside_canvas(dir.path("layout.svg")), "") << args;
  }
}

}  // namespace
}  // namespace tessel
