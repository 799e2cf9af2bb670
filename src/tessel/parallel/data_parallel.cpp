#include "tessel/parallel/data_parallel.h"

#include <algorithm>

namespace tessel {

DataParallel::DataParallel(const Kernels& kernels, ParamRegistry& params, Comm& dp,
                           bool distributed_optimizer, int64_t bucket_floats,
                           const std::function<bool(const Param&)>& include, bool overlap)
    : k_(kernels), params_(params), dp_(dp), distributed_(distributed_optimizer), overlap_(overlap) {
  const std::vector<Param>& ps = params.params();
  bucket_of_.assign(ps.size(), -1);
  // Backward finishes the last parameters first: buckets are cut from the end of the buffer, as
  // runs of consecutive included parameters.
  for (int i = static_cast<int>(ps.size()) - 1; i >= 0; --i) {
    if (include && !include(ps[i])) continue;
    const bool adjacent = !buckets_.empty() && ps[i].offset + ps[i].numel() == buckets_.back().begin;
    if (!adjacent || buckets_.back().end - buckets_.back().begin >= bucket_floats) {
      buckets_.emplace_back();
      buckets_.back().end = ps[i].offset + ps[i].numel();
    }
    buckets_.back().begin = ps[i].offset;
    bucket_of_[i] = static_cast<int>(buckets_.size()) - 1;
  }
  const int dp_size = dp_.size();
  for (Bucket& b : buckets_) b.shard = (b.end - b.begin + dp_size - 1) / dp_size;
  if (distributed_) {
    for (const Bucket& b : buckets_) {
      staging_.push_back(k_.zeros({b.shard * dp_size}));
      slices_.push_back(k_.zeros({b.shard}));
    }
  }
}

std::vector<FlatRange> DataParallel::owned_ranges() const {
  std::vector<FlatRange> owned;
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {  // ascending offsets
    if (!distributed_) {
      owned.push_back({it->begin, it->end});
      continue;
    }
    const FlatRange slice = own_slice(*it);
    if (slice.begin < slice.end) owned.push_back(slice);
  }
  return owned;
}

FlatRange DataParallel::own_slice(const Bucket& b) const {
  const int64_t begin = std::min(b.end, b.begin + dp_.rank() * b.shard);
  return {begin, std::min(b.end, begin + b.shard)};
}

void DataParallel::arm() {
  armed_ = overlap_;
  for (Bucket& b : buckets_) {
    b.pending = 0;
    b.started = false;
  }
  for (int bucket : bucket_of_)
    if (bucket >= 0) ++buckets_[bucket].pending;
}

void DataParallel::grad_ready(int index) {
  if (!armed_ || bucket_of_[index] < 0) return;
  Bucket& b = buckets_[bucket_of_[index]];
  if (--b.pending == 0) start(b, false);
  // Give the reductions already in flight a chance to progress while backward goes on.
  for (Bucket& other : buckets_)
    if (other.started) other.request.test();
}

void DataParallel::start(Bucket& b, bool blocking) {
  b.started = true;
  float* grads = params_.grads() + b.begin;
  const int64_t n = b.end - b.begin;
  if (dp_.size() == 1) return;
  if (!distributed_) {
    if (blocking) dp_.all_reduce(grads, n);
    else b.request = dp_.all_reduce_async(grads, n);
    return;
  }
  const size_t i = &b - buckets_.data();
  k_.copy(staging_[i].data(), grads, n);  // the padding stays 0
  if (blocking) dp_.reduce_scatter(staging_[i].data(), slices_[i].data(), b.shard);
  else b.request = dp_.reduce_scatter_async(staging_[i].data(), slices_[i].data(), b.shard);
}

void DataParallel::finish_grad_reduction() {
  for (Bucket& b : buckets_)
    if (!b.started) start(b, true);
  for (Bucket& b : buckets_) b.request.wait();
  armed_ = false;
  if (!distributed_ || dp_.size() == 1) return;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const FlatRange slice = own_slice(buckets_[i]);
    if (slice.begin < slice.end)
      k_.copy(params_.grads() + slice.begin, slices_[i].data(), slice.end - slice.begin);
  }
}

void DataParallel::gather_params() {
  if (!distributed_ || dp_.size() == 1) return;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    const FlatRange slice = own_slice(b);
    if (slice.begin < slice.end)
      k_.copy(slices_[i].data(), params_.values() + slice.begin, slice.end - slice.begin);
    dp_.all_gather(slices_[i].data(), staging_[i].data(), b.shard);
    k_.copy(params_.values() + b.begin, staging_[i].data(), b.end - b.begin);
  }
}

}  // namespace tessel
