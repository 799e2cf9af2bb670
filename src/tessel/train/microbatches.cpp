#include "tessel/train/microbatches.h"

#include "tessel/core/error.h"
#include "tessel/model/mtp.h"

namespace tessel {

MicrobatchLoader::MicrobatchLoader(const Kernels& k, BatchLoader& batches,
                                   const ContextParallel& cp)
    : k_(k),
      batches_(batches),
      cp_(cp),
      B_(batches.shape().micro_batch),
      T_(batches.seq_length()),
      staging_(k.zeros({B_ * T_}, DType::I32)) {}

void MicrobatchLoader::start_batch(int64_t first, int64_t next) {
  batch_ = &batches_.get(first);
  if (next >= 0) batches_.prefetch(next);
}

void MicrobatchLoader::copy_rows(const std::vector<int32_t>& host, int microbatch, int32_t* rows) {
  if (rows == nullptr) return;
  TESSEL_CHECK(!host.empty(), "microbatch rows asked for that the data loader does not make");
  k_.memory.from_host(staging_.ints(), host.data() + microbatch * B_ * T_, staging_.bytes());
  cp_.take_local_rows(staging_.ints(), rows, B_, T_, 1);
}

void MicrobatchLoader::fill(int microbatch, const MicrobatchRows& rows) {
  TESSEL_CHECK(batch_ != nullptr, "MicrobatchLoader::fill before start_batch");
  copy_rows(batch_->inputs, microbatch, rows.tokens);
  copy_rows(batch_->targets, microbatch, rows.targets);
  copy_rows(batch_->position_ids, microbatch, rows.position_ids);
  copy_rows(batch_->key_start, microbatch, rows.key_start);
  if (rows.sequence_key_start != nullptr)  // whole sequences, as they are on the host
    k_.memory.from_host(rows.sequence_key_start, batch_->key_start.data() + microbatch * B_ * T_, B_ * T_ * 4);
  // Multi-token prediction: each depth's rows shifted over whole sequences, then this CP rank's.
  const int depths = rows.mtp_depths;
  if (depths == 0) return;
  const int64_t n = B_ * T_, local = local_tokens(), at = microbatch * n;
  std::vector<int32_t> shifted(n);
  for (int d = 0; d < depths; ++d) {
    mtp_shift_rows(batch_->inputs.data() + at, shifted.data(), B_, T_, d + 1, 0);
    copy_rows(shifted, 0, rows.mtp_tokens + d * local);
    mtp_shift_rows(batch_->targets.data() + at, shifted.data(), B_, T_, d + 1, -1);
    copy_rows(shifted, 0, rows.mtp_targets + d * local);
  }
}

int64_t MicrobatchLoader::counted_mtp_targets(int depth) const {
  return mtp_counted_targets(batch_->targets.data(), static_cast<int64_t>(batch_->targets.size()) / T_, T_, depth);
}

}  // namespace tessel
