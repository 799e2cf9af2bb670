#include "tessel/train/data.h"

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
  g.num_samples = megatron_num_samples(plan.train_iters(), o.batch.global_batch_size,
                                       o.eval.interval, o.eval.iters);
  // Sample-based training reads --train-samples samples, not iterations × G (as Megatron); a step
  // schedule's iterations what they consume (Megatron's iterations × micro batch × DP would run
  // out).
  int64_t& train = g.num_samples[static_cast<int>(Split::Train)];
  if (o.optim.lr.sample_based()) train = o.optim.lr.train_samples;
  else if (!o.batch.step_schedule.empty()) train = plan.batches.consumed_before(plan.train_iters() + 1);
  g.tokenizer = plan.tokenizer.get();
  Comm& world = groups.world();
  const DataBuildCoordination coordination{
      .builds_first = groups.world_rank() == 0,
      .together = [&world](const std::function<void()>& phase) { check_together(world, phase); }};
  return build_gpt_datasets(g, coordination);
}

}  // namespace tessel
