#include "tessel/comm/comm.h"

namespace tessel {

const char* comm_op_name(CommOp op) {
  static constexpr const char* kNames[kNumCommOps] = {
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv"};
  return kNames[static_cast<int>(op)];
}

// Waits for each request in turn and empties the list, so it can collect the next round.
// Waiting in order cannot deadlock: every request is already posted, and waiting on one makes
// progress on all of them.
void wait_all(std::vector<Request>& requests) {
  for (Request& request : requests) request.wait();
  requests.clear();
}

}  // namespace tessel
