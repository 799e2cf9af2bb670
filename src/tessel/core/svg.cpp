#include "tessel/core/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessel {

std::string svg_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// DejaVu Sans, rsvg-convert's sans-serif on Debian, averages ~0.55 em over digits and lower case;
// 0.62 em covers the capitals and punctuation of tessel's labels too. Characters are counted as
// code points (the bytes that do not continue one): "×" and "–" are one each.
double svg_text_width(std::string_view text, double font_size) {
  const auto code_points = std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  });
  return 0.62 * font_size * static_cast<double>(code_points);
}

void SvgCanvas::text(double x, double y, std::string_view text, double font_size, std::string_view anchor,
                     std::string_view attributes) {
  const double width = svg_text_width(text, font_size);
  const double left = anchor == "middle" ? x - width / 2 : anchor == "end" ? x - width : x;
  shape(fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='{:g}'{}{}{}>{}</text>", x, y, font_size,
                    anchor == "start" ? "" : fmt::format(" text-anchor='{}'", anchor),
                    attributes.empty() ? "" : " ", attributes, svg_escape(text)),
        left + width, y + 0.25 * font_size);  // descenders below the baseline
}

void SvgCanvas::shape(std::string element, double right, double bottom) {
  body_ += element + "\n";
  right_ = std::max(right_, right);
  bottom_ = std::max(bottom_, bottom);
}

double SvgCanvas::legend(const std::vector<std::string>& names, const std::vector<std::string>& colours, double x,
                         double y) {
  for (size_t i = 0; i < names.size(); ++i) {
    const double top = y + 18 * i;
    shape(fmt::format("<rect x='{:.1f}' y='{:.1f}' width='12' height='12' fill='{}'/>", x, top, colours[i]), x + 12,
          top + 12);
    text(x + 18, top + 11, names[i], 12);
  }
  return y + 18 * names.size();
}

std::string SvgCanvas::document(double margin) const {
  return fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' "
                     "font-family='sans-serif'>\n{}</svg>\n",
                     std::ceil(right_ + margin), std::ceil(bottom_ + margin), body_);
}

}  // namespace tessel
