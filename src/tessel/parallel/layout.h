// The parallel layout: which ranks form each process group, with Megatron-Core's semantics
// (RankGenerator in megatron/core/parallel_state.py). World = TP·CP·DP·PP on the dense side and
// ETP·EP·EDP·PP on the expert side; the order string (default "tp-cp-ep-dp-pp", first axis
// varying fastest) decides which ranks are neighbours. Group lists — the groups, their order and
// the rank order inside each — equal Megatron's for the same sizes and order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>


namespace tessel {

// --data-parallel-sharding-strategy, Megatron-FSDP's names: what data parallelism shards besides
// the batch — nothing (DDP), the optimizer's state (the distributed optimizer, ZeRO-1), the
// gradients too (ZeRO-2), the parameters too (ZeRO-3). parallel/fully_sharded.h.
enum class ShardingStrategy : uint8_t { NoShard, Optim, OptimGrads, OptimGradsParams };
const char* sharding_strategy_name(ShardingStrategy s);  // "no_shard", "optim", ...
bool parse_sharding_strategy(const std::string& name, ShardingStrategy& out);  // false: unknown
// torchtitan's reshard_after_forward policy; "default" is always without pipeline parallelism and
// never with it (parallel/fully_sharded.h says why).
enum class ReshardAfterForward : uint8_t { Default, Always, Never };
const char* reshard_after_forward_name(ReshardAfterForward r);
bool parse_reshard_after_forward(const std::string& name, ReshardAfterForward& out);

struct ParallelConfig {
  int world = 1;
  int tp = 1;   // --tensor-model-parallel-size
  int cp = 1;   // --context-parallel-size
  int pp = 1;   // --pipeline-model-parallel-size
  int ep = 1;   // --expert-model-parallel-size
  int etp = 0;  // --expert-tensor-parallel-size; 0 means = tp
  int vpp = 1;  // --num-virtual-stages-per-pipeline-rank
  std::string order = "tp-cp-ep-dp-pp";
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  // --use-megatron-fsdp's strategy (NoShard without it: strategy() follows --use-distributed-optimizer).
  ShardingStrategy sharding = ShardingStrategy::NoShard;
  ReshardAfterForward reshard_after_forward = ReshardAfterForward::Default;

  ShardingStrategy strategy() const {
    return sharding != ShardingStrategy::NoShard ? sharding
           : distributed_optimizer              ? ShardingStrategy::Optim
                                                : ShardingStrategy::NoShard;
  }
  bool fully_sharded() const { return strategy() >= ShardingStrategy::OptimGrads; }
  // Whether units are freed after the forward (the policy resolved).
  bool reshards_after_forward() const {
    return reshard_after_forward == ReshardAfterForward::Always ||
           (reshard_after_forward == ReshardAfterForward::Default && pp == 1);
  }
  int expert_tp() const { return etp > 0 ? etp : tp; }
  int dp() const { return world / (tp * cp * pp); }          // valid configs only
  int expert_dp() const { return world / (expert_tp() * ep * pp); }
};

enum class GroupKind : uint8_t { TP, CP, DP, DP_CP, PP, TP_CP, MP, TP_DP_CP, Embedding, EP, ETP, EDP, TP_EP };
constexpr int kNumGroupKinds = 13;
constexpr std::array<GroupKind, kNumGroupKinds> kAllGroupKinds = {
    GroupKind::TP, GroupKind::CP, GroupKind::DP, GroupKind::DP_CP, GroupKind::PP,
    GroupKind::TP_CP, GroupKind::MP, GroupKind::TP_DP_CP, GroupKind::Embedding, GroupKind::EP,
    GroupKind::ETP, GroupKind::EDP, GroupKind::TP_EP};
// "tp", "cp", "dp", "dp_cp", "pp", "tp_cp", "mp", "tp_dp_cp", "embedding", "ep", "etp", "edp", "tp_ep"
const char* group_kind_name(GroupKind kind);

// A rank's coordinate on every axis (dense: tp, cp, dp, pp; expert: etp, ep, edp; pp is shared).
struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0, ep = 0, etp = 0, edp = 0;
};

// Every rule the parallel sizes break, one message each (empty when valid): world not divisible,
// a bad order string, sizes below 1, a world past kMaxWorld, ... Model- and batch-dependent rules are in
// train/plan.h's training_violations().
inline constexpr int kMaxWorld = 1 << 20;
std::vector<std::string> layout_violations(const ParallelConfig& config);

class Layout {
 public:
  // Throws one tessel::Error listing every layout_violations() message.
  explicit Layout(const ParallelConfig& config);

  const ParallelConfig& config() const { return config_; }
  int world() const { return config_.world; }
  // Every group of a kind, in Megatron's order; each group's ranks in Megatron's order.
  const std::vector<std::vector<int>>& groups(GroupKind kind) const;
  // The group of `kind` that holds `rank`.
  const std::vector<int>& group_of(GroupKind kind, int rank) const;
  RankCoords coords(int rank) const;

 private:
  ParallelConfig config_;
  std::array<std::vector<std::vector<int>>, kNumGroupKinds> groups_;
  std::vector<RankCoords> coords_;
};

}  // namespace tessel
