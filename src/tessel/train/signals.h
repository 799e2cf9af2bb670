// Ending a run early on purpose, with a save (Megatron's --exit-signal-handler and
// --exit-duration-in-mins). A scheduler about to pre-empt a job sends SIGTERM (Slurm, to every
// task), or the signal a job asked for (SIGUSR1/SIGUSR2; Open MPI's mpirun forwards both); a
// user presses Ctrl-C (SIGINT). With --exit-signal-handler those four only set a flag; the ranks
// agree after each iteration whether any rank got one, or whether any has run past the time
// limit, and then all of them finish that iteration, save, commit and exit 0.
#pragma once

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/train/options.h"

namespace tessel {

class ExitRequest {
 public:
  // Installs the handlers (--exit-signal-handler) and starts the clock (--exit-duration-in-mins).
  explicit ExitRequest(const FaultOptions& options);
  ~ExitRequest();  // restores the handlers it replaced
  ExitRequest(const ExitRequest&) = delete;
  ExitRequest& operator=(const ExitRequest&) = delete;

  // Collective over `world` when either is asked for (else nothing): why every rank stops after
  // this iteration ("SIGTERM", "--exit-duration-in-mins 30"), or nothing.
  std::optional<std::string> poll(Comm& world);

 private:
  const FaultOptions& options_;
  double start_seconds_;
  std::vector<std::pair<int, struct sigaction>> replaced_;
};

}  // namespace tessel
