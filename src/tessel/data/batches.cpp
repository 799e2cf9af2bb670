#include "tessel/data/batches.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "tessel/core/error.h"

namespace tessel {

void shift_rows(const int32_t* rows, int32_t* out, int64_t B, int64_t T, int k, int32_t fill) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) out[b * T + t] = t + k < T ? rows[b * T + t + k] : fill;
}

int64_t count_targets_from(const int32_t* targets, int64_t B, int64_t T, int from) {
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = from; t < T; ++t) n += targets[b * T + t] >= 0;
  return n;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

int64_t sample_rows(std::span<const int32_t> tokens, const Packing& packing, int32_t* inputs,
                    int32_t* targets, int32_t* position_ids, int32_t* key_start) {
  const int64_t S = static_cast<int64_t>(tokens.size()) - 1;
  int64_t counted = 0;
  int32_t start = 0;  // the current document's first position
  for (int64_t i = 0; i < S; ++i) {
    const bool ends_document = tokens[i] == packing.eod;
    inputs[i] = tokens[i];
    targets[i] = packing.eod_mask_loss && ends_document ? -1 : tokens[i + 1];
    counted += targets[i] >= 0;
    if (packing.documents()) {
      position_ids[i] = packing.reset_position_ids ? static_cast<int32_t>(i) - start
                                                   : static_cast<int32_t>(i);
      key_start[i] = packing.reset_attention_mask ? start : 0;
    }
    if (ends_document) start = static_cast<int32_t>(i) + 1;
  }
  return counted;
}

BatchLoader::BatchLoader(const SampleDataset& data, BatchShape shape, Packing packing)
    : data_(data), shape_(shape), packing_(packing), thread_([this] { worker(); }) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchLoader::read(HostBatch& batch, int64_t first, int64_t microbatches) const {
  const int64_t S = data_.seq_length(), B = shape_.micro_batch, M = microbatches;
  const int64_t rows = M * B * S;
  batch.first = -1;
  batch.inputs.resize(rows);
  batch.targets.resize(rows);
  batch.position_ids.resize(packing_.documents() ? rows : 0);
  batch.key_start.resize(packing_.documents() ? rows : 0);
  batch.sample_ids.resize(rows);
  batch.counted_targets = 0;
  std::vector<int32_t> tokens(S + 1);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t sample = first + shape_.position(m, b);
      TESSEL_CHECK(sample < kSampleIdLimit, "dropout keys samples below 2^31; sample {} is past them", sample);
      data_.sample(sample, tokens);
      const int64_t at = (m * B + b) * S;
      std::fill_n(batch.sample_ids.begin() + at, S, static_cast<int32_t>(sample));
      batch.counted_targets +=
          sample_rows(tokens, packing_, batch.inputs.data() + at, batch.targets.data() + at,
                      packing_.documents() ? batch.position_ids.data() + at : nullptr,
                      packing_.documents() ? batch.key_start.data() + at : nullptr);
    }
  batch.first = first;
  batch.microbatches = M;
}

void BatchLoader::worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || wanted_ >= 0; });
    if (stop_) return;
    const int64_t first = wanted_, microbatches = wanted_microbatches_;
    HostBatch& batch = batches_[1 - current_];
    reading_ = true;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      read(batch, first, microbatches);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    read_seconds_ += seconds_since(start);
    batches_read_ += 1;
    error_ = error;
    reading_ = false;
    wanted_ = -1;
    cv_.notify_all();
  }
}

void BatchLoader::prefetch(int64_t first, int64_t microbatches) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !reading_ && wanted_ < 0; });  // one read at a time
  const auto is_it = [&](const HostBatch& b) { return b.first == first && b.microbatches == microbatches; };
  if (is_it(batches_[current_]) || is_it(batches_[1 - current_])) return;
  wanted_ = first;
  wanted_microbatches_ = microbatches;
  cv_.notify_all();
}

const HostBatch& BatchLoader::get(int64_t first, int64_t microbatches) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !reading_ && wanted_ < 0; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
  const auto is_it = [&](const HostBatch& b) { return b.first == first && b.microbatches == microbatches; };
  if (!is_it(batches_[current_])) {
    current_ = 1 - current_;
    if (!is_it(batches_[current_])) read(batches_[current_], first, microbatches);
  }
  wait_seconds_ += seconds_since(start);
  return batches_[current_];
}

double BatchLoader::read_seconds_per_batch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return batches_read_ > 0 ? read_seconds_ / batches_read_ : 0.0;
}

}  // namespace tessel
