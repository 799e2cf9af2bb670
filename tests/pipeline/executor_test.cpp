// The pipeline executor on one rank (ProcessGroups::single(), PP 1): the 1F1B schedule with each
// backward B split into its halves I then W — right after each other, or with every W deferred
// past the next microbatch's forward and I, as zero-bubble schedules place them — trains exactly
// as the plain schedule; schedules that misplace a W are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "tessel/parallel/groups.h"
#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/model/transformer.h"
#include "support/printers.h"
#include "support/tiny_model.h"
#include "tessel/pipeline/executor.h"
#include "tessel/pipeline/schedule.h"

namespace tessel {
namespace {

using testing::tiny_config;

constexpr int kMicrobatches = 4;
constexpr int64_t kMicroBatch = 2;

ScheduleConfig one_f_one_b() {
  ScheduleConfig sc;
  sc.kind = ScheduleKind::OneFOneB;
  sc.microbatches = kMicrobatches;
  return sc;
}

// Each B becomes I then W at once.
RankSchedule split_backwards(const RankSchedule& actions) {
  RankSchedule split;
  for (const Action& a : actions) {
    if (a.kind != ActionKind::Backward) {
      split.push_back(a);
      continue;
    }
    split.push_back({ActionKind::BackwardInput, a.microbatch, a.chunk, a.peer});
    split.push_back({ActionKind::BackwardWeight, a.microbatch, a.chunk, a.peer});
  }
  return split;
}

// Each W moved after the next I (the last W stays last): F0 I0 F1 I1 W0 F2 I2 W1 … I3 W2 W3.
RankSchedule defer_weights(const RankSchedule& split) {
  RankSchedule deferred;
  std::vector<Action> waiting;
  for (const Action& a : split) {
    if (a.kind == ActionKind::BackwardWeight) {
      waiting.push_back(a);
      continue;
    }
    deferred.push_back(a);
    if (a.kind == ActionKind::BackwardInput && !waiting.empty()) {
      deferred.push_back(waiting.front());
      waiting.erase(waiting.begin());
    }
  }
  deferred.insert(deferred.end(), waiting.begin(), waiting.end());
  return deferred;
}

// Compute actions as text: "F0 I0 W0 F1 …" (kind, microbatch).
std::string render(const RankSchedule& actions) {
  std::string s;
  for (const Action& a : actions) {
    const char* kind = a.kind == ActionKind::Forward         ? "F"
                       : a.kind == ActionKind::Backward      ? "B"
                       : a.kind == ActionKind::BackwardInput ? "I"
                       : a.kind == ActionKind::BackwardWeight ? "W"
                                                              : "?";
    s += (s.empty() ? "" : " ") + std::string(kind) + std::to_string(a.microbatch);
  }
  return s;
}

// A whole model trained by the executor with plain SGD, every iteration on new data.
struct TrainRun {
  std::vector<double> losses;
  std::vector<float> values;  // the parameters at the end
  std::vector<int> reports;   // grad_ready calls per parameter, over all iterations
  int arms = 0;
  bool reported_early = false;  // a gradient changed after grad_ready called it final
};

TrainRun train(Arch arch, const RankSchedule& actions, int iterations) {
  const ModelConfig cfg = tiny_config(arch);
  ProcessGroups groups = ProcessGroups::single();
  ParamRegistry params;
  const Kernels& k = cpu_kernels();
  TransformerChunk chunk(k, params, cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}, .micro_batch = kMicroBatch},
                         ChunkGroups::one_process(k));
  params.finalize();
  chunk.bind(params);
  params.init_values(7);
  const int64_t tokens = kMicroBatch * cfg.seq_length;
  PipelineExecutor executor(k, {&chunk}, groups.pp(), one_f_one_b(), {.tokens = tokens});

  TrainRun run;
  run.reports.assign(params.params().size(), 0);
  std::vector<std::vector<float>> at_report(params.params().size());
  for (int it = 0; it < iterations; ++it) {
    params.zero_grads();
    for (std::vector<float>& g : at_report) g.clear();
    const PipelineExecutor::FillFn fill = [&](int mb, const std::vector<InputBuffer>& inputs) {
      std::vector<int32_t> tok(tokens), tgt(tokens);
      for (int64_t i = 0; i < tokens; ++i) {
        const uint64_t element = (static_cast<uint64_t>(it) * kMicrobatches + mb) * tokens + i;
        tok[i] = static_cast<int32_t>(random_bits(11, 1, element) % cfg.vocab_size);
        tgt[i] = static_cast<int32_t>(random_bits(11, 2, element) % cfg.vocab_size);
      }
      for (const InputBuffer& input : inputs)
        k.memory.from_host(input.rows, (input.name == "tokens" ? tok : tgt).data(), tokens * 4);
    };
    const std::function<void(int)> grad_ready = [&](int index) {
      const Param& p = params.params()[index];
      ++run.reports[index];
      at_report[index].assign(p.grad, p.grad + p.numel());
    };
    const std::vector<float> grad_scales(kMicrobatches, 1.0f / (tokens * kMicrobatches));
    run.losses.push_back(executor.run(actions, kMicrobatches, fill, grad_scales,
                                      [&] { ++run.arms; }, grad_ready));
    for (const Param& p : params.params()) {
      const std::vector<float>& g = at_report[&p - params.params().data()];
      if (!std::equal(g.begin(), g.end(), p.grad)) run.reported_early = true;
    }
    for (int64_t i = 0; i < params.numel(); ++i) params.values()[i] -= 0.5f * params.grads()[i];
  }
  run.values.assign(params.values(), params.values() + params.numel());
  return run;
}

class SplitBackward : public ::testing::TestWithParam<Arch> {};

TEST_P(SplitBackward, TrainsAsThePlainSchedule) {
  const ScheduleConfig sc = one_f_one_b();
  const RankSchedule compute = generate_schedule(sc)[0];
  ASSERT_EQ(render(compute), "F0 B0 F1 B1 F2 B2 F3 B3");
  ASSERT_EQ(render(split_backwards(compute)), "F0 I0 W0 F1 I1 W1 F2 I2 W2 F3 I3 W3");
  ASSERT_EQ(render(defer_weights(split_backwards(compute))), "F0 I0 F1 I1 W0 F2 I2 W1 F3 I3 W2 W3");
  const RankSchedule plain = lower({compute}, sc)[0];
  const RankSchedule split = lower({split_backwards(compute)}, sc)[0];
  const RankSchedule deferred = lower({defer_weights(split_backwards(compute))}, sc)[0];
  const int iterations = 3;
  const TrainRun a = train(GetParam(), plain, iterations);
  for (const RankSchedule* actions : {&split, &deferred}) {
    const TrainRun b = train(GetParam(), *actions, iterations);
    const char* which = actions == &split ? "I W" : "W deferred";
    EXPECT_EQ(b.losses, a.losses) << which;
    EXPECT_EQ(b.values, a.values) << which;
    EXPECT_EQ(b.arms, iterations) << which;
    EXPECT_EQ(b.reports, std::vector<int>(b.reports.size(), iterations)) << which;
    EXPECT_FALSE(b.reported_early) << which;
  }
  // Training happened: the losses move.
  EXPECT_NE(a.losses.front(), a.losses.back());
}

INSTANTIATE_TEST_SUITE_P(Arches, SplitBackward, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return arch_name(info.param); });

// W needs what its I saved; and the last microbatch's halves report gradients final, so no other
// microbatch's half may follow them.
TEST(SplitBackward, RefusesMisplacedWeightHalves) {
  const RankSchedule split = split_backwards(generate_schedule(one_f_one_b())[0]);
  auto moved = [&](ActionKind kind, int microbatch, int to) {
    RankSchedule s = split;
    auto from = std::find_if(s.begin(), s.end(), [&](const Action& a) {
      return a.kind == kind && a.microbatch == microbatch;
    });
    const Action a = *from;
    s.erase(from);
    s.insert(s.begin() + to, a);
    return s;
  };
  const RankSchedule early = moved(ActionKind::BackwardWeight, 1, 4);
  ASSERT_EQ(render(early), "F0 I0 W0 F1 W1 I1 F2 I2 W2 F3 I3 W3");
  EXPECT_THROW(train(Arch::GPT2, early, 1), Error);
  const RankSchedule late = moved(ActionKind::BackwardWeight, 2, 11);
  ASSERT_EQ(render(late), "F0 I0 W0 F1 I1 W1 F2 I2 F3 I3 W3 W2");
  EXPECT_THROW(train(Arch::GPT2, late, 1), Error);
}

}  // namespace
}  // namespace tessel
