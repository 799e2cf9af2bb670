#include "tessel/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/ranges.h>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/kernels.h"

namespace tessel {

namespace {

// grad_sq_sum splits the buffer into blocks of this many floats, whatever the thread count, and
// adds the block sums in order: the result depends on the data only.
constexpr int64_t kSumBlock = 1 << 16;
// Each block keeps this many independent double accumulators (one AVX-512 register's worth), so
// the loop vectorises without reassociating anything.
constexpr int kLanes = 8;

double sum_of_squares(const float* x, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (; i < n; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  double sum = 0.0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

}  // namespace

AdamW::AdamW(ParamRegistry& params, const OptimizerConfig& config, std::vector<FlatRange> owned)
    : params_(params), config_(config), owned_(std::move(owned)) {
  if (owned_.empty()) owned_.push_back({0, params.numel()});
  for (const FlatRange& r : owned_) state_numel_ += r.end - r.begin;
  std::vector<std::string> problems;
  if (!(config.beta1 >= 0.0f && config.beta1 < 1.0f))
    problems.push_back(fmt::format("--adam-beta1 {} is not in [0, 1)", config.beta1));
  if (!(config.beta2 >= 0.0f && config.beta2 < 1.0f))
    problems.push_back(fmt::format("--adam-beta2 {} is not in [0, 1)", config.beta2));
  if (!(config.eps > 0.0f))
    problems.push_back(fmt::format("--adam-eps {} is not positive", config.eps));
  if (!(config.weight_decay >= 0.0f))
    problems.push_back(fmt::format("--weight-decay {} is negative", config.weight_decay));
  if (!(config.clip_grad >= 0.0f))
    problems.push_back(fmt::format("--clip-grad {} is negative", config.clip_grad));
  if (!problems.empty()) fail("invalid optimizer config: {}", fmt::join(problems, "; "));
  TESSEL_CHECK(params.numel() == 0 || params.values() != nullptr,
               "AdamW needs a finalized parameter registry");
  m_ = alloc_floats(state_numel_);
  v_ = alloc_floats(state_numel_);
}

template <typename F>
void AdamW::for_each_owned_piece(F&& f) const {
  int64_t state = 0;
  for (const FlatRange& r : owned_) {
    for (const Param& p : params_.params()) {
      const int64_t begin = std::max(r.begin, p.offset), end = std::min(r.end, p.offset + p.numel());
      if (begin < end) f(p, begin - p.offset, end - begin, state + begin - r.begin);
    }
    state += r.end - r.begin;
  }
}

double AdamW::grad_sq_sum(const std::function<bool(const Param&)>& counted) const {
  double sum = 0.0;
  for_each_owned_piece([&](const Param& p, int64_t first, int64_t n, int64_t) {
    if (counted && !counted(p)) return;
    const float* g = p.grad + first;
    const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
    std::vector<double> block_sums(blocks);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kSumBlock;
      block_sums[b] = sum_of_squares(g + begin, std::min(kSumBlock, n - begin));
    }
    for (double s : block_sums) sum += s;
  });
  return sum;
}

float AdamW::grad_norm() const { return static_cast<float>(std::sqrt(grad_sq_sum())); }

float AdamW::clip(float norm) {
  if (config_.clip_grad <= 0.0f) return 1.0f;
  // As Megatron's clip_grad_norm_: the 1e-6 keeps a zero norm from dividing by zero.
  const float scale = static_cast<float>(config_.clip_grad / (static_cast<double>(norm) + 1e-6));
  if (!(scale < 1.0f)) return 1.0f;
  for (const FlatRange& r : owned_) {
    float* g = params_.grads() + r.begin;
    const int64_t n = r.end - r.begin;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] *= scale;
  }
  return scale;
}

void AdamW::step(float lr) {
  ++step_;
  for_each_owned_piece([&](const Param& p, int64_t first, int64_t n, int64_t state) {
    const float wd = p.weight_decay ? config_.weight_decay : 0.0f;
    cpu::adamw_update(p.value + first, p.grad + first, m_.get() + state, v_.get() + state, n, lr,
                      config_.beta1, config_.beta2, config_.eps, wd, step_);
  });
}

}  // namespace tessel
