#include "tessel/train/signals.h"

#include <fmt/format.h>

#include <chrono>

namespace tessel {

namespace {

constexpr int kExitSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

// The last exit signal received (0: none). A handler may only store to a lock-free atomic.
volatile std::sig_atomic_t received = 0;

void note_signal(int signal) { received = signal; }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a signal";
  }
}

}  // namespace

ExitRequest::ExitRequest(const FaultOptions& options)
    : options_(options), start_seconds_(now_seconds()) {
  if (!options.exit_signal_handler) return;
  received = 0;
  struct sigaction action {};
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write or a read in progress goes on
  for (int signal : kExitSignals) {
    struct sigaction old {};
    sigaction(signal, &action, &old);
    replaced_.emplace_back(signal, old);
  }
}

ExitRequest::~ExitRequest() {
  for (const auto& [signal, old] : replaced_) sigaction(signal, &old, nullptr);
}

std::optional<std::string> ExitRequest::poll(Comm& world) {
  const bool timed = options_.exit_duration_mins > 0;
  if (!options_.exit_signal_handler && !timed) return std::nullopt;
  const double over_time =
      timed && now_seconds() - start_seconds_ >= 60 * options_.exit_duration_mins ? 1 : 0;
  // Which signal (the largest number any rank got) and whether any rank is past the limit.
  double flags[2] = {static_cast<double>(received), over_time};
  world.all_reduce(flags, 2, ReduceOp::Max);
  if (flags[0] != 0) return signal_name(static_cast<int>(flags[0]));
  if (flags[1] != 0) return fmt::format("--exit-duration-in-mins {}", options_.exit_duration_mins);
  return std::nullopt;
}

}  // namespace tessel
