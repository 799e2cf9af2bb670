#include "layout_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "parallel_flags.h"
#include "tessel/core/error.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/train/plan.h"

namespace tessel {

namespace {

// The axes a rank has a coordinate on, each with its own group kind; the combined kinds (dp_cp,
// mp, ...) are listed after the table.
constexpr std::array<GroupKind, 7> kAxisKinds = {GroupKind::TP, GroupKind::CP, GroupKind::DP, GroupKind::PP,
                                                 GroupKind::ETP, GroupKind::EP, GroupKind::EDP};

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
  fmt::print("expert layers: world {} = ETP {} × EP {} × PP {} × EDP {}, EDP = {} / ({} × {} × {}) = {}\n",
             c.world, c.expert_tp(), c.ep, c.pp, c.expert_dp(), c.world, c.expert_tp(), c.ep, c.pp,
             c.expert_dp());
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
  if (o.pipeline_size > 1)
    fmt::print("  each stage sends its output activation [micro batch, sequence, hidden] = [{}, {}, {}] "
               "forward and receives its gradient back\n",
               micro_batch, m.seq_length, m.hidden_size);
}

// How context parallelism splits one sequence (seed example 11): the seed's simple split into
// CP contiguous pieces, and Megatron's load-balanced one that tessel runs — 2·CP chunks, rank i
// holding chunks i and 2·CP−1−i, so every rank gets the same share of the causal triangle.
void print_context_split(int cp, int64_t T) {
  fmt::print("context parallel: sequence {} over CP {}\n", T, cp);
  std::vector<std::string> simple;
  for (int r = 0; r < cp; ++r)
    simple.push_back(fmt::format("rank {} positions {}–{}", r, r * T / cp, (r + 1) * T / cp - 1));
  fmt::print("  simple split: {}\n", fmt::join(simple, ", "));
  fmt::print("  load-balanced (what tessel runs): {} chunks of {}\n", 2 * cp, T / (2 * cp));
  for (int r = 0; r < cp; ++r)
    fmt::print("    rank {} chunks {{{},{}}}: positions [{}]\n", r, r, 2 * cp - 1 - r,
               fmt::join(context_parallel_positions(T, cp, r), ","));
}

// Seed example 10: the experts of every MoE layer split evenly over EP, and each expert's MLP
// over ETP.
void print_expert_split(int experts, int ep, int etp) {
  fmt::print("experts: {} / EP {} = {} per EP rank: {}\n", experts, ep, experts / ep,
             split_text(experts, ep, "expert", "experts"));
  if (etp > 1)
    fmt::print("each expert over ETP {}: gate/up split by columns, down by rows (1/{} of its "
               "neurons per rank); the tokens it receives are all-gathered over ETP, its output "
               "reduce-scattered back\n",
               etp, etp);
}

void print_table(const Layout& layout) {
  std::vector<GroupKind> shown;
  for (GroupKind kind : kAxisKinds)
    if (layout.groups(kind).front().size() > 1) shown.push_back(kind);
  std::vector<std::string> lines(layout.world() + 1);
  lines[0] = "rank | tp cp dp pp | etp ep edp";
  for (int r = 0; r < layout.world(); ++r) {
    RankCoords c = layout.coords(r);
    lines[r + 1] = fmt::format("{:>4} | {:>2} {:>2} {:>2} {:>2} | {:>3} {:>2} {:>3}", r, c.tp, c.cp, c.dp,
                               c.pp, c.etp, c.ep, c.edp);
  }
  // One column per shown kind, as wide as its widest cell.
  for (size_t i = 0; i < shown.size(); ++i) {
    std::vector<std::string> cells = {std::string(group_kind_name(shown[i])) + " group"};
    for (int r = 0; r < layout.world(); ++r) cells.push_back(group_text(layout.group_of(shown[i], r)));
    size_t width = 0;
    for (const std::string& cell : cells) width = std::max(width, cell.size());
    for (size_t row = 0; row < lines.size(); ++row)
      lines[row] += (i == 0 ? " | " : "  ") +
                    (i + 1 == shown.size() ? cells[row] : fmt::format("{:<{}}", cells[row], width));
  }
  fmt::print("\n");
  for (const std::string& line : lines) fmt::print("{}\n", line);
}

void print_group_lists(const Layout& layout) {
  fmt::print("\ngroups, in Megatron-Core's order:\n");
  for (GroupKind kind : kAllGroupKinds) {
    const std::vector<std::vector<int>>& groups = layout.groups(kind);
    std::vector<std::string> texts;
    for (const std::vector<int>& g : groups) texts.push_back(group_text(g));
    fmt::print("  {:<10} {} group{} of {}: {}\n", group_kind_name(kind), groups.size(),
               groups.size() == 1 ? "" : "s", groups.front().size(), fmt::join(texts, " "));
  }
}

void print_rank(const Layout& layout, int rank) {
  RankCoords c = layout.coords(rank);
  fmt::print("\nrank {}: tp {}, cp {}, dp {}, pp {}; expert layers: etp {}, ep {}, edp {}\n", rank, c.tp, c.cp,
             c.dp, c.pp, c.etp, c.ep, c.edp);
  std::vector<std::string> texts;
  size_t width = 0;
  for (GroupKind kind : kAllGroupKinds) {
    const std::vector<int>& g = layout.group_of(kind, rank);
    texts.push_back(g.empty() ? "(none: a middle pipeline stage)" : group_text(g));
    width = std::max(width, texts.back().size());
  }
  for (int k = 0; k < kNumGroupKinds; ++k)
    fmt::print("  {:<10} {:<{}}   {}\n", group_kind_name(kAllGroupKinds[k]), texts[k], width,
               group_kind_role(kAllGroupKinds[k]));
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
  c.add_flag("--json", json_, "print one JSON object: world, order, groups, ranks")->excludes(rank_opt_);
  const BatchFlags batch = add_batch_flags(c, batch_);
  micro_batch_opt_ = batch.micro_batch;
  num_microbatches_opt_ = add_microbatches_flag(c, num_microbatches_);
  global_batch_opt_ = batch.global_batch->excludes(num_microbatches_opt_);
  model_.add_to(c);
  add_stage_flags(c, pipeline_);
  c.footer(
      "A model flag adds what the layout does to the model, and its rules: --num-attention-heads, "
      "--num-query-groups, --hidden-size and --ffn-hidden-size the split over TP, --num-layers the "
      "pipeline stages, --num-experts the experts per EP rank, --seq-length with CP the context split.");
}

bool LayoutCommand::model_given() const { return model_.any_given() || sequence_parallel_opt_->count() > 0; }

bool LayoutCommand::batch_given() const {
  return micro_batch_opt_->count() + num_microbatches_opt_->count() + global_batch_opt_->count() > 0;
}

void LayoutCommand::run() const {
  const ModelConfig model = model_.resolve("");
  const int64_t micro_batch = batch_.micro_batch_size;
  std::vector<std::string> v = layout_violations(config_);
  const bool layout_ok = v.empty();
  if (rank_opt_->count() > 0 && (rank_ < 0 || rank_ >= config_.world))
    v.push_back(fmt::format("--rank {} is outside the world of {} ranks", rank_, config_.world));

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
  if (json_) {
    fmt::print("{}\n", layout_json(layout).dump());
    return;
  }
  print_summary(layout);
  if (batch_given())
    print_batch(micro_batch, config_.dp(), microbatch_count(config_, micro_batch, global_batch));
  const bool heads = model_.given(&ModelConfig::num_attention_heads);
  const bool groups =
      model_.given(&ModelConfig::num_query_groups) && model.query_groups() != model.num_attention_heads;
  const bool mlp = model_.given(&ModelConfig::hidden_size) || model_.given(&ModelConfig::ffn_hidden_size);
  if (heads || groups || mlp) print_model_split(model, config_.tp, heads, groups, mlp);
  if (show_cp) print_context_split(config_.cp, model.seq_length);
  if (experts) print_expert_split(num_experts, config_.ep, config_.expert_tp());
  if (layers)
    print_stages(assign_layers(model.num_layers, stages), stages, model,
                 micro_batch_opt_->count() ? micro_batch : 1);
  if (rank_opt_->count() > 0) {
    print_rank(layout, rank_);
    return;
  }
  print_table(layout);
  print_group_lists(layout);
}

}  // namespace tessel
