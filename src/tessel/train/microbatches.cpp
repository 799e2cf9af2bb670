#include "tessel/train/microbatches.h"

namespace tessel {

MicrobatchLoader::MicrobatchLoader(const Kernels& k, Sampler& sampler, const ContextParallel& cp,
                                   int64_t micro_batch, int64_t first_sample)
    : k_(k),
      sampler_(sampler),
      cp_(cp),
      B_(micro_batch),
      T_(sampler.seq_length()),
      first_sample_(first_sample),
      host_tokens_(B_ * T_),
      host_targets_(B_ * T_),
      tokens_(k.zeros({B_ * T_}, DType::I32)),
      targets_(k.zeros({B_ * T_}, DType::I32)) {}

void MicrobatchLoader::fill(int64_t iteration, int microbatch, int32_t* tokens, int32_t* targets) {
  sampler_.fill(iteration - 1, first_sample_ + microbatch * B_, B_, host_tokens_.data(),
                host_targets_.data());
  k_.memory.from_host(tokens_.ints(), host_tokens_.data(), tokens_.bytes());
  k_.memory.from_host(targets_.ints(), host_targets_.data(), targets_.bytes());
  cp_.take_local_rows(tokens_.ints(), tokens, B_, T_, 1);
  cp_.take_local_rows(targets_.ints(), targets, B_, T_, 1);
}

}  // namespace tessel
