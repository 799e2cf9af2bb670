// The zero-bubble generators behind generate_schedule (pipeline/schedule.h): each backward is
// split into its input-gradient half I, which the previous stage waits for, and its
// weight-gradient half W, which waits for nobody and fills what would be idle time.
//   ZB-H1      Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024): 1F1B's memory, a third
//              of its bubble;
//   ZB-V       the same paper's V schedule: two chunks per rank in a V, 1F1B's memory, no bubble
//              inside a rank's iteration once m ≥ 2p;
//   DualPipeV  DeepSeek-V3's DualPipe folded onto the V placement (DeepSeek's dualpipev.py).
// Each returns rank `rank`'s compute list for p ranks and m microbatches (local chunk 0 only for
// ZB-H1; chunks 0 and 1 of the V placement for the others).
#pragma once

#include "tessel/pipeline/schedule.h"

namespace tessel {

RankSchedule zero_bubble_h1(int p, int m, int rank);
RankSchedule zero_bubble_v(int p, int m, int rank);
RankSchedule dualpipe_v(int p, int m, int rank);  // m ≥ 2p

}  // namespace tessel
