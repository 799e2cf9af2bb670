// The drawings' shared canvas (src/tessel/core/svg.h), which grows to hold its text, and the
// rendering check every drawing is held to (tests/support/svg_render.h), itself tried on SVGs
// that are clipped and on ones that fit.
#include "tessel/core/svg.h"

#include <gtest/gtest.h>

#include <string>

#include "support/fixtures.h"
#include "support/svg_render.h"

namespace tessel {
namespace {

TEST(SvgCanvas, GrowsToHoldItsText) {
  SvgCanvas svg;
  svg.text(10, 20, "a title of forty characters, more or less", 14);
  svg.text(300, 60, "right-aligned", 12, "end");
  const std::string doc = svg.document(10);
  // 41 code points of 0.62 × 14 px from x = 10; the lowest baseline 60 plus its descender (a
  // quarter of 12 px) and the margin of 10.
  EXPECT_DOUBLE_EQ(svg.right(), 10 + 41 * 0.62 * 14);
  EXPECT_EQ(doc.rfind("<svg xmlns='http://www.w3.org/2000/svg' width='", 0), 0u) << doc;
  EXPECT_NE(doc.find(" height='73'"), std::string::npos) << doc;
  EXPECT_NE(doc.find("text-anchor='end'"), std::string::npos);
  // "×" is one character wide, not two.
  EXPECT_DOUBLE_EQ(svg_text_width("2 × 2", 10), svg_text_width("2 x 2", 10));
  svg.text(0, 80, "a < b & c", 12);
  EXPECT_NE(svg.document().find(">a &lt; b &amp; c<"), std::string::npos);
}

// The check: an SVG whose title runs past its right edge, and one whose label starts left of
// it, are caught; one that fits, a frame on its very edge included, is not; one that does not
// render is said.
TEST(SvgRender, InkOutsideTheCanvasIsFound) {
  if (const std::string why = testing::svg_renderer_missing(); !why.empty()) GTEST_SKIP() << why;
  testing::TestDir dir;
  const std::string head = "<svg xmlns='http://www.w3.org/2000/svg' width='120' height='40' font-family='sans-serif'>";
  const std::string clipped = dir.write("clipped.svg", head + "<text x='10' y='25' font-size='14'>a title far too "
                                                             "long for its canvas</text></svg>\n");
  EXPECT_NE(testing::ink_outside_canvas(clipped).find("pixels drawn outside the 120 × 40 canvas"), std::string::npos);
  const std::string left = dir.write("left.svg", head + "<text x='-30' y='25' font-size='14'>rank</text></svg>\n");
  EXPECT_NE(testing::ink_outside_canvas(left), "");
  const std::string fits = dir.write("fits.svg", head + "<text x='10' y='25' font-size='14'>fits</text>"
                                                         "<rect x='0' y='0' width='120' height='40' fill='none' "
                                                         "stroke='#000'/></svg>\n");
  EXPECT_EQ(testing::ink_outside_canvas(fits), "");
  EXPECT_NE(testing::ink_outside_canvas(dir.write("broken.svg", head + "<text>")), "");
  // What the canvas drew for its own text fits too.
  SvgCanvas svg;
  svg.text(5, 15, "a title of forty characters, more or less", 14);
  svg.legend({"a legend line as long as the title above it"}, {kSvgPalette[0]}, 5, 30);
  EXPECT_EQ(testing::ink_outside_canvas(dir.write("canvas.svg", svg.document())), "");
}

}  // namespace
}  // namespace tessel
