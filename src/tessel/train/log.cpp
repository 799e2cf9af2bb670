#include "tessel/train/log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace {
// A figure's number in a --log-json record under `key`: "a" a number, "a[]" appended to the list
// a, "a.b" member b of the object a (model/step_terms.h).
void add_json_figure(nlohmann::json& record, const std::string& key, double value) {
  const size_t dot = key.find('.');
  if (key.ends_with("[]")) record[key.substr(0, key.size() - 2)].push_back(value);
  else if (dot != std::string::npos) record[key.substr(0, dot)][key.substr(dot + 1)] = value;
  else record[key] = value;
}


// The records of a --log-json file up to `iteration` (none when it is 0 or the file is absent).
std::string records_until(const std::string& path, int64_t iteration) {
  std::string kept;
  std::ifstream in(path);
  for (std::string line; iteration > 0 && std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object() && record.value("iteration", int64_t{0}) <= iteration) kept += line + "\n";
  }
  return kept;
}

// The log, put in place holding `kept` (a resumed run's records up to its save, else none) and
// opened to append to, never through a link; a failed write (a full disk) leaves the old file
// whole. Replaceable, not durable: the records appended after it are not synced either, and each
// resume writes the file anew.
std::FILE* open_log(const std::string& path, const std::string& kept) {
  try {
    return open_growing_file(path, kept);
  } catch (const Error& e) {
    if (kept.empty()) fail("--log-json {}: cannot create it ({})", path, e.what());
    fail("--log-json {}: cannot rewrite the {} bytes of records it keeps ({}); the file is left as "
         "it was", path, kept.size(), e.what());
  }
}

}  // namespace

TrainLog::TrainLog(int64_t train_iters, int64_t log_interval, const std::string& json_path,
                   bool progress, bool quiet, int64_t resumed_after)
    : train_iters_(train_iters), log_interval_(log_interval > 0 ? log_interval : 1),
      progress_(progress && !quiet), quiet_(quiet) {
  if (json_path.empty()) return;
  json_path_ = json_path;
  // A resumed run keeps the records up to its save (a new one none): rewritten whole or not at
  // all, then appended to.
  const std::string kept = records_until(json_path, resumed_after);
  json_ = open_log(json_path, kept);
  json_bytes_ = static_cast<int64_t>(kept.size());
  json_records_ = std::count(kept.begin(), kept.end(), '\n');
}

void TrainLog::write_json(const nlohmann::json& record) {
  if (json_ == nullptr) return;
  const std::string line = record.dump() + "\n";
  if (std::fputs(line.c_str(), json_) >= 0 && std::fflush(json_) == 0) {
    json_bytes_ += static_cast<int64_t>(line.size());
    ++json_records_;
    return;
  }
  write_error_ = fmt::format("--log-json {}: write failed ({}); it keeps the {} records before it",
                             json_path_, std::strerror(errno), json_records_);
  // Whatever part of the line reached the disk goes: the file ends with its last whole record.
  // Cut after the close, which may still write what was buffered; through the file opened, not
  // its name.
  const int file = ::dup(::fileno(json_));
  std::fclose(json_);
  json_ = nullptr;
  if (file < 0 || ::ftruncate(file, json_bytes_) != 0)
    *write_error_ += fmt::format(" (and its last line may be cut: {})", std::strerror(errno));
  if (file >= 0) ::close(file);
}

void TrainLog::check() const {
  if (write_error_) throw Error(*write_error_);
}

TrainLog::~TrainLog() {
  if (progress_drawn_) std::fputs("\r\033[K", stdout);
  if (json_ != nullptr) std::fclose(json_);
}

void TrainLog::iteration(const IterationStats& s) {
  elapsed_s_ += s.iteration_time_ms / 1000.0;
  skipped_since_logged_ += s.skipped ? 1 : 0;
  // A skipped step is news, unless a loss scaler skips it: then it is the scaler's overflow, which
  // the interval's line counts, as Megatron's.
  const bool logged = at_interval(s.iteration) || (s.skipped && !s.loss_scale);
  if (logged) {
    std::string after_loss, at_end;
    if (s.loss_scale) after_loss += fmt::format(" | loss scale {:.1f}", s.loss_scale->scale);
    for (const StepFigure& f : s.figures) (f.after_loss ? after_loss : at_end) += " | " + f.text;
    if (s.num_zeros) at_end += fmt::format(" | num zeros {:.0f}", *s.num_zeros);
    if (s.params_norm) at_end += fmt::format(" | params norm {:.3f}", *s.params_norm);
    if (s.throughput) at_end += fmt::format(" | {:.3g} TFLOP/s per rank", *s.throughput);
    if (s.loss_scale) at_end += fmt::format(" | number of skipped iterations {:3d}", skipped_since_logged_);
    message(fmt::format("iter {:>{}}/{} | loss {:.4f}{} | lr {:.3e} | global batch {} | grad norm {:.3f} | "
                        "{:.0f} tok/s | {:.1f} ms{}{}",
                        s.iteration, fmt::formatted_size("{}", train_iters_), train_iters_,
                        s.loss, after_loss, s.lr, s.global_batch, s.grad_norm, s.tokens_per_s, s.iteration_time_ms,
                        at_end,
                        s.skipped ? " | skipped: not finite, no optimizer step" : ""));
    if (json_ != nullptr) {
      nlohmann::json j = {{"iteration", s.iteration},
                          {"loss", s.loss},
                          {"lr", s.lr},
                          {"global_batch_size", s.global_batch},
                          {"grad_norm", s.grad_norm},
                          {"tokens_per_s", s.tokens_per_s},
                          {"iteration_time_ms", s.iteration_time_ms},
                          {"data_wait_ms", s.data_wait_ms}};
      j["consumed_samples"] = s.consumed_samples;
      j["world_size"] = s.world_size;
      const auto optional = [&j](const char* key, const std::optional<double>& value) {
        if (value) j[key] = *value;
      };
      optional("params_norm", s.params_norm);
      optional("num_zeros", s.num_zeros);
      optional("interval_time_s", s.interval_time_s);
      optional("throughput", s.throughput);
      optional("memory_bytes", s.memory_bytes);
      optional("peak_memory_bytes", s.peak_memory_bytes);
      if (s.skipped) j["skipped"] = true;
      if (s.loss_scale) {
        j["loss_scale"] = s.loss_scale->scale;
        j["growth_tracker"] = s.loss_scale->growth_tracker;
        j["hysteresis_tracker"] = s.loss_scale->hysteresis_tracker;
        j["skipped_iterations"] = skipped_since_logged_;
      }
      for (const StepFigure& f : s.figures)
        for (const auto& [key, value] : f.json) add_json_figure(j, key, value);
      for (const IterationStats::Comm& c : s.comm)
        j["comm"][c.group][c.op] = {{"calls", c.calls}, {"bytes", c.bytes}, {"ms", 1e3 * c.seconds}};
      // Every rank's: "ranks": [{"rank": 0, "comm": {"pp": {"send": {calls, bytes, ms, "peers": {"2": ...}}}}}]
      std::map<int, nlohmann::json> ranks;
      for (const IterationStats::PeerComm& c : s.traffic) {
        nlohmann::json& rank = ranks.try_emplace(c.rank, nlohmann::json{{"rank", c.rank}}).first->second;
        const nlohmann::json counter = {{"calls", c.calls}, {"bytes", c.bytes}, {"ms", 1e3 * c.seconds}};
        nlohmann::json& call = rank["comm"][c.group][c.op];
        if (c.peer < 0) call.update(counter);
        else call["peers"][std::to_string(c.peer)] = counter;
      }
      for (auto& [r, rank] : ranks) j["ranks"].push_back(std::move(rank));
      write_json(j);
    }
    skipped_since_logged_ = 0;
  }
  if (progress_) draw_progress(s);
}

void TrainLog::evaluation(int64_t it, const std::string& split, double loss) {
  const double ppl = std::exp(std::min(loss, 20.0));  // one scalar, capped at 20 as Megatron
  message(fmt::format("{} loss at iteration {} | lm loss value: {:.6f} | lm loss PPL: {:.4f}",
                      split == "valid" ? "validation" : split, it, loss, ppl));
  if (json_ == nullptr || quiet_) return;
  const nlohmann::json j = {{"iteration", it}, {"split", split}, {"loss", loss}, {"ppl", ppl}};
  write_json(j);
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
