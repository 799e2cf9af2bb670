#include "tessel/train/mixed_precision.h"

namespace tessel {

LossScaling run_loss_scaling(const TrainOptions& o) {
  return loss_scaling(o.loss_scale, o.precision, o.parallel.layout.distributed_optimizer);
}

std::vector<std::string> mixed_precision_violations(const TrainOptions& o) {
  const LossScaling scaling = run_loss_scaling(o);
  std::vector<std::string> v = loss_scale_violations(o.loss_scale, scaling);
  // Post-validation steps before the norm, so before the step's overflow is known; the dynamic
  // scale of the next iteration depends on it.
  if (scaling == LossScaling::Dynamic && o.optim.post_validation)
    v.push_back("--enable-optimizer-post-validation with a dynamic loss scale (--fp16 without --loss-scale): each "
                "scale depends on whether the step before overflowed, which a step taken before its gradient norm "
                "cannot know; give --loss-scale, or leave post-validation off");
  return v;
}

std::vector<std::string> settle_mixed_precision(TrainOptions& o) {
  std::vector<std::string> notes;
  const LossScaling scaling = run_loss_scaling(o);
  if (o.precision == Precision::FP16 && o.device == Device::CPU)
    notes.push_back("--fp16: every GEMM's operands rounded to fp16 and accumulated in fp32, emulated on the CPU: "
                    "slower than fp32, numerically fp16's");
  if (scaling == LossScaling::Dynamic && o.faults.check_nan) {
    o.faults.check_nan = false;
    notes.push_back("--check-for-nan-in-loss-and-grad: off, as Megatron sets it with dynamic loss scaling, where a "
                    "non-finite gradient is the scaler's signal: that iteration's step is skipped");
  }
  if (o.loss_scale.loss_scale && scaling == LossScaling::None)
    notes.push_back(*o.loss_scale.loss_scale == 0.0f
                        ? "--loss-scale 0: no static scale, as in Megatron-LM (0 counts as not given)"
                        : "--loss-scale: no effect without --fp16, --bf16 or --use-distributed-optimizer, as in "
                          "Megatron-LM");
  return notes;
}

}  // namespace tessel
