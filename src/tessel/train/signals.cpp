#include "tessel/train/signals.h"

#include <fmt/format.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <string_view>
#include <thread>

namespace tessel {

namespace {

constexpr int kExitSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

// The last exit signal received (0: none). A handler may only store to a lock-free atomic; it
// runs on whichever thread the signal lands on (an OpenMP or MPI thread as well), so the flag is
// an atomic the training thread reads, not a volatile.
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free);

void note_signal(int signal) { received.store(signal, std::memory_order_relaxed); }

sigset_t exit_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : kExitSignals) sigaddset(&set, signal);
  return set;
}

// The one thread the exit signals reach: it takes each from the pending set and notes it.
void take_exit_signals() {
  const sigset_t set = exit_signal_set();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) == 0) note_signal(signal);
  }
}

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

// Blocked in the calling thread and, by inheritance, in every thread it starts after (OpenMP's,
// oneDNN's, MPI's, the data loader's), and taken by a thread of their own with sigwait: a signal
// delivered to a computing thread is not safe however little its handler does. oneDNN's JIT GEMM
// kernels use rsp as a data register, pointing into the heap; the kernel pushes a signal's frame
// below wherever rsp points, over the heap, and the save after a SIGTERM crashed in malloc. The
// handler stays as the disposition for a thread that unblocks them (a library's): one that
// computes no GEMM.
void install_exit_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write or a read in progress goes on
  for (int signal : kExitSignals) sigaction(signal, &action, nullptr);
  const sigset_t set = exit_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  static std::once_flag started;
  std::call_once(started, [] { std::thread(take_exit_signals).detach(); });  // inherits the mask
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
