// The two drawings of `tessel plan --svg-memory / --svg-time`: plain SVG, one stacked bar per
// pipeline stage (memory) and one bar of the step's parts (time), with a legend.
#include <fmt/format.h>

#include <algorithm>

#include "tessel/plan/report.h"

namespace tessel {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                                   "#ff9da7", "#9c755f", "#bab0ac"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

struct Part {
  std::string name;
  double value;
};

std::string legend(const std::vector<std::string>& names, double x, double y) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += fmt::format("<rect x='{:.0f}' y='{:.0f}' width='12' height='12' fill='{}'/>", x, y + 18 * i, kColors[i % 10]);
    s += fmt::format("<text x='{:.0f}' y='{:.0f}' font-size='12'>{}</text>\n", x + 18, y + 18 * i + 11, escape(names[i]));
  }
  return s;
}

}  // namespace

std::string memory_svg(const Estimate& est, const std::string& title) {
  const std::vector<std::string> names = {"weights", "gradients", "optimizer", "activations", "buffers", "runtime"};
  const double bar = 28, gap = 10, left = 60, top = 40, height = 320;
  const double width = left + est.stages.size() * (bar + gap) + 200;
  double top_value = est.memory_limit_gib;
  for (const StageMemory& s : est.stages) top_value = std::max(top_value, s.total() / kGiB);
  top_value *= 1.05;
  auto y_of = [&](double g) { return top + height * (1 - g / top_value); };
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' font-family='sans-serif'>\n",
                                width, top + height + 50);
  svg += fmt::format("<text x='{}' y='20' font-size='14'>{}</text>\n", left, escape(title));
  for (int tick = 0; tick <= 4; ++tick) {
    const double g = top_value * tick / 4;
    svg += fmt::format("<line x1='{}' x2='{:.0f}' y1='{:.1f}' y2='{:.1f}' stroke='#ddd'/><text x='5' y='{:.1f}' font-size='11'>{:.0f} GiB</text>\n",
                       left, width - 200, y_of(g), y_of(g), y_of(g) + 4, g);
  }
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const StageMemory& s = est.stages[i];
    const double parts[] = {s.weights, s.grads, s.optimizer, s.activations, s.buffers, s.runtime};
    double base = 0;
    const double x = left + i * (bar + gap);
    for (size_t k = 0; k < 6; ++k) {
      const double g = parts[k] / kGiB;
      svg += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{}' height='{:.1f}' fill='{}'><title>stage {} {}: {:.2f} GiB</title></rect>\n",
                         x, y_of(base + g), bar, y_of(base) - y_of(base + g), kColors[k], s.stage, names[k], g);
      base += g;
    }
    svg += fmt::format("<text x='{:.1f}' y='{:.0f}' font-size='11'>{}</text>\n", x + 4, top + height + 15, s.stage);
  }
  svg += fmt::format("<line x1='{}' x2='{:.0f}' y1='{:.1f}' y2='{:.1f}' stroke='#d00' stroke-dasharray='6,4'/>"
                     "<text x='{}' y='{:.1f}' font-size='11' fill='#d00'>device memory {:.0f} GiB</text>\n",
                     left, width - 200, y_of(est.memory_limit_gib), y_of(est.memory_limit_gib), left + 4,
                     y_of(est.memory_limit_gib) - 4, est.memory_limit_gib);
  svg += fmt::format("<text x='{}' y='{:.0f}' font-size='12'>pipeline stage</text>\n", left, top + height + 35);
  svg += legend(names, width - 180, top);
  return svg + "</svg>\n";
}

std::string time_svg(const Estimate& est, const std::string& title) {
  const StepTime& t = est.time;
  const std::vector<Part> parts = {{"compute", t.compute},  {"TP comm", t.tp_comm}, {"CP comm", t.cp_comm},
                                   {"EP comm", t.ep_comm},  {"PP comm", t.pp_comm}, {"bubble", t.bubble},
                                   {"DP comm", t.dp_comm},  {"embedding sync", t.embedding_sync},
                                   {"optimizer", t.optimizer}};
  const double left = 20, top = 40, length = 600, bar = 40;
  std::string svg = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' font-family='sans-serif'>\n",
                                left + length + 220, top + 18 * parts.size() + 20);
  svg += fmt::format("<text x='{}' y='20' font-size='14'>{} — step {:.4g} s (busiest stage {})</text>\n", left, escape(title), t.step, t.stage);
  double at = 0;
  std::vector<std::string> names;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double w = t.step > 0 ? length * parts[i].value / t.step : 0;
    svg += fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'><title>{}: {:.4g} s</title></rect>\n",
                       left + at, top, w, bar, kColors[i], parts[i].name, parts[i].value);
    at += w;
    names.push_back(fmt::format("{} {:.4g} s ({:.1f} %)", parts[i].name, parts[i].value,
                                t.step > 0 ? 100 * parts[i].value / t.step : 0));
  }
  svg += legend(names, left + length + 20, top);
  return svg + "</svg>\n";
}

}  // namespace tessel
