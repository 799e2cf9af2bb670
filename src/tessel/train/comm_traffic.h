// Who talks to whom: every rank's communication in an iteration, by group kind, kind of call and
// peer, gathered to the first rank — for --log-json's "ranks" and --profile-report's lines.
#pragma once

#include <vector>

#include "tessel/parallel/groups.h"
#include "tessel/train/log.h"

namespace tessel {

// Each rank's counters (peer -1) and its listed calls summed by peer (groups.h's comm_calls: a
// send's or receive's peer; a collective counts with every other member of its group), on the
// first rank; empty on the others. Collective over the world.
std::vector<IterationStats::PeerComm> gather_comm_traffic(ProcessGroups& groups);

}  // namespace tessel
