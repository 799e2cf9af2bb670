#include "tessel/data/gpt_indices.h"

#include <limits>
#include <numeric>

#include "tessel/core/error.h"

namespace tessel {

namespace {

// add_extra_token_to_sequence: every sample reads one token past its seq_length.
constexpr int64_t kExtraToken = 1;

}  // namespace

GptEpochPlan plan_gpt_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples,
                             int64_t seq_length) {
  TESSEL_CHECK(seq_length > 1, "the sequence length must be at least 2, got {}", seq_length);
  TESSEL_CHECK(tokens_per_epoch > 1, "an epoch of {} tokens holds no sample", tokens_per_epoch);
  GptEpochPlan plan;
  plan.tokens_per_epoch = tokens_per_epoch;
  if (!num_samples) return plan;
  TESSEL_CHECK(*num_samples >= 0 && *num_samples < std::numeric_limits<int64_t>::max() / seq_length,
               "cannot draw {} samples", *num_samples);
  const int64_t requested = *num_samples * seq_length + kExtraToken;
  for (int64_t tokens = tokens_per_epoch; tokens < requested; tokens += tokens_per_epoch)
    ++plan.num_epochs;
  if (plan.num_epochs == 1) return plan;
  plan.samples_before_final_epoch =
      ((plan.num_epochs - 1) * tokens_per_epoch - kExtraToken) / seq_length;
  const int64_t from_final_epoch = *num_samples - plan.samples_before_final_epoch;
  const int64_t per_epoch = (tokens_per_epoch - kExtraToken) / seq_length;
  TESSEL_CHECK(from_final_epoch >= 0 && from_final_epoch <= per_epoch + 1,
               "epoch plan: {} samples from the final epoch of {}", from_final_epoch, per_epoch);
  // Megatron: int(0.80 * per_epoch), a truncation of the double product.
  plan.separate_final_epoch = from_final_epoch < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  return plan;
}

std::vector<int32_t> build_document_index(int64_t first, int64_t count, int64_t num_epochs,
                                          bool separate_final_epoch, NumpyRandomState& rng) {
  TESSEL_CHECK(first >= 0 && first + count <= std::numeric_limits<int32_t>::max(),
               "document ids past int32 ({} + {})", first, count);
  if (separate_final_epoch && num_epochs > 1) {
    std::vector<int32_t> index = build_document_index(first, count, num_epochs - 1, false, rng);
    const std::vector<int32_t> last = build_document_index(first, count, 1, false, rng);
    index.insert(index.end(), last.begin(), last.end());
    return index;
  }
  std::vector<int32_t> index(static_cast<size_t>(count * num_epochs));
  for (int64_t e = 0; e < num_epochs; ++e)
    std::iota(index.begin() + e * count, index.begin() + (e + 1) * count, static_cast<int32_t>(first));
  rng.shuffle(std::span<int32_t>(index));
  return index;
}

std::vector<int64_t> build_sample_index(const LowLevelDataset& data,
                                        std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs,
                                        int64_t tokens_per_epoch) {
  const int64_t num_samples = (num_epochs * tokens_per_epoch - kExtraToken) / seq_length;
  std::vector<int64_t> index(static_cast<size_t>(2 * (num_samples + 1)));
  const int64_t last_position = static_cast<int64_t>(document_index.size()) - 1;
  int64_t position = 0;  // into document_index
  int64_t offset = 0;    // token offset into that document
  index[0] = position;
  index[1] = offset;
  for (int64_t k = 1; k <= num_samples; ++k) {
    // Consume seq_length + 1 tokens from (position, offset) on; the next sample starts on the
    // last of them, so the window ends one token before where it stops.
    int64_t remaining = seq_length + kExtraToken;
    while (remaining != 0) {
      const int64_t length = data.sequence_length(document_index[static_cast<size_t>(position)]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - kExtraToken;
        remaining = 0;
      } else {
        TESSEL_CHECK(position < last_position,
                     "sample index: the documents ran out at sample {} of {}", k, num_samples);
        ++position;
        offset = 0;
      }
    }
    index[static_cast<size_t>(2 * k)] = position;
    index[static_cast<size_t>(2 * k + 1)] = offset;
  }
  return index;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& rng) {
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  std::iota(index.begin(), index.end(), int64_t{0});
  rng.shuffle(std::span<int64_t>(index.data(), static_cast<size_t>(num_samples)));
  if (num_samples < total_size)
    rng.shuffle(std::span<int64_t>(index.data() + num_samples,
                                   static_cast<size_t>(total_size - num_samples)));
  return index;
}

}  // namespace tessel
