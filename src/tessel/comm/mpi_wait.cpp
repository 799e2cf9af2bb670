// How every MpiComm call waits (mpi.h): the operation was started non-blocking; this file polls
// it until it completes, and ends the job when it makes no progress for the distributed timeout.
//
// A blocking MPI call (and MPI_Wait) spins on its core for as long as it waits. A rank that waits
// for a slow or stopped peer — a pipeline bubble, a rank loading a file, a rank stopped by the
// scheduler — then takes a core from the ranks that compute (8 ranks share 2 cores in the main
// job), and a peer that never comes leaves the job hanging. So: MPI_Test in a tight loop for
// the first kSpinSeconds (most waits end there, at MPI's own latency), then sleeps between
// tests, growing from kFirstPause to kLongestPause; Open MPI's non-blocking collectives advance
// inside MPI_Test, so the pause also bounds how late a long wait notices its end.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tessel/comm/mpi.h"

namespace tessel {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kSpinSeconds = 0.002;
constexpr std::chrono::microseconds kFirstPause{20}, kLongestPause{1000};

std::atomic<double> timeout_seconds{600.0};

// The world ranks of a communicator's members, in its order.
std::vector<int> world_ranks(MPI_Comm comm, int size) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(size), in_world(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  MPI_Group_translate_ranks(group, size, ranks.data(), world, in_world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return in_world;
}

}  // namespace

void set_distributed_timeout(double seconds) { timeout_seconds = seconds; }

double distributed_timeout() { return timeout_seconds; }

void MpiComm::wait(MPI_Request& request, const char* what, int peer) const {
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  if (done) return;
  const Clock::time_point start = Clock::now();
  std::chrono::microseconds pause = kFirstPause;
  for (;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited >= timeout_seconds) {
      const std::vector<int> members = world_ranks(comm_, size_);
      const std::string call =
          peer < 0 ? fmt::format("{} over group {} (world ranks {})", what, name_,
                                 fmt::join(members, ", "))
                   : fmt::format("{} {} group {}'s rank {} (world rank {})", what,
                                 what[0] == 's' ? "to" : "from", name_, peer, members[peer]);
      abort_job(fmt::format("distributed timeout: rank {} waited {:.0f} s in {} without progress "
                            "(the limit of --distributed-timeout-minutes or -seconds): a rank has stopped or hangs",
                            members[rank_], waited, call));
    }
    if (waited < kSpinSeconds) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, kLongestPause);
  }
}

}  // namespace tessel
