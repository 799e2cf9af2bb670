#include "tessel/train/model_state.h"

#include <fmt/format.h>

#include <vector>

namespace tessel {

void report_model_state(TrainLog& log, ProcessGroups& groups, GradSync& sync) {
  const GradSync::StateBytes b = sync.take_state_bytes();
  constexpr double kMiB = 1024.0 * 1024.0;
  const float mine[4] = {static_cast<float>(b.params / kMiB), static_cast<float>(b.grads / kMiB),
                         static_cast<float>(b.optimizer / kMiB), static_cast<float>(b.gathered_peak / kMiB)};
  Comm& world = groups.world();
  std::vector<float> all(4 * world.size());
  world.all_gather(mine, all.data(), 4);
  for (int r = 0; r < world.size(); ++r) {
    const float* x = all.data() + 4 * r;
    log.message(fmt::format("profile: rank {} model state {:.2f} MiB = parameters {:.2f} + gradients {:.2f} + Adam "
                            "moments {:.2f}{}",
                            r, x[0] + x[1] + x[2], x[0], x[1], x[2],
                            sync.fully_sharded() ? fmt::format("; units gathered whole at most {:.2f} MiB at once", x[3])
                                                 : std::string()));
  }
}

}  // namespace tessel
