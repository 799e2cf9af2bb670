#include "layout_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <nlohmann/json.hpp>

#include "layout_traffic.h"
#include "parallel_flags.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/group_kinds.h"
#include "tessel/parallel/layout_svg.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/train/plan.h"

namespace tessel {

namespace {

// (0,1,2) as the seed writes groups.
std::string group_text(const std::vector<int>& group) {
  if (group.empty()) return "(none)";
  return "(" + fmt::format("{}", fmt::join(group, ",")) + ")";
}

// "rank 0 heads 0–3, rank 1 heads 4–7": `count` things split evenly over TP.
std::string split_text(int count, int tp, const char* one, const char* many) {
  const int per = count / tp;
  std::vector<std::string> parts;
  for (int r = 0; r < tp; ++r) {
    if (per == 1) parts.push_back(fmt::format("rank {} {} {}", r, one, r));
    else parts.push_back(fmt::format("rank {} {} {}–{}", r, many, r * per, (r + 1) * per - 1));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

void print_summary(const Layout& layout) {
  const ParallelConfig& c = layout.config();
  fmt::print("world {} = TP {} × CP {} × PP {} × DP {}   (order {}, first axis varies fastest)\n",
             c.world, c.tp, c.cp, c.pp, c.dp(), c.order);
  fmt::print("DP = world / (TP × CP × PP) = {} / ({} × {} × {}) = {}\n", c.world, c.tp, c.cp, c.pp, c.dp());
  if (c.ep > 1 || c.expert_tp() != c.tp)  // otherwise the expert layers are split as the dense ones
    fmt::print("expert layers: world {} = ETP {} × EP {} × PP {} × EDP {}, EDP = {} / ({} × {} × {}) = {}\n",
               c.world, c.expert_tp(), c.ep, c.pp, c.expert_dp(), c.world, c.expert_tp(), c.ep, c.pp,
               c.expert_dp());
}

// The seed lists its groups in the order tp-pp-dp: a model replica's pipeline stages are
// neighbours, and the replicas follow. Megatron's default order puts dp before pp. Where the
// order given makes other groups of the kinds shown than the seed's order would, one line says
// so, with rank 0's groups both ways. (With CP or EP above 1 the seed's order, which leaves them
// out, is no layout, and nothing is said.)
void print_order_note(const Layout& layout, const std::vector<GroupKind>& kinds) {
  ParallelConfig seed_config = layout.config();
  seed_config.order = "tp-pp-dp";
  if (!layout_violations(seed_config).empty()) return;
  const Layout seed(seed_config);
  auto rank0 = [&](const Layout& l) {
    std::vector<std::string> parts;
    for (GroupKind kind : kinds) parts.push_back(fmt::format("{} {}", group_kind_name(kind), group_text(l.group_of(kind, 0))));
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  if (std::all_of(kinds.begin(), kinds.end(), [&](GroupKind k) { return layout.groups(k) == seed.groups(k); })) return;
  fmt::print("order {}{} is not the seed's {} (pipeline stages before data replicas): rank 0 is in {} here, "
             "and in {} with --order {}\n",
             layout.config().order, layout.config().order == ParallelConfig{}.order ? " (Megatron's default)" : "",
             seed_config.order, rank0(layout), rank0(seed), seed_config.order);
}

void print_batch(int64_t micro_batch, int dp, int64_t microbatches) {
  fmt::print("global batch = micro batch × DP × microbatches = {} × {} × {} = {}\n", micro_batch, dp,
             microbatches, micro_batch * dp * microbatches);
}

void print_model_split(const ModelConfig& m, int tp, bool heads, bool groups, bool mlp) {
  fmt::print("TP {} splits the model:\n", tp);
  if (heads) {
    fmt::print("  attention heads: {} / TP {} = {} per TP rank\n", m.num_attention_heads, tp,
               m.num_attention_heads / tp);
    fmt::print("  attention heads per TP rank: {}\n", split_text(m.num_attention_heads, tp, "head", "heads"));
  }
  if (groups) {
    fmt::print("  query groups (key/value heads): {} / TP {} = {} per TP rank\n", m.query_groups(), tp,
               m.query_groups() / tp);
    fmt::print("  query groups per TP rank: {}\n", split_text(m.query_groups(), tp, "group", "groups"));
  }
  if (mlp) {
    const int C = m.hidden_size, F = m.ffn_size();
    fmt::print("  MLP {} → {} → {}: {} / TP {} = {} neurons per TP rank\n", C, F, C, F, tp, F / tp);
    fmt::print("  MLP neurons per TP rank: {}\n", split_text(F, tp, "neuron", "neurons"));
    fmt::print("  the first linear{} is split by columns: each TP rank computes its own neurons;\n",
               m.arch == Arch::Llama ? " (gate and up)" : "");
    fmt::print("  the second linear is split by rows: the TP ranks' partial sums ({} values per token) "
               "are all-reduced\n", C);
  }
}

// One row per rank: its coordinates, then its group on every axis whose groups have more than one
// rank.
// Which layers each pipeline rank holds (seed examples 7, 9 and 12), and what crosses between
// neighbouring stages.
void print_stages(const std::vector<ChunkSpec>& chunks, const StageOptions& o, const ModelConfig& m,
                  int64_t micro_batch) {
  fmt::print("pipeline: {} layers over PP {}{}:\n", m.num_layers, o.pipeline_size,
             o.virtual_stages > 1 ? fmt::format(" × VPP {} (model chunk k on stage k mod PP)", o.virtual_stages)
                                  : std::string());
  for (int stage = 0; stage < o.pipeline_size; ++stage) {
    std::vector<ChunkSpec> mine = rank_chunks(chunks, o, stage);
    std::string text;
    for (size_t c = 0; c < mine.size(); ++c) {
      const ChunkSpec& s = mine[c];
      if (!text.empty()) text += "; ";
      if (mine.size() > 1) text += fmt::format("chunk {} = ", c);
      text += s.num_layers == 0 ? std::string("no layers")
                                : fmt::format("layers {}–{}", s.first_layer + 1, s.first_layer + s.num_layers);
      if (s.has_embedding) text += " + embedding";
      if (s.has_head) text += " + final norm, LM head, loss";
    }
    fmt::print("  stage {}: {}\n", stage, text);
  }
  // Every model chunk but the last sends forward; the last computes the loss instead.
  const int p = o.pipeline_size, last = p - 1;
  const std::string activation = fmt::format("its output activation [micro batch, sequence, hidden] = [{}, {}, {}]",
                                             micro_batch, m.seq_length, m.hidden_size);
  if (o.virtual_stages > 1)
    fmt::print("  each model chunk sends {} forward to the next (stage {}'s chunk k to stage 0's chunk k+1) and "
               "receives its gradient back; the last, stage {}'s chunk {}, computes the loss and sends nothing "
               "forward\n", activation, last, last, o.virtual_stages - 1);
  else if (p == 2)
    fmt::print("  stage 0 sends {} forward to stage 1 and receives its gradient back; stage 1, the last, computes "
               "the loss and sends nothing forward\n", activation);
  else
    fmt::print("  stages 0–{} each send {} forward to the next stage and receive its gradient back; stage {}, the "
               "last, computes the loss and sends nothing forward\n", last - 1, activation, last);
}

// The query-key pairs causal attention scores for `positions`: position t attends to 0…t.
int64_t causal_pairs(const std::vector<int32_t>& positions) {
  int64_t pairs = 0;
  for (int32_t t : positions) pairs += t + 1;
  return pairs;
}

// How context parallelism splits one sequence (seed example 11): the seed's simple split into
// CP contiguous pieces, and Megatron's load-balanced one that tessel runs — 2·CP chunks, rank i
// holding chunks i and 2·CP−1−i, so every rank gets the same share of the causal triangle. The
// work of each rank (query-key pairs) is printed with both, which is the reason for the second.
void print_context_split(int cp, int64_t T) {
  fmt::print("context parallel: sequence {} over CP {}\n", T, cp);
  std::vector<std::string> simple;
  for (int r = 0; r < cp; ++r) {
    std::vector<int32_t> mine(T / cp);
    std::iota(mine.begin(), mine.end(), static_cast<int32_t>(r * T / cp));
    simple.push_back(fmt::format("rank {} positions {}–{} ({} pairs)", r, mine.front(), mine.back(), causal_pairs(mine)));
  }
  fmt::print("  simple split: {}\n", fmt::join(simple, ", "));
  fmt::print("  causal attention: position t attends to positions 0…t, t+1 query-key pairs, so later positions "
             "cost more and the simple split leaves rank {} the most work\n", cp - 1);
  fmt::print("  load-balanced (what tessel runs): {} chunks of {}, rank i holding chunks i and 2·CP−1−i = {}−i, an "
             "early chunk with a late one\n", 2 * cp, T / (2 * cp), 2 * cp - 1);
  for (int r = 0; r < cp; ++r) {
    const std::vector<int32_t> mine = context_parallel_positions(T, cp, r);
    fmt::print("    rank {} chunks {{{},{}}}: positions [{}] ({} pairs)\n", r, r, 2 * cp - 1 - r, fmt::join(mine, ","),
               causal_pairs(mine));
  }
}

// Seed example 10: the experts of every MoE layer split evenly over EP, and each expert's MLP
// over ETP (each only where its size is above 1).
void print_expert_split(int experts, int ep, int etp) {
  if (ep > 1)
    fmt::print("experts: {} / EP {} = {} per EP rank: {}\n", experts, ep, experts / ep,
               split_text(experts, ep, "expert", "experts"));
  if (etp > 1)
    fmt::print("each expert over ETP {}: gate/up split by columns, down by rows (1/{} of its "
               "neurons per rank); the tokens it receives are all-gathered over ETP, its output "
               "reduce-scattered back\n",
               etp, etp);
}

// One row per rank: its coordinate on each kind shown that is one axis, then its group of each
// kind shown.
void print_table(const Layout& layout, const std::vector<GroupKind>& kinds) {
  std::vector<std::vector<std::string>> columns;  // each a header, then a cell per rank
  columns.push_back({"rank"});
  for (int r = 0; r < layout.world(); ++r) columns.back().push_back(std::to_string(r));
  for (GroupKind kind : kinds)
    if (const auto axis = axis_coordinate(kind)) {
      columns.push_back({group_kind_name(kind)});
      for (int r = 0; r < layout.world(); ++r) columns.back().push_back(std::to_string(layout.coords(r).**axis));
    }
  const size_t coordinates = columns.size();
  for (GroupKind kind : kinds) {
    columns.push_back({std::string(group_kind_name(kind)) + " group"});
    for (int r = 0; r < layout.world(); ++r) columns.back().push_back(group_text(layout.group_of(kind, r)));
  }
  // Numbers right-aligned, groups left-aligned, each column as wide as its widest cell.
  std::vector<size_t> widths;
  for (const std::vector<std::string>& column : columns) {
    widths.push_back(0);
    for (const std::string& cell : column) widths.back() = std::max(widths.back(), cell.size());
  }
  fmt::print("\n");
  for (int row = 0; row <= layout.world(); ++row) {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c) {
      const size_t width = widths[c];
      const std::string& cell = columns[c][row];
      const std::string separator = c == 0 ? "" : c == 1 || c == coordinates ? " | " : c < coordinates ? " " : "  ";
      line += separator + (c < coordinates ? fmt::format("{:>{}}", cell, width)
                                           : c + 1 == columns.size() ? cell : fmt::format("{:<{}}", cell, width));
    }
    fmt::print("{}\n", line);
  }
}

void print_group_lists(const Layout& layout, const std::vector<GroupKind>& kinds) {
  fmt::print("\ngroups, in Megatron-Core's order:\n");
  for (GroupKind kind : kinds) {
    const std::vector<std::vector<int>>& groups = layout.groups(kind);
    std::vector<std::string> texts;
    for (const std::vector<int>& g : groups) texts.push_back(group_text(g));
    fmt::print("  {:<10} {} group{} of {}: {}\n", group_kind_name(kind), groups.size(),
               groups.size() == 1 ? "" : "s", groups.front().size(), fmt::join(texts, " "));
  }
  std::vector<std::string> others;
  for (GroupKind kind : kAllGroupKinds)
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) others.push_back(group_kind_name(kind));
  if (!others.empty()) fmt::print("  not shown: {} (--groups all, or name them)\n", fmt::join(others, ", "));
}

void print_rank(const Layout& layout, const std::vector<GroupKind>& kinds, int rank) {
  std::vector<std::string> coordinates;
  for (GroupKind kind : kinds)
    if (const auto axis = axis_coordinate(kind))
      coordinates.push_back(fmt::format("{} {}", group_kind_name(kind), layout.coords(rank).**axis));
  fmt::print("\nrank {}{}{}\n", rank, coordinates.empty() ? "" : ": ", fmt::join(coordinates, ", "));
  std::vector<std::string> texts;
  size_t width = 0;
  for (GroupKind kind : kinds) {
    const std::vector<int>& g = layout.group_of(kind, rank);
    texts.push_back(g.empty() ? "(none: a middle pipeline stage)" : group_text(g));
    width = std::max(width, texts.back().size());
  }
  for (size_t k = 0; k < kinds.size(); ++k)
    fmt::print("  {:<10} {:<{}}   {}\n", group_kind_name(kinds[k]), texts[k], width, group_kind_role(kinds[k]));
}

// --groups: the kinds it names, in its order, or every kind for "all"; a name it does not know is
// added to `v`.
std::vector<GroupKind> parse_group_kinds(const std::string& text, std::vector<std::string>& v) {
  if (text == "all") return {kAllGroupKinds.begin(), kAllGroupKinds.end()};
  std::vector<GroupKind> kinds;
  std::vector<std::string> names;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    if (const auto kind = group_kind_from_name(name)) {
      if (std::find(kinds.begin(), kinds.end(), *kind) == kinds.end()) kinds.push_back(*kind);
    } else {
      for (GroupKind k : kAllGroupKinds) names.push_back(group_kind_name(k));
      v.push_back(fmt::format("--groups {}: no group kind '{}' (known: {}, or all)", text, name, fmt::join(names, ", ")));
      names.clear();
    }
    start = comma + 1;
  }
  return kinds;
}

nlohmann::ordered_json layout_json(const Layout& layout) {
  nlohmann::ordered_json j;
  j["world"] = layout.world();
  j["order"] = layout.config().order;
  nlohmann::ordered_json groups = nlohmann::ordered_json::object();
  for (GroupKind kind : kAllGroupKinds) groups[group_kind_name(kind)] = layout.groups(kind);
  j["groups"] = std::move(groups);
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int r = 0; r < layout.world(); ++r) {
    RankCoords c = layout.coords(r);
    ranks.push_back({{"rank", r}, {"tp", c.tp}, {"cp", c.cp}, {"dp", c.dp}, {"pp", c.pp},
                     {"ep", c.ep}, {"etp", c.etp}, {"edp", c.edp}});
  }
  j["ranks"] = std::move(ranks);
  return j;
}

}  // namespace

LayoutCommand::LayoutCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("layout", "show the process groups, batch and model split of a parallel layout");
  CLI::App& c = *cmd_;
  c.add_option("--world", config_.world, "number of ranks")->required();
  sequence_parallel_opt_ = add_layout_flags(c, config_).sequence_parallel;
  rank_opt_ = c.add_option("--rank", rank_, "show this rank's groups only");
  CLI::Option* json = c.add_flag("--json", json_, "print one JSON object: world, order, groups (all kinds), ranks")
                          ->excludes(rank_opt_);
  groups_opt_ = c.add_option("--groups", groups_,
                             "the group kinds to show, e.g. tp,pp,dp, or all (default: TP, CP, DP, PP and EP where "
                             "their size is above 1, ETP and EDP where they also differ from TP and DP)")
                    ->excludes(json);
  svg_opt_ = c.add_option("--svg", svg_path_, "also draw the picture into this SVG file");
  gpus_per_node_opt_ =
      c.add_option("--gpus-per-node", gpus_per_node_, "--svg: draw the ranks a row per node of this many");
  traffic_opt_ = c.add_option("--traffic", traffic_path_,
                              "--svg: shade each rank's box by the bytes it moved in the last record of this "
                              "tessel train --log-json file");
  const BatchFlags batch = add_batch_flags(c, batch_);
  micro_batch_opt_ = batch.micro_batch;
  num_microbatches_opt_ = add_microbatches_flag(c, num_microbatches_);
  global_batch_opt_ = batch.global_batch->excludes(num_microbatches_opt_);
  model_.add_to(c);
  add_stage_flags(c, pipeline_);
  c.footer(
      "A model flag adds what the layout does to the model, and its rules: --num-attention-heads, "
      "--num-query-groups, --hidden-size and --ffn-hidden-size the split over TP, --num-layers the "
      "pipeline stages, --num-experts the experts per EP rank, --seq-length with CP the context split. "
      "Only parallelisms larger than one are described.");
}

bool LayoutCommand::model_given() const { return model_.any_given() || sequence_parallel_opt_->count() > 0; }

bool LayoutCommand::batch_given() const {
  return micro_batch_opt_->count() + num_microbatches_opt_->count() + global_batch_opt_->count() > 0;
}

void LayoutCommand::run() const {
  if (!svg_path_.empty()) require_writable_file("--svg", svg_path_);  // a folder or none: said first
  const ModelConfig model = model_.resolve("");
  const int64_t micro_batch = batch_.micro_batch_size;
  std::vector<std::string> v = layout_violations(config_);
  const bool layout_ok = v.empty();
  if (rank_opt_->count() > 0 && (rank_ < 0 || rank_ >= config_.world))
    v.push_back(fmt::format("--rank {} is outside the world of {} ranks", rank_, config_.world));
  const std::vector<GroupKind> kinds_asked =
      groups_opt_->count() > 0 ? parse_group_kinds(groups_, v) : std::vector<GroupKind>{};
  if (gpus_per_node_opt_->count() > 0 && gpus_per_node_ < 1)
    v.push_back(fmt::format("--gpus-per-node must be at least 1 (got {})", gpus_per_node_));
  if (gpus_per_node_opt_->count() > 0 && svg_opt_->count() == 0)
    v.push_back("--gpus-per-node draws the nodes in --svg's picture: give --svg too");
  if (traffic_opt_->count() > 0 && svg_opt_->count() == 0)
    v.push_back("--traffic shades the boxes of --svg's picture: give --svg too");
  const LayoutTraffic traffic =
      traffic_opt_->count() > 0 ? read_layout_traffic(traffic_path_, config_.world, v) : LayoutTraffic{};

  // The batch: micro batch × DP × microbatches, from the micro batch and either of the others
  // (Megatron's default global batch is micro batch × DP).
  if (batch_given() && micro_batch_opt_->count() == 0)
    v.push_back(fmt::format("{} needs --micro-batch-size",
                            num_microbatches_opt_->count() > 0 ? "--num-microbatches" : "--global-batch-size"));
  if (num_microbatches_ < 1) v.push_back(fmt::format("--num-microbatches must be positive (got {})", num_microbatches_));
  // A global batch left to the count is micro batch × DP × microbatches, compared by division
  // before it is multiplied: the flags take any 64-bit number, and the product wrapped to a
  // negative batch. A count past the schedules' bound or a product past 2^63 is the batch's one
  // rule broken, named by the flags given; a count below 1 is reported by its own rule, one
  // microbatch standing in for it.
  int64_t global_batch = batch_.global_batch_size;
  bool batch_known = true;
  if (global_batch_opt_->count() == 0) {
    const int64_t dp = layout_ok ? config_.dp() : 1, count = std::max(num_microbatches_, 1);
    batch_known = false;
    if (count > kMaxSchedulePairs)
      v.push_back(fmt::format("--num-microbatches {} is past tessel's bound of {}", count, kMaxSchedulePairs));
    else if (micro_batch > 0 && micro_batch > std::numeric_limits<int64_t>::max() / dp / count)
      v.push_back(fmt::format("--micro-batch-size {}{} × --num-microbatches {} is past 2^63 samples", micro_batch,
                              layout_ok ? fmt::format(" × DP {}", dp) : "", count));
    else
      batch_known = true, global_batch = std::max<int64_t>(micro_batch * dp * count, 1);
  }
  if (model_given()) {
    std::vector<std::string> m = model.violations();
    v.insert(v.end(), m.begin(), m.end());
  }
  if ((model_given() || batch_given()) && batch_known) {
    std::vector<std::string> b = batch_violations(config_, micro_batch, global_batch);
    v.insert(v.end(), b.begin(), b.end());
  }
  if (model_given()) {
    std::vector<std::string> t = model_split_violations(config_, model, micro_batch);
    v.insert(v.end(), t.begin(), t.end());
  }
  ParallelConfig staged = config_;  // with the virtual stages that --num-layers-per-virtual-pipeline-stage gives
  const std::vector<std::string> chunks = resolve_virtual_stages(model.num_layers, pipeline_, staged);
  v.insert(v.end(), chunks.begin(), chunks.end());
  const StageOptions stages = stage_options(staged, pipeline_, model.mtp_num_layers);
  const bool layers = model_.given(&ModelConfig::num_layers), experts = model_.given(&MoeConfig::num_experts);
  if (layers && chunks.empty()) {
    std::vector<std::string> st = stage_violations(model.num_layers, stages);
    v.insert(v.end(), st.begin(), st.end());
  }
  const int num_experts = model.moe.num_experts;
  if (experts && (num_experts < 1 || num_experts % config_.ep != 0))
    v.push_back(fmt::format("--num-experts {} is not divisible by --expert-model-parallel-size {}",
                            num_experts, config_.ep));
  // (training_violations checks the sequence against 2·CP: --seq-length is a model flag.)
  const bool show_cp = config_.cp > 1 && model_.given(&ModelConfig::seq_length);
  if (!v.empty()) throw Error(fmt::format("invalid layout: {}", fmt::join(v, "; ")));

  Layout layout(config_);
  const std::vector<GroupKind> kinds = groups_opt_->count() > 0 ? kinds_asked : kinds_of_interest(layout);
  if (json_) {
    fmt::print("{}\n", layout_json(layout).dump());
  } else {
    print_summary(layout);
    print_order_note(layout, kinds);
    if (batch_given())
      print_batch(micro_batch, config_.dp(), microbatch_count(config_, micro_batch, global_batch));
    const bool heads = model_.given(&ModelConfig::num_attention_heads);
    const bool groups =
        model_.given(&ModelConfig::num_query_groups) && model.query_groups() != model.num_attention_heads;
    const bool mlp = model_.given(&ModelConfig::hidden_size) || model_.given(&ModelConfig::ffn_hidden_size);
    // Only the parallelisms of size above 1 are described: TP 1 splits nothing.
    if (config_.tp > 1 && (heads || groups || mlp)) print_model_split(model, config_.tp, heads, groups, mlp);
    if (show_cp) print_context_split(config_.cp, model.seq_length);
    if (experts) print_expert_split(num_experts, config_.ep, config_.expert_tp());
    if (layers && config_.pp > 1)
      print_stages(assign_layers(model.num_layers, stages), stages, model,
                   micro_batch_opt_->count() ? micro_batch : 1);
    if (rank_opt_->count() > 0) {
      print_rank(layout, kinds, rank_);
    } else {
      print_table(layout, kinds);
      print_group_lists(layout, kinds);
    }
  }
  if (!svg_path_.empty()) {
    try {
      // A plot: a rerun of the command draws it again, no fsync.
      write_file_atomically(svg_path_, layout_svg(layout, kinds, gpus_per_node_, traffic), Durability::kReplaceable);
    } catch (const Error& e) {
      throw Error(fmt::format("--svg {}: {}", svg_path_, e.what()));
    }
    if (!json_) fmt::print("wrote {}\n", svg_path_);
  }
}

}  // namespace tessel
