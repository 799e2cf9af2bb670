// Ending a run early on purpose, with a save (Megatron's --exit-signal-handler and
// --exit-duration-in-mins). A scheduler about to pre-empt a job sends SIGTERM (Slurm, to every
// task), or the signal a job asked for (SIGUSR1/SIGUSR2; Open MPI's mpirun forwards both); a
// user presses Ctrl-C (SIGINT). With --exit-signal-handler those four only set a flag; the ranks
// agree after each iteration whether any rank got one, or whether any has run past the time
// limit, and then all of them finish that iteration, save, commit and exit 0.
//
// The handlers go in before MPI_Init (main, from the command line) and stay for the life of the
// process: a signal during start-up stops the run after its first iteration, and one during the
// last save, the export or MPI_Finalize is noted and changes nothing, instead of killing a rank
// its peers then wait for.
#pragma once

#include <optional>
#include <string>

#include "tessel/comm/comm.h"
#include "tessel/train/options.h"

namespace tessel {

// Makes SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 set the exit flag from now on (idempotent: again
// after a library that replaced them).
void install_exit_signal_handlers();

// Whether `argv` asks `tessel train` for --exit-signal-handler: main's test before MPI_Init, which
// comes before the flags are parsed.
bool asks_exit_signal_handler(int argc, char** argv);

class ExitRequest {
 public:
  // Installs the handlers (--exit-signal-handler) and starts the clock (--exit-duration-in-mins).
  explicit ExitRequest(const FaultOptions& options);
  ExitRequest(const ExitRequest&) = delete;
  ExitRequest& operator=(const ExitRequest&) = delete;

  // Collective over `world` when either is asked for (else nothing): why every rank stops after
  // this iteration ("SIGTERM", "--exit-duration-in-mins 30"), or nothing.
  std::optional<std::string> poll(Comm& world);

 private:
  const FaultOptions& options_;
  double start_seconds_;
};

}  // namespace tessel
