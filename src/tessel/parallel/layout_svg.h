// The picture `tessel layout --svg` draws, as the seed draws its 8-GPU grid: every rank a box in
// rank order (a row per node when the node size is known, framed), and each group of each kind
// asked for a line of that kind's colour through its ranks, with a dot on every member; a legend
// names each kind, its role and its groups.
#pragma once

#include <string>
#include <vector>

#include "tessel/parallel/layout.h"

namespace tessel {

// `gpus_per_node` 0: the node size is not known, and ranks are drawn eight to a row, unframed.
std::string layout_svg(const Layout& layout, const std::vector<GroupKind>& kinds, int gpus_per_node);

}  // namespace tessel
