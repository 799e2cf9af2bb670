// Megatron-Core's rank generator. A rank number is a mixed-radix number whose digits are the
// coordinates on each axis, taken in the order string's order with the first axis the fastest:
//   rank = c[0] + c[1]·s[0] + c[2]·s[0]·s[1] + ...   (s = axis sizes in order)
// A group kind is a set of axes that vary inside a group; the other axes' coordinates say which
// group. Groups are numbered by those other coordinates as a mixed-radix number (first axis
// fastest), and ranks inside a group by the varying coordinates the same way — exactly
// generate_masked_orthogonal_rank_groups in megatron/core/parallel_state.py.
//
// Two grids share the order string: the dense one (sizes tp, cp, dp, pp; ep is 1 there) and the
// expert one (etp in tp's place, ep, expert dp in dp's place, pp; cp is 1 there). An axis the
// order string leaves out must have size 1 on both; Megatron appends it at the end.
#include "tessel/parallel/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <cctype>

#include "tessel/core/error.h"

namespace tessel {

namespace {

constexpr const char* kStrategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
constexpr const char* kReshard[] = {"default", "always", "never"};

template <typename E, size_t N>
bool parse_name(const char* const (&names)[N], const std::string& name, E& out) {
  const auto found = std::find(std::begin(names), std::end(names), name);
  if (found == std::end(names)) return false;
  out = static_cast<E>(found - std::begin(names));
  return true;
}

}  // namespace

const char* sharding_strategy_name(ShardingStrategy s) { return kStrategies[static_cast<int>(s)]; }
bool parse_sharding_strategy(const std::string& name, ShardingStrategy& out) {
  return parse_name(kStrategies, name, out);
}
const char* reshard_after_forward_name(ReshardAfterForward r) { return kReshard[static_cast<int>(r)]; }
bool parse_reshard_after_forward(const std::string& name, ReshardAfterForward& out) {
  return parse_name(kReshard, name, out);
}

namespace {

enum Axis : int { kTP, kCP, kEP, kDP, kPP };
constexpr int kNumAxes = 5;
constexpr std::array<const char*, kNumAxes> kAxisTokens = {"tp", "cp", "ep", "dp", "pp"};

// The order string's axes, then those it leaves out (size 1 by validation), so every axis has a
// place. `problems` lists what is wrong with the string itself.
struct ParsedOrder {
  std::vector<int> axes;          // all five, order string first
  std::vector<int> given;         // the axes the string names, in its order
  std::vector<std::string> problems;
};

ParsedOrder parse_order(const std::string& order) {
  ParsedOrder parsed;
  std::string lower = order;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::array<int, kNumAxes> seen{};
  size_t start = 0;
  while (true) {
    size_t dash = lower.find('-', start);
    std::string token = lower.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    auto it = std::find_if(kAxisTokens.begin(), kAxisTokens.end(),
                           [&](const char* name) { return token == name; });
    if (it == kAxisTokens.end()) {
      parsed.problems.push_back(fmt::format("--order '{}': unknown axis '{}' (known: tp, cp, ep, dp, pp)",
                                            order, token));
    } else {
      int axis = static_cast<int>(it - kAxisTokens.begin());
      if (seen[axis] == 0) parsed.given.push_back(axis);
      else if (seen[axis] == 1)
        parsed.problems.push_back(fmt::format("--order '{}' names {} more than once", order, token));
      ++seen[axis];
    }
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  parsed.axes = parsed.given;
  for (int axis = 0; axis < kNumAxes; ++axis)
    if (!seen[axis]) parsed.axes.push_back(axis);
  return parsed;
}

// The sizes of each axis on the two grids (valid configs only: dp() and expert_dp() divide).
std::array<int, kNumAxes> dense_sizes(const ParallelConfig& c) { return {c.tp, c.cp, 1, c.dp(), c.pp}; }
std::array<int, kNumAxes> expert_sizes(const ParallelConfig& c) {
  return {c.expert_tp(), 1, c.ep, c.expert_dp(), c.pp};
}

// Megatron's generate_masked_orthogonal_rank_groups: `sizes` are the axis sizes in order (first
// fastest), `varies[i]` says whether axis i varies inside a group.
std::vector<std::vector<int>> orthogonal_groups(const std::vector<int>& sizes, const std::vector<bool>& varies) {
  const size_t axes = sizes.size();
  std::vector<int> stride(axes);
  int world = 1;
  for (size_t i = 0; i < axes; ++i) {
    stride[i] = world;
    world *= sizes[i];
  }
  int group_size = 1;
  for (size_t i = 0; i < axes; ++i)
    if (varies[i]) group_size *= sizes[i];

  std::vector<std::vector<int>> groups(world / group_size);
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    // The fixed axes' coordinates are the digits of the group's index.
    int base = 0, rest = g;
    for (size_t i = 0; i < axes; ++i) {
      if (varies[i]) continue;
      base += (rest % sizes[i]) * stride[i];
      rest /= sizes[i];
    }
    for (int k = 0; k < group_size; ++k) {
      // The varying axes' coordinates are the digits of the position inside the group.
      int rank = base;
      rest = k;
      for (size_t i = 0; i < axes; ++i) {
        if (!varies[i]) continue;
        rank += (rest % sizes[i]) * stride[i];
        rest /= sizes[i];
      }
      groups[g].push_back(rank);
    }
  }
  return groups;
}

// The groups in which `axes` vary, on the grid with `sizes` laid out in `order`.
std::vector<std::vector<int>> groups_over(const std::vector<int>& order, const std::array<int, kNumAxes>& sizes,
                                          std::initializer_list<Axis> axes) {
  std::vector<int> ordered_sizes;
  std::vector<bool> varies;
  for (int axis : order) {
    ordered_sizes.push_back(sizes[axis]);
    varies.push_back(std::find(axes.begin(), axes.end(), axis) != axes.end());
  }
  return orthogonal_groups(ordered_sizes, varies);
}

// Product of the sizes of the axes before pp: the distance between neighbouring pipeline stages.
int pipeline_stride(const std::vector<int>& order, const std::array<int, kNumAxes>& sizes) {
  int stride = 1;
  for (int axis : order) {
    if (axis == kPP) break;
    stride *= sizes[axis];
  }
  return stride;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP: return "tp";
    case GroupKind::CP: return "cp";
    case GroupKind::DP: return "dp";
    case GroupKind::DP_CP: return "dp_cp";
    case GroupKind::PP: return "pp";
    case GroupKind::TP_CP: return "tp_cp";
    case GroupKind::MP: return "mp";
    case GroupKind::TP_DP_CP: return "tp_dp_cp";
    case GroupKind::Embedding: return "embedding";
    case GroupKind::EP: return "ep";
    case GroupKind::ETP: return "etp";
    case GroupKind::EDP: return "edp";
    case GroupKind::TP_EP: return "tp_ep";
  }
  return "?";
}

std::vector<std::string> layout_violations(const ParallelConfig& c) {
  std::vector<std::string> v;
  auto at_least = [&](const char* flag, int value, int least) {
    if (value < least) v.push_back(fmt::format("{} must be at least {} (got {})", flag, least, value));
  };
  at_least("world size", c.world, 1);
  at_least("--tensor-model-parallel-size", c.tp, 1);
  at_least("--context-parallel-size", c.cp, 1);
  at_least("--pipeline-model-parallel-size", c.pp, 1);
  at_least("--expert-model-parallel-size", c.ep, 1);
  at_least("--expert-tensor-parallel-size", c.etp, 0);  // 0: same as TP
  at_least("--num-virtual-stages-per-pipeline-rank", c.vpp, 1);
  // The layout lists every rank's groups: a world far past any job's (the largest run on ~100,000
  // GPUs) is refused before they fill memory, and with it the sizes that divide it.
  if (c.world > kMaxWorld)
    v.push_back(fmt::format("world size {} is past tessel's bound of {} ranks", c.world, kMaxWorld));
  const bool sizes_ok = v.empty();

  bool divisible = false;
  if (sizes_ok) {
    // In 64 bits: three sizes up to the world's each.
    const int64_t dense = int64_t{c.tp} * c.cp * c.pp, expert = int64_t{c.expert_tp()} * c.ep * c.pp;
    if (c.world % dense != 0)
      v.push_back(fmt::format("world size {} is not divisible by TP × CP × PP = {} × {} × {} = {} "
                              "(--tensor-model-parallel-size, --context-parallel-size, "
                              "--pipeline-model-parallel-size)", c.world, c.tp, c.cp, c.pp, dense));
    if (c.world % expert != 0)
      v.push_back(fmt::format("world size {} is not divisible by ETP × EP × PP = {} × {} × {} = {} "
                              "(--expert-tensor-parallel-size, --expert-model-parallel-size, "
                              "--pipeline-model-parallel-size)", c.world, c.expert_tp(), c.ep, c.pp, expert));
    divisible = c.world % dense == 0 && c.world % expert == 0;
  }
  if (c.vpp > 1 && c.pp == 1)
    v.push_back(fmt::format("--num-virtual-stages-per-pipeline-rank {} needs "
                            "--pipeline-model-parallel-size > 1", c.vpp));

  ParsedOrder order = parse_order(c.order);
  v.insert(v.end(), order.problems.begin(), order.problems.end());
  if (!divisible) return v;

  // An axis left out of the order string is appended by Megatron, which only works at size 1.
  const std::array<int, kNumAxes> dense = dense_sizes(c), expert = expert_sizes(c);
  for (int axis = 0; axis < kNumAxes; ++axis) {
    if (std::find(order.given.begin(), order.given.end(), axis) != order.given.end()) continue;
    if (dense[axis] == 1 && expert[axis] == 1) continue;
    std::string size = axis == kCP   ? std::to_string(dense[axis])
                       : axis == kEP ? std::to_string(expert[axis])
                                     : fmt::format("{} (expert {})", dense[axis], expert[axis]);
    v.push_back(fmt::format("--order '{}' leaves out {}, whose size is {}", c.order, kAxisTokens[axis], size));
  }
  if (!v.empty()) return v;

  // Megatron: the dense and the expert grid must share their pipeline groups. With pp last both
  // grids agree; otherwise it asks for equal data-parallel sizes, then checks the groups.
  if (c.pp > 1 && order.given.back() != kPP) {
    if (c.expert_dp() != c.dp())
      v.push_back(fmt::format("--order '{}' does not end with pp, which needs expert DP ({}) equal to "
                              "DP ({})", c.order, c.expert_dp(), c.dp()));
    else if (pipeline_stride(order.axes, dense) != pipeline_stride(order.axes, expert))
      v.push_back(fmt::format("--order '{}' gives the expert layers other pipeline groups than the "
                              "dense layers (the axes before pp span {} dense but {} expert ranks)",
                              c.order, pipeline_stride(order.axes, dense), pipeline_stride(order.axes, expert)));
  }
  return v;
}

Layout::Layout(const ParallelConfig& config) : config_(config) {
  std::vector<std::string> v = layout_violations(config);
  if (!v.empty()) throw Error("invalid parallel layout: " + join(v));

  const std::vector<int> order = parse_order(config.order).axes;
  const std::array<int, kNumAxes> dense = dense_sizes(config), expert = expert_sizes(config);
  auto set = [&](GroupKind kind, std::vector<std::vector<int>> groups) {
    groups_[static_cast<int>(kind)] = std::move(groups);
  };
  // The kinds initialize_model_parallel asks each generator for.
  set(GroupKind::TP, groups_over(order, dense, {kTP}));
  set(GroupKind::CP, groups_over(order, dense, {kCP}));
  set(GroupKind::DP, groups_over(order, dense, {kDP}));
  set(GroupKind::DP_CP, groups_over(order, dense, {kDP, kCP}));
  set(GroupKind::PP, groups_over(order, dense, {kPP}));
  set(GroupKind::TP_CP, groups_over(order, dense, {kTP, kCP}));
  set(GroupKind::MP, groups_over(order, dense, {kTP, kPP}));
  set(GroupKind::TP_DP_CP, groups_over(order, dense, {kTP, kDP, kCP}));
  set(GroupKind::EP, groups_over(order, expert, {kEP}));
  set(GroupKind::ETP, groups_over(order, expert, {kTP}));
  set(GroupKind::EDP, groups_over(order, expert, {kDP}));
  set(GroupKind::TP_EP, groups_over(order, expert, {kTP, kEP}));
  // The word embedding lives on the first and the last stage of each pipeline.
  std::vector<std::vector<int>> embedding;
  for (const std::vector<int>& stages : groups(GroupKind::PP))
    embedding.push_back(stages.size() == 1 ? std::vector<int>{stages.front()}
                                           : std::vector<int>{stages.front(), stages.back()});
  set(GroupKind::Embedding, std::move(embedding));

  // A rank's coordinate on an axis is its position in that axis's group.
  coords_.resize(config.world);
  auto positions = [&](GroupKind kind, int RankCoords::*field) {
    for (const std::vector<int>& group : groups(kind))
      for (size_t i = 0; i < group.size(); ++i) coords_[group[i]].*field = static_cast<int>(i);
  };
  positions(GroupKind::TP, &RankCoords::tp);
  positions(GroupKind::CP, &RankCoords::cp);
  positions(GroupKind::DP, &RankCoords::dp);
  positions(GroupKind::PP, &RankCoords::pp);
  positions(GroupKind::EP, &RankCoords::ep);
  positions(GroupKind::ETP, &RankCoords::etp);
  positions(GroupKind::EDP, &RankCoords::edp);
}

const std::vector<std::vector<int>>& Layout::groups(GroupKind kind) const {
  return groups_[static_cast<int>(kind)];
}

// Middle pipeline stages hold no embedding: their embedding group is empty.
const std::vector<int>& Layout::group_of(GroupKind kind, int rank) const {
  TESSEL_CHECK(rank >= 0 && rank < world(), "rank {} is outside the world of {} ranks", rank, world());
  for (const std::vector<int>& group : groups(kind))
    if (std::find(group.begin(), group.end(), rank) != group.end()) return group;
  static const std::vector<int> none;
  return none;
}

RankCoords Layout::coords(int rank) const {
  TESSEL_CHECK(rank >= 0 && rank < world(), "rank {} is outside the world of {} ranks", rank, world());
  return coords_[rank];
}

}  // namespace tessel
