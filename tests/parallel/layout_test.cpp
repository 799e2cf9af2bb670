// The rank generator against group lists worked out by hand from Megatron-Core's algorithm
// (generate_masked_orthogonal_rank_groups: a rank is a mixed-radix number of its coordinates in
// the order string's order, first axis fastest), and the validation rules (`tessel layout`: tests/cli/).
//
// How the lists below were worked out, e.g. the seed's 8 GPUs, TP 2 · PP 2 · DP 2, order tp-pp-dp:
// rank = tp + 2·pp + 4·dp. A TP group fixes (pp, dp) and runs tp over 0..1; groups are numbered by
// (pp, dp) with pp fastest: (0,0) → (0,1), (1,0) → (2,3), (0,1) → (4,5), (1,1) → (6,7).
#include <gtest/gtest.h>

#include "support/parallel_config.h"

#include <array>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tessel/train/plan.h"
#include "tessel/core/error.h"
#include "tessel/parallel/group_kinds.h"
#include "tessel/parallel/layout.h"

namespace {

using tessel::GroupKind;
using tessel::Layout;
using tessel::ParallelConfig;
using tessel::testing::parallel_config;
using Groups = std::vector<std::vector<int>>;


// [[0], [1], ..., [n-1]]: the groups of an axis of size 1.
Groups singletons(int n) {
  Groups g;
  for (int r = 0; r < n; ++r) g.push_back({r});
  return g;
}

// Every kind must be listed, so each configuration checks all thirteen.
void expect_all_groups(const Layout& layout, const std::map<GroupKind, Groups>& expected) {
  ASSERT_EQ(expected.size(), static_cast<size_t>(tessel::kNumGroupKinds));
  for (const auto& [kind, groups] : expected)
    EXPECT_EQ(layout.groups(kind), groups) << tessel::group_kind_name(kind);
}

void expect_coords(const Layout& layout, int rank, tessel::RankCoords want) {
  tessel::RankCoords got = layout.coords(rank);
  EXPECT_EQ(got.tp, want.tp) << "rank " << rank;
  EXPECT_EQ(got.cp, want.cp) << "rank " << rank;
  EXPECT_EQ(got.dp, want.dp) << "rank " << rank;
  EXPECT_EQ(got.pp, want.pp) << "rank " << rank;
  EXPECT_EQ(got.ep, want.ep) << "rank " << rank;
  EXPECT_EQ(got.etp, want.etp) << "rank " << rank;
  EXPECT_EQ(got.edp, want.edp) << "rank " << rank;
}

// ---- group lists ----

TEST(Layout, SeedEightGpusOrderTpPpDp) {
  Layout layout(parallel_config(8, 2, 1, 2, 1, 0, "tp-pp-dp"));
  // rank = tp + 2·pp + 4·dp; the expert grid (ETP 2, EP 1, EDP 2) is the same grid.
  expect_all_groups(layout, {
      {GroupKind::TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::CP, singletons(8)},
      {GroupKind::DP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::DP_CP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::PP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::TP_CP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::MP, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {GroupKind::TP_DP_CP, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
      {GroupKind::Embedding, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::EP, singletons(8)},
      {GroupKind::ETP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::EDP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::TP_EP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
  });
  // The seed: GPU 0 is in TP (0,1), PP (0,2), DP (0,4).
  EXPECT_EQ(layout.group_of(GroupKind::TP, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.group_of(GroupKind::PP, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.group_of(GroupKind::DP, 0), (std::vector<int>{0, 4}));
  EXPECT_EQ(layout.group_of(GroupKind::DP, 6), (std::vector<int>{2, 6}));
  expect_coords(layout, 0, {.tp = 0, .cp = 0, .dp = 0, .pp = 0, .ep = 0, .etp = 0, .edp = 0});
  expect_coords(layout, 5, {.tp = 1, .cp = 0, .dp = 1, .pp = 0, .ep = 0, .etp = 1, .edp = 1});  // 5 = 1 + 4
  expect_coords(layout, 6, {.tp = 0, .cp = 0, .dp = 1, .pp = 1, .ep = 0, .etp = 0, .edp = 1});  // 6 = 2 + 4
}

TEST(Layout, SeedEightGpusDefaultOrder) {
  Layout layout(parallel_config(8, 2, 1, 2, 1, 0, "tp-cp-ep-dp-pp"));
  // rank = tp + 2·dp + 4·pp: DP and PP trade places against the seed's picture.
  expect_all_groups(layout, {
      {GroupKind::TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::CP, singletons(8)},
      {GroupKind::DP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::DP_CP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::PP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::TP_CP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::MP, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
      {GroupKind::TP_DP_CP, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {GroupKind::Embedding, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::EP, singletons(8)},
      {GroupKind::ETP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::EDP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::TP_EP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
  });
  EXPECT_EQ(layout.group_of(GroupKind::PP, 0), (std::vector<int>{0, 4}));
  EXPECT_EQ(layout.group_of(GroupKind::DP, 0), (std::vector<int>{0, 2}));
  expect_coords(layout, 5, {.tp = 1, .cp = 0, .dp = 0, .pp = 1, .ep = 0, .etp = 1, .edp = 0});  // 5 = 1 + 4
  expect_coords(layout, 6, {.tp = 0, .cp = 0, .dp = 1, .pp = 1, .ep = 0, .etp = 0, .edp = 1});  // 6 = 2 + 4
}

TEST(Layout, World16Tp2Cp2Pp2Dp2) {
  Layout layout(parallel_config(16, 2, 2, 2, 1, 0, "tp-cp-ep-dp-pp"));
  // Dense: rank = tp + 2·cp + 4·dp + 8·pp. Expert: ETP 2, EP 1, EDP 16/(2·1·2) = 4,
  // rank = etp + 2·edp + 8·pp, so expert DP spans what dense CP × DP spans.
  expect_all_groups(layout, {
      {GroupKind::TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}},
      {GroupKind::CP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}},
      {GroupKind::DP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}},
      {GroupKind::DP_CP, {{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}},
      {GroupKind::PP, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}},
      {GroupKind::TP_CP, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}},
      {GroupKind::MP, {{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}},
      {GroupKind::TP_DP_CP, {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}},
      {GroupKind::Embedding, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}},
      {GroupKind::EP, singletons(16)},
      {GroupKind::ETP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}},
      {GroupKind::EDP, {{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}},
      {GroupKind::TP_EP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}},
  });
  // 11 = 1 + 2·1 + 4·0 + 8·1; expert: 11 = 1 + 2·1 + 8·1.
  expect_coords(layout, 11, {.tp = 1, .cp = 1, .dp = 0, .pp = 1, .ep = 0, .etp = 1, .edp = 1});
  // 14 = 0 + 2·1 + 4·1 + 8·1; expert: 14 = 0 + 2·3 + 8·1.
  expect_coords(layout, 14, {.tp = 0, .cp = 1, .dp = 1, .pp = 1, .ep = 0, .etp = 0, .edp = 3});
}

TEST(Layout, World32Tp2Pp2Ep4Etp1) {
  Layout layout(parallel_config(32, 2, 1, 2, 4, 1, "tp-cp-ep-dp-pp"));
  // Dense: DP = 32/(2·1·2) = 8, rank = tp + 2·dp + 16·pp.
  // Expert: ETP 1, EP 4, EDP = 32/(1·4·2) = 4, rank = ep + 4·edp + 16·pp.
  expect_all_groups(layout, {
      {GroupKind::TP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15},
                       {16, 17}, {18, 19}, {20, 21}, {22, 23}, {24, 25}, {26, 27}, {28, 29}, {30, 31}}},
      {GroupKind::CP, singletons(32)},
      {GroupKind::DP, {{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15},
                       {16, 18, 20, 22, 24, 26, 28, 30}, {17, 19, 21, 23, 25, 27, 29, 31}}},
      {GroupKind::DP_CP, {{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15},
                          {16, 18, 20, 22, 24, 26, 28, 30}, {17, 19, 21, 23, 25, 27, 29, 31}}},
      {GroupKind::PP, {{0, 16}, {1, 17}, {2, 18}, {3, 19}, {4, 20}, {5, 21}, {6, 22}, {7, 23},
                       {8, 24}, {9, 25}, {10, 26}, {11, 27}, {12, 28}, {13, 29}, {14, 30}, {15, 31}}},
      {GroupKind::TP_CP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15},
                          {16, 17}, {18, 19}, {20, 21}, {22, 23}, {24, 25}, {26, 27}, {28, 29}, {30, 31}}},
      {GroupKind::MP, {{0, 1, 16, 17}, {2, 3, 18, 19}, {4, 5, 20, 21}, {6, 7, 22, 23},
                       {8, 9, 24, 25}, {10, 11, 26, 27}, {12, 13, 28, 29}, {14, 15, 30, 31}}},
      {GroupKind::TP_DP_CP, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
                             {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}}},
      {GroupKind::Embedding, {{0, 16}, {1, 17}, {2, 18}, {3, 19}, {4, 20}, {5, 21}, {6, 22}, {7, 23},
                              {8, 24}, {9, 25}, {10, 26}, {11, 27}, {12, 28}, {13, 29}, {14, 30}, {15, 31}}},
      {GroupKind::EP, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15},
                       {16, 17, 18, 19}, {20, 21, 22, 23}, {24, 25, 26, 27}, {28, 29, 30, 31}}},
      {GroupKind::ETP, singletons(32)},
      {GroupKind::EDP, {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15},
                        {16, 20, 24, 28}, {17, 21, 25, 29}, {18, 22, 26, 30}, {19, 23, 27, 31}}},
      {GroupKind::TP_EP, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15},
                          {16, 17, 18, 19}, {20, 21, 22, 23}, {24, 25, 26, 27}, {28, 29, 30, 31}}},
  });
  // 21 = 1 + 2·2 + 16·1; expert: 21 = 1 + 4·1 + 16·1.
  expect_coords(layout, 21, {.tp = 1, .cp = 0, .dp = 2, .pp = 1, .ep = 1, .etp = 0, .edp = 1});
  EXPECT_EQ(layout.group_of(GroupKind::EDP, 21), (std::vector<int>{17, 21, 25, 29}));
  EXPECT_EQ(layout.group_of(GroupKind::EP, 21), (std::vector<int>{20, 21, 22, 23}));
}

TEST(Layout, World8Cp2Pp2Ep2) {
  Layout layout(parallel_config(8, 1, 2, 2, 2, 0, "tp-cp-ep-dp-pp"));
  // Dense: TP 1, DP = 8/(1·2·2) = 2, rank = cp + 2·dp + 4·pp.
  // Expert: ETP = TP = 1, EP 2, EDP = 8/(1·2·2) = 2, rank = ep + 2·edp + 4·pp.
  expect_all_groups(layout, {
      {GroupKind::TP, singletons(8)},
      {GroupKind::CP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::DP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::DP_CP, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {GroupKind::PP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::TP_CP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::MP, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::TP_DP_CP, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {GroupKind::Embedding, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {GroupKind::EP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {GroupKind::ETP, singletons(8)},
      {GroupKind::EDP, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {GroupKind::TP_EP, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
  });
  // 7 = 1 + 2·1 + 4·1 on both grids.
  expect_coords(layout, 7, {.tp = 0, .cp = 1, .dp = 1, .pp = 1, .ep = 1, .etp = 0, .edp = 1});
}

TEST(Layout, EmbeddingIsFirstAndLastStage) {
  // 8 ranks, PP 4, DP 2, default order: rank = dp + 2·pp, pipelines (0,2,4,6) and (1,3,5,7).
  Layout deep(parallel_config(8, 1, 1, 4, 1, 0, "tp-cp-ep-dp-pp"));
  EXPECT_EQ(deep.groups(GroupKind::PP), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(deep.groups(GroupKind::Embedding), (Groups{{0, 6}, {1, 7}}));
  EXPECT_EQ(deep.group_of(GroupKind::Embedding, 7), (std::vector<int>{1, 7}));
  EXPECT_TRUE(deep.group_of(GroupKind::Embedding, 2).empty());  // a middle stage
  // One stage: the embedding group is that one rank.
  Layout flat(parallel_config(4, 2, 1, 1, 1, 0, "tp-cp-ep-dp-pp"));
  EXPECT_EQ(flat.groups(GroupKind::Embedding), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(Layout, OrderMayLeaveOutAxesOfSizeOne) {
  // Megatron appends the axes an order string leaves out; at size 1 they change nothing.
  Layout short_order(parallel_config(8, 2, 1, 2, 1, 0, "tp-dp-pp"));
  EXPECT_EQ(short_order.groups(GroupKind::PP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(short_order.groups(GroupKind::DP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  Layout upper(parallel_config(8, 2, 1, 2, 1, 0, "TP-PP-DP"));
  EXPECT_EQ(upper.groups(GroupKind::PP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(Layout, GroupOfRejectsRanksOutsideTheWorld) {
  Layout layout(parallel_config(4, 2, 1, 1, 1, 0, "tp-cp-ep-dp-pp"));
  EXPECT_THROW(layout.group_of(GroupKind::TP, 4), tessel::Error);
  EXPECT_THROW(layout.coords(-1), tessel::Error);
}

// The kinds `tessel layout` shows unless --groups names others: the axes larger than one, the
// expert ones only where their groups differ from the dense ones.
TEST(Layout, KindsOfInterest) {
  using Kinds = std::vector<GroupKind>;
  EXPECT_EQ(tessel::kinds_of_interest(Layout(parallel_config(8, 2, 1, 2, 1, 0, "tp-pp-dp"))),
            (Kinds{GroupKind::TP, GroupKind::DP, GroupKind::PP}));
  EXPECT_EQ(tessel::kinds_of_interest(Layout(parallel_config(1, 1, 1, 1, 1, 0, "tp-cp-ep-dp-pp"))), Kinds{});
  // EP 2 over DP 4: expert DP is 2, other groups than DP's.
  EXPECT_EQ(tessel::kinds_of_interest(Layout(parallel_config(4, 1, 1, 1, 2, 0, "tp-cp-ep-dp-pp"))),
            (Kinds{GroupKind::DP, GroupKind::EP, GroupKind::EDP}));
  // ETP 1 under TP 2: the expert layers are not split over TP, their DP is twice as large.
  EXPECT_EQ(tessel::kinds_of_interest(Layout(parallel_config(8, 2, 2, 1, 2, 1, "tp-cp-ep-dp-pp"))),
            (Kinds{GroupKind::TP, GroupKind::CP, GroupKind::DP, GroupKind::EP, GroupKind::EDP}));
  // Without experts split otherwise, the expert DP (here DP × CP) is no parallelism of its own.
  EXPECT_EQ(tessel::kinds_of_interest(Layout(parallel_config(4, 1, 2, 2, 1, 0, "tp-cp-ep-dp-pp"))),
            (Kinds{GroupKind::CP, GroupKind::PP}));
  for (GroupKind kind : tessel::kAllGroupKinds)
    EXPECT_EQ(tessel::group_kind_from_name(tessel::group_kind_name(kind)), kind);
  EXPECT_EQ(tessel::group_kind_from_name("tensor"), std::nullopt);
}

// ---- validation ----

bool has(const std::vector<std::string>& v, const std::string& text) {
  for (const std::string& s : v)
    if (s.find(text) != std::string::npos) return true;
  return false;
}

TEST(LayoutViolations, EveryBrokenRuleListedTogether) {
  ParallelConfig c = parallel_config(10, 4, 1, 0, 1, 0, "tp-xx-dp-dp");
  c.vpp = 0;
  std::vector<std::string> v = tessel::layout_violations(c);
  EXPECT_EQ(v.size(), 4u);
  EXPECT_TRUE(has(v, "--pipeline-model-parallel-size must be at least 1 (got 0)"));
  EXPECT_TRUE(has(v, "--num-virtual-stages-per-pipeline-rank must be at least 1 (got 0)"));
  EXPECT_TRUE(has(v, "unknown axis 'xx'"));
  EXPECT_TRUE(has(v, "names dp more than once"));
  try {
    Layout layout(c);
    FAIL() << "Layout accepted an invalid config";
  } catch (const tessel::Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos);
    for (const std::string& s : v) EXPECT_NE(what.find(s), std::string::npos) << s << " not in " << what;
  }
}

TEST(LayoutViolations, WorldMustDivideBothGrids) {
  std::vector<std::string> v = tessel::layout_violations(parallel_config(12, 8, 1, 1, 16, 1, "tp-cp-ep-dp-pp"));
  EXPECT_EQ(v.size(), 2u);
  EXPECT_TRUE(has(v, "world size 12 is not divisible by TP × CP × PP = 8 × 1 × 1 = 8"));
  EXPECT_TRUE(has(v, "world size 12 is not divisible by ETP × EP × PP = 1 × 16 × 1 = 16"));
  EXPECT_TRUE(tessel::layout_violations(parallel_config(12, 4, 1, 3, 1, 0, "tp-cp-ep-dp-pp")).empty());
}

TEST(LayoutViolations, OrderMustNameEveryAxisLargerThanOne) {
  std::vector<std::string> v = tessel::layout_violations(parallel_config(8, 2, 2, 2, 1, 0, "tp-pp-dp"));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "leaves out cp, whose size is 2")) << v[0];
  // ep is 1 on the dense grid but 2 on the expert grid.
  v = tessel::layout_violations(parallel_config(8, 1, 1, 2, 2, 0, "tp-dp-pp"));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "leaves out ep, whose size is 2")) << v[0];
}

TEST(LayoutViolations, PipelineGroupsMustMatchAcrossGrids) {
  // pp not last: Megatron needs expert DP = DP. Here DP = 16/2 = 8, expert DP = 16/(1·4·2) = 2.
  std::vector<std::string> v = tessel::layout_violations(parallel_config(16, 1, 1, 2, 4, 1, "tp-pp-ep-dp"));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "does not end with pp, which needs expert DP (2) equal to DP (8)")) << v[0];
  // Equal DP (2 and 2), yet the axes before pp hold TP 4 dense ranks but ETP 1 expert ranks.
  v = tessel::layout_violations(parallel_config(16, 4, 1, 2, 4, 1, "tp-pp-ep-dp"));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "other pipeline groups")) << v[0];
  // The same sizes with pp last are fine.
  EXPECT_TRUE(tessel::layout_violations(parallel_config(16, 4, 1, 2, 4, 1, "tp-ep-dp-pp")).empty());
}

TEST(LayoutViolations, InterleavingNeedsAPipeline) {
  ParallelConfig c = parallel_config(4, 1, 1, 1, 1, 0, "tp-cp-ep-dp-pp");
  c.vpp = 2;
  std::vector<std::string> v = tessel::layout_violations(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "--num-virtual-stages-per-pipeline-rank 2 needs --pipeline-model-parallel-size > 1"));
  c.pp = 2;
  EXPECT_TRUE(tessel::layout_violations(c).empty());
}

TEST(TrainingViolations, ModelAndBatchRules) {
  ParallelConfig c = parallel_config(8, 4, 1, 1, 2, 0, "tp-cp-ep-dp-pp");  // DP 2
  tessel::ModelConfig m;
  m.arch = tessel::Arch::Llama;
  m.num_attention_heads = 6;
  m.num_query_groups = 3;
  m.ffn_hidden_size = 30;
  m.seq_length = 10;
  std::vector<std::string> v = tessel::training_violations(c, m, 2, 6);
  EXPECT_EQ(v.size(), 5u);
  EXPECT_TRUE(has(v, "--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4"));
  EXPECT_TRUE(has(v, "--num-query-groups 3 below --tensor-model-parallel-size 4 replicates each group on TP / "
                     "groups ranks: 3 must divide 4"));
  EXPECT_TRUE(has(v, "--ffn-hidden-size 30 is not divisible by --tensor-model-parallel-size 4"));
  EXPECT_TRUE(has(v, "--global-batch-size 6 is not divisible by --micro-batch-size 2 × DP 2 = 4"));
  EXPECT_TRUE(has(v, "--expert-model-parallel-size 2 with --tensor-model-parallel-size 4 needs --sequence-parallel"));

  // Sequence parallel splits micro batch × sequence rows over TP: 1 × 10 over 4 does not divide.
  c.sequence_parallel = true;
  m.num_attention_heads = 8;
  m.num_query_groups = 4;
  m.ffn_hidden_size = 32;
  v = tessel::training_violations(c, m, 1, 8);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "1 × --seq-length 10 = 10 rows, not divisible by --tensor-model-parallel-size 4")) << v[0];
  EXPECT_TRUE(tessel::training_violations(c, m, 2, 8).empty());  // 20 rows

  // With TP 1 there is nothing to split: no rule broken (the trainer turns it off, as Megatron).
  ParallelConfig no_tp = parallel_config(4, 1, 1, 1, 1, 0, "tp-cp-ep-dp-pp");
  no_tp.sequence_parallel = true;
  EXPECT_TRUE(tessel::training_violations(no_tp, m, 1, 4).empty());

  // Context parallel's load-balanced split: the sequence in 2·CP chunks.
  ParallelConfig cp = parallel_config(4, 1, 4, 1, 1, 0, "tp-cp-ep-dp-pp");
  v = tessel::training_violations(cp, m, 1, 1);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(has(v, "--seq-length 10 is not divisible by 2 × --context-parallel-size 4 = 8"));

  v = tessel::training_violations(no_tp, m, 0, 0);
  EXPECT_TRUE(has(v, "--micro-batch-size must be positive (got 0)"));
  EXPECT_TRUE(has(v, "--global-batch-size must be positive (got 0)"));
}

}  // namespace
