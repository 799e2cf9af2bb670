#include "tessel/parallel/group_kinds.h"

namespace tessel {

std::optional<GroupKind> group_kind_from_name(std::string_view name) {
  for (GroupKind kind : kAllGroupKinds)
    if (name == group_kind_name(kind)) return kind;
  return std::nullopt;
}

const char* group_kind_role(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return "tensor parallel: splits each layer's weights";
    case GroupKind::CP: return "context parallel: splits the sequence";
    case GroupKind::DP: return "data parallel: same weights, other samples";
    case GroupKind::DP_CP: return "data × context: gradients are reduced here";
    case GroupKind::PP: return "pipeline: one rank per stage";
    case GroupKind::TP_CP: return "tensor × context";
    case GroupKind::MP: return "model parallel: tensor × pipeline";
    case GroupKind::TP_DP_CP: return "tensor × data × context";
    case GroupKind::Embedding: return "first and last pipeline stage: the tied embedding";
    case GroupKind::EP: return "expert parallel: splits the experts";
    case GroupKind::ETP: return "expert tensor parallel";
    case GroupKind::EDP: return "expert data parallel";
    case GroupKind::TP_EP: return "expert tensor × expert parallel";
  }
  return "";
}

std::optional<int RankCoords::*> axis_coordinate(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return &RankCoords::tp;
    case GroupKind::CP: return &RankCoords::cp;
    case GroupKind::DP: return &RankCoords::dp;
    case GroupKind::PP: return &RankCoords::pp;
    case GroupKind::EP: return &RankCoords::ep;
    case GroupKind::ETP: return &RankCoords::etp;
    case GroupKind::EDP: return &RankCoords::edp;
    default: return std::nullopt;
  }
}

std::vector<GroupKind> kinds_of_interest(const Layout& layout) {
  const ParallelConfig& c = layout.config();
  const bool experts_split_otherwise = c.ep > 1 || c.expert_tp() != c.tp;
  std::vector<GroupKind> kinds;
  for (GroupKind kind : kAllGroupKinds) {
    if (!axis_coordinate(kind) || layout.groups(kind).front().size() < 2) continue;
    const bool expert = kind == GroupKind::ETP || kind == GroupKind::EDP;
    if (expert && (!experts_split_otherwise ||
                   layout.groups(kind) == layout.groups(kind == GroupKind::ETP ? GroupKind::TP : GroupKind::DP)))
      continue;
    kinds.push_back(kind);
  }
  return kinds;
}

}  // namespace tessel
