// What tessel's drawings share: a palette, escaped text, and a canvas that grows to hold what is
// drawn on it, text included, so that no title or legend is clipped at the edge. Plain SVG 1.1,
// one element a line, readable by rsvg-convert and any browser.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

// Tableau's ten colours: distinct on screen and in grey print.
inline constexpr std::array<const char*, 10> kSvgPalette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                            "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                                            "#9c755f", "#bab0ac"};

// `text` with <, > and & written as entities.
std::string svg_escape(std::string_view text);

// The width of `text` (UTF-8) in a sans-serif font of `font_size` pixels, over-estimated: no
// font metrics are at hand, and a canvas a little wide clips nothing.
double svg_text_width(std::string_view text, double font_size);

class SvgCanvas {
 public:
  // Text with its baseline at y, starting at x (anchor "start"), centred on it ("middle") or ending
  // at it ("end"); `attributes` are added to the element as they are (fill='#d00').
  void text(double x, double y, std::string_view text, double font_size, std::string_view anchor = "start",
            std::string_view attributes = "");
  // Any other element, reaching right to `right` and down to `bottom`. Drawings keep their
  // elements right of and below the origin, where the canvas starts.
  void shape(std::string element, double right, double bottom);
  // One swatch of each colour and its name a line, from (x, y) down; returns the bottom.
  double legend(const std::vector<std::string>& names, const std::vector<std::string>& colours, double x, double y);

  double right() const { return right_; }
  double bottom() const { return bottom_; }
  // The document: everything drawn, on a canvas reaching `margin` past the furthest element.
  std::string document(double margin = 10) const;

 private:
  std::string body_;
  double right_ = 0, bottom_ = 0;
};

}  // namespace tessel
