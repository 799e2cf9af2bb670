// The check every SVG tessel draws is held to: rendered by rsvg-convert (Debian's librsvg2-bin,
// scripts/install-test-deps.sh), nothing of it lies outside its canvas — no title, label or legend
// runs past the edge to be clipped. The SVG is rendered once more on a canvas widened by a margin
// on every side (its root's width, height and a viewBox moved out by the margin), and the pixels
// drawn in that margin are counted: that is what a viewer would have cut off. A test calls
//   if (const std::string why = svg_renderer_missing(); !why.empty()) GTEST_SKIP() << why;
//   EXPECT_EQ(ink_outside_canvas(path), "");
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_command.h"

namespace tessel::testing {

// Why the check cannot run on this machine, or empty.
inline std::string svg_renderer_missing() {
  if (run_command("command -v rsvg-convert").exit_code == 0) return "";
  return "rsvg-convert is not installed (Debian's librsvg2-bin: scripts/install-test-deps.sh)";
}

// An RGBA image, 8 bits a channel.
struct RgbaImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // (height, width, 4)
};

inline uint32_t big_endian(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) | (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) | uint32_t{static_cast<uint8_t>(s[at + 3])};
}

// The PNG rsvg-convert writes (8-bit RGBA, not interlaced); `error` says why another is not read.
inline RgbaImage read_rgba_png(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RgbaImage image;
  if (png.size() < 33 || png.compare(1, 3, "PNG") != 0) return error = path + " is not a PNG", image;
  std::string compressed;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t length = big_endian(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      image.width = static_cast<int>(big_endian(png, at + 8));
      image.height = static_cast<int>(big_endian(png, at + 12));
      if (png[at + 16] != 8 || png[at + 17] != 6 || png[at + 20] != 0)
        return error = path + ": not an 8-bit RGBA PNG without interlacing", image;
    }
    if (type == "IDAT") compressed += png.substr(at + 8, length);
    at += 12 + length;
  }
  const size_t stride = 4 * static_cast<size_t>(image.width);
  std::vector<uint8_t> raw((stride + 1) * image.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(compressed.data()), compressed.size()) != Z_OK ||
      raw_size != raw.size())
    return error = path + ": its image data does not inflate to its size", image;
  // Undo each row's filter (PNG's None, Sub, Up, Average, Paeth) against the row above.
  image.pixels.assign(stride * image.height, 0);
  for (int y = 0; y < image.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in_row = &raw[y * (stride + 1) + 1];
    uint8_t* row = &image.pixels[y * stride];
    const uint8_t* up = y > 0 ? &image.pixels[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= 4 ? row[i - 4] : 0, b = up ? up[i] : 0, c = up && i >= 4 ? up[i - 4] : 0;
      int predicted = 0;
      if (filter == 1) predicted = a;
      if (filter == 2) predicted = b;
      if (filter == 3) predicted = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        predicted = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      row[i] = static_cast<uint8_t>(in_row[i] + predicted);
    }
  }
  return image;
}

// What of the SVG file at `svg_path` is drawn outside its canvas, said in words ("N pixels outside
// the W × H canvas, the first at (x, y)"), or empty when nothing is; a file that does not render
// is said too.
inline std::string ink_outside_canvas(const std::string& svg_path) {
  constexpr int kMargin = 120;  // the band around the canvas that is looked at
  std::ifstream in(svg_path);
  std::stringstream text;
  text << in.rdbuf();
  std::string svg = text.str();
  std::smatch root;
  if (!std::regex_search(svg, root, std::regex("<svg[^>]*>"))) return svg_path + ": no <svg> element";
  std::string tag = root.str();
  std::smatch w, h;
  const std::regex width_re("\\swidth=['\"]([0-9.]+)['\"]"), height_re("\\sheight=['\"]([0-9.]+)['\"]");
  if (!std::regex_search(tag, w, width_re) || !std::regex_search(tag, h, height_re) ||
      tag.find("viewBox") != std::string::npos)
    return svg_path + ": the root <svg> needs a width and a height in pixels, and no viewBox";
  const double width = std::stod(w[1]), height = std::stod(h[1]);
  tag = std::regex_replace(tag, width_re, " width='" + std::to_string(width + 2 * kMargin) + "'");
  tag = std::regex_replace(tag, height_re, " height='" + std::to_string(height + 2 * kMargin) + "'");
  tag.insert(4, " viewBox='" + std::to_string(-kMargin) + " " + std::to_string(-kMargin) + " " +
                    std::to_string(width + 2 * kMargin) + " " + std::to_string(height + 2 * kMargin) + "'");
  svg.replace(root.position(), root.length(), tag);

  const std::string widened = svg_path + ".widened.svg", png = svg_path + ".widened.png";
  std::ofstream(widened) << svg;
  const CommandResult r = run_command("rsvg-convert -o '" + png + "' '" + widened + "'");
  std::filesystem::remove(widened);
  if (r.exit_code != 0) return svg_path + " does not render: " + r.output;
  std::string error;
  const RgbaImage image = read_rgba_png(png, error);
  std::filesystem::remove(png);
  if (!error.empty()) return error;
  // Antialiasing may spill a pixel past an edge drawn on it.
  const double left = kMargin - 1, top = kMargin - 1, right = kMargin + width + 1, bottom = kMargin + height + 1;
  long outside = 0;
  std::string first;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) {
      if (image.pixels[(static_cast<size_t>(y) * image.width + x) * 4 + 3] == 0) continue;
      if (x >= left && x < right && y >= top && y < bottom) continue;
      if (outside++ == 0) first = "(" + std::to_string(x - kMargin) + ", " + std::to_string(y - kMargin) + ")";
    }
  if (outside == 0) return "";
  return svg_path + ": " + std::to_string(outside) + " pixels drawn outside the " + std::to_string(int(width)) + " × " +
         std::to_string(int(height)) + " canvas, the first at " + first;
}

}  // namespace tessel::testing
