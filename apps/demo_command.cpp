#include "demo_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "demo_output.h"
#include "demo_runs.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/core/params.h"
#include "tessel/parallel/data_parallel.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

namespace {

// This rank's shard of a parameter, sliced out of the whole tensor by the registry's shard spec
// (Param::global_index) — the rule every tessel layer's weights follow.
void copy_shard(Param& shard, const float* whole) {
  for (int64_t i = 0; i < shard.numel(); ++i) {
    const int64_t g = shard.global_index(i);
    shard.value[i] = g < 0 ? 0.0f : whole[g];
  }
}

// The first and last global index, along the split dimension, of what this rank's shard holds:
// read from the registry, not worked out here.
std::pair<int64_t, int64_t> split_range(const Param& p) {
  const int d = p.shard.dim;
  int64_t global_stride = 1, local_stride = 1;
  for (size_t k = d + 1; k < p.global_shape.size(); ++k) {
    global_stride *= p.global_shape[k];
    local_stride *= p.local_shape[k];
  }
  auto coord = [&](int64_t local) {
    return p.global_index(local) / global_stride % p.global_shape[d];
  };
  return {coord(0), coord((p.local_shape[d] - 1) * local_stride)};
}

float norm(const float* values, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(values[i]) * values[i];
  return static_cast<float>(std::sqrt(sum));
}

// One line per token of values (N, C): "PREFIX, token t: [...]".
std::string token_rows(const std::string& prefix, const float* values, int64_t N, int64_t C) {
  std::string lines;
  for (int64_t t = 0; t < N; ++t)
    lines += fmt::format("{}, token {}: {}\n", prefix, t, list_text(values + t * C, C));
  return lines;
}

ShardSpec tp_split(Comm& tp, int dim) {
  return ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size()};
}

// ---- seed example 4 (四.2): a column-parallel linear --------------------------------------
// Y = X·W with W (n, n) split by columns over TP 2: each rank multiplies the whole X by its own
// columns and so computes its own part of Y, with no communication; an all-gather over the TP
// group puts Y together on every rank. With W = identity, Y = X.
void demo_tp_column(ProcessGroups& groups, const std::vector<float>& x, bool identity,
                    uint64_t seed) {
  Comm& tp = groups.tp();
  const int64_t n = static_cast<int64_t>(x.size());
  // The whole W, [in, out] as GPT-2's Conv1D (y = x·W): identity, or normal(0, 1) from the seed.
  std::vector<float> w_whole(n * n, 0.0f);
  for (int64_t i = 0; i < n * n; ++i)
    w_whole[i] = identity ? (i / n == i % n ? 1.0f : 0.0f) : random_normal(seed, 0, i);

  // Declared as tessel's column-parallel layers declare theirs: split along dim 1, the outputs.
  ParamRegistry params;
  params.add("weight", {n, n}, ParamInit::Zeros, 0.0f, false, tp_split(tp, 1));
  params.finalize();
  Param& w = params.get("weight");
  copy_shard(w, w_whole.data());
  const int64_t cols = w.local_shape[1];

  std::vector<float> y_local(cols);  // (1, n / TP)
  cpu_kernels().linear_forward(y_local.data(), x.data(), w.value, nullptr, 1, n, cols,
                      WeightLayout::InOut);
  std::vector<float> y(n);  // (1, n): every rank's columns, in TP rank order
  tp.all_gather(y_local.data(), y.data(), cols);

  // The check: the same product on one rank, W unsplit.
  std::vector<float> y_whole(n);
  cpu_kernels().linear_forward(y_whole.data(), x.data(), w_whole.data(), nullptr, 1, n, n,
                      WeightLayout::InOut);
  const float diff = max_abs_difference(y.data(), y_whole.data(), n);

  print_from_rank0(
      groups.world(),
      fmt::format("seed example 4: TP {} splits W ({}×{}, {}) by columns; X = {}; Y = X·W\n",
                  tp.size(), n, n, identity ? "identity" : "random", list_text(x.data(), n)));
  const auto [first, last] = split_range(w);
  print_by_rank(
      groups.world(),
      fmt::format("rank {} holds columns {}–{} of W (shape [{}, {}])\nrank {} computes {}\n",
                  tp.rank(), first, last, n, cols, tp.rank(), list_text(y_local.data(), cols)));
  print_by_rank(groups.world(),
                fmt::format("rank {} gathered {} (unsplit X·W: max difference {:.1e})\n", tp.rank(),
                            list_text(y.data(), n), diff));
  check_against_one_process(groups.world(), diff, "demo tp-column: the gathered Y");
}

// ---- seed example 6 (五.2): an MLP split over TP ------------------------------------------
// MLP C → F → C with GELU, split as Megatron splits it. The first linear (c_fc) is
// column-parallel: rank r holds F/TP of the hidden neurons (its columns of c_fc and their
// biases), so GELU runs on its own neurons with no communication. The second (c_proj) is
// row-parallel: rank r holds the matching rows, so its product is a partial sum over its own
// neurons; one all-reduce over TP adds the partial sums, then c_proj's bias is added once.

// GPT-2's MLP parameters (names, [in, out] shapes); split over `tp` as TransformerChunk splits
// them, or whole when `tp` is null.
void declare_mlp(ParamRegistry& reg, int64_t C, int64_t F, Comm* tp) {
  auto split = [&](int dim) { return tp ? tp_split(*tp, dim) : ShardSpec{}; };
  reg.add("mlp.c_fc.weight", {C, F}, ParamInit::Normal, 1.0f / std::sqrt(static_cast<float>(C)),
          true, split(1));
  reg.add("mlp.c_fc.bias", {F}, ParamInit::Normal, 0.1f, false, split(0));
  reg.add("mlp.c_proj.weight", {F, C}, ParamInit::Normal, 1.0f / std::sqrt(static_cast<float>(F)),
          true, split(0));
  reg.add("mlp.c_proj.bias", {C}, ParamInit::Normal, 0.1f, false, ShardSpec{});
  reg.finalize();
}

// out (N, C) = GELU(x · c_fc + b_fc) · c_proj over the neurons this registry holds: the whole
// MLP's product for an unsplit registry, this rank's partial sum for a TP shard. No c_proj bias.
void mlp_product(float* out, const float* x, ParamRegistry& reg, int64_t N, int64_t C) {
  const Param& fc_w = reg.get("mlp.c_fc.weight");
  const int64_t F_local = fc_w.local_shape[1];
  std::vector<float> hidden(N * F_local), act(N * F_local);  // (N, F_local)
  cpu_kernels().linear_forward(hidden.data(), x, fc_w.value, reg.get("mlp.c_fc.bias").value, N, C, F_local,
                      WeightLayout::InOut);
  cpu_kernels().gelu_forward(act.data(), hidden.data(), N * F_local);
  cpu_kernels().linear_forward(out, act.data(), reg.get("mlp.c_proj.weight").value, nullptr, N, F_local, C,
                      WeightLayout::InOut);
}

void demo_tp_mlp(ProcessGroups& groups, int64_t C, int64_t F, int64_t N, uint64_t seed) {
  Comm& tp = groups.tp();
  // The whole MLP, on every rank: the reference, and the source of every rank's shards.
  ParamRegistry whole;
  declare_mlp(whole, C, F, nullptr);
  whole.init_values(seed);
  ParamRegistry shard;
  declare_mlp(shard, C, F, &tp);
  for (size_t i = 0; i < shard.params().size(); ++i)
    copy_shard(shard.params()[i], whole.params()[i].value);

  std::vector<float> x(N * C);  // (N, C): N tokens, the same on both ranks (TP shares its input)
  for (int64_t i = 0; i < N * C; ++i) x[i] = random_normal(seed, 1, i);

  std::vector<float> partial(N * C);  // (N, C)
  mlp_product(partial.data(), x.data(), shard, N, C);
  // Printed as it is before the reduction, which clobbers it.
  const std::string partial_rows =
      token_rows(fmt::format("rank {} partial sum", tp.rank()), partial.data(), N, C);
  // Megatron's g: without sequence parallel, leaving a row-parallel region all-reduces over TP.
  std::vector<float> sum(N * C), y(N * C);  // (N, C) each
  TensorParallel{.group = tp, .kernels = &cpu_kernels()}.reduce_rows(partial.data(), sum.data(), N, C);
  y = sum;
  cpu_kernels().bias_forward(y.data(), shard.get("mlp.c_proj.bias").value, N, C);

  std::vector<float> y_whole(N * C);
  mlp_product(y_whole.data(), x.data(), whole, N, C);
  cpu_kernels().bias_forward(y_whole.data(), whole.get("mlp.c_proj.bias").value, N, C);
  const float diff = max_abs_difference(y.data(), y_whole.data(), N * C);

  print_from_rank0(groups.world(),
                   fmt::format("seed example 6: MLP {} → {} → {} (GELU) with TP {}, {} tokens\n"
                               "first linear column-parallel (c_fc [{}, {}] split by columns), "
                               "second row-parallel (c_proj [{}, {}] split by rows)\n",
                               C, F, C, tp.size(), N, C, F, F, C));
  const Param& fc_w = shard.get("mlp.c_fc.weight");
  const Param& proj_w = shard.get("mlp.c_proj.weight");
  const auto [fc_first, fc_last] = split_range(fc_w);
  const auto [proj_first, proj_last] = split_range(proj_w);
  TESSEL_CHECK(fc_first == proj_first && fc_last == proj_last,
               "demo tp-mlp: c_fc columns {}–{} but c_proj rows {}–{}", fc_first, fc_last,
               proj_first, proj_last);
  print_by_rank(
      groups.world(),
      fmt::format(
          "rank {} holds neurons {}–{} (c_fc columns, c_proj rows: shapes [{}, {}] and [{}, {}])\n",
          tp.rank(), fc_first, fc_last, fc_w.local_shape[0], fc_w.local_shape[1],
          proj_w.local_shape[0], proj_w.local_shape[1]) +
          partial_rows);
  print_by_rank(groups.world(),
                token_rows(fmt::format("rank {} all-reduced (the partial sums added)", tp.rank()),
                           sum.data(), N, C) +
                    fmt::format("rank {} all-reduced + bias: output norm {:.6f}; unsplit MLP: max "
                                "difference {:.1e}\n",
                                tp.rank(), norm(y.data(), N * C), diff));
  check_against_one_process(groups.world(), diff, "demo tp-mlp: the TP output");
}

// ---- seed example 13 (三.2): data parallel ------------------------------------------------
// DP 2: every replica holds the same weight w and computes a gradient on its own data. The
// gradients are all-reduced and averaged, so every replica takes the same SGD step and the
// replicas stay identical.
void demo_dp(ProcessGroups& groups, float w0, const std::vector<float>& grads, float lr) {
  Comm& dp = groups.dp();
  ParamRegistry params;
  params.add("w", {1}, ParamInit::Zeros, 0.0f, false);
  params.finalize();
  Param& w = params.get("w");
  w.value[0] = w0;
  // As in Megatron, tessel's loss is the mean over the whole global batch, so each rank's
  // gradient arrives already divided by DP and the reduction sums: the sum is the average.
  const float own_grad = grads[dp.rank()];
  w.grad[0] = own_grad / dp.size();
  DataParallel ddp(cpu_kernels(), params, dp, /*distributed_optimizer=*/false);
  ddp.arm();
  ddp.grad_ready(0);  // the (only) gradient is final: its bucket's all-reduce starts
  ddp.finish_grad_reduction();
  const float g = w.grad[0];
  w.value[0] = w0 - lr * g;  // SGD

  // The check: every replica's w, side by side.
  std::vector<float> replicas(dp.size());
  dp.all_gather(w.value, replicas.data(), 1);
  const bool identical =
      std::all_of(replicas.begin(), replicas.end(), [&](float v) { return v == replicas[0]; });

  print_from_rank0(
      groups.world(),
      fmt::format(
          "seed example 13: DP {}, one weight w = {:g} on every replica, SGD with lr {:g}\n",
          dp.size(), w0, lr));
  print_by_rank(
      groups.world(),
      fmt::format(
          "rank {} before: w = {:g}, gradient from its own data {:g} (sent as {:g} / {} = {:g})\n",
          dp.rank(), w0, own_grad, own_grad, dp.size(), own_grad / dp.size()));
  print_by_rank(groups.world(),
                fmt::format("rank {} after all-reduce: gradient {:g}\n"
                            "rank {} after the step: w = {:g} - {:g} × {:g} = {:g}\n",
                            dp.rank(), g, dp.rank(), w0, lr, g, w.value[0]));
  print_from_rank0(
      groups.world(),
      identical
          ? fmt::format("replicas identical: w = {:g} on all {} ranks\n", replicas[0], dp.size())
          : fmt::format("replicas DIFFER: {}\n", list_text(replicas.data(), dp.size())));
  TESSEL_CHECK(identical, "demo dp: the replicas differ after the step");
}

}  // namespace

DemoCommand::DemoCommand(CLI::App& app) {
  cmd_ =
      app.add_subcommand("demo", "the seed's worked examples on 2 ranks (run under mpirun -n 2)");
  cmd_->require_subcommand(1);

  tp_column_ = cmd_->add_subcommand(
      "tp-column", "seed example 4: TP 2 splits W by columns, Y = X·W, all-gather");
  tp_column_->add_option("--x", x_, "X, comma-separated (length divisible by 2)")
      ->capture_default_str();
  tp_column_->add_option("--weight", weight_, "W: identity | random")
      ->check(CLI::IsMember({"identity", "random"}))
      ->capture_default_str();
  tp_column_->add_option("--seed", seed_, "seed of the random W")->capture_default_str();

  tp_mlp_ = cmd_->add_subcommand(
      "tp-mlp", "seed example 6: MLP 8 → 32 → 8, column- then row-parallel over TP 2");
  tp_mlp_->add_option("--hidden-size", hidden_, "MLP input and output size")->capture_default_str();
  tp_mlp_->add_option("--ffn-hidden-size", ffn_, "hidden neurons (divisible by 2)")
      ->capture_default_str();
  tp_mlp_->add_option("--tokens", tokens_, "tokens through the MLP")->capture_default_str();
  tp_mlp_->add_option("--seed", seed_, "seed of the weights and the input")->capture_default_str();

  dp_ = cmd_->add_subcommand(
      "dp", "seed example 13: DP 2 averages gradients, both replicas take the same step");
  dp_->add_option("--w", w_, "the weight every replica starts from")->capture_default_str();
  dp_->add_option("--grads", grads_, "each rank's gradient, comma-separated")
      ->capture_default_str();
  dp_->add_option("--lr", lr_, "SGD learning rate")->capture_default_str();

  pp_ = cmd_->add_subcommand(
      "pp", "seed example 7: 8 layers over PP 2, the activation [4, 4, 8] forward, its gradient back");
  pp_->add_option("--seed", seed_, "seed of the weights and the input")->capture_default_str();

  ep_ = cmd_->add_subcommand(
      "ep", "seed example 10: 8 experts over EP 2, tokens routed top-k, all-to-all there and back");
  ep_->add_option("--route", route_,
                  "each token's first-choice expert, comma-separated (tokens A, B, ...; the first "
                  "half on rank 0)")
      ->capture_default_str();
  ep_->add_option("--moe-router-topk", top_k_, "experts per token")->capture_default_str();
  ep_->add_option("--seed", seed_, "seed of the weights and the inputs")->capture_default_str();

  cp_ = cmd_->add_subcommand(
      "cp", "seed example 11: a sequence over CP 2, causal attention by the ring of K/V blocks");
  cp_->add_option("--seq-length", seq_length_, "positions in the sequence (a multiple of 4)")
      ->capture_default_str();
  cp_->add_option("--seed", seed_, "seed of Q, K and V")->capture_default_str();
}

void DemoCommand::run(const MpiRuntime& runtime) const {
  // Flags are checked before any communication, alike on every rank (ConfigError).
  if (*tp_column_) {
    const std::vector<float> x = parse_floats(x_, "--x");
    if (x.size() % kDemoRanks != 0)
      throw ConfigError(fmt::format("--x has {} values: not divisible by TP {}", x.size(), kDemoRanks));
    ProcessGroups groups = demo_groups(runtime, "tp-column", {.tp = kDemoRanks});
    demo_tp_column(groups, x, weight_ == "identity", seed_);
  } else if (*tp_mlp_) {
    if (hidden_ < 1 || tokens_ < 1)
      throw ConfigError(
          fmt::format("--hidden-size {} and --tokens {}: both must be positive", hidden_, tokens_));
    if (ffn_ < 1 || ffn_ % kDemoRanks != 0)
      throw ConfigError(
          fmt::format("--ffn-hidden-size {}: not a positive multiple of TP {}", ffn_, kDemoRanks));
    ProcessGroups groups = demo_groups(runtime, "tp-mlp", {.tp = kDemoRanks});
    demo_tp_mlp(groups, hidden_, ffn_, tokens_, seed_);
  } else if (*dp_) {
    const std::vector<float> grads = parse_floats(grads_, "--grads");
    if (grads.size() != kDemoRanks)
      throw ConfigError(fmt::format("--grads gives {} gradients: one per rank ({}) needed",
                                    grads.size(), kDemoRanks));
    ProcessGroups groups = demo_groups(runtime, "dp", {});
    demo_dp(groups, w_, grads, lr_);
  } else if (*pp_) {
    ProcessGroups groups = demo_groups(runtime, "pp", {.pp = kDemoRanks});
    demo_pp(groups, seed_);
  } else if (*ep_) {
    run_ep(runtime);
  } else if (*cp_) {
    if (seq_length_ < 1 || seq_length_ % (2 * kDemoRanks) != 0)
      throw ConfigError(fmt::format("--seq-length {}: not a positive multiple of 2·CP = {} (the "
                                    "causal balance cuts it into 2·CP chunks)",
                                    seq_length_, 2 * kDemoRanks));
    ProcessGroups groups = demo_groups(runtime, "cp", {.cp = kDemoRanks});
    demo_cp(groups, seq_length_, seed_);
  }
}

void DemoCommand::run_ep(const MpiRuntime& runtime) const {
  std::vector<std::string> problems;
  std::vector<int> route;
  std::vector<float> experts;
  try {
    experts = parse_floats(route_, "--route");
  } catch (const ConfigError& e) {
    problems.push_back(e.what());
  }
  for (float e : experts) {
    route.push_back(static_cast<int>(e));
    if (e != std::floor(e) || e < 0 || e >= kDemoExperts)
      problems.push_back(fmt::format("--route: {:g} is not an expert (0–{})", e, kDemoExperts - 1));
  }
  if (!experts.empty() && route.size() < kDemoRanks)
    problems.push_back(fmt::format("--route names {} token(s): at least one per rank ({}) needed",
                                   route.size(), kDemoRanks));
  if (route.size() > 26) problems.push_back("--route names more tokens than A–Z");
  if (top_k_ < 1 || top_k_ > kDemoExperts)
    problems.push_back(fmt::format("--moe-router-topk {}: not between 1 and {}", top_k_, kDemoExperts));
  if (!problems.empty()) throw ConfigError(fmt::format("{}", fmt::join(problems, "; ")));
  ProcessGroups groups = demo_groups(runtime, "ep", {.ep = kDemoRanks});
  demo_ep(groups, route, top_k_, seed_);
}

}  // namespace tessel
