#include "tessel/train/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel {

TrainLog::TrainLog(int64_t train_iters, int64_t log_interval, const std::string& json_path,
                   bool progress, bool quiet)
    : train_iters_(train_iters), log_interval_(log_interval > 0 ? log_interval : 1),
      progress_(progress && !quiet), quiet_(quiet) {
  if (!json_path.empty()) {
    json_ = std::fopen(json_path.c_str(), "w");
    TESSEL_CHECK(json_ != nullptr, "{}: cannot open --log-json file for writing", json_path);
  }
}

TrainLog::~TrainLog() {
  if (progress_drawn_) std::fputs("\r\033[K", stdout);
  if (json_ != nullptr) std::fclose(json_);
}

void TrainLog::iteration(const IterationStats& s) {
  elapsed_s_ += s.iteration_time_ms / 1000.0;
  const bool logged = s.iteration % log_interval_ == 0 || s.iteration == train_iters_ ||
                      s.iteration == 1;
  if (logged) {
    std::string moe;
    if (s.moe)
      moe = fmt::format(" | experts {:.0f}/{:.1f}/{:.0f} tok | dropped {:.1f} | aux {:.4f}",
                        s.expert_tokens_min, s.expert_tokens_mean, s.expert_tokens_max,
                        s.dropped_tokens, s.aux_loss);
    message(fmt::format("iter {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | "
                        "{:.0f} tok/s | {:.1f} ms{}",
                        s.iteration, fmt::formatted_size("{}", train_iters_), train_iters_,
                        s.loss, s.lr, s.grad_norm, s.tokens_per_s, s.iteration_time_ms, moe));
    if (json_ != nullptr) {
      nlohmann::json j = {{"iteration", s.iteration},
                          {"loss", s.loss},
                          {"lr", s.lr},
                          {"grad_norm", s.grad_norm},
                          {"tokens_per_s", s.tokens_per_s},
                          {"iteration_time_ms", s.iteration_time_ms},
                          {"data_wait_ms", s.data_wait_ms}};
      if (s.moe) {
        j["expert_tokens"] = {{"min", s.expert_tokens_min}, {"mean", s.expert_tokens_mean},
                              {"max", s.expert_tokens_max}};
        j["dropped_tokens"] = s.dropped_tokens;
        j["aux_loss"] = s.aux_loss;
      }
      for (const IterationStats::Comm& c : s.comm)
        j["comm"][c.group][c.op] = {{"calls", c.calls}, {"bytes", c.bytes}, {"ms", 1e3 * c.seconds}};
      std::fputs((j.dump() + "\n").c_str(), json_);
      std::fflush(json_);
    }
  }
  if (progress_) draw_progress(s);
}

void TrainLog::evaluation(int64_t it, const std::string& split, double loss) {
  const double ppl = std::exp(std::min(loss, 20.0));  // one scalar, capped at 20 as Megatron
  message(fmt::format("{} loss at iteration {} | lm loss value: {:.6f} | lm loss PPL: {:.4f}",
                      split == "valid" ? "validation" : split, it, loss, ppl));
  if (json_ == nullptr || quiet_) return;
  const nlohmann::json j = {{"iteration", it}, {"split", split}, {"loss", loss}, {"ppl", ppl}};
  std::fputs((j.dump() + "\n").c_str(), json_);
  std::fflush(json_);
}

void TrainLog::message(const std::string& line) {
  if (quiet_) return;
  if (progress_drawn_) std::fputs("\r\033[K", stdout);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
  progress_drawn_ = false;
}

void TrainLog::draw_progress(const IterationStats& s) {
  constexpr int kWidth = 30;
  const double done = static_cast<double>(s.iteration) / train_iters_;
  const int filled = static_cast<int>(done * kWidth);
  const double eta = s.iteration > 0 ? elapsed_s_ / s.iteration * (train_iters_ - s.iteration) : 0;
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  fmt::print("\r\033[K[{}] {:5.1f}% | loss {:.4f} | {:.0f} tok/s | eta {:.0f}:{:02.0f}", bar,
             100 * done, s.loss, s.tokens_per_s, std::floor(eta / 60), std::fmod(eta, 60.0));
  std::fflush(stdout);
  progress_drawn_ = true;
}

}  // namespace tessel
