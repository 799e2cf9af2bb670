#include "tessel/parallel/fully_sharded.h"

#include <algorithm>
#include <utility>

#include "tessel/core/error.h"

namespace tessel {

FullySharded::FullySharded(const Kernels& k, ParamRegistry& params, Comm& dense, Comm& experts,
                           std::vector<WeightUnit> units, std::vector<int> chunk_first,
                           FullyShardedConfig config)
    : k_(k), params_(params), config_(std::move(config)) {
  const std::vector<Param>& ps = params.params();
  std::vector<int> unit_of(ps.size(), -1);
  for (size_t u = 0; u < units.size(); ++u)
    for (int i : units[u].params) {
      TESSEL_CHECK(unit_of[i] < 0, "fully sharded: parameter {} in two units", ps[i].name);
      unit_of[i] = static_cast<int>(u);
    }
  for (size_t i = 0; i < ps.size(); ++i)
    TESSEL_CHECK(unit_of[i] >= 0, "fully sharded: parameter {} in no unit", ps[i].name);
  const auto alone = [&](int i) {
    return std::find(config_.alone.begin(), config_.alone.end(), i) != config_.alone.end();
  };
  chunk_first.push_back(static_cast<int>(units.size()));
  units_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    Unit& unit = units_[u];
    // Buckets: runs of adjacent parameters reduced over the same group.
    std::vector<int> members = units[u].params;
    std::sort(members.begin(), members.end());
    for (size_t j = 0; j < members.size(); ++j) {
      const Param& p = ps[members[j]];
      Comm* group = config_.is_expert(p) ? &experts : &dense;
      const bool joins = j > 0 && !alone(members[j]) && !alone(members[j - 1]) &&
                         buckets_.back().end == p.offset && buckets_.back().group == group;
      if (joins) {
        buckets_.back().end += p.numel();
        continue;
      }
      buckets_.push_back({.begin = p.offset, .end = p.offset + p.numel(), .group = group});
      unit.buckets.push_back(static_cast<int>(buckets_.size()) - 1);
    }
    for (int i : units[u].reads)
      if (unit_of[i] != static_cast<int>(u) &&
          std::find(unit.reads.begin(), unit.reads.end(), unit_of[i]) == unit.reads.end())
        unit.reads.push_back(unit_of[i]);
    unit.backward_needs_weights = units[u].backward_needs_weights;
    const int chunk = static_cast<int>(std::upper_bound(chunk_first.begin(), chunk_first.end(), static_cast<int>(u)) -
                                       chunk_first.begin()) - 1;
    if (static_cast<int>(u) + 1 < chunk_first[chunk + 1]) unit.next_forward = static_cast<int>(u) + 1;
    if (static_cast<int>(u) > chunk_first[chunk]) unit.next_backward = static_cast<int>(u) - 1;
  }
  for (Bucket& b : buckets_) {
    const int size = b.group->size();
    const int64_t n = b.end - b.begin, shard = (n + size - 1) / size;
    for (int r = 0; r < size; ++r) {
      b.offsets.push_back(std::min(n, r * shard));
      b.counts.push_back(std::min(n, (r + 1) * shard) - b.offsets.back());
    }
    b.own_begin = b.begin + b.offsets[b.group->rank()];
    b.own_end = b.own_begin + b.counts[b.group->rank()];
    if (b.own_begin < b.own_end) owned_.push_back({b.own_begin, b.own_end});
  }
  for (Unit& u : units_)
    for (int b : u.buckets) u.bytes += (buckets_[b].end - buckets_[b].begin) * 4;
  std::sort(owned_.begin(), owned_.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  int64_t largest = 1;
  for (const Bucket& b : buckets_) largest = std::max(largest, b.own_end - b.own_begin);
  reduced_ = k_.zeros({largest});
  for (Unit& u : units_) u.whole = true;  // the values as initialised, until shard_values()
}

void FullySharded::start_gather(Unit& u) {
  if (u.whole || !u.arriving.empty()) return;
  float* values = params_.values();
  for (int i : u.buckets) {
    Bucket& b = buckets_[i];
    u.arriving.push_back(b.group->all_gather_v_async(values + b.own_begin, values + b.begin, b.counts.data(),
                                                     b.offsets.data()));
  }
  gathered_now_ += u.bytes;
  gathered_peak_ = std::max(gathered_peak_, gathered_now_);
}

void FullySharded::wait_gather(Unit& u) {
  if (u.whole) return;
  start_gather(u);
  wait_all(u.arriving);
  u.arriving.clear();
  u.whole = true;
}

void FullySharded::free_unit(Unit& u) {
  if (!config_.shard_params || u.users > 0 || (!u.whole && u.arriving.empty())) return;
  wait_all(u.arriving);  // a prefetch never used: MPI may still write into the buffer
  u.arriving.clear();
  float* values = params_.values();
  const DeviceMemory& memory = params_.memory();
  for (int i : u.buckets) {
    const Bucket& b = buckets_[i];
    memory.discard(values + b.begin, (b.own_begin - b.begin) * 4);
    memory.discard(values + b.own_end, (b.end - b.own_end) * 4);
  }
  u.whole = false;
  gathered_now_ -= u.bytes;
}

void FullySharded::take(int unit) {
  Unit& u = units_[unit];
  ++u.users;
  if (config_.shard_params) wait_gather(u);
}

void FullySharded::acquire(int unit, bool backward) {
  Unit& u = units_[unit];
  take(unit);
  for (int r : u.reads) take(r);
  if (backward) {
    u.dirty = true;
    for (int r : u.reads) units_[r].dirty = true;
  }
  if (!config_.shard_params) return;
  // The next unit's gather goes on while this one computes.
  const int next = backward ? u.next_backward : u.next_forward;
  if (next >= 0 && (!backward || units_[next].backward_needs_weights)) start_gather(units_[next]);
}

void FullySharded::give_back(int unit, bool backward) {
  Unit& u = units_[unit];
  --u.users;
  const bool free = backward ? config_.reshard_after_forward || last_microbatch_ : config_.reshard_after_forward;
  if (free) free_unit(u);
}

void FullySharded::release(int unit, bool backward) {
  give_back(unit, backward);
  for (int r : units_[unit].reads) give_back(r, backward);
}

void FullySharded::grads_written(int unit) {
  Unit& u = units_[unit];
  u.dirty = true;
  for (int r : u.reads) units_[r].dirty = true;
  // Without resharding, gradients accumulate whole until the step's last microbatch.
  if (config_.reshard_after_forward || last_microbatch_) reduce_scatter(u);
}

void FullySharded::reduce_scatter(Unit& u) {
  if (!u.dirty) return;
  float* grads = params_.grads();
  for (int i : u.buckets) {
    const Bucket& b = buckets_[i];
    // The owned slice holds this rank's sum so far, to which its backward has added its own
    // part: the other ranks add only theirs, so the reduced slice is the new sum.
    b.group->reduce_scatter_v(grads + b.begin, reduced_.data(), b.counts.data());
    k_.copy(grads + b.own_begin, reduced_.data(), b.own_end - b.own_begin);
    params_.memory().discard(grads + b.begin, (b.own_begin - b.begin) * 4);
    params_.memory().discard(grads + b.own_end, (b.end - b.own_end) * 4);
  }
  u.dirty = false;
}

void FullySharded::zero_grads() { params_.memory().discard(params_.grads(), params_.numel() * 4); }

void FullySharded::finish_grad_reduction() {
  for (Unit& u : units_) reduce_scatter(u);
  shard_values();
}

void FullySharded::gather_params() {
  if (config_.shard_params) return;
  float* values = params_.values();
  for (Bucket& b : buckets_) b.group->all_gather_v(values + b.own_begin, values + b.begin, b.counts.data(), b.offsets.data());
}

void FullySharded::gather_all() {
  if (!config_.shard_params) return;
  for (Unit& u : units_) start_gather(u);
  for (Unit& u : units_) wait_gather(u);
}

void FullySharded::shard_values() {
  if (!config_.shard_params) return;
  for (Unit& u : units_) {
    TESSEL_CHECK(u.users == 0, "fully sharded: a unit still in use at the end of a pass");
    free_unit(u);
  }
  gathered_now_ = 0;
}

FullySharded::Held FullySharded::take_held() {
  Held held;
  int64_t owned = 0;
  for (const FlatRange& r : owned_) owned += (r.end - r.begin) * 4;
  held.params = config_.shard_params ? owned : params_.numel() * 4;
  held.grads = owned;
  held.gathered_peak = gathered_peak_;
  gathered_peak_ = gathered_now_;
  return held;
}

}  // namespace tessel
