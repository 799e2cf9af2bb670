// The two drawings of `tessel plan --svg-memory / --svg-time`: plain SVG, one stacked bar per
// pipeline stage (memory) and one bar of the step's parts (time), with a legend. Axes and labels
// use the unit that suits the magnitude (KiB for a teaching-sized model, GiB for a large one) and
// ticks at round values.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/core/svg.h"
#include "tessel/plan/report.h"

namespace tessel {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Part {
  std::string name;
  double value;
};

struct Unit {
  double size;
  const char* name;
};

const std::vector<Unit> kByteUnits = {{1, "B"}, {1024, "KiB"}, {1024 * 1024, "MiB"}, {kGiB, "GiB"}, {1024 * kGiB, "TiB"}};
const std::vector<Unit> kSecondUnits = {{1e-9, "ns"}, {1e-6, "µs"}, {1e-3, "ms"}, {1, "s"}};

// The largest of `units` (smallest first) in which `value` is at least 1.
Unit unit_for(double value, const std::vector<Unit>& units) {
  Unit chosen = units.front();
  for (const Unit& u : units)
    if (std::fabs(value) >= u.size) chosen = u;
  return chosen;
}

// "3.25 MiB", "412 µs": four significant digits in the value's own unit; nothing is "0".
std::string in_unit(double value, const std::vector<Unit>& units) {
  if (value == 0) return "0";
  const Unit u = unit_for(value, units);
  return fmt::format("{:.4g} {}", value / u.size, u.name);
}

// A step of 1, 2 or 5 × 10^k that cuts [0, top] into at most five intervals.
double round_step(double top) {
  if (!(top > 0)) return 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(top / 5)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * magnitude * 5 >= top) return f * magnitude;
  return 10 * magnitude;
}

// The palette's first `n` colours, one for each part.
std::vector<std::string> colours(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(kSvgPalette[i % kSvgPalette.size()]);
  return out;
}

}  // namespace

std::string memory_svg(const Estimate& est, const Cluster& cluster, const std::string& title) {
  const std::vector<std::string> names = {
      "weights", "gradients", "optimizer", "activations", "buffers",
      cluster.cpu() ? "runtime (the process's baseline memory)" : "runtime (CUDA context, workspaces, NCCL buffers)"};
  const double bar = 28, gap = 10, left = 70, top = 40, height = 320;
  const double plot_right = left + est.stages.size() * (bar + gap);
  double fullest = 0;
  for (const StageMemory& s : est.stages) fullest = std::max(fullest, s.total());
  // The device's memory is drawn as a line when it is near the bars; a CPU's 12 GiB beside a model
  // of a few MiB would flatten them to nothing, so it is then only said.
  const double limit = est.memory_limit_gib * kGiB;
  const bool limit_on_scale = limit <= 4 * fullest;
  const double largest = std::max(limit_on_scale ? limit : 0.0, fullest);
  const Unit unit = unit_for(largest, kByteUnits);
  const double step = round_step(largest / unit.size) * unit.size;
  const double top_value = std::max(step, std::ceil(largest / step) * step);
  auto y_of = [&](double bytes) { return top + height * (1 - bytes / top_value); };
  SvgCanvas svg;
  for (int tick = 0; tick * step <= top_value * (1 + 1e-9); ++tick) {
    const double bytes = tick * step;
    svg.shape(fmt::format("<line x1='{}' x2='{:.0f}' y1='{:.1f}' y2='{:.1f}' stroke='#ddd'/>", left, plot_right,
                          y_of(bytes), y_of(bytes)),
              plot_right, y_of(bytes));
    svg.text(left - 6, y_of(bytes) + 4, fmt::format("{:.4g} {}", bytes / unit.size, unit.name), 11, "end");
  }
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const StageMemory& s = est.stages[i];
    const double parts[] = {s.weights, s.grads, s.optimizer, s.activations, s.buffers, s.runtime};
    double base = 0;
    const double x = left + i * (bar + gap);
    for (size_t k = 0; k < 6; ++k) {
      svg.shape(fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{}' height='{:.1f}' fill='{}'><title>stage {} {}: "
                            "{}</title></rect>", x, y_of(base + parts[k]), bar, y_of(base) - y_of(base + parts[k]),
                            kSvgPalette[k], s.stage, names[k], in_unit(parts[k], kByteUnits)),
                x + bar, y_of(base));
      base += parts[k];
    }
    svg.text(x + bar / 2, top + height + 15, std::to_string(s.stage), 11, "middle");
  }
  const std::string device = fmt::format("device memory {}", in_unit(limit, kByteUnits));
  if (limit_on_scale) {
    svg.shape(fmt::format("<line x1='{}' x2='{:.0f}' y1='{:.1f}' y2='{:.1f}' stroke='#d00' stroke-dasharray='6,4'/>",
                          left, plot_right, y_of(limit), y_of(limit)),
              plot_right, y_of(limit));
    svg.text(left + 4, y_of(limit) - 4, device, 11, "start", "fill='#d00'");
  }
  svg.text(left, top + height + 35, "pipeline stage", 12);
  // The legend right of all drawn so far (the device memory's label runs past a narrow plot); the
  // limit off the scale and the title, below and above all.
  // Each part's size on the fullest stage beside its name: a teaching-sized model's KiB of weights
  // would not show beside a CPU process's baseline memory otherwise.
  size_t fullest_stage = 0;
  for (size_t i = 0; i < est.stages.size(); ++i)
    if (est.stages[i].total() > est.stages[fullest_stage].total()) fullest_stage = i;
  const StageMemory& f = est.stages[fullest_stage];
  const double sizes[] = {f.weights, f.grads, f.optimizer, f.activations, f.buffers, f.runtime};
  std::vector<std::string> labels;
  for (size_t k = 0; k < names.size(); ++k) labels.push_back(names[k] + " " + in_unit(sizes[k], kByteUnits));
  const double legend_x = svg.right() + 20;
  svg.text(legend_x, top + 11, fmt::format("stage {}, the fullest:", f.stage), 12);
  svg.legend(labels, colours(names.size()), legend_x, top + 20);
  if (!limit_on_scale)
    svg.text(left, top + height + 52, device + ", far above the bars: not drawn", 11, "start", "fill='#d00'");
  svg.text(left, 20, title, 14);
  return svg.document();
}

std::string time_svg(const Estimate& est, const std::string& title) {
  const StepTime& t = est.time;
  const std::vector<Part> parts = {{"compute", t.compute},
                                   {"TP comm", t.tp_comm},
                                   {"CP comm", t.cp_comm},
                                   {"EP comm", t.ep_comm},
                                   {"PP comm", t.pp_comm},
                                   {"idle (waits for other stages)", t.idle},
                                   {"DP comm", t.dp_comm},
                                   {"embedding sync", t.embedding_sync},
                                   {"optimizer", t.optimizer}};
  const double left = 20, top = 40, length = 600, bar = 40;
  SvgCanvas svg;
  std::string heading = fmt::format("{} — step {}, busiest stage {}", title, in_unit(t.step, kSecondUnits), t.stage);
  if (est.run.parallel.pp > 1) heading += fmt::format("; pipeline bubble {:.1f} %", 100 * t.bubble);
  svg.text(left, 20, heading, 14);
  double at = 0;
  std::vector<std::string> names;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double w = t.step > 0 ? length * parts[i].value / t.step : 0;
    svg.shape(fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'><title>{}: {}</title>"
                          "</rect>", left + at, top, w, bar, kSvgPalette[i], parts[i].name,
                          in_unit(parts[i].value, kSecondUnits)),
              left + at + w, top + bar);
    at += w;
    names.push_back(fmt::format("{} {} ({:.1f} %)", parts[i].name, in_unit(parts[i].value, kSecondUnits),
                                t.step > 0 ? 100 * parts[i].value / t.step : 0));
  }
  svg.legend(names, colours(names.size()), left + length + 20, top);
  return svg.document();
}

}  // namespace tessel
