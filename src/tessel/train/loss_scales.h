// How the token losses of a global batch make its gradient: the weight each microbatch's summed
// token losses get (the head's cross-entropy gradient scale), as Megatron's pretrain_gpt.py
// loss_func, the schedules' forward_step and finalize_model_grads together normalise them.
//
// --calculate-per-token-loss: every microbatch 1 / N, N the loss tokens of the whole global batch
// (every microbatch, DP and CP rank): the gradient of Σ losses / N.
// Megatron's default: microbatch m's 1 / (max(N_m, 1) × M), N_m its loss tokens and M the global
// batch's microbatches (over DP: Megatron divides by num_microbatches, and DDP averages over DP):
// the gradient of the mean over microbatches of each one's mean token loss. N_m counts the whole
// microbatch's tokens, every CP rank's share: Megatron's CP ranks each divide by their own share's
// count, which makes its gradient change with CP where some tokens are masked; tessel's does not.
//
// Without masked tokens (no --eod-mask-loss) N_m × M = N and the two are the same to the bit.
#pragma once

#include <cstdint>
#include <vector>

namespace tessel {

// The scales of this rank's microbatches, whose loss tokens are `microbatch_tokens`; `microbatches`
// the global batch's (M) and `batch_tokens` its loss tokens (N).
std::vector<float> microbatch_loss_scales(bool per_token, const std::vector<int64_t>& microbatch_tokens,
                                          int64_t microbatches, double batch_tokens);

}  // namespace tessel
