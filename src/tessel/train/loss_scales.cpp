#include "tessel/train/loss_scales.h"

#include <algorithm>

namespace tessel {

std::vector<float> microbatch_loss_scales(bool per_token, const std::vector<int64_t>& microbatch_tokens,
                                          int64_t microbatches, double batch_tokens) {
  std::vector<float> scales;
  for (const int64_t tokens : microbatch_tokens) {
    // As Megatron's clamp: a microbatch with every token masked adds nothing, not a division by 0.
    const double divisor = per_token ? batch_tokens
                                     : static_cast<double>(std::max<int64_t>(tokens, 1)) *
                                           static_cast<double>(microbatches);
    scales.push_back(static_cast<float>(1.0 / divisor));
  }
  return scales;
}

}  // namespace tessel
