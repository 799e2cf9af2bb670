// The picture `tessel layout --svg` draws, as the seed draws its 8-GPU grid: every rank a box in
// rank order (a row per node when the node size is known, framed), and each group of each kind
// asked for a line of that kind's colour through its ranks, with a dot on every member; a legend
// names each kind, its role and its groups. With a run's traffic, each box is shaded by the bytes
// its rank moved, and says how many.
#pragma once

#include <string>
#include <vector>

#include "tessel/parallel/layout.h"

namespace tessel {

// What each rank moved in one iteration of a real run (a tessel train --log-json record's "ranks"),
// to shade its box by; no bytes: white boxes.
struct LayoutTraffic {
  std::vector<double> bytes;         // a value per rank
  std::vector<std::string> written;  // and as written in its box: "1.2 MiB"
  std::string source;         // where they come from: "iteration 2 of log.jsonl"
};

// `gpus_per_node` 0: the node size is not known, and ranks are drawn eight to a row, unframed.
std::string layout_svg(const Layout& layout, const std::vector<GroupKind>& kinds, int gpus_per_node,
                       const LayoutTraffic& traffic = {});

}  // namespace tessel
