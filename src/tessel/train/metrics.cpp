#include "tessel/train/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "tessel/plan/model.h"

namespace tessel {

namespace {

// This process's resident memory now and its peak, in bytes.
std::pair<double, double> resident_memory() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  statm >> pages >> resident;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {resident * static_cast<double>(sysconf(_SC_PAGESIZE)), usage.ru_maxrss * 1024.0};
}

}  // namespace

RunMetrics::RunMetrics(const TrainPlan& plan, ProcessGroups& groups, const GradSync& sync, int64_t first_iteration)
    : plan_(plan), groups_(groups), sync_(sync), first_iteration_(first_iteration) {
  const TensorBoardOptions& tb = plan.options.log.tensorboard;
  if (tb.throughput) {
    PlanModel model;
    model.cfg = plan.model;
    model_flops_ = model_flops_per_iteration(model, plan.options.batch.global_batch_size);
  }
  if (!tb.dir.empty() && groups.world_rank() == groups.world().size() - 1)
    writer_ = std::make_unique<EventFileWriter>(tb.dir, tb.queue_size);
}

void RunMetrics::complete(IterationStats& s) {
  const LogOptions& log = plan_.options.log;
  const TensorBoardOptions& tb = log.tensorboard;
  s.consumed_samples = plan_.batches.consumed_before(s.iteration + 1);
  s.world_size = groups_.world().size();
  if (tb.params_norm) s.params_norm = sync_.params_norm();
  if (tb.num_zeros_in_grad) s.num_zeros = sync_.grad_zeros();
  if (tb.memory) {
    const auto [now, peak] = resident_memory();
    double largest[2] = {now, peak};
    groups_.world().all_reduce(largest, 2, ReduceOp::Max);
    s.memory_bytes = largest[0];
    s.peak_memory_bytes = largest[1];
  }
  // Megatron's log line: every --log-interval iterations, and the run's first, which goes on
  // counting the interval's time.
  interval_ms_ += s.iteration_time_ms;
  ++interval_iterations_;
  const bool first = s.iteration == first_iteration_;
  if (s.iteration % std::max<int64_t>(log.interval, 1) != 0 && !first) return;
  if (tb.timers || tb.throughput) {
    // Megatron times the interval after a barrier: the slowest rank's time.
    double slowest = interval_ms_;
    groups_.world().all_reduce(&slowest, 1, ReduceOp::Max);
    s.interval_time_s = slowest / 1e3 / static_cast<double>(interval_iterations_);
    if (tb.throughput) s.throughput = model_flops_ / (*s.interval_time_s * 1e12 * s.world_size);
  }
  if (first) return;
  interval_ms_ = 0;
  interval_iterations_ = 0;
}

void RunMetrics::scalar(const char* tag, double value, int64_t iteration, int64_t samples) {
  writer_->add_scalar(tag, value, iteration);
  writer_->add_scalar(std::string(tag) + " vs samples", value, samples);
}

void RunMetrics::write(const IterationStats& s) {
  if (!writer_) return;
  const TensorBoardOptions& tb = plan_.options.log.tensorboard;
  const int64_t it = s.iteration, samples = s.consumed_samples;
  if (it % std::max<int64_t>(tb.interval, 1) == 0) {
    scalar("learning-rate", s.lr, it, samples);
    scalar("batch-size", static_cast<double>(s.global_batch), it, samples);
    scalar("lm loss", s.loss, it, samples);
    if (tb.loss_scale) scalar("loss-scale", s.loss_scale ? s.loss_scale->scale : 1.0, it, samples);
    if (tb.world_size) scalar("world-size", s.world_size, it, samples);
    scalar("grad-norm", s.grad_norm, it, samples);
    if (s.num_zeros) scalar("num-zeros", *s.num_zeros, it, samples);
    if (s.params_norm) scalar("params-norm", *s.params_norm, it, samples);
    if (s.memory_bytes) {
      writer_->add_scalar("mem-reserved-bytes", *s.memory_bytes, it);
      writer_->add_scalar("mem-max-allocated-bytes", *s.peak_memory_bytes, it);
    }
  }
  // The MoE routers' losses and MTP's, every iteration as Megatron writes them.
  for (const StepFigure& f : s.figures)
    for (const auto& [tag, value] : f.tensorboard) writer_->add_scalar(tag, value, it);
  if (s.interval_time_s && tb.timers) {
    if (it != first_iteration_) writer_->add_scalar("iteration-time", *s.interval_time_s, it);
    if (s.throughput) writer_->add_scalar("throughput", *s.throughput, it);
  }
}

void RunMetrics::evaluation(int64_t it, double loss) {
  if (!writer_) return;
  const int64_t samples = it * plan_.options.batch.global_batch_size;
  scalar("lm loss validation", loss, it, samples);
  if (plan_.options.log.tensorboard.validation_ppl)
    scalar("lm loss validation ppl", std::exp(std::min(20.0, loss)), it, samples);  // one scalar, as Megatron's
}

void RunMetrics::flush() {
  if (writer_) writer_->flush();
}

}  // namespace tessel
