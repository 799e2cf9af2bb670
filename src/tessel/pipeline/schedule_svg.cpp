#include "tessel/pipeline/schedule_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "tessel/core/svg.h"

namespace tessel {

namespace {

constexpr double kLabelFont = 11, kRow = 30, kRowGap = 10, kLeft = 64, kTop = 36;
constexpr const char* kSendColour = "#555";

// A colour per compute kind, lightened towards white for later chunks so that a rank's chunks
// stand apart.
std::string fill_colour(const Action& a, int virtual_stages) {
  int rgb[3] = {76, 120, 168};                                                  // F: blue
  if (a.kind == ActionKind::Backward) rgb[0] = 228, rgb[1] = 120, rgb[2] = 30;  // B: orange
  if (a.kind == ActionKind::BackwardInput) rgb[0] = 214, rgb[1] = 80, rgb[2] = 80;
  if (a.kind == ActionKind::BackwardWeight) rgb[0] = 84, rgb[1] = 162, rgb[2] = 75;
  const double lighten = virtual_stages > 1 ? 0.55 * a.chunk / (virtual_stages - 1) : 0;
  for (int& c : rgb) c = static_cast<int>(std::lround(c + (255 - c) * lighten));
  return fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]);
}

// The hatching of idle time and the head of a send's arrow.
void add_definitions(SvgCanvas& svg) {
  svg.shape("<defs><pattern id='bubble' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'><rect width='6' height='6' fill='#f4f4f4'/>"
            "<line x1='0' y1='0' x2='0' y2='6' stroke='#c8c8c8' stroke-width='2'/></pattern>"
            "<marker id='arrow' markerWidth='7' markerHeight='7' refX='6' refY='3.5' orient='auto'>"
            "<path d='M0,0 L7,3.5 L0,7 z' fill='" + std::string(kSendColour) + "'/></marker></defs>",
            0, 0);
}

// A tick step of 1, 2 or 5 × 10^k time units, at least `min_pixels` apart.
double tick_step(double unit, double min_pixels) {
  for (double scale = 1e-9;; scale *= 10)
    for (double step : {1.0, 2.0, 5.0})
      if (step * scale * unit >= min_pixels) return step * scale;
}

struct Placed {
  int rank = 0;
  const TimedAction* action = nullptr;
};

// An arrow for every message: a forward's output to the forward of the next model chunk, a
// backward's (or input gradient's) result to the backward of the previous one, where the two
// chunks live on different ranks (lower() sends nothing within a rank).
void draw_sends(SvgCanvas& svg, const Simulation& sim, const ScheduleConfig& config, double unit) {
  const int last = config.pipeline_size * config.virtual_stages - 1;
  // (is forward, microbatch, model chunk) → where it ran
  std::map<std::tuple<bool, int, int>, Placed> ran;
  for (int r = 0; r < static_cast<int>(sim.ranks.size()); ++r)
    for (const TimedAction& ta : sim.ranks[r].compute) {
      const ActionKind kind = ta.action.kind;
      if (kind == ActionKind::BackwardWeight) continue;  // W sends nothing
      ran[{kind == ActionKind::Forward, ta.action.microbatch, model_chunk_index(r, ta.action.chunk, config)}] = {r, &ta};
    }
  for (const auto& [key, from] : ran) {
    const auto [forward, microbatch, chunk] = key;
    const int next = forward ? chunk + 1 : chunk - 1;
    if (next < 0 || next > last) continue;
    const auto to = ran.find({forward, microbatch, next});
    if (to == ran.end() || to->second.rank == from.rank) continue;
    const double x1 = kLeft + from.action->end * unit, x2 = kLeft + to->second.action->start * unit;
    const bool down = to->second.rank > from.rank;
    const double y1 = kTop + from.rank * (kRow + kRowGap) + (down ? kRow : 0);
    const double y2 = kTop + to->second.rank * (kRow + kRowGap) + (down ? 0 : kRow);
    svg.shape(fmt::format("<line class='send' x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='{}' "
                          "stroke-width='0.8' marker-end='url(#arrow)'/>",
                          x1, y1, x2, y2, kSendColour),
              std::max(x1, x2) + 4, std::max(y1, y2));
  }
}

}  // namespace

std::string schedule_svg(const Simulation& sim, const ScheduleConfig& config, const std::string& title) {
  const int p = config.pipeline_size, v = config.virtual_stages;
  // Pixels per time unit: the narrowest box holds the widest label ("32") with room to spare,
  // and a short schedule is spread to about 1200 pixels (at most 48 for its narrowest box).
  double narrowest = 0;
  for (const RankTimeline& t : sim.ranks)
    for (const TimedAction& ta : t.compute)
      if (ta.end > ta.start && (narrowest == 0 || ta.end - ta.start < narrowest)) narrowest = ta.end - ta.start;
  if (narrowest == 0) narrowest = 1;
  const double fit = (svg_text_width(std::to_string(config.microbatches), kLabelFont) + 4) / narrowest;
  const double unit = std::max(fit, std::min(1200.0 / std::max(sim.makespan, 1e-9), 48.0 / narrowest));

  SvgCanvas svg;
  add_definitions(svg);
  svg.text(kLeft, 20, title, 14);
  for (int r = 0; r < p; ++r) {
    const double y = kTop + r * (kRow + kRowGap);
    svg.text(8, y + kRow * 0.62, fmt::format("rank {}", r), 12);
    for (const Interval& gap : sim.ranks[r].idle)
      svg.shape(fmt::format("<rect class='bubble' x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{}' "
                            "fill='url(#bubble)'><title>rank {} idle {:.4g}</title></rect>",
                            kLeft + gap.start * unit, y, (gap.end - gap.start) * unit, kRow, r, gap.end - gap.start),
                kLeft + gap.end * unit, y + kRow);
    for (const TimedAction& ta : sim.ranks[r].compute) {
      const double x = kLeft + ta.start * unit, w = (ta.end - ta.start) * unit;
      svg.shape(fmt::format("<rect class='{}' x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{}' fill='{}' "
                            "stroke='#333' stroke-width='0.6'><title>rank {} {}</title></rect>",
                            action_kind_name(ta.action.kind), x, y, w, kRow, fill_colour(ta.action, v), r,
                            action_label(ta.action, v)),
                x + w, y + kRow);
      svg.text(x + w / 2, y + kRow * 0.62, std::to_string(ta.action.microbatch + 1), kLabelFont, "middle");
    }
  }
  draw_sends(svg, sim, config, unit);

  // Time axis: ticks at round values, at least 40 pixels apart.
  const double plot_w = sim.makespan * unit, axis_y = kTop + p * (kRow + kRowGap);
  svg.shape(fmt::format("<line x1='{}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#000'/>", kLeft, axis_y,
                        kLeft + plot_w, axis_y),
            kLeft + plot_w, axis_y);
  const double step = tick_step(unit, 40);
  for (int i = 0; i * step <= sim.makespan + 1e-9; ++i) {
    const double x = kLeft + i * step * unit;
    svg.shape(fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#000'/>", x, axis_y, x,
                          axis_y + 5),
              x, axis_y + 5);
    svg.text(x, axis_y + 18, fmt::format("{:g}", i * step), 11, "middle");
  }
  svg.text(kLeft + plot_w, axis_y + 34, "time", 12, "end");

  // Legend, one line: each compute kind the schedule runs (for every chunk), idle, a send.
  double x = kLeft;
  const double legend_y = axis_y + 46;
  auto swatch = [&](const std::string& fill, const std::string& name) {
    svg.shape(fmt::format("<rect x='{:.1f}' y='{:.1f}' width='14' height='14' fill='{}' stroke='#333' "
                          "stroke-width='0.6'/>", x, legend_y, fill),
              x + 14, legend_y + 14);
    svg.text(x + 18, legend_y + 11, name, 12);
    x += 30 + svg_text_width(name, 12);
  };
  for (ActionKind kind : {ActionKind::Forward, ActionKind::Backward, ActionKind::BackwardInput,
                          ActionKind::BackwardWeight}) {
    const bool runs = std::any_of(sim.ranks.begin(), sim.ranks.end(), [&](const RankTimeline& t) {
      return std::any_of(t.compute.begin(), t.compute.end(), [&](const TimedAction& a) { return a.action.kind == kind; });
    });
    if (!runs) continue;
    for (int c = 0; c < v; ++c)
      swatch(fill_colour(Action{kind, 0, c, -1}, v),
             fmt::format("{}{}", action_kind_name(kind), v > 1 ? fmt::format(" chunk {}", c) : ""));
  }
  swatch("url(#bubble)", "idle (bubble)");
  svg.shape(fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='{}' marker-end='url(#arrow)'/>",
                        x, legend_y + 7, x + 24, legend_y + 7, kSendColour),
            x + 24, legend_y + 14);
  svg.text(x + 30, legend_y + 11, "send (activation forward, gradient back)", 12);
  svg.text(kLeft, legend_y + 34,
           fmt::format("bubble {:.3g}: the ranks' idle share of the iteration (hatched time ÷ all ranks' time)",
                       sim.bubble()),
           12);
  return svg.document();
}

}  // namespace tessel
