#include "tessel/core/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/core/philox.h"

namespace tessel {

int64_t Param::global_index(int64_t local) const {
  if (shard.dim < 0) return local;
  // Unravel the local index, move the split coordinate to its global place, ravel again.
  int64_t global = 0;
  int64_t rest = local;
  int64_t coord[8];  // parameters have at most a few dimensions
  for (int d = static_cast<int>(local_shape.size()) - 1; d >= 0; --d) {
    coord[d] = rest % local_shape[d];
    rest /= local_shape[d];
  }
  // The block (section) the local coordinate lies in, then its place in the global block.
  int64_t c = coord[shard.dim];
  int64_t global_start = 0;
  int64_t global_part = shard.padded_size > 0 ? shard.padded_size : global_shape[shard.dim];
  for (const int64_t section : shard.sections) {
    global_part = section;
    if (c < section / shard.count) break;
    c -= section / shard.count;
    global_start += section;
  }
  const int64_t local_part = global_part / shard.count;
  coord[shard.dim] = global_start + shard.index * local_part + c;
  if (coord[shard.dim] >= global_shape[shard.dim]) return -1;  // padding
  for (size_t d = 0; d < global_shape.size(); ++d) global = global * global_shape[d] + coord[d];
  return global;
}

std::string ShardSpec::sections_problem(int64_t size) const {
  int64_t total = 0;
  for (const int64_t section : sections) {
    if (section % count != 0) return fmt::format("a section of {} does not split into {} parts", section, count);
    total += section;
  }
  if (!sections.empty() && total != size)
    return fmt::format("sections of {} in all for dimension {} of size {}", total, dim, size);
  return "";
}

int ParamRegistry::add(std::string name, Shape global_shape, ParamInit init, float init_std,
                       bool weight_decay, ShardSpec shard) {
  TESSEL_CHECK(!has(name), "parameter {} declared twice", name);
  TESSEL_CHECK(values_ == nullptr, "parameter {} declared after finalize()", name);
  Param p;
  p.name = std::move(name);
  p.global_shape = global_shape;
  p.local_shape = std::move(global_shape);
  if (shard.dim >= 0) {
    int64_t& d = p.local_shape.at(shard.dim);
    if (shard.padded_size > 0) {
      TESSEL_CHECK(shard.padded_size >= d, "parameter {}: padded size {} below {}", p.name,
                   shard.padded_size, d);
      d = shard.padded_size;
    }
    const std::string sections = shard.sections_problem(d);
    TESSEL_CHECK(sections.empty(), "parameter {}: {}", p.name, sections);
    TESSEL_CHECK(d % shard.count == 0, "parameter {}: dimension {} of size {} does not split into {} parts",
                 p.name, shard.dim, d, shard.count);
    d /= shard.count;
  }
  p.shard = shard;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  p.offset = numel_;
  numel_ += p.numel();
  index_[p.name] = static_cast<int>(params_.size());
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size()) - 1;
}

void ParamRegistry::finalize(const DeviceMemory& memory) {
  memory_ = &memory;
  values_ = reserve_floats(numel_, memory);
  grads_ = reserve_floats(numel_, memory);
  for (Param& p : params_) {
    p.value = values_.get() + p.offset;
    p.grad = grads_.get() + p.offset;
  }
}

// Drawn on the host, then moved to the registry's memory.
void ParamRegistry::init_values(uint64_t seed, const std::vector<FlatRange>& only) {
  if (only.empty()) {
    for (Param& p : params_) init_piece(p, 0, p.numel(), seed);
    return;
  }
  for_each_piece(params_, only, [&](const Param& p, int64_t first, int64_t n, int64_t) {
    init_piece(params_[&p - params_.data()], first, n, seed);
  });
}

void ParamRegistry::init_piece(Param& p, int64_t first, int64_t n, uint64_t seed) {
  std::vector<float> host(n);
  if (p.init == ParamInit::Normal) {
    const uint64_t stream = fnv1a64(p.name);
    float* values = host.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = p.global_index(first + i);
      values[i] = g < 0 ? 0.0f : p.init_std * random_normal(seed, stream, g);
    }
  } else if (p.init == ParamInit::LogUniform) {
    const uint64_t stream = fnv1a64(p.name);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = p.global_index(first + i);
      host[i] = g < 0 ? 0.0f : std::log(p.init_std * random_uniform(seed, stream, g));
    }
  } else {
    std::fill(host.begin(), host.end(), p.init == ParamInit::Ones ? 1.0f : 0.0f);
  }
  memory_->from_host(p.value + first, host.data(), n * 4);
}

void ParamRegistry::zero_grads() { memory_->zero(grads_.get(), numel_ * 4); }

std::vector<float> ParamRegistry::to_host(const Param& p) const {
  std::vector<float> host(p.numel());
  memory_->to_host(host.data(), p.value, p.numel() * 4);
  return host;
}

void ParamRegistry::from_host(Param& p, const float* values) {
  memory_->from_host(p.value, values, p.numel() * 4);
}

int ParamRegistry::index(const std::string& name) const {
  auto it = index_.find(name);
  TESSEL_CHECK(it != index_.end(), "no parameter named {}", name);
  return it->second;
}

Param& ParamRegistry::get(const std::string& name) {
  auto it = index_.find(name);
  TESSEL_CHECK(it != index_.end(), "no parameter named {}", name);
  return params_[it->second];
}

const Param& ParamRegistry::get(const std::string& name) const {
  return const_cast<ParamRegistry*>(this)->get(name);
}

}  // namespace tessel
