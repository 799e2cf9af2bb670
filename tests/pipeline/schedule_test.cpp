// Pipeline schedules as data: the generators (GPipe, 1F1B, interleaved 1F1B with Megatron's
// microbatch groups), the lowering pass and the simulator (`tessel schedule`: tests/cli/).
//
// The invariants are checked on a matrix of (schedule, p, m, v, g) that includes p = 1, m = 1,
// m = p, m < p, m not a multiple of p, and PP4 · VPP2 with 8 microbatches. Expected tables were
// worked out by hand from the rules (warm-up min(p − r − 1, m) for 1F1B; as soon as possible
// start of each action in the rank's order).
#include <gtest/gtest.h>
#include <unistd.h>

#include "support/schedules.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/simulate.h"

namespace {

using tessel::Action;
using tessel::ActionKind;
using tessel::RankSchedule;
using tessel::ScheduleConfig;
using tessel::ScheduleKind;
using tessel::testing::config;
using tessel::testing::run;


std::string name(const ScheduleConfig& c) {
  return tessel::schedule_kind_name(c.kind) + " p" + std::to_string(c.pipeline_size) + " m" +
         std::to_string(c.microbatches) + " v" + std::to_string(c.virtual_stages) + " g" +
         std::to_string(c.microbatch_group);
}

// Every valid configuration the invariants run on.
std::vector<ScheduleConfig> valid_configs() {
  std::vector<ScheduleConfig> all;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 3, 4, 5, 8}) all.push_back(config(kind, p, m));
  const int interleaved[][4] = {
      // p, m, v, g
      {2, 2, 2, 0}, {2, 4, 2, 0}, {2, 5, 2, 3}, {2, 6, 3, 0}, {2, 8, 2, 4}, {3, 3, 2, 0},
      {3, 6, 2, 0}, {3, 5, 2, 5}, {3, 7, 2, 4}, {4, 4, 2, 0}, {4, 8, 2, 0}, {4, 8, 3, 0},
      {4, 7, 2, 7}, {4, 12, 2, 0}, {4, 12, 2, 6}, {4, 10, 2, 5}, {4, 16, 4, 8},
  };
  for (const auto& c : interleaved) all.push_back(config(ScheduleKind::Interleaved, c[0], c[1], c[2], c[3]));
  return all;
}

// ---- the compute lists ----

// On every rank each (microbatch, chunk) runs exactly one F and one B, the F first, and nothing else.
TEST(Schedule, EachForwardOnceAndBeforeItsBackward) {
  for (const ScheduleConfig& c : valid_configs()) {
    SCOPED_TRACE(name(c));
    std::vector<RankSchedule> ranks = tessel::generate_schedule(c);
    ASSERT_EQ(static_cast<int>(ranks.size()), c.pipeline_size);
    for (int r = 0; r < c.pipeline_size; ++r) {
      std::map<std::pair<int, int>, int> forward_at, backward_at;
      for (int i = 0; i < static_cast<int>(ranks[r].size()); ++i) {
        const Action& a = ranks[r][i];
        ASSERT_TRUE(a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) << "rank " << r;
        ASSERT_TRUE(a.microbatch >= 0 && a.microbatch < c.microbatches) << "rank " << r;
        ASSERT_TRUE(a.chunk >= 0 && a.chunk < c.virtual_stages) << "rank " << r;
        auto& where = a.kind == ActionKind::Forward ? forward_at : backward_at;
        EXPECT_TRUE(where.emplace(std::pair{a.microbatch, a.chunk}, i).second)
            << "rank " << r << " runs " << tessel::action_label(a, c.virtual_stages) << " twice";
      }
      EXPECT_EQ(static_cast<int>(forward_at.size()), c.microbatches * c.virtual_stages) << "rank " << r;
      EXPECT_EQ(static_cast<int>(backward_at.size()), c.microbatches * c.virtual_stages) << "rank " << r;
      for (const auto& [key, i] : forward_at) {
        ASSERT_TRUE(backward_at.count(key)) << "rank " << r;
        EXPECT_LT(i, backward_at[key]) << "rank " << r << " microbatch " << key.first << " chunk " << key.second;
      }
    }
  }
}

// The forwards a rank runs before its first backward: Megatron's warm-up, plus the first steady F.
int forwards_before_first_backward(const RankSchedule& s) {
  int n = 0;
  for (const Action& a : s) {
    if (a.kind == ActionKind::Backward) break;
    n++;
  }
  return n;
}

TEST(Schedule, WarmupCountsAreMegatrons) {
  for (int p : {1, 2, 4})
    for (int m : {1, 3, 8}) {
      std::vector<RankSchedule> s = tessel::generate_schedule(config(ScheduleKind::OneFOneB, p, m));
      for (int r = 0; r < p; ++r) {
        const int warmup = std::min(p - r - 1, m);
        EXPECT_EQ(forwards_before_first_backward(s[r]), warmup < m ? warmup + 1 : m) << p << " " << m << " " << r;
        // Steady state alternates F and B: after the warm-up, no two forwards in a row.
        for (size_t i = warmup + 1; i < s[r].size(); ++i)
          EXPECT_FALSE(s[r][i].kind == ActionKind::Forward && s[r][i - 1].kind == ActionKind::Forward);
      }
    }
  // Interleaved: 2 (p − r − 1) + (v − 1) g, clipped to v · m.
  const std::vector<std::array<int, 4>> pmvg = {{4, 8, 2, 4}, {2, 5, 2, 3}, {4, 12, 3, 6}, {2, 2, 2, 2}};
  for (const auto& [p, m, v, g] : pmvg) {
    std::vector<RankSchedule> s = tessel::generate_schedule(config(ScheduleKind::Interleaved, p, m, v, g));
    for (int r = 0; r < p; ++r) {
      const int warmup = std::min(2 * (p - r - 1) + (v - 1) * g, v * m);
      EXPECT_EQ(forwards_before_first_backward(s[r]), warmup < v * m ? warmup + 1 : v * m)
          << "p" << p << " m" << m << " v" << v << " g" << g << " rank " << r;
    }
  }
}

// Megatron's comment in schedules.py: PP2, microbatch group 3, 5 microbatches, VP2 gives
//   microbatch 0 1 2 0 1 2 3 4 3 4
//   chunk      0 0 0 1 1 1 0 0 1 1
// for the forwards on every rank; the k-th backward mirrors the k-th forward's chunk.
TEST(Schedule, InterleavedTableMatchesMegatronsExample) {
  const int microbatch[] = {0, 1, 2, 0, 1, 2, 3, 4, 3, 4};
  const int chunk[] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
  std::vector<RankSchedule> s = tessel::generate_schedule(config(ScheduleKind::Interleaved, 2, 5, 2, 3));
  for (int r = 0; r < 2; ++r) {
    int f = 0, b = 0;
    for (const Action& a : s[r]) {
      if (a.kind == ActionKind::Forward) {
        EXPECT_EQ(a.microbatch, microbatch[f]) << "rank " << r << " forward " << f;
        EXPECT_EQ(a.chunk, chunk[f]) << "rank " << r << " forward " << f;
        f++;
      } else {
        EXPECT_EQ(a.microbatch, microbatch[b]) << "rank " << r << " backward " << b;
        EXPECT_EQ(a.chunk, 1 - chunk[b]) << "rank " << r << " backward " << b;
        b++;
      }
    }
    EXPECT_EQ(f, 10);
    EXPECT_EQ(b, 10);
  }
}

// ---- lowering ----

TEST(Schedule, LoweringPairsEverySendWithOneReceive) {
  for (const ScheduleConfig& c : valid_configs()) {
    SCOPED_TRACE(name(c));
    const int p = c.pipeline_size, K = p * c.virtual_stages;
    std::vector<RankSchedule> compute = tessel::generate_schedule(c);
    std::vector<RankSchedule> lowered = tessel::lower(compute, c);
    // (from, to, tag) of every send and every receive.
    std::multiset<std::tuple<int, int, int>> sends, receives;
    std::set<int> tags;
    for (int r = 0; r < p; ++r) {
      RankSchedule only_compute;
      for (size_t i = 0; i < lowered[r].size(); ++i) {
        const Action& a = lowered[r][i];
        const int k = tessel::model_chunk_index(r, a.chunk, c);
        switch (a.kind) {
          case ActionKind::SendForward:
          case ActionKind::SendBackward: {
            const int tag = tessel::p2p_tag(a, r, c);
            EXPECT_TRUE(tag >= 0 && tag < 2 * c.microbatches * (K - 1)) << tag;
            EXPECT_TRUE(tags.insert(tag).second) << "tag " << tag << " used twice";
            sends.insert({r, a.peer, tag});
            // Right after the compute that produced it, going to the neighbouring model chunk's rank.
            ASSERT_GT(i, 0u);
            const Action& producer = lowered[r][i - 1];
            EXPECT_EQ(producer.microbatch, a.microbatch);
            EXPECT_EQ(producer.chunk, a.chunk);
            EXPECT_EQ(producer.kind, a.kind == ActionKind::SendForward ? ActionKind::Forward : ActionKind::Backward);
            const int neighbour = a.kind == ActionKind::SendForward ? k + 1 : k - 1;
            ASSERT_TRUE(neighbour >= 0 && neighbour < K);
            EXPECT_EQ(a.peer, neighbour % p);
            break;
          }
          case ActionKind::RecvForward:
          case ActionKind::RecvBackward: {
            receives.insert({a.peer, r, tessel::p2p_tag(a, r, c)});
            ASSERT_LT(i + 1, lowered[r].size());
            const Action& consumer = lowered[r][i + 1];
            EXPECT_EQ(consumer.microbatch, a.microbatch);
            EXPECT_EQ(consumer.chunk, a.chunk);
            EXPECT_EQ(consumer.kind, a.kind == ActionKind::RecvForward ? ActionKind::Forward : ActionKind::Backward);
            const int neighbour = a.kind == ActionKind::RecvForward ? k - 1 : k + 1;
            ASSERT_TRUE(neighbour >= 0 && neighbour < K);
            EXPECT_EQ(a.peer, neighbour % p);
            break;
          }
          default: only_compute.push_back(a);
        }
      }
      // Lowering adds actions and changes nothing else.
      ASSERT_EQ(only_compute.size(), compute[r].size());
      for (size_t i = 0; i < only_compute.size(); ++i) {
        EXPECT_EQ(only_compute[i].kind, compute[r][i].kind);
        EXPECT_EQ(only_compute[i].microbatch, compute[r][i].microbatch);
        EXPECT_EQ(only_compute[i].chunk, compute[r][i].chunk);
      }
    }
    // One activation and one gradient per microbatch across each of the K − 1 boundaries.
    EXPECT_EQ(static_cast<int>(sends.size()), 2 * c.microbatches * (K - 1));
    EXPECT_EQ(sends, receives);
  }
}

TEST(Schedule, VppRingWrapsFromLastRankToRankZero) {
  ScheduleConfig c = config(ScheduleKind::Interleaved, 4, 4, 2);
  std::vector<RankSchedule> lowered = tessel::lower(tessel::generate_schedule(c), c);
  // Rank 3's chunk 0 is model chunk 3: it sends its output to model chunk 4 = rank 0's chunk 1.
  bool seen = false;
  for (const Action& a : lowered[3])
    if (a.kind == ActionKind::SendForward && a.chunk == 0) {
      EXPECT_EQ(a.peer, 0);
      seen = true;
    }
  EXPECT_TRUE(seen);
  // Rank 0's chunk 1 receives it from rank 3 and sends its gradient back there.
  for (const Action& a : lowered[0])
    if ((a.kind == ActionKind::RecvForward || a.kind == ActionKind::SendBackward) && a.chunk == 1) {
      EXPECT_EQ(a.peer, 3);
    }
  // Model chunk 0 (rank 0, chunk 0) neither receives activations nor sends gradients.
  for (const Action& a : lowered[0])
    EXPECT_FALSE(a.chunk == 0 && (a.kind == ActionKind::RecvForward || a.kind == ActionKind::SendBackward));
}

// ---- simulation ----


// No deadlock; in the time line a chunk's forward starts after the previous model chunk's forward
// of the same microbatch has ended, and its backward after the next model chunk's backward; each
// rank runs one thing at a time, in its list's order.
TEST(Simulate, CrossRankDependenciesHold) {
  for (const ScheduleConfig& c : valid_configs())
    for (auto [f, b] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{2.0, 3.0}}) {
      SCOPED_TRACE(name(c) + " F" + std::to_string(f) + " B" + std::to_string(b));
      const int p = c.pipeline_size, K = p * c.virtual_stages;
      tessel::Simulation sim = run(c, f, b);
      ASSERT_TRUE(sim.ok()) << sim.error;
      std::map<std::pair<int, int>, tessel::TimedAction> fwd, bwd;  // (microbatch, model chunk)
      for (int r = 0; r < p; ++r) {
        double last_end = 0;
        for (const tessel::TimedAction& t : sim.ranks[r].compute) {
          EXPECT_GE(t.start, last_end) << "rank " << r << " overlaps itself";
          EXPECT_DOUBLE_EQ(t.end - t.start, t.action.kind == ActionKind::Forward ? f : b);
          last_end = t.end;
          const int k = tessel::model_chunk_index(r, t.action.chunk, c);
          (t.action.kind == ActionKind::Forward ? fwd : bwd)[{t.action.microbatch, k}] = t;
        }
        EXPECT_LE(last_end, sim.makespan);
      }
      ASSERT_EQ(static_cast<int>(fwd.size()), c.microbatches * K);
      ASSERT_EQ(static_cast<int>(bwd.size()), c.microbatches * K);
      for (int i = 0; i < c.microbatches; ++i)
        for (int k = 0; k < K; ++k) {
          const tessel::TimedAction &f_k = fwd[{i, k}], &b_k = bwd[{i, k}];
          if (k > 0) {
            EXPECT_GE(f_k.start, (fwd[{i, k - 1}].end)) << "F microbatch " << i << " chunk " << k;
          }
          if (k < K - 1) {
            EXPECT_GE(b_k.start, (bwd[{i, k + 1}].end)) << "B microbatch " << i << " chunk " << k;
          }
          EXPECT_GE(b_k.start, f_k.end);
        }
    }
}

TEST(Simulate, PeakMicrobatchesInFlight) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 4, 5, 8, 16}) {
      tessel::Simulation one = run(config(ScheduleKind::OneFOneB, p, m), 1, 2);
      tessel::Simulation all = run(config(ScheduleKind::GPipe, p, m), 1, 2);
      ASSERT_TRUE(one.ok() && all.ok());
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(one.ranks[r].peak_in_flight, p - r) << "1f1b p" << p << " m" << m << " rank " << r;
        EXPECT_EQ(one.ranks[r].peak_in_flight, std::min(p - r, m)) << "1f1b p" << p << " m" << m << " rank " << r;
        EXPECT_EQ(all.ranks[r].peak_in_flight, m) << "gpipe p" << p << " m" << m << " rank " << r;
      }
    }
  // Interleaved: the warm-up forwards plus the first steady one, in (microbatch, chunk) units.
  tessel::Simulation vpp = run(config(ScheduleKind::Interleaved, 4, 8, 2), 1, 2);
  ASSERT_TRUE(vpp.ok());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(vpp.ranks[r].peak_in_flight, 2 * (4 - r - 1) + 4 + 1) << "rank " << r;
}

// The bubble, the ranks' idle share of the iteration: (p − 1)/(m + p − 1) for GPipe and 1F1B,
// (p − 1)/(v·m + p − 1) for interleaved 1F1B, every rank idling alike; the makespan is the ideal
// time plus p − 1 forward-backward pairs (of a chunk, with VPP).
TEST(Simulate, BubbleMatchesTheFormula) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 3, 4, 6, 8})
        for (auto [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}}) {
          ScheduleConfig c = config(kind, p, m);
          tessel::Simulation sim = run(c, f, b);
          ASSERT_TRUE(sim.ok()) << sim.error;
          EXPECT_DOUBLE_EQ(sim.makespan, (m + p - 1) * (f + b)) << name(c);
          EXPECT_NEAR(sim.bubble(), (p - 1.0) / (m + p - 1), 1e-12) << name(c);
          EXPECT_NEAR(sim.bubble(), *tessel::published_bubble(c, {}).value, 1e-12) << name(c);
          for (int r = 0; r < p; ++r) EXPECT_NEAR(sim.ranks[r].idle_share(), sim.bubble(), 1e-12) << name(c);
        }
  // Every valid interleaved configuration of the matrix, m a multiple of g or not.
  for (const ScheduleConfig& c : valid_configs()) {
    if (c.kind != ScheduleKind::Interleaved) continue;
    for (auto [f, b] : {std::pair{1.0, 1.0}, std::pair{1.0, 2.0}}) {
      tessel::Simulation sim = run(c, f, b);
      ASSERT_TRUE(sim.ok()) << sim.error;
      const int p = c.pipeline_size, m = c.microbatches, v = c.virtual_stages;
      EXPECT_DOUBLE_EQ(sim.makespan, (v * m + p - 1) * (f + b)) << name(c);
      EXPECT_NEAR(sim.bubble(), (p - 1.0) / (v * m + p - 1), 1e-12) << name(c);
      for (int r = 0; r < p; ++r) EXPECT_NEAR(sim.ranks[r].idle_share(), sim.bubble(), 1e-12) << name(c);
    }
  }
}

// The seed's forward table (PP 2, 4 microbatches, T1..T5): 2 idle cells of 10, a bubble of 0.2 —
// not 0, as the most a rank idles between its own first and last forward would say.
TEST(Simulate, SeedForwardTableBubble) {
  const ScheduleConfig c = config(ScheduleKind::GPipe, 2, 4);
  const tessel::Simulation sim =
      tessel::simulate(tessel::lower(tessel::forward_only_schedule(tessel::generate_schedule(c)), c), c);
  ASSERT_TRUE(sim.ok()) << sim.error;
  EXPECT_DOUBLE_EQ(sim.makespan, 5);
  EXPECT_DOUBLE_EQ(sim.bubble(), 0.2);
  EXPECT_DOUBLE_EQ(*tessel::published_bubble(c, {}).value, 0.2);
  EXPECT_DOUBLE_EQ(sim.back_to_back_bubble(), 0);
}

// The bubble shrinks with more virtual stages: PP4, 8 microbatches, 1F1B against VPP2.
TEST(Simulate, InterleavingShrinksTheBubble) {
  tessel::Simulation flat = run(config(ScheduleKind::OneFOneB, 4, 8), 2, 4);  // a stage = 2 chunks
  tessel::Simulation vpp = run(config(ScheduleKind::Interleaved, 4, 8, 2), 1, 2);
  ASSERT_TRUE(flat.ok() && vpp.ok());
  EXPECT_DOUBLE_EQ(flat.ranks[0].busy, vpp.ranks[0].busy);
  EXPECT_LT(vpp.makespan, flat.makespan);
  EXPECT_NEAR(vpp.ranks[0].idle_time * 2, flat.ranks[0].idle_time, 1e-12);
  EXPECT_LT(vpp.bubble(), flat.bubble());
}

TEST(Simulate, FindsDeadlock) {
  // Rank 1 wants microbatch 2 first; rank 0 sends microbatch 1 and then waits for its gradient.
  ScheduleConfig c = config(ScheduleKind::OneFOneB, 2, 2);
  auto a = [](ActionKind k, int mb) { return Action{k, mb, 0, -1}; };
  std::vector<RankSchedule> compute = {
      {a(ActionKind::Forward, 0), a(ActionKind::Backward, 0), a(ActionKind::Forward, 1), a(ActionKind::Backward, 1)},
      {a(ActionKind::Forward, 1), a(ActionKind::Backward, 1), a(ActionKind::Forward, 0), a(ActionKind::Backward, 0)}};
  tessel::Simulation sim = tessel::simulate(tessel::lower(compute, c), c);
  EXPECT_FALSE(sim.ok());
  EXPECT_NE(sim.error.find("deadlock"), std::string::npos) << sim.error;
  EXPECT_NE(sim.error.find("rank 0 waits at recvB1"), std::string::npos) << sim.error;
  EXPECT_NE(sim.error.find("rank 1 waits at recvF2"), std::string::npos) << sim.error;
  // The same lists in a consistent order run.
  std::swap(compute[1][0], compute[1][2]);
  std::swap(compute[1][1], compute[1][3]);
  EXPECT_TRUE(tessel::simulate(tessel::lower(compute, c), c).ok());
}

TEST(Simulate, ReportsBrokenSchedules) {
  ScheduleConfig c = config(ScheduleKind::OneFOneB, 2, 2);
  std::vector<RankSchedule> compute = tessel::generate_schedule(c);
  // Not lowered: rank 0 would run a backward whose output gradient it never received.
  tessel::Simulation unlowered = tessel::simulate(compute, c);
  EXPECT_NE(unlowered.error.find("rank 0 runs B1 before receiving its output gradient"), std::string::npos)
      << unlowered.error;
  // A backward before its forward.
  std::vector<RankSchedule> swapped = compute;
  std::swap(swapped[1][0], swapped[1][1]);
  tessel::Simulation early = tessel::simulate(tessel::lower(swapped, c), c);
  EXPECT_NE(early.error.find("before its forward"), std::string::npos) << early.error;
  // A send nobody receives.
  std::vector<RankSchedule> lowered = tessel::lower(compute, c);
  std::erase_if(lowered[0], [](const Action& a) { return a.kind == ActionKind::RecvBackward && a.microbatch == 1; });
  std::erase_if(lowered[0], [](const Action& a) { return a.kind == ActionKind::Backward && a.microbatch == 1; });
  tessel::Simulation lost = tessel::simulate(lowered, c);
  EXPECT_NE(lost.error.find("never received"), std::string::npos) << lost.error;
}

TEST(Simulate, CommunicationCostDelaysTheReceiver) {
  ScheduleConfig c = config(ScheduleKind::OneFOneB, 2, 1);
  tessel::SimulationCosts costs;
  costs.communication = 0.5;
  tessel::Simulation sim = tessel::simulate(tessel::lower(tessel::generate_schedule(c), c), c, costs);
  ASSERT_TRUE(sim.ok()) << sim.error;
  // F on rank 0 [0, 1), message until 1.5, F on rank 1 [1.5, 2.5), B [2.5, 4.5), B on rank 0 [5, 7).
  EXPECT_DOUBLE_EQ(sim.ranks[1].compute[0].start, 1.5);
  EXPECT_DOUBLE_EQ(sim.ranks[0].compute[1].start, 5.0);
  EXPECT_DOUBLE_EQ(sim.makespan, 7.0);
  ASSERT_EQ(sim.ranks[0].idle.size(), 1u);
  EXPECT_DOUBLE_EQ(sim.ranks[0].idle[0].start, 1.0);
  EXPECT_DOUBLE_EQ(sim.ranks[0].idle[0].end, 5.0);
}

// ---- rules ----

std::string violations(const ScheduleConfig& c) {
  std::string all;
  for (const std::string& v : tessel::schedule_violations(c, "--microbatches " + std::to_string(c.microbatches)))
    all += v + "\n";
  return all;
}

TEST(Schedule, ViolationsNameTheRule) {
  for (const ScheduleConfig& c : valid_configs()) EXPECT_EQ(violations(c), "") << name(c);

  std::string v = violations(config(ScheduleKind::OneFOneB, 0, 0));
  EXPECT_NE(v.find("--pp must be at least 1 (got 0)"), std::string::npos) << v;
  EXPECT_NE(v.find("--microbatches 0 must be at least 1"), std::string::npos) << v;
  v = violations(config(ScheduleKind::OneFOneB, 2, 4, 2));
  EXPECT_NE(v.find("--vpp 2 needs --schedule interleaved"), std::string::npos) << v;
  v = violations(config(ScheduleKind::Interleaved, 1, 4, 1));
  EXPECT_NE(v.find("--schedule interleaved needs --vpp 2 or more"), std::string::npos) << v;
  EXPECT_NE(v.find("--schedule interleaved needs --pp 2 or more"), std::string::npos) << v;
  v = violations(config(ScheduleKind::Interleaved, 4, 8, 2, 3));
  EXPECT_NE(v.find("--microbatch-group-size-per-virtual-pipeline-stage 3 is below --pp 4"), std::string::npos) << v;
  v = violations(config(ScheduleKind::Interleaved, 4, 8, 2, 9));
  EXPECT_NE(v.find("--microbatch-group-size-per-virtual-pipeline-stage 9 exceeds --microbatches 8"), std::string::npos)
      << v;
  v = violations(config(ScheduleKind::Interleaved, 4, 3, 2));
  EXPECT_NE(v.find("--microbatches 3 is below --pp 4"), std::string::npos) << v;
  v = violations(config(ScheduleKind::Interleaved, 4, 6, 2));
  EXPECT_NE(v.find("--microbatches 6 leaves a final group of 2"), std::string::npos) << v;
  EXPECT_EQ(violations(config(ScheduleKind::Interleaved, 4, 6, 2, 6)), "");  // one group of 6
  EXPECT_EQ(violations(config(ScheduleKind::Interleaved, 2, 5, 2, 3)), "");  // final group 2 ≥ p

  try {
    tessel::generate_schedule(config(ScheduleKind::Interleaved, 1, 0, 1));
    FAIL() << "no error";
  } catch (const tessel::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("0 microbatches must be at least 1"), std::string::npos) << what;
    EXPECT_NE(what.find("--vpp 2 or more"), std::string::npos) << what;
    EXPECT_NE(what.find("--pp 2 or more"), std::string::npos) << what;
  }
  EXPECT_THROW(tessel::parse_schedule_kind("zigzag"), tessel::ConfigError);
}

}  // namespace
