#include "tessel/comm/comm.h"

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel {

void CommGroup::refuse() { fail("a declare-only model build does not communicate"); }

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

std::optional<RankMessage> first_error(Comm& world, const std::optional<std::string>& mine) {
  // The lowest failing rank r as size − r, the largest such value over the ranks (0: none).
  double lowest = mine ? world.size() - world.rank() : 0;
  world.all_reduce(&lowest, 1, ReduceOp::Max);
  if (lowest == 0) return std::nullopt;
  const int root = world.size() - static_cast<int>(lowest);
  // Its message goes out as floats, one per byte (exact), after its length.
  float length = root == world.rank() ? static_cast<float>(mine->size()) : 0.0f;
  world.broadcast(&length, 1, root);
  std::vector<float> bytes(static_cast<size_t>(length));
  if (root == world.rank())
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((*mine)[i]);
  world.broadcast(bytes.data(), static_cast<int64_t>(bytes.size()), root);
  RankMessage first{root, {}};
  for (float b : bytes) first.message.push_back(static_cast<char>(static_cast<unsigned char>(b)));
  return first;
}

void check_together(Comm& world, const std::function<void()>& step) {
  std::optional<std::string> mine;
  try {
    step();
  } catch (const Error& e) {
    mine = e.what();
  }
  if (std::optional<RankMessage> first = first_error(world, mine))
    throw JobError(first->rank == 0 ? first->message
                                    : fmt::format("[rank {}] {}", first->rank, first->message));
}

}  // namespace tessel
