// ProcessGroups::create: every group's Comm has the layout's members, in the layout's order.
// TP2×DP2 is checked against groups worked out by hand from Megatron's algorithm; the other
// layouts against Layout's own lists (whose values layout's tests check), through an all-gather
// of world ranks, which shows both the members and their order.

#include <gtest/gtest.h>

#include <vector>

#include "tessel/parallel/groups.h"
#include "tessel/comm/mpi.h"
#include "support/world_copy.h"
#include "tessel/core/error.h"
#include "support/parallel_config.h"

namespace tessel {
namespace {

using testing::parallel_config;

// The world ranks of this rank's group of `kind`, in group-rank order, as the Comm sees them.
std::vector<int> gathered_members(Comm& comm) {
  float me = static_cast<float>(world_rank());
  std::vector<float> all(comm.size());
  comm.all_gather(&me, all.data(), 1);
  return std::vector<int>(all.begin(), all.end());
}

// Default order tp-cp-ep-dp-pp, TP2 × DP2: TP groups [0,1] [2,3], DP groups [0,2] [1,3].
TEST(ProcessGroups, Tp2Dp2TalksToTheRightPartners) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelConfig config;
  config.world = 4;
  config.tp = 2;
  Layout layout(config);
  const int rank = world_rank();
  ProcessGroups groups = ProcessGroups::create(layout, rank);

  const std::vector<int> tp_group = {rank / 2 * 2, rank / 2 * 2 + 1};
  const std::vector<int> dp_group = {rank % 2, rank % 2 + 2};
  EXPECT_EQ(groups.tp().size(), 2);
  EXPECT_EQ(groups.tp().rank(), rank % 2);
  EXPECT_EQ(groups.dp().size(), 2);
  EXPECT_EQ(groups.dp().rank(), rank / 2);
  EXPECT_EQ(groups.pp().size(), 1);
  EXPECT_EQ(groups.world().size(), 4);
  EXPECT_EQ(groups.world().rank(), rank);

  float tp_sum = static_cast<float>(rank), dp_sum = static_cast<float>(rank);
  groups.tp().all_reduce(&tp_sum, 1);
  groups.dp().all_reduce(&dp_sum, 1);
  EXPECT_EQ(tp_sum, tp_group[0] + tp_group[1]);
  EXPECT_EQ(dp_sum, dp_group[0] + dp_group[1]);
  EXPECT_EQ(gathered_members(groups.tp()), tp_group);
  EXPECT_EQ(gathered_members(groups.dp()), dp_group);
  EXPECT_EQ(gathered_members(groups.dp_cp()), dp_group);
  EXPECT_EQ(gathered_members(groups.tp_dp_cp()), (std::vector<int>{0, 1, 2, 3}));

  EXPECT_EQ(groups.coords().tp, rank % 2);
  EXPECT_EQ(groups.coords().dp, rank / 2);
  EXPECT_EQ(groups.coords().pp, 0);
}

// Pipeline of 4 stages: the embedding group is the first and last stage, [0, 3]; the middle
// stages are in none and get a LocalComm of size 1.
TEST(ProcessGroups, MiddleStagesHaveALocalEmbeddingComm) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelConfig config;
  config.world = 4;
  config.pp = 4;
  ProcessGroups groups = ProcessGroups::create(Layout(config), world_rank());
  const int rank = world_rank();
  EXPECT_EQ(gathered_members(groups.pp()), (std::vector<int>{0, 1, 2, 3}));
  if (rank == 0 || rank == 3) {
    EXPECT_EQ(gathered_members(groups.embedding()), (std::vector<int>{0, 3}));
  } else {
    EXPECT_EQ(groups.embedding().size(), 1);
    EXPECT_EQ(groups.embedding().rank(), 0);
    float x = 5.0f;
    groups.embedding().all_reduce(&x, 1);
    EXPECT_EQ(x, 5.0f);
  }
  EXPECT_EQ(groups.coords().pp, rank);
}


// Every kind, every layout of this job's size: the Comm's members in order equal the list.
TEST(ProcessGroups, EveryKindMatchesTheLayout) {
  const std::vector<ParallelConfig> configs = {
      parallel_config(2, 2, 1, 1, 1, 0, "tp-cp-ep-dp-pp"),
      parallel_config(2, 1, 1, 2, 1, 0, "tp-cp-ep-dp-pp"),
      parallel_config(2, 1, 2, 1, 2, 1, "tp-cp-ep-dp-pp"),
      parallel_config(2, 1, 1, 1, 1, 0, "tp-cp-ep-dp-pp"),
      parallel_config(4, 2, 1, 2, 1, 0, "tp-pp-dp"),
      parallel_config(4, 1, 2, 2, 2, 1, "tp-cp-ep-dp-pp"),
      parallel_config(4, 2, 1, 1, 2, 1, "tp-cp-ep-dp-pp"),
      parallel_config(4, 1, 1, 2, 1, 0, "tp-cp-ep-dp-pp"),
  };
  const int rank = world_rank();
  int checked = 0;
  for (const ParallelConfig& config : configs) {
    if (config.world != world_size()) continue;
    Layout layout(config);
    ProcessGroups groups = ProcessGroups::create(layout, rank);
    for (GroupKind kind : kAllGroupKinds) {
      std::vector<int> expected = {rank};  // a rank in no group (embedding) talks to itself
      for (const auto& group : layout.groups(kind))
        for (int member : group)
          if (member == rank) expected = group;
      EXPECT_EQ(gathered_members(groups.get(kind)), expected)
          << group_kind_name(kind) << " group, tp " << config.tp << " cp " << config.cp << " pp "
          << config.pp << " ep " << config.ep << " order " << config.order;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no layout of " << world_size() << " ranks in the list";
}

TEST(ProcessGroups, WrongWorldSizeThrowsOnEveryRank) {
  ParallelConfig config;
  config.world = world_size() * 2;
  EXPECT_THROW(ProcessGroups::create(Layout(config), world_rank()), Error);
}

}  // namespace
}  // namespace tessel
