// The group kinds of layout.h as a reader meets them: named on a command line, described in a
// few words, placed on an axis, and the few a reader of a layout looks at first.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "tessel/parallel/layout.h"

namespace tessel {

// The kind group_kind_name() calls `name`, or none.
std::optional<GroupKind> group_kind_from_name(std::string_view name);

// What a kind's groups do: "tensor parallel: splits each layer's weights".
const char* group_kind_role(GroupKind kind);

// The coordinate a kind that is one axis gives a rank (&RankCoords::tp for TP), or none for the
// kinds that span several axes (mp, dp_cp, embedding, ...).
std::optional<int RankCoords::*> axis_coordinate(GroupKind kind);

// The kinds a reader of `layout` looks at first, in Megatron's order: TP, CP, DP, PP and EP where
// their groups hold more than one rank, and the expert layers' ETP and EDP where they do, the
// expert layers are split otherwise than the dense ones (EP or ETP given), and their groups
// differ from TP's and DP's. The combined kinds (mp, dp_cp, ...) only follow from these.
std::vector<GroupKind> kinds_of_interest(const Layout& layout);

}  // namespace tessel
