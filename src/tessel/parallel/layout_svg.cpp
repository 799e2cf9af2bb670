#include "tessel/parallel/layout_svg.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "tessel/core/svg.h"
#include "tessel/parallel/group_kinds.h"

namespace tessel {

namespace {

constexpr int kRanksPerRow = 8;   // without a node size: rows as wide as the seed's 8 GPUs
constexpr double kLeft = 12;      // the grid's left edge
constexpr double kTop = 64;       // below the title and the reading note
constexpr double kColumnGap = 20;
constexpr double kRowGap = 48;    // between rows: the arcs of groups that skip ranks run here
constexpr double kLaneTop = 40;   // the first kind's line, below a box's two lines of text
constexpr double kLaneStep = 9;   // between the lines of two kinds inside a box
constexpr double kFramePad = 8, kFrameLabel = 18;  // a node's frame around its row, its name on top
constexpr size_t kGroupsPerLine = 96;              // characters of a legend's list of groups

// Where each rank's box is: rank r in row r / columns, column r % columns.
struct Grid {
  int columns = 1;
  double box_w = 0, box_h = 0, row_top = 0;  // row_top: a box's top below its row's top
  double x(int rank) const { return kLeft + kFramePad + (rank % columns) * (box_w + kColumnGap); }
  double y(int rank) const { return kTop + (rank / columns) * pitch() + row_top; }
  double pitch() const { return row_top + box_h + kFramePad + kRowGap; }
  double lane(int rank, int kind) const { return y(rank) + kLaneTop + kind * kLaneStep; }
};

// "tp 0 · pp 1 · dp 0": the rank's coordinate on each kind drawn that is one axis, and the bytes it
// moved where a run's traffic is given.
std::string coordinates_text(const Layout& layout, const std::vector<GroupKind>& kinds, int rank,
                             const LayoutTraffic& traffic) {
  std::vector<std::string> parts;
  const RankCoords c = layout.coords(rank);
  for (GroupKind kind : kinds)
    if (const auto axis = axis_coordinate(kind)) parts.push_back(fmt::format("{} {}", group_kind_name(kind), c.**axis));
  if (!traffic.written.empty()) parts.push_back(traffic.written[rank]);
  return fmt::format("{}", fmt::join(parts, " · "));
}

// White for no bytes to a light orange for the most any rank moved: light enough that the
// groups' lines, the dp line's orange among them, stay visible over it.
std::string traffic_fill(const LayoutTraffic& traffic, int rank) {
  if (traffic.bytes.empty()) return "#fff";
  const double most = *std::max_element(traffic.bytes.begin(), traffic.bytes.end());
  const double share = most > 0 ? 0.4 * traffic.bytes[rank] / most : 0;
  const auto channel = [&](int full) { return static_cast<int>(std::lround(255 - (255 - full) * share)); };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(0xf2), channel(0x8e), channel(0x2b));
}

// A group's line: straight between ranks that are neighbours on the grid, and otherwise an arc
// that bows out below the row (or right of the column) into the gap, so that it does not run
// through the ranks it skips.
void draw_group(SvgCanvas& svg, const Grid& grid, const std::vector<int>& group, int kind, const char* colour) {
  auto at = [&](int rank) { return std::pair{grid.x(rank) + grid.box_w / 2, grid.lane(rank, kind)}; };
  auto [x, y] = at(group.front());
  std::string path = fmt::format("M{:.1f},{:.1f}", x, y);
  double right = x, bottom = y;
  for (size_t i = 1; i < group.size(); ++i) {
    const int a = group[i - 1], b = group[i];
    const auto [bx, by] = at(b);
    const int columns_apart = std::abs(a % grid.columns - b % grid.columns);
    const int rows_apart = std::abs(a / grid.columns - b / grid.columns);
    if (columns_apart + rows_apart <= 1) {
      path += fmt::format(" L{:.1f},{:.1f}", bx, by);
    } else {
      // The control point lies off the chord's middle along its normal, the one pointing down or
      // right (away from the canvas's top-left edge); a quadratic arc reaches half as far.
      const double dx = bx - x, dy = by - y, length = std::hypot(dx, dy);
      const double flip = dy > 0 ? -1 : 1, nx = flip * -dy / length, ny = flip * dx / length;
      const double room = 2 * (grid.y(a) + grid.box_h - y + kRowGap - 8);
      const double bow = std::min(0.3 * length, room);
      const double cx = (x + bx) / 2 + nx * bow, cy = (y + by) / 2 + ny * bow;
      path += fmt::format(" Q{:.1f},{:.1f} {:.1f},{:.1f}", cx, cy, bx, by);
      right = std::max(right, (x + bx) / 2 + nx * bow / 2);
      bottom = std::max(bottom, (y + by) / 2 + ny * bow / 2);
    }
    x = bx, y = by;
    right = std::max(right, x), bottom = std::max(bottom, y);
  }
  svg.shape(fmt::format("<path d='{}' fill='none' stroke='{}' stroke-width='3' stroke-opacity='0.8' "
                        "stroke-linecap='round'/>", path, colour),
            right + 2, bottom + 2);
  for (int rank : group) {
    const auto [mx, my] = at(rank);
    svg.shape(fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='4.5' fill='{}'/>", mx, my, colour), mx + 5, my + 5);
  }
}

// "(0,1) (2,3) (4,5)" over as many lines as it takes, broken after a space or a comma.
std::vector<std::string> group_lines(const std::vector<std::vector<int>>& groups) {
  std::vector<std::string> texts;
  for (const std::vector<int>& g : groups) texts.push_back(fmt::format("({})", fmt::join(g, ",")));
  std::string rest = fmt::format("{}", fmt::join(texts, " "));
  std::vector<std::string> lines;
  while (rest.size() > kGroupsPerLine) {
    const size_t at = rest.find_last_of(" ,", kGroupsPerLine - 1);
    const size_t cut = at == std::string::npos ? kGroupsPerLine : at + 1;
    lines.push_back(rest.substr(0, cut));
    rest.erase(0, cut);
  }
  lines.push_back(rest);
  return lines;
}

}  // namespace

std::string layout_svg(const Layout& layout, const std::vector<GroupKind>& kinds, int gpus_per_node,
                       const LayoutTraffic& traffic) {
  const ParallelConfig& c = layout.config();
  const int world = layout.world();
  Grid grid;
  grid.columns = gpus_per_node > 0 ? gpus_per_node : std::min(world, kRanksPerRow);
  grid.row_top = gpus_per_node > 0 ? kFrameLabel : 0;
  grid.box_h = kLaneTop + std::max(static_cast<double>(kinds.size()) - 1, 0.0) * kLaneStep + 10;
  grid.box_w = 64;
  for (int r = 0; r < world; ++r)
    grid.box_w = std::max({grid.box_w, svg_text_width(fmt::format("rank {}", r), 13) + 16,
                           svg_text_width(coordinates_text(layout, kinds, r, traffic), 10) + 12});

  SvgCanvas svg;
  svg.text(kLeft, 22, fmt::format("world {} = TP {} × CP {} × PP {} × DP {} · order {} (first axis fastest){}", world,
                                  c.tp, c.cp, c.pp, c.dp(), c.order,
                                  gpus_per_node > 0 ? fmt::format(" · nodes of {} GPUs", gpus_per_node) : ""),
           15);
  svg.text(kLeft, 42,
           fmt::format("each box a rank; a line of a kind's colour joins the ranks of one group, a dot on each{}",
                       traffic.bytes.empty() ? ""
                                             : fmt::format("; the deeper a box's orange, the more bytes its rank "
                                                           "sent, received and reduced in {}", traffic.source)),
           12, "start", "fill='#555'");

  if (gpus_per_node > 0) {
    const int nodes = (world + gpus_per_node - 1) / gpus_per_node;  // a row each
    for (int node = 0; node < nodes; ++node) {
      const double top = kTop + node * grid.pitch();
      const double w = 2 * kFramePad + grid.columns * grid.box_w + (grid.columns - 1) * kColumnGap;
      const double h = grid.row_top + grid.box_h + kFramePad;
      svg.shape(fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' rx='8' fill='#f4f4f4' "
                            "stroke='#888'/>", kLeft, top, w, h),
                kLeft + w, top + h);
      svg.text(kLeft + kFramePad, top + 14, fmt::format("node {}", node), 12, "start", "fill='#555'");
    }
  }
  for (int r = 0; r < world; ++r)
    svg.shape(fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' rx='4' fill='{}' "
                          "stroke='#333'/>", grid.x(r), grid.y(r), grid.box_w, grid.box_h, traffic_fill(traffic, r)),
              grid.x(r) + grid.box_w, grid.y(r) + grid.box_h);
  for (size_t k = 0; k < kinds.size(); ++k)
    for (const std::vector<int>& group : layout.groups(kinds[k]))
      if (!group.empty()) draw_group(svg, grid, group, static_cast<int>(k), kSvgPalette[k % kSvgPalette.size()]);
  // The ranks' names over the lines that cross their boxes, each on a white halo.
  const std::string halo = "stroke='#fff' stroke-width='3' paint-order='stroke'";
  for (int r = 0; r < world; ++r) {
    const double middle = grid.x(r) + grid.box_w / 2;
    svg.text(middle, grid.y(r) + 16, fmt::format("rank {}", r), 13, "middle", "font-weight='bold' " + halo);
    svg.text(middle, grid.y(r) + 30, coordinates_text(layout, kinds, r, traffic), 10, "middle", halo);
  }

  // The legend: each kind's colour, name, role and groups.
  double y = svg.bottom() + 24;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const std::vector<std::vector<int>>& groups = layout.groups(kinds[k]);
    y = svg.legend({fmt::format("{} — {}: {} group{} of {}", group_kind_name(kinds[k]), group_kind_role(kinds[k]),
                                groups.size(), groups.size() == 1 ? "" : "s", groups.front().size())},
                   {kSvgPalette[k % kSvgPalette.size()]}, kLeft, y);
    for (const std::string& line : group_lines(groups)) {
      svg.text(kLeft + 18, y + 9, line, 11, "start", "fill='#444'");
      y += 15;
    }
    y += 6;
  }
  return svg.document();
}

}  // namespace tessel
