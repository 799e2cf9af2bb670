#include "tessel/train/microbatches.h"

#include "tessel/core/error.h"

namespace tessel {

MicrobatchLoader::MicrobatchLoader(const Kernels& k, BatchLoader& batches,
                                   const ContextParallel& cp)
    : k_(k),
      batches_(batches),
      cp_(cp),
      B_(batches.shape().micro_batch),
      T_(batches.seq_length()),
      staging_(k.zeros({B_ * T_}, DType::I32)) {}

void MicrobatchLoader::start_batch(BatchSpan current, BatchSpan next) {
  batch_ = &batches_.get(current.first, current.microbatches);
  if (next.first >= 0) batches_.prefetch(next.first, next.microbatches);
}

void MicrobatchLoader::copy_rows(const std::vector<int32_t>& host, int microbatch, int32_t* rows) {
  if (rows == nullptr) return;
  TESSEL_CHECK(!host.empty(), "microbatch rows asked for that the data loader does not make");
  k_.memory.from_host(staging_.ints(), host.data() + microbatch * B_ * T_, staging_.bytes());
  cp_.take_local_rows(staging_.ints(), rows, B_, T_, 1);
}

const std::vector<int32_t>& MicrobatchLoader::host_rows(const std::string& name) const {
  if (name == "tokens") return batch_->inputs;
  if (name == "targets") return batch_->targets;
  if (name == "position_ids") return batch_->position_ids;
  if (name == "key_start") return batch_->key_start;
  if (name == "sample_ids" || name == "routing_sample_ids") return batch_->sample_ids;
  fail("microbatch input '{}' that the data loader does not make", name);
}

void MicrobatchLoader::fill(int microbatch, const std::vector<InputBuffer>& inputs) {
  TESSEL_CHECK(batch_ != nullptr, "MicrobatchLoader::fill before start_batch");
  const int64_t n = B_ * T_, at = microbatch * n;
  const std::string shifted = "shifted_";
  for (const InputBuffer& input : inputs) {
    if (input.name == "sequence_key_start") {  // whole sequences, as they are on the host
      k_.memory.from_host(input.rows, batch_->key_start.data() + at, n * 4);
    } else if (input.name.starts_with(shifted)) {
      // Row r: the rows shifted r + 1 over whole sequences, then this CP rank's; past a
      // sequence's end token 0, or target −1 (out of the loss).
      const std::string source = input.name.substr(shifted.size());
      const std::vector<int32_t>& host = host_rows(source);
      const int32_t past_end = source == "targets" ? -1 : 0;
      const int64_t local = local_tokens();
      std::vector<int32_t> rows(n);
      for (int64_t r = 0; r < input.numel / local; ++r) {
        shift_rows(host.data() + at, rows.data(), B_, T_, static_cast<int>(r + 1), past_end);
        copy_rows(rows, 0, input.rows + r * local);
      }
    } else {
      copy_rows(host_rows(input.name), microbatch, input.rows);
    }
  }
}

int64_t MicrobatchLoader::counted_targets_from(int from) const {
  return count_targets_from(batch_->targets.data(), static_cast<int64_t>(batch_->targets.size()) / T_, T_, from);
}

int64_t MicrobatchLoader::counted_targets_of(int microbatch) const {
  return count_targets_from(batch_->targets.data() + microbatch * B_ * T_, B_, T_, 0);
}

}  // namespace tessel
