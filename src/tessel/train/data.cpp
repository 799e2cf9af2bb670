#include "tessel/train/data.h"

#include <algorithm>

#include "tessel/comm/comm.h"

namespace tessel {

GptDataSplits build_training_data(const TrainPlan& plan, ProcessGroups& groups) {
  const TrainOptions& o = plan.options;
  const DataOptions& d = o.data;
  GptDataOptions g;
  g.data_path = d.path;
  g.train_data_path = d.train_path;
  g.valid_data_path = d.valid_path;
  g.test_data_path = d.test_path;
  g.mock_data = d.mock_data;
  g.split = d.split;
  g.data_cache_path = d.cache_path;
  g.seq_length = plan.model.seq_length;
  g.seed = static_cast<uint32_t>(o.seed);
  const int64_t iterations = plan.train_iters();
  g.num_samples = megatron_num_samples(iterations, o.batch.global_batch_size, o.eval.interval, o.eval.iters);
  // Sample-based training reads --train-samples samples, not iterations × G (as Megatron). Else
  // the iterations read up to what they consume and the evaluations up to what they do: more than
  // Megatron's sizes for a step schedule (iterations × micro batch × DP) or a run resumed with a
  // smaller global batch (its consumed samples, then iterations × the new G), where Megatron's
  // sampler would run out; Megatron's sizes, and so its data order, wherever they suffice.
  int64_t& train = g.num_samples[static_cast<int>(Split::Train)];
  int64_t& valid = g.num_samples[static_cast<int>(Split::Valid)];
  if (o.optim.lr.sample_based()) train = o.optim.lr.train_samples;
  else train = std::max(train, plan.batches.consumed_before(iterations + 1));
  if (o.eval.iters > 0) valid = std::max(valid, plan.valid_samples_before(iterations / o.eval.interval + 1));
  g.tokenizer = plan.tokenizer.get();
  Comm& world = groups.world();
  const DataBuildCoordination coordination{
      .builds_first = groups.world_rank() == 0,
      .together = [&world](const std::function<void()>& phase) { check_together(world, phase); }};
  return build_gpt_datasets(g, coordination);
}

}  // namespace tessel
