#include "tessel/train/signals.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string_view>

namespace tessel {

namespace {

constexpr int kExitSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

// The last exit signal received (0: none). A handler may only store to a lock-free atomic; it
// runs on whichever thread the signal lands on (an OpenMP or MPI thread as well), so the flag is
// an atomic the training thread reads, not a volatile.
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free);

void note_signal(int signal) { received.store(signal, std::memory_order_relaxed); }

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

void install_exit_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write or a read in progress goes on
  for (int signal : kExitSignals) sigaction(signal, &action, nullptr);
}

bool asks_exit_signal_handler(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) != "train") return false;
  for (int i = 2; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with("--exit-signal-handler")) return true;
  return false;
}

ExitRequest::ExitRequest(const FaultOptions& options)
    : options_(options), start_seconds_(now_seconds()) {
  if (options.exit_signal_handler) install_exit_signal_handlers();
}

std::optional<std::string> ExitRequest::poll(Comm& world) {
  const bool timed = options_.exit_duration_mins > 0;
  if (!options_.exit_signal_handler && !timed) return std::nullopt;
  const double over_time =
      timed && now_seconds() - start_seconds_ >= 60 * options_.exit_duration_mins ? 1 : 0;
  // Which signal (the largest number any rank got) and whether any rank is past the limit.
  double flags[2] = {static_cast<double>(received.load(std::memory_order_relaxed)), over_time};
  world.all_reduce(flags, 2, ReduceOp::Max);
  if (flags[0] != 0) return signal_name(static_cast<int>(flags[0]));
  if (flags[1] != 0) return fmt::format("--exit-duration-in-mins {}", options_.exit_duration_mins);
  return std::nullopt;
}

}  // namespace tessel
