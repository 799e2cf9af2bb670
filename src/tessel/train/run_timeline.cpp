#include "tessel/train/run_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "tessel/core/svg.h"
#include "tessel/plan/memory.h"

namespace tessel {

bool is_collective(CommOp op) { return op != CommOp::Send && op != CommOp::Recv; }

std::vector<RunMessage> pair_messages(const RunTimeline& timeline) {
  // (iteration, group, from, to) -> the sends, then the receives, in the order they were posted
  using Route = std::tuple<int64_t, GroupKind, int, int>;
  std::map<Route, std::pair<std::vector<size_t>, std::vector<size_t>>> routes;
  for (size_t i = 0; i < timeline.calls.size(); ++i) {
    const RunTimeline::Call& c = timeline.calls[i];
    if (c.op == CommOp::Send) routes[{c.iteration, c.group, c.rank, c.peer}].first.push_back(i);
    if (c.op == CommOp::Recv) routes[{c.iteration, c.group, c.peer, c.rank}].second.push_back(i);
  }
  std::vector<RunMessage> messages;
  for (const auto& [route, ends] : routes)
    for (size_t k = 0; k < std::min(ends.first.size(), ends.second.size()); ++k)
      messages.push_back({ends.first[k], ends.second[k]});
  return messages;
}

namespace {

char action_letter(ActionKind kind) { return "FBIW"[static_cast<int>(kind)]; }

std::string box_name(const RunTimeline::Box& b, int chunks_per_rank) {
  return chunks_per_rank > 1 ? fmt::format("{}{} c{}", action_letter(b.kind), b.microbatch + 1, b.model_chunk)
                             : fmt::format("{}{}", action_letter(b.kind), b.microbatch + 1);
}

std::string call_name(const RunTimeline::Call& c) {
  if (c.op == CommOp::Send) return fmt::format("{} send to rank {}", group_kind_name(c.group), c.peer);
  if (c.op == CommOp::Recv) return fmt::format("{} recv from rank {}", group_kind_name(c.group), c.peer);
  return fmt::format("{} {}", group_kind_name(c.group), comm_op_name(c.op));
}

}  // namespace

// A thread per rank; a box per compute action and per communication call (its start to the end
// of this rank's wait for it), and a flow arrow from each send to its receive.
std::string run_timeline_chrome_trace(const RunTimeline& timeline, const std::string& tool) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < timeline.lanes.size(); ++r) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r}, {"args", {{"name", timeline.lanes[r]}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", r}, {"args", {{"sort_index", r}}}});
  }
  for (const RunTimeline::Box& b : timeline.boxes)
    events.push_back({{"name", box_name(b, timeline.chunks_per_rank)},
                      {"cat", std::string(1, action_letter(b.kind))},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", b.rank},
                      {"ts", 1e3 * b.start},
                      {"dur", 1e3 * (b.end - b.start)},
                      {"args", {{"microbatch", b.microbatch + 1}, {"model_chunk", b.model_chunk}, {"iteration", b.iteration}}}});
  for (const RunTimeline::Call& c : timeline.calls)
    events.push_back({{"name", call_name(c)},
                      {"cat", "comm"},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", c.rank},
                      {"ts", 1e3 * c.start},
                      {"dur", 1e3 * (c.end - c.start)},
                      {"args", {{"group", group_kind_name(c.group)}, {"op", comm_op_name(c.op)}, {"bytes", c.bytes},
                                {"iteration", c.iteration}}}});
  int id = 0;
  for (const RunMessage& m : pair_messages(timeline)) {
    const RunTimeline::Call &send = timeline.calls[m.send], &recv = timeline.calls[m.recv];
    for (const auto& [call, phase] : {std::pair{&send, "s"}, std::pair{&recv, "f"}})
      events.push_back({{"name", "message"}, {"cat", "comm"}, {"ph", phase}, {"bp", "e"}, {"id", id},
                        {"pid", 0}, {"tid", call->rank}, {"ts", 1e3 * (call == &send ? send.start : recv.end)}});
    ++id;
  }
  return nlohmann::json{{"traceEvents", events},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"iterations", {timeline.first_iteration, timeline.last_iteration}}, {"tool", tool}}}}
             .dump() +
         "\n";
}

namespace {

// The compute kinds in `tessel schedule`'s colours (F blue, B orange, I red, W green), a later
// model chunk of a rank lighter.
std::string box_colour(ActionKind kind, int chunk_index, int chunks_per_rank) {
  static constexpr int kRgb[4][3] = {{76, 120, 168}, {228, 120, 30}, {214, 80, 80}, {84, 162, 75}};
  const int* rgb = kRgb[static_cast<int>(kind)];
  const double lighten = chunks_per_rank > 1 ? 0.55 * chunk_index / (chunks_per_rank - 1) : 0;
  const auto channel = [&](int c) { return static_cast<int>(std::lround(c + (255 - c) * lighten)); };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(rgb[0]), channel(rgb[1]), channel(rgb[2]));
}

// A tick step of 1, 2 or 5 × 10^k ms that puts ticks at least `min_ms` apart.
double tick_step(double min_ms) {
  const double decade = std::pow(10.0, std::floor(std::log10(std::max(min_ms, 1e-9))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * decade >= min_ms) return m * decade;
  return 10 * decade;
}

std::string ms_text(double ms) {
  if (ms == 0) return "0";
  if (ms >= 1000) return fmt::format("{:g} s", ms / 1000);
  if (ms >= 1) return fmt::format("{:g} ms", ms);
  return fmt::format("{:g} µs", ms * 1000);
}

// Geometry of the drawing: a lane per rank, its compute boxes above a strip of collective marks.
struct Frame {
  double left, top, unit;  // unit: pixels per ms
  static constexpr double kRow = 28, kStrip = 14, kGap = 12;
  double lane_top(int rank) const { return top + rank * (kRow + kStrip + kGap); }
  double x(double ms) const { return left + ms * unit; }
};

// The idle time of each lane between the first compute and the last compute of any rank in the
// iteration: the bubble, hatched.
void draw_bubbles(SvgCanvas& svg, const RunTimeline& t, const Frame& f) {
  std::map<int64_t, std::pair<double, double>> spans;  // iteration -> first start, last end
  for (const RunTimeline::Box& b : t.boxes) {
    auto [it, fresh] = spans.try_emplace(b.iteration, b.start, b.end);
    if (!fresh) it->second = {std::min(it->second.first, b.start), std::max(it->second.second, b.end)};
  }
  for (const auto& [iteration, span] : spans) {
    for (size_t r = 0; r < t.lanes.size(); ++r) {
      std::vector<std::pair<double, double>> busy;
      for (const RunTimeline::Box& b : t.boxes)
        if (b.iteration == iteration && b.rank == static_cast<int>(r)) busy.push_back({b.start, b.end});
      std::sort(busy.begin(), busy.end());
      double from = span.first;
      busy.push_back({span.second, span.second});
      for (const auto& [start, end] : busy) {
        if (start > from) {
          const double y = f.lane_top(static_cast<int>(r));
          svg.shape(fmt::format("<rect class='bubble' x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{}' "
                                "fill='url(#bubble)'/>",
                                f.x(from), y, (start - from) * f.unit, Frame::kRow),
                    f.x(start), y + Frame::kRow);
        }
        from = std::max(from, end);
      }
    }
  }
}

}  // namespace

std::string run_timeline_svg(const RunTimeline& t, const std::string& title) {
  SvgCanvas svg;
  double last = 0;
  for (const RunTimeline::Box& b : t.boxes) last = std::max(last, b.end);
  for (const RunTimeline::Call& c : t.calls) last = std::max(last, c.end);
  double label_width = 0;
  for (const std::string& lane : t.lanes) label_width = std::max(label_width, svg_text_width(lane, 12));
  const Frame f{10 + label_width + 10, 48, 1100.0 / std::max(last, 1e-3)};
  svg.text(10, 22, title, 14);
  svg.text(10, 38,
           "boxes: compute (microbatches from 1); arrows: each send to its receive; ticks under a lane: "
           "its collectives; hatched: bubble (idle)",
           11, "start", "fill='#555'");
  svg.shape("<defs><pattern id='bubble' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'><rect width='6' height='6' fill='#f4f4f4'/>"
            "<line x1='0' y1='0' x2='0' y2='6' stroke='#bbb' stroke-width='2'/></pattern>"
            "<marker id='arrow' markerWidth='8' markerHeight='8' refX='7' refY='4' orient='auto'>"
            "<path d='M0,0 L8,4 L0,8 z' fill='#333'/></marker></defs>",
            0, 0);
  draw_bubbles(svg, t, f);
  // The chunk index of each (rank, model chunk), for the lighter colour of a rank's later chunks.
  std::map<std::pair<int, int>, int> chunk_index;
  for (const RunTimeline::Box& b : t.boxes) chunk_index[{b.rank, b.model_chunk}] = 0;
  for (auto it = chunk_index.begin(); it != chunk_index.end(); ++it)
    if (it != chunk_index.begin() && std::prev(it)->first.first == it->first.first)
      it->second = std::prev(it)->second + 1;
  for (size_t r = 0; r < t.lanes.size(); ++r) {
    const double y = f.lane_top(static_cast<int>(r));
    svg.text(10, y + Frame::kRow * 0.65, t.lanes[r], 12);
    svg.shape(fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#ccc'/>", f.left,
                          y + Frame::kRow + Frame::kStrip, f.x(last), y + Frame::kRow + Frame::kStrip),
              f.x(last), y + Frame::kRow + Frame::kStrip);
  }
  for (const RunTimeline::Box& b : t.boxes) {
    const double x = f.x(b.start), w = std::max(0.5, (b.end - b.start) * f.unit), y = f.lane_top(b.rank);
    svg.shape(fmt::format("<rect class='{}' x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{}' fill='{}' stroke='#333' "
                          "stroke-width='0.5'><title>rank {} {} (iteration {}): {:.3f} ms</title></rect>",
                          action_letter(b.kind), x, y, w, Frame::kRow,
                          box_colour(b.kind, chunk_index[{b.rank, b.model_chunk}], t.chunks_per_rank), b.rank,
                          box_name(b, t.chunks_per_rank), b.iteration, b.end - b.start),
              x + w, y + Frame::kRow);
    const std::string label = std::to_string(b.microbatch + 1);
    if (svg_text_width(label, 10) + 2 <= w) svg.text(x + w / 2, y + Frame::kRow * 0.65, label, 10, "middle", "fill='#fff'");
  }
  // The collectives: a tick in the lane's strip, coloured by group kind, labelled where the next
  // tick leaves room; the full label is the tick's tooltip.
  std::vector<GroupKind> kinds;
  for (const RunTimeline::Call& c : t.calls)
    if (is_collective(c.op) && std::find(kinds.begin(), kinds.end(), c.group) == kinds.end()) kinds.push_back(c.group);
  std::sort(kinds.begin(), kinds.end());
  // The palette's colours unlike the boxes' blue, orange, red and green.
  static constexpr int kMarkColours[] = {3, 5, 6, 7, 8, 9};
  const auto kind_colour = [&](GroupKind g) {
    return kSvgPalette[kMarkColours[(std::find(kinds.begin(), kinds.end(), g) - kinds.begin()) % std::size(kMarkColours)]];
  };
  std::vector<std::vector<const RunTimeline::Call*>> marks(t.lanes.size());
  for (const RunTimeline::Call& c : t.calls)
    if (is_collective(c.op)) marks[c.rank].push_back(&c);
  for (std::vector<const RunTimeline::Call*>& lane : marks) {
    std::sort(lane.begin(), lane.end(), [](const auto* a, const auto* b) { return a->start < b->start; });
    for (size_t i = 0; i < lane.size(); ++i) {
      const RunTimeline::Call& c = *lane[i];
      const double x = f.x(c.start), y = f.lane_top(c.rank) + Frame::kRow + 1;
      const std::string label = fmt::format("{} {} {}", group_kind_name(c.group), comm_op_name(c.op), bytes_str(c.bytes));
      svg.shape(fmt::format("<rect class='collective' x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{}' fill='{}'>"
                            "<title>rank {}: {} (iteration {}), {:.3f} ms</title></rect>",
                            x, y, std::max(2.0, (c.end - c.start) * f.unit), Frame::kStrip - 2, kind_colour(c.group),
                            c.rank, label, c.iteration, c.end - c.start),
                x + 2, y + Frame::kStrip - 2);
      const double room = (i + 1 < lane.size() ? f.x(lane[i + 1]->start) : f.x(last) + 200) - x;
      if (svg_text_width(label, 9) + 6 <= room) svg.text(x + 3, y + 10, label, 9);
    }
  }
  for (const RunMessage& m : pair_messages(t)) {
    const RunTimeline::Call &send = t.calls[m.send], &recv = t.calls[m.recv];
    const double y1 = f.lane_top(send.rank) + Frame::kRow / 2, y2 = f.lane_top(recv.rank) + Frame::kRow / 2;
    const double x1 = f.x(send.start), x2 = f.x(std::max(send.start, recv.end));
    svg.shape(fmt::format("<line class='message' x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#333' "
                          "stroke-width='0.8' marker-end='url(#arrow)'><title>rank {} → rank {}: {} {} "
                          "(iteration {})</title></line>",
                          x1, y1, x2, y2 + (y2 > y1 ? -4 : 4), send.rank, recv.rank, group_kind_name(send.group),
                          bytes_str(send.bytes), send.iteration),
              std::max(x1, x2) + 4, std::max(y1, y2));
  }
  // The time axis, ticks at round values, and the legend.
  const double axis_y = f.lane_top(static_cast<int>(t.lanes.size())) - Frame::kGap + 4;
  svg.shape(fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#000'/>", f.left, axis_y,
                        f.x(last), axis_y),
            f.x(last), axis_y);
  const double step = tick_step(80 / f.unit);
  for (double ms = 0; ms <= last + 1e-9; ms += step) {
    svg.shape(fmt::format("<line x1='{0:.1f}' y1='{1:.1f}' x2='{0:.1f}' y2='{2:.1f}' stroke='#000'/>", f.x(ms), axis_y,
                          axis_y + 5),
              f.x(ms), axis_y + 5);
    svg.text(f.x(ms), axis_y + 18, ms_text(ms), 11, "middle");
  }
  svg.text(f.x(last), axis_y + 34, "time since the first event", 11, "end");
  std::vector<std::string> names, colours;
  std::set<ActionKind> ran;
  for (const RunTimeline::Box& b : t.boxes) ran.insert(b.kind);
  for (ActionKind kind : ran) {
    names.push_back(std::string(1, action_letter(kind)));
    colours.push_back(box_colour(kind, 0, 1));
  }
  for (GroupKind g : kinds) {
    names.push_back(fmt::format("{} collective", group_kind_name(g)));
    colours.push_back(kind_colour(g));
  }
  names.push_back("bubble");
  colours.push_back("url(#bubble)");
  svg.legend(names, colours, f.left, axis_y + 44);
  return svg.document();
}

}  // namespace tessel
