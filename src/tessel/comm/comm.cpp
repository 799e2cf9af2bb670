#include "tessel/comm/comm.h"

#include <fmt/format.h>

#include <chrono>

#include "tessel/core/error.h"

namespace tessel {

void CommGroup::refuse() { fail("a declare-only model build does not communicate"); }

const char* comm_op_name(CommOp op) {
  static constexpr const char* kNames[kNumCommOps] = {
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send", "recv"};
  return kNames[static_cast<int>(op)];
}

namespace {
double system_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

void Comm::reset_stats() {
  stats_ = {};
  calls_.clear();
  ++generation_;
}

CallTicket Comm::note_call(CommOp op, double bytes, int peer) {
  CommCounter& counter = stats_[static_cast<int>(op)];
  ++counter.calls;
  counter.bytes += bytes;
  if (!recording_) return {};
  const double now = system_seconds();
  const int world_peer = peer < 0 || members_.empty() ? peer : members_.at(peer);
  calls_.push_back({op, bytes, world_peer, now, now, 0});
  return {generation_, calls_.size() - 1};
}

void Comm::note_blocked(CommOp op, const CallTicket& ticket, double seconds) {
  stats_[static_cast<int>(op)].seconds += seconds;
  if (ticket.generation != generation_) return;
  CommCall& call = calls_[ticket.index];
  call.blocked += seconds;
  call.end = system_seconds();
}

// Waits for each request in turn and empties the list, so it can collect the next round.
// Waiting in order cannot deadlock: every request is already posted, and waiting on one makes
// progress on all of them.
void wait_all(std::vector<Request>& requests) {
  for (Request& request : requests) request.wait();
  requests.clear();
}

std::vector<float> all_gather_lists(Comm& comm, const std::vector<float>& mine, std::vector<int64_t>& starts) {
  // The lengths go first, as floats (exact below 2^24 elements).
  std::vector<float> lengths(comm.size());
  const float length = static_cast<float>(mine.size());
  comm.all_gather(&length, lengths.data(), 1);
  std::vector<int64_t> counts(comm.size());
  starts.assign(comm.size() + 1, 0);
  for (int r = 0; r < comm.size(); ++r) {
    counts[r] = static_cast<int64_t>(lengths[r]);
    starts[r + 1] = starts[r] + counts[r];
  }
  std::vector<float> all(starts.back());
  comm.all_gather_v(mine.data(), all.data(), counts.data(), starts.data());
  return all;
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
