#include "tessel/pipeline/zero_bubble.h"

#include <algorithm>
#include <deque>

namespace tessel {

namespace {

// Appends one rank's actions, keeping the per-chunk counts: the next forward, input gradient and
// weight gradient of each chunk run the lowest microbatch not yet run, as every schedule here
// runs each kind in microbatch order on each chunk. Actions of microbatches ≥ m are dropped:
// a schedule written for more microbatches, cut back to m, keeps every dependency it had (an
// action only ever waits for actions of its own microbatch), so the generators below are
// written for m ≥ 2p and run any m.
class RankBuilder {
 public:
  explicit RankBuilder(int m) : m_(m) {}

  void forward(int chunk) { add(ActionKind::Forward, forwards_[chunk]++, chunk); }
  // The whole backward (B) or its input half (I), whose W joins the queue of deferred ones.
  void backward(int chunk) { add(ActionKind::Backward, backwards_[chunk]++, chunk); }
  void input_gradient(int chunk) {
    const int mb = backwards_[chunk]++;
    add(ActionKind::BackwardInput, mb, chunk);
    deferred_.push_back({mb, chunk});
  }
  // The oldest deferred W (DeepSeek's WeightGradStore is a queue too).
  void weight_gradient() {
    if (deferred_.empty()) return;
    const auto [mb, chunk] = deferred_.front();
    deferred_.pop_front();
    add(ActionKind::BackwardWeight, mb, chunk);
  }
  int forwards(int chunk) const { return forwards_[chunk]; }
  bool weights_pending() const { return !deferred_.empty(); }
  RankSchedule take() { return std::move(actions_); }

 private:
  void add(ActionKind kind, int mb, int chunk) {
    if (mb < m_) actions_.push_back({kind, mb, chunk, -1});
  }

  int m_;
  int forwards_[2] = {0, 0}, backwards_[2] = {0, 0};
  std::deque<std::pair<int, int>> deferred_;  // (microbatch, chunk) of Is whose W has not run
  RankSchedule actions_;
};

}  // namespace

// Step x of rank r runs F_x, then I of microbatch x − (p − 1 − r), then W of microbatch x − (p − 1),
// those that exist. The I's run where 1F1B runs its backwards (rank r is p − 1 − r forwards
// ahead), and being half as long they bring each gradient back twice as fast; every rank starts
// its W's p − 1 steps in, as late as the last rank can, so at most p microbatches are in flight
// on any rank: 1F1B's first stage. With T_F = T_I = T_W a rank idles p − 1 units where 1F1B
// idles 3(p − 1).
RankSchedule zero_bubble_h1(int p, int m, int rank) {
  RankSchedule s;
  for (int x = 0; x < m + p - 1; ++x) {
    const int input = x - (p - 1 - rank), weight = x - (p - 1);
    if (x < m) s.push_back({ActionKind::Forward, x, 0, -1});
    if (input >= 0 && input < m) s.push_back({ActionKind::BackwardInput, input, 0, -1});
    if (weight >= 0 && weight < m) s.push_back({ActionKind::BackwardWeight, weight, 0, -1});
  }
  return s;
}

// Rank r's chunk 0 is model chunk r, its chunk 1 model chunk 2p − 1 − r: a microbatch's forward
// runs down the ranks on chunk 0 and back up on chunk 1, its backward the other way, so the last
// rank hands over to itself and the first rank both starts and ends every microbatch.
//   warm-up    2(p − r) − 1 forwards of chunk 0 (the V fills from the top), then r pairs
//              F(chunk 1) F(chunk 0), then p − r triples F I W of chunk 1: the first gradients
//              arrive from the bottom of the V as the rank runs out of chunk-0 inputs;
//   steady     F I W of chunk 0, then of chunk 1, until every forward has run;
//   cool-down  the input gradients still owed, chunk 0 first (r pairs I(0) I(1), then p − r
//              pairs I(0) W(0)), then the deferred W's fill the tail as the last gradients drain.
// At most 2p (microbatch, chunk) forwards are in flight — p microbatches' activations, 1F1B's
// memory — and with T_F = T_I = T_W and m ≥ 2p no rank idles between its first and last action.
RankSchedule zero_bubble_v(int p, int m, int rank) {
  const int n = std::max(m, 2 * p);  // written for n ≥ 2p microbatches, cut back to m
  RankBuilder b(m);
  auto triple = [&](int chunk) {
    b.forward(chunk);
    b.input_gradient(chunk);
    b.weight_gradient();
  };
  for (int i = 0; i < 2 * (p - rank) - 1; ++i) b.forward(0);
  for (int i = 0; i < rank; ++i) {
    b.forward(1);
    b.forward(0);
  }
  for (int i = 0; i < p - rank; ++i) triple(1);
  while (b.forwards(1) < n) {
    if (b.forwards(0) < n) {
      triple(0);
    } else {  // chunk 0 has run out of forwards: its I and W alone
      b.input_gradient(0);
      b.weight_gradient();
    }
    triple(1);
  }
  for (int i = 0; i < rank; ++i) {
    b.input_gradient(0);
    b.input_gradient(1);
  }
  for (int i = 0; i < p - rank; ++i) {
    b.input_gradient(0);
    b.weight_gradient();
  }
  while (b.weights_pending()) b.weight_gradient();
  return b.take();
}

// DeepSeek's DualPipeV step by step (dualpipev.py), F(c) a forward of chunk c, B a whole
// backward, I an input gradient whose W is queued:
//   1  2(p − r − 1) × F(0)                 2  (r + 1) × F(0) F(1)
//   3  (p − r − 1) × I(1) W F(1)           4  (m − 2p + r + 1) × F(0) B(1) F(1) B(0)   (main)
//   5  (p − r − 1) × B(1) F(1) B(0)        6  (r + 1) × B(1) B(0), the second half split into I
//   7  (p − r − 1) × W I(0)                8  (r + 1) × W
// DeepSeek overlaps each F(0) B(1) and F(1) B(0) pair's communication with its computation; here
// they run one after the other, their messages non-blocking as every schedule's.
RankSchedule dualpipe_v(int p, int m, int rank) {
  RankBuilder b(m);
  for (int i = 0; i < 2 * (p - rank - 1); ++i) b.forward(0);
  for (int i = 0; i < rank + 1; ++i) {
    b.forward(0);
    b.forward(1);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    b.input_gradient(1);
    b.weight_gradient();
    b.forward(1);
  }
  for (int i = 0; i < m - 2 * p + rank + 1; ++i) {
    b.forward(0);
    b.backward(1);
    b.forward(1);
    b.backward(0);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    b.backward(1);
    b.forward(1);
    b.backward(0);
  }
  // Step 6: DeepSeek splits from the middle on, chunk 1's split starting one step later on even
  // ranks (so that the W queue matches what steps 7 and 8 pop).
  const int steps = rank + 1, half = steps / 2;
  for (int i = 0; i < steps; ++i) {
    const bool split1 = i > half || (i == half && rank % 2 == 1), split0 = i >= half;
    split1 ? b.input_gradient(1) : b.backward(1);
    split0 ? b.input_gradient(0) : b.backward(0);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    b.weight_gradient();
    b.input_gradient(0);
  }
  while (b.weights_pending()) b.weight_gradient();
  return b.take();
}

}  // namespace tessel
