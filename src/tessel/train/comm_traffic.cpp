#include "tessel/train/comm_traffic.h"

#include <cmath>
#include <map>
#include <tuple>

namespace tessel {

namespace {

// Each entry goes as kFields floats: rank, peer, group kind, kind of call, calls, bytes in two
// parts (below and above 2^24, each exact in a float), seconds.
constexpr int kFields = 8;
constexpr double kBytesSplit = 16777216.0;  // 2^24

}  // namespace

std::vector<IterationStats::PeerComm> gather_comm_traffic(ProcessGroups& groups) {
  Comm& world = groups.world();
  using Key = std::tuple<int, GroupKind, CommOp>;  // peer, group, call
  std::map<Key, CommCounter> sums;
  for (const ProcessGroups::CommUse& use : groups.comm_uses()) sums[{-1, use.group, use.op}] = use.counter;
  for (const ProcessGroups::GroupCall& c : groups.comm_calls()) {
    std::vector<int> peers = {c.call.peer};
    if (c.call.peer < 0) {
      peers.clear();
      for (int member : groups.get(c.group).members())
        if (member != groups.world_rank()) peers.push_back(member);
    }
    for (int peer : peers) {
      CommCounter& sum = sums[{peer, c.group, c.call.op}];
      ++sum.calls;
      sum.bytes += c.call.bytes;
      sum.seconds += c.call.blocked;
    }
  }
  std::vector<float> mine;
  for (const auto& [key, sum] : sums) {
    const auto& [peer, group, op] = key;
    const double high = std::floor(sum.bytes / kBytesSplit);
    mine.insert(mine.end(), {static_cast<float>(world.rank()), static_cast<float>(peer), static_cast<float>(group),
                             static_cast<float>(op), static_cast<float>(sum.calls),
                             static_cast<float>(sum.bytes - high * kBytesSplit), static_cast<float>(high),
                             static_cast<float>(sum.seconds)});
  }
  std::vector<int64_t> starts;
  const std::vector<float> all = all_gather_lists(world, mine, starts);
  std::vector<IterationStats::PeerComm> traffic;
  if (world.rank() != 0) return traffic;
  for (int64_t i = 0; i < starts.back(); i += kFields) {
    const float* a = all.data() + i;
    traffic.push_back({static_cast<int>(a[0]), static_cast<int>(a[1]), group_kind_name(static_cast<GroupKind>(a[2])),
                       comm_op_name(static_cast<CommOp>(a[3])), static_cast<int64_t>(a[4]),
                       a[5] + kBytesSplit * a[6], a[7]});
  }
  return traffic;
}

}  // namespace tessel
