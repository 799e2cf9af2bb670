// The zero-bubble schedules (ZB-H1, ZB-V, DualPipeV) on the schedule IR: each microbatch's F
// before its I before its W on every chunk; the V placement's neighbours (the last rank hands
// over to itself); the memory bound (peak in flight no more than 1F1B's); and, with equal
// costs, the bubbles the papers publish — 1F1B (p − 1)/(m + p − 1) of the iteration, ZB-H1 a
// third of 1F1B's idle time, ZB-V none once m ≥ 2p, DualPipeV (p − 1)/(6m + p − 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "support/schedules.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/simulate.h"
#include "tessel/pipeline/stages.h"

namespace tessel {
namespace {

using testing::config;

ScheduleConfig zb(ScheduleKind kind, int p, int m) {
  return config(kind, p, m, chunks_per_rank(kind, 1));
}

std::string name(const ScheduleConfig& c) {
  return schedule_kind_name(c.kind) + " p" + std::to_string(c.pipeline_size) + " m" + std::to_string(c.microbatches);
}

// Every configuration the invariants run on: m below, at and above p and 2p.
std::vector<ScheduleConfig> zero_bubble_configs() {
  std::vector<ScheduleConfig> all;
  for (int p : {1, 2, 3, 4, 6})
    for (int m : {1, 2, 3, 4, 5, 7, 8, 12, 16}) {
      all.push_back(zb(ScheduleKind::ZeroBubbleH1, p, m));
      if (p > 1) all.push_back(zb(ScheduleKind::ZeroBubbleV, p, m));
      if (p > 1 && m >= 2 * p) all.push_back(zb(ScheduleKind::DualPipeV, p, m));
    }
  return all;
}

Simulation simulate_with(const ScheduleConfig& c, double f, double i, double w) {
  SimulationCosts costs;
  costs.forward = f;
  costs.backward_input = i;
  costs.backward_weight = w;
  costs.backward = i + w;
  return simulate(lower(generate_schedule(c), c), c, costs);
}

TEST(ZeroBubble, EveryChunkRunsFThenIThenWInMicrobatchOrder) {
  for (const ScheduleConfig& c : zero_bubble_configs()) {
    SCOPED_TRACE(name(c));
    EXPECT_TRUE(schedule_violations(c, "--microbatches").empty());
    const std::vector<RankSchedule> ranks = generate_schedule(c);
    for (int r = 0; r < c.pipeline_size; ++r) {
      // Position of each (kind, microbatch, chunk); B counts as I and W at once.
      std::map<std::tuple<int, int, int>, int> at;
      std::map<std::pair<int, int>, int> last_of;  // (kind, chunk) → last microbatch run
      for (int i = 0; i < static_cast<int>(ranks[r].size()); ++i) {
        const Action& a = ranks[r][i];
        ASSERT_TRUE(a.microbatch >= 0 && a.microbatch < c.microbatches);
        ASSERT_TRUE(a.chunk >= 0 && a.chunk < c.virtual_stages);
        std::vector<int> kinds;
        if (a.kind == ActionKind::Forward) kinds = {0};
        if (a.kind == ActionKind::BackwardInput) kinds = {1};
        if (a.kind == ActionKind::BackwardWeight) kinds = {2};
        if (a.kind == ActionKind::Backward) kinds = {1, 2};
        ASSERT_FALSE(kinds.empty()) << "rank " << r << ": not a compute action";
        for (int kind : kinds) {
          EXPECT_TRUE(at.emplace(std::tuple{kind, a.microbatch, a.chunk}, i).second)
              << "rank " << r << " runs " << action_label(a, c.virtual_stages) << " twice";
          auto [it, first] = last_of.emplace(std::pair{kind, a.chunk}, a.microbatch);
          if (!first) {
            EXPECT_EQ(a.microbatch, it->second + 1) << "rank " << r << " out of order";
          }
          it->second = a.microbatch;
        }
      }
      ASSERT_EQ(static_cast<int>(at.size()), 3 * c.microbatches * c.virtual_stages) << "rank " << r;
      for (int mb = 0; mb < c.microbatches; ++mb)
        for (int chunk = 0; chunk < c.virtual_stages; ++chunk) {
          const int f = at[{0, mb, chunk}], i = at[{1, mb, chunk}], w = at[{2, mb, chunk}];
          EXPECT_LT(f, i) << "rank " << r << " F before I";
          EXPECT_LE(i, w) << "rank " << r << " I before W";
        }
    }
  }
}

// Without deadlock under several costs; each forward after the previous model chunk's, each
// input gradient after the next model chunk's, wherever the V puts them.
TEST(ZeroBubble, CrossRankDependenciesHold) {
  for (const ScheduleConfig& c : zero_bubble_configs())
    for (auto [f, i, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{2.0, 2.0, 1.0}, std::tuple{1.0, 3.0, 2.0}}) {
      SCOPED_TRACE(name(c) + " F" + std::to_string(f) + " I" + std::to_string(i) + " W" + std::to_string(w));
      const Simulation sim = simulate_with(c, f, i, w);
      ASSERT_TRUE(sim.ok()) << sim.error;
      const int K = c.pipeline_size * c.virtual_stages;
      std::map<std::pair<int, int>, TimedAction> fwd, input;  // (microbatch, model chunk)
      for (int r = 0; r < c.pipeline_size; ++r)
        for (const TimedAction& t : sim.ranks[r].compute) {
          const int k = model_chunk_index(r, t.action.chunk, c);
          if (t.action.kind == ActionKind::Forward) fwd[{t.action.microbatch, k}] = t;
          if (t.action.kind == ActionKind::BackwardInput || t.action.kind == ActionKind::Backward)
            input[{t.action.microbatch, k}] = t;
        }
      for (int mb = 0; mb < c.microbatches; ++mb)
        for (int k = 0; k < K; ++k) {
          const TimedAction &f = fwd[{mb, k}], &i = input[{mb, k}];
          if (k > 0) {
            EXPECT_GE(f.start, (fwd[{mb, k - 1}].end));
          }
          if (k + 1 < K) {
            EXPECT_GE(i.start, (input[{mb, k + 1}].end));
          }
          EXPECT_GE(i.start, f.end);
        }
    }
}

// 1F1B's memory: 1F1B holds at most p microbatches (on its first stage). ZB-H1 holds no more
// on any rank; ZB-V's (microbatch, chunk) slots are half a stage each, so at most 2p of them.
TEST(ZeroBubble, PeakInFlightIsNoMoreThanOneFOneBs) {
  for (int p : {2, 3, 4, 6})
    for (int m : {1, 3, 4, 8, 12, 16}) {
      const Simulation one = simulate_with(config(ScheduleKind::OneFOneB, p, m), 1, 1, 1);
      int one_f_one_b = 0;
      for (const RankTimeline& t : one.ranks) one_f_one_b = std::max(one_f_one_b, t.peak_in_flight);
      EXPECT_EQ(one_f_one_b, std::min(p, m));
      const Simulation h1 = simulate_with(zb(ScheduleKind::ZeroBubbleH1, p, m), 1, 1, 1);
      const Simulation v = simulate_with(zb(ScheduleKind::ZeroBubbleV, p, m), 1, 1, 1);
      ASSERT_TRUE(h1.ok() && v.ok());
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(h1.ranks[r].peak_in_flight, one_f_one_b) << "zb-h1 p" << p << " m" << m << " rank " << r;
        EXPECT_LE(v.ranks[r].peak_in_flight, 2 * one_f_one_b) << "zb-v p" << p << " m" << m << " rank " << r;
      }
      if (m >= 2 * p) {
        EXPECT_EQ(v.ranks[0].peak_in_flight, 2 * p) << "zb-v p" << p << " m" << m;
      }
    }
}

// T_F = T_I = T_W = 1 (B = 2): the published bubbles. 1F1B's is the seed's bubble (the ranks'
// idle share of the iteration); the zero-bubble papers' count iterations back to back, measured
// over the longest rank span.
TEST(ZeroBubble, BubblesMatchThePublishedFormulas) {
  const SimulationCosts equal;  // F 1, B 2, I 1, W 1
  for (int p : {2, 3, 4, 6})
    for (int m : {1, 2, 4, 6, 8, 12, 16, 24}) {
      SCOPED_TRACE("p" + std::to_string(p) + " m" + std::to_string(m));
      const Simulation one = simulate_with(config(ScheduleKind::OneFOneB, p, m), 1, 1, 1);
      EXPECT_NEAR(one.bubble(), (p - 1.0) / (m + p - 1.0), 1e-12);
      EXPECT_NEAR(one.back_to_back_bubble(), one.bubble(), 1e-12);
      EXPECT_FALSE(published_bubble(config(ScheduleKind::OneFOneB, p, m), equal).back_to_back);
      EXPECT_DOUBLE_EQ(one.ranks[0].span_idle(), 3.0 * (p - 1));
      const ScheduleConfig h1c = zb(ScheduleKind::ZeroBubbleH1, p, m);
      const Simulation h1 = simulate_with(h1c, 1, 1, 1);
      EXPECT_TRUE(published_bubble(h1c, equal).back_to_back);
      if (m >= p) {
        EXPECT_DOUBLE_EQ(h1.ranks[0].span_idle(), one.ranks[0].span_idle() / 3);  // a third
        EXPECT_NEAR(h1.back_to_back_bubble(), (p - 1.0) / (3 * m + p - 1.0), 1e-12);
        EXPECT_NEAR(h1.back_to_back_bubble(), *published_bubble(h1c, equal).value, 1e-12);
      }
      const ScheduleConfig vc = zb(ScheduleKind::ZeroBubbleV, p, m);
      const Simulation v = simulate_with(vc, 1, 1, 1);
      EXPECT_GT(v.bubble(), 0.0);  // one iteration alone still fills and drains the pipeline
      if (m >= 2 * p) {
        EXPECT_DOUBLE_EQ(v.back_to_back_bubble(), 0.0);
        EXPECT_EQ(*published_bubble(vc, equal).value, 0.0);
        for (const RankTimeline& t : v.ranks) EXPECT_DOUBLE_EQ(t.span_idle(), 0.0);
      } else {
        EXPECT_GT(v.back_to_back_bubble(), 0.0);
        EXPECT_FALSE(published_bubble(vc, equal).value.has_value());
      }
      if (m >= 2 * p) {
        const ScheduleConfig dc = zb(ScheduleKind::DualPipeV, p, m);
        const Simulation d = simulate_with(dc, 1, 1, 1);
        EXPECT_NEAR(d.back_to_back_bubble(), (p - 1.0) / (6 * m + p - 1.0), 1e-12);
        EXPECT_NEAR(d.back_to_back_bubble(), *published_bubble(dc, equal).value, 1e-12);
      }
    }
  // With unequal costs no value is claimed for the split schedules.
  SimulationCosts uneven = equal;
  uneven.backward_input = 2;
  EXPECT_FALSE(published_bubble(zb(ScheduleKind::ZeroBubbleH1, 4, 8), uneven).value.has_value());
  EXPECT_TRUE(published_bubble(config(ScheduleKind::OneFOneB, 4, 8), uneven).value.has_value());
}

// PP4, 8 microbatches, a stage's F = I = W = 2 units (two chunks of 1): ZB-V idles less than
// interleaved 1F1B, which idles less than 1F1B.
TEST(ZeroBubble, ZbvBeatsInterleavedAtEqualWork) {
  const Simulation one = simulate_with(config(ScheduleKind::OneFOneB, 4, 8), 2, 2, 2);
  const Simulation vpp = simulate_with(config(ScheduleKind::Interleaved, 4, 8, 2), 1, 1, 1);
  const Simulation v = simulate_with(zb(ScheduleKind::ZeroBubbleV, 4, 8), 1, 1, 1);
  ASSERT_TRUE(one.ok() && vpp.ok() && v.ok());
  EXPECT_DOUBLE_EQ(one.ranks[0].busy, v.ranks[0].busy);
  EXPECT_DOUBLE_EQ(vpp.ranks[0].busy, v.ranks[0].busy);
  EXPECT_LT(v.longest_span(), vpp.longest_span());
  EXPECT_LT(vpp.longest_span(), one.longest_span());
}

TEST(ZeroBubble, VPlacementFoldsTheModelOverTheRanks) {
  const ScheduleConfig c = zb(ScheduleKind::ZeroBubbleV, 4, 8);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(model_chunk_index(r, 0, c), r);
    EXPECT_EQ(model_chunk_index(r, 1, c), 7 - r);
    EXPECT_EQ(model_chunk_rank(r, 4, Placement::V), r);
    EXPECT_EQ(model_chunk_rank(7 - r, 4, Placement::V), r);
  }
  const std::vector<RankSchedule> lowered = lower(generate_schedule(c), c);
  // The last rank's chunk 0 (model chunk 3) feeds its own chunk 1 (model chunk 4), and takes its
  // gradient back from it; rank 0's chunk 1 is the last model chunk: nothing after it.
  int to_self = 0;
  for (const Action& a : lowered[3]) {
    const bool down = a.kind == ActionKind::SendForward && a.chunk == 0;
    const bool up = a.kind == ActionKind::SendBackward && a.chunk == 1;
    if (down || up) {
      EXPECT_EQ(a.peer, 3);
      to_self++;
    }
  }
  EXPECT_EQ(to_self, 16);
  for (const Action& a : lowered[0]) {
    EXPECT_FALSE(a.chunk == 1 && (a.kind == ActionKind::SendForward || a.kind == ActionKind::RecvBackward));
    if (a.kind == ActionKind::RecvForward && a.chunk == 1) {
      EXPECT_EQ(a.peer, 1);
    }
  }
  // The stages follow: rank 0 holds the first and the last layers, the embedding and the head.
  const StageOptions v{.pipeline_size = 2, .virtual_stages = 2, .placement = Placement::V};
  const std::vector<ChunkSpec> chunks = assign_layers(8, v);
  const std::vector<ChunkSpec> r0 = rank_chunks(chunks, v, 0), r1 = rank_chunks(chunks, v, 1);
  EXPECT_EQ(r0[0].first_layer, 0);
  EXPECT_TRUE(r0[0].has_embedding);
  EXPECT_EQ(r0[1].first_layer, 6);
  EXPECT_TRUE(r0[1].has_head);
  EXPECT_EQ(r1[0].first_layer, 2);
  EXPECT_EQ(r1[1].first_layer, 4);
  EXPECT_NE(stage_violations(6, v).at(0).find("--num-layers 6 does not split into the 2 × "
                                               "--pipeline-model-parallel-size 2 = 4 model chunks"),
            std::string::npos);
}

TEST(ZeroBubble, ViolationsNameTheRule) {
  auto all = [](const ScheduleConfig& c) {
    std::string s;
    for (const std::string& v : schedule_violations(c, "--microbatches " + std::to_string(c.microbatches))) s += v + "\n";
    return s;
  };
  std::string v = all(config(ScheduleKind::ZeroBubbleV, 1, 4, 3));
  EXPECT_NE(v.find("--schedule zb-v holds two model chunks per rank (a V): --vpp must be 2 or left out (got 3)"),
            std::string::npos) << v;
  EXPECT_NE(v.find("--schedule zb-v needs --pp 2 or more"), std::string::npos) << v;
  v = all(zb(ScheduleKind::DualPipeV, 4, 6));
  EXPECT_NE(v.find("--schedule dualpipev needs at least 2 × --pp = 8 microbatches (got --microbatches 6)"), std::string::npos) << v;
  v = all(config(ScheduleKind::ZeroBubbleH1, 2, 4, 2));
  EXPECT_NE(v.find("--vpp 2 needs --schedule interleaved (zb-h1 runs one model chunk per rank)"), std::string::npos)
      << v;
  EXPECT_EQ(chunks_per_rank(ScheduleKind::ZeroBubbleV, 1), 2);
  EXPECT_EQ(chunks_per_rank(ScheduleKind::ZeroBubbleH1, 1), 1);
  for (const char* name : {"zb-h1", "zb-v", "dualpipev"})
    EXPECT_EQ(schedule_kind_name(parse_schedule_kind(name)), name);
}

}  // namespace
}  // namespace tessel
