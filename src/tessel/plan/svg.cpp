// The two drawings of `tessel plan --svg-memory / --svg-time`: plain SVG, one stacked bar per
// pipeline stage (memory) and one bar of the step's parts (time), with a legend.
#include <fmt/format.h>

#include <algorithm>

#include "tessel/core/svg.h"
#include "tessel/plan/report.h"

namespace tessel {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Part {
  std::string name;
  double value;
};

// The palette's first `n` colours, one for each part.
std::vector<std::string> colours(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(kSvgPalette[i % kSvgPalette.size()]);
  return out;
}

}  // namespace

std::string memory_svg(const Estimate& est, const std::string& title) {
  const std::vector<std::string> names = {"weights", "gradients", "optimizer", "activations", "buffers", "runtime"};
  const double bar = 28, gap = 10, left = 60, top = 40, height = 320;
  const double plot_right = left + est.stages.size() * (bar + gap);
  double top_value = est.memory_limit_gib;
  for (const StageMemory& s : est.stages) top_value = std::max(top_value, s.total() / kGiB);
  top_value *= 1.05;
  auto y_of = [&](double g) { return top + height * (1 - g / top_value); };
  SvgCanvas svg;
  for (int tick = 0; tick <= 4; ++tick) {
    const double g = top_value * tick / 4;
    svg.shape(fmt::format("<line x1='{}' x2='{:.0f}' y1='{:.1f}' y2='{:.1f}' stroke='#ddd'/>", left, plot_right,
                          y_of(g), y_of(g)),
              plot_right, y_of(g));
    svg.text(5, y_of(g) + 4, fmt::format("{:.0f} GiB", g), 11);
  }
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const StageMemory& s = est.stages[i];
    const double parts[] = {s.weights, s.grads, s.optimizer, s.activations, s.buffers, s.runtime};
    double base = 0;
    const double x = left + i * (bar + gap);
    for (size_t k = 0; k < 6; ++k) {
      const double g = parts[k] / kGiB;
      svg.shape(fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{}' height='{:.1f}' fill='{}'><title>stage {} {}: "
                            "{:.2f} GiB</title></rect>", x, y_of(base + g), bar, y_of(base) - y_of(base + g),
                            kSvgPalette[k], s.stage, names[k], g),
                x + bar, y_of(base));
      base += g;
    }
    svg.text(x + 4, top + height + 15, std::to_string(s.stage), 11);
  }
  const double limit_y = y_of(est.memory_limit_gib);
  svg.shape(fmt::format("<line x1='{}' x2='{:.0f}' y1='{:.1f}' y2='{:.1f}' stroke='#d00' stroke-dasharray='6,4'/>",
                        left, plot_right, limit_y, limit_y),
            plot_right, limit_y);
  svg.text(left + 4, limit_y - 4, fmt::format("device memory {:.0f} GiB", est.memory_limit_gib), 11, "start",
           "fill='#d00'");
  svg.text(left, top + height + 35, "pipeline stage", 12);
  // The legend right of all drawn so far (the device memory's label runs past a narrow plot), the
  // title above all.
  svg.legend(names, colours(names.size()), svg.right() + 20, top);
  svg.text(left, 20, title, 14);
  return svg.document();
}

std::string time_svg(const Estimate& est, const std::string& title) {
  const StepTime& t = est.time;
  const std::vector<Part> parts = {{"compute", t.compute},  {"TP comm", t.tp_comm}, {"CP comm", t.cp_comm},
                                   {"EP comm", t.ep_comm},  {"PP comm", t.pp_comm}, {"bubble", t.bubble},
                                   {"DP comm", t.dp_comm},  {"embedding sync", t.embedding_sync},
                                   {"optimizer", t.optimizer}};
  const double left = 20, top = 40, length = 600, bar = 40;
  SvgCanvas svg;
  svg.text(left, 20, fmt::format("{} — step {:.4g} s (busiest stage {})", title, t.step, t.stage), 14);
  double at = 0;
  std::vector<std::string> names;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double w = t.step > 0 ? length * parts[i].value / t.step : 0;
    svg.shape(fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'><title>{}: {:.4g} s</title>"
                          "</rect>", left + at, top, w, bar, kSvgPalette[i], parts[i].name, parts[i].value),
              left + at + w, top + bar);
    at += w;
    names.push_back(fmt::format("{} {:.4g} s ({:.1f} %)", parts[i].name, parts[i].value,
                                t.step > 0 ? 100 * parts[i].value / t.step : 0));
  }
  svg.legend(names, colours(names.size()), left + length + 20, top);
  return svg.document();
}

}  // namespace tessel
