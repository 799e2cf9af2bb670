#include "tessel/pipeline/executor.h"

#include <chrono>

#include "tessel/core/error.h"

namespace tessel {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

PipelineExecutor::PipelineExecutor(const Kernels& k, std::vector<TransformerChunk*> chunks,
                                   Comm& pp, const ScheduleConfig& schedule,
                                   const MicrobatchShape& microbatch)
    : k_(k),
      chunks_(std::move(chunks)), pp_(pp), schedule_(schedule),
      num_model_chunks_(static_cast<int>(chunks_.size()) * pp.size()), slots_(chunks_.size()) {
  for (const TransformerChunk* c : chunks_) {
    inputs_.push_back(c->microbatch_inputs(microbatch));
    if (c->shared_tied_embedding() >= 0) shared_params_.push_back({c->shared_tied_embedding(), 2});
  }
}

int64_t PipelineExecutor::activation_bytes() const {
  int64_t n = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    n += chunks_[c]->shared_activation_bytes();
    for (const Slot& s : slots_[c])
      if (s.microbatch != -1) n += s.acts.bytes();
  }
  for (const LeavingGradient& g : leaving_) n += g.buffer.bytes();
  return n;
}

PipelineExecutor::Slot& PipelineExecutor::slot(int chunk, int microbatch) {
  std::vector<Slot>& slots = slots_[chunk];
  for (Slot& s : slots)
    if (s.microbatch == microbatch) return s;
  // A free slot whose output has left (its input gradient may still be leaving: only that buffer
  // waits for the receiver, not the whole slot); a new one only when every slot is in flight.
  for (Slot& s : slots) {
    if (s.microbatch == -1 && s.send_forward.test()) {
      if (!s.send_backward.test()) let_gradient_leave(s);
      s.microbatch = microbatch;
      s.input_grad_done = s.weights_done = s.input_grad_sent = false;
      return s;
    }
  }
  const TransformerChunk& c = *chunks_[chunk];
  Slot s;
  s.acts = c.make_activations();
  TensorList buffers;
  list_buffers(s, buffers, inputs_[chunk], c.local_rows(), c.hidden_size(), model_chunk(chunk),
               num_model_chunks_);
  buffers.allocate(k_);
  s.microbatch = microbatch;
  slots.push_back(std::move(s));
  return slots.back();
}

int64_t PipelineExecutor::list_buffers(Slot& s, TensorList& list, const std::vector<MicrobatchInput>& inputs,
                                       int64_t rows, int64_t hidden, int model_chunk, int model_chunks) {
  list.set_part("executor slot");
  s.inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    list.add(s.inputs[i], inputs[i].shape, inputs[i].description, DType::I32);
  int64_t leaving = 0;
  if (model_chunk > 0) {
    list.add(s.input, {rows, hidden}, "input");
    const int64_t before = list.bytes();
    list.add(s.d_input, {rows, hidden}, "input gradient");
    leaving = list.bytes() - before;
  }
  if (model_chunk + 1 < model_chunks) list.add(s.d_output, {rows, hidden}, "output gradient");
  return leaving;
}

PipelineExecutor::SlotTensors PipelineExecutor::slot_tensors(const std::vector<MicrobatchInput>& inputs,
                                                             int64_t rows, int64_t hidden, int model_chunk,
                                                             int model_chunks) {
  Slot s;
  TensorList list;
  const int64_t leaving = list_buffers(s, list, inputs, rows, hidden, model_chunk, model_chunks);
  return {list.declared(), leaving};
}

void PipelineExecutor::let_gradient_leave(Slot& s) {
  Tensor spare;
  for (auto it = leaving_.begin(); it != leaving_.end(); ++it) {
    if (it->send.test()) {
      spare = std::move(it->buffer);
      leaving_.erase(it);
      break;
    }
  }
  if (spare.empty()) spare = k_.zeros({s.d_input.numel()});
  leaving_.push_back({std::move(s.d_input), std::move(s.send_backward)});
  s.d_input = std::move(spare);
  s.send_backward = Request();
}

void PipelineExecutor::release_if_done(Slot& s, int model_chunk) {
  if (s.weights_done && (model_chunk == 0 || s.input_grad_sent)) s.microbatch = -1;
}

double PipelineExecutor::forward(Slot& s, int chunk, int microbatch, const FillFn& fill,
                                 float grad_scale) {
  // The inputs the forward reads: those read only with gradients (multi-token prediction's rows)
  // in a forward with gradients alone.
  const std::vector<MicrobatchInput>& inputs = inputs_[chunk];
  std::vector<InputBuffer> filled;
  InputRows rows;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputRead read = inputs[i].read;
    if (read == InputRead::Never || (read == InputRead::WithGradients && grad_scale <= 0)) continue;
    filled.push_back({inputs[i].name, s.inputs[i].ints(), s.inputs[i].numel()});
    rows[inputs[i].name] = s.inputs[i].ints();
  }
  if (!filled.empty()) fill(microbatch, filled);
  return chunks_[chunk]->forward(s.acts, rows, model_chunk(chunk) == 0 ? nullptr : s.input.data(), grad_scale);
}

double PipelineExecutor::run(const RankSchedule& actions, int microbatches, const FillFn& fill,
                             const std::vector<float>& grad_scales, const std::function<void()>& arm,
                             const std::function<void(int)>& grad_ready) {
  const auto start = Clock::now();
  stats_ = {};
  const int rank = pp_.rank();
  const int64_t rows = chunks_.empty() ? 0 : chunks_[0]->local_rows() * chunks_[0]->hidden_size();
  int in_flight = 0;
  bool armed = false;
  double loss_sum = 0;
  const std::function<void(int)> no_hook;
  std::vector<std::pair<int, int>> reports_left = shared_params_;
  const std::function<void(int)> last_ready = [&](int index) {
    for (auto& [shared, left] : reports_left)
      if (shared == index && --left > 0) return;
    if (grad_ready) grad_ready(index);
  };
  // Per chunk: whether the last microbatch's input (bit 0) and weight (bit 1) gradients have been
  // reported; a backward of that kind after it would change gradients already reported final.
  std::vector<int> reported(chunks_.size(), 0);
  auto check_not_reported = [&](const Action& a, int kinds) {
    TESSEL_CHECK((reported[a.chunk] & kinds) == 0,
                 "pipeline schedule runs a backward of microbatch {} on chunk {} after the last "
                 "microbatch's, whose gradients are already reported final", a.microbatch, a.chunk);
  };
  // After each compute that began at compute_start: its time, and (before its slot may be
  // released) the activations held at that moment.
  Clock::time_point compute_start;
  stats_.started = std::chrono::system_clock::now();
  stats_.timeline.reserve(actions.size());
  auto computed = [&](const Action& a) {
    const ActionKind kind = a.kind;
    const double took = seconds_since(compute_start);
    const double end = seconds_since(start);
    stats_.timeline.push_back({kind, model_chunk(a.chunk), a.microbatch, end - took, end});
    stats_.compute_seconds[static_cast<int>(kind)] += took;
    stats_.compute_count[static_cast<int>(kind)]++;
    stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, activation_bytes());
  };
  for (const Action& a : actions) {
    const int k = model_chunk(a.chunk);
    TransformerChunk& chunk = *chunks_[a.chunk];
    Slot& s = slot(a.chunk, a.microbatch);
    const bool last_microbatch = a.microbatch == microbatches - 1;
    const std::function<void(int)>& ready = !last_microbatch ? no_hook : reports_left.empty() ? grad_ready : last_ready;
    switch (a.kind) {
      case ActionKind::RecvForward:
        s.recv = pp_.irecv(s.input.data(), rows, a.peer, p2p_tag(a, rank, schedule_));
        break;
      case ActionKind::RecvBackward:
        s.recv = pp_.irecv(s.d_output.data(), rows, a.peer, p2p_tag(a, rank, schedule_));
        break;
      case ActionKind::Forward: {
        s.recv.wait();
        if (before_compute_) before_compute_(last_microbatch);
        compute_start = Clock::now();
        loss_sum += forward(s, a.chunk, a.microbatch, fill, grad_scales.at(a.microbatch));
        stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++in_flight);
        computed(a);
        break;
      }
      case ActionKind::SendForward:
        s.send_forward = pp_.isend(chunk.output(s.acts), rows, a.peer, p2p_tag(a, rank, schedule_));
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput: {
        const bool whole = a.kind == ActionKind::Backward;
        check_not_reported(a, whole ? 3 : 1);
        s.recv.wait();
        if (last_microbatch && !armed) {
          arm();
          armed = true;
        }
        const float* d_output = k + 1 < num_model_chunks_ ? s.d_output.data() : nullptr;
        float* d_input = k > 0 ? s.d_input.data() : nullptr;
        s.input_grad_done = true;
        if (last_microbatch) reported[a.chunk] |= whole ? 3 : 1;
        if (before_compute_) before_compute_(last_microbatch);
        compute_start = Clock::now();
        if (!whole) {
          chunk.backward_input(s.acts, d_output, d_input, ready);
          computed(a);
          break;
        }
        chunk.backward(s.acts, d_output, d_input, ready);
        computed(a);
        --in_flight;
        s.weights_done = true;
        release_if_done(s, k);
        break;
      }
      case ActionKind::BackwardWeight:
        check_not_reported(a, 2);
        TESSEL_CHECK(s.input_grad_done && !s.weights_done,
                     "pipeline schedule runs W of microbatch {} on chunk {} without a backward_input "
                     "before it", a.microbatch, a.chunk);
        if (last_microbatch) reported[a.chunk] |= 2;
        if (before_compute_) before_compute_(last_microbatch);
        compute_start = Clock::now();
        chunk.backward_weight(s.acts, ready);
        computed(a);
        --in_flight;
        s.weights_done = true;
        release_if_done(s, k);
        break;
      case ActionKind::SendBackward:
        s.send_backward = pp_.isend(s.d_input.data(), rows, a.peer, p2p_tag(a, rank, schedule_));
        s.input_grad_sent = true;  // the slot may be reused now (a gradient still leaving waits aside)
        release_if_done(s, k);
        break;
    }
  }
  for (std::vector<Slot>& slots : slots_) {
    for (Slot& s : slots) {
      s.send_forward.wait();
      s.send_backward.wait();
      TESSEL_CHECK(s.microbatch == -1, "pipeline schedule left microbatch {} unfinished", s.microbatch);
    }
  }
  for (LeavingGradient& g : leaving_) g.send.wait();  // the buffers stay for the next iteration
  stats_.seconds = seconds_since(start);
  return loss_sum;
}

double PipelineExecutor::run_forward(const RankSchedule& actions, int microbatches,
                                     const FillFn& fill) {
  const auto start = Clock::now();
  stats_ = {};
  const int rank = pp_.rank();
  const int64_t rows = chunks_.empty() ? 0 : chunks_[0]->local_rows() * chunks_[0]->hidden_size();
  double loss_sum = 0;
  for (const Action& a : actions) {
    TESSEL_CHECK(a.microbatch < microbatches, "forward-only schedule names microbatch {} of {}",
                 a.microbatch, microbatches);
    const int k = model_chunk(a.chunk);
    Slot& s = slot(a.chunk, a.microbatch);
    switch (a.kind) {
      case ActionKind::RecvForward:
        s.recv = pp_.irecv(s.input.data(), rows, a.peer, p2p_tag(a, rank, schedule_));
        break;
      case ActionKind::Forward:
        s.recv.wait();
        if (before_compute_) before_compute_(true);
        loss_sum += forward(s, a.chunk, a.microbatch, fill, 0.0f);
        if (k + 1 == num_model_chunks_) s.microbatch = -1;  // nothing to send on
        break;
      case ActionKind::SendForward:
        s.send_forward = pp_.isend(chunks_[a.chunk]->output(s.acts), rows, a.peer,
                                   p2p_tag(a, rank, schedule_));
        s.microbatch = -1;  // reused once the send has left
        break;
      default:
        fail("forward-only pipeline schedule holds a backward action");
    }
  }
  for (std::vector<Slot>& slots : slots_)
    for (Slot& s : slots) {
      s.send_forward.wait();
      TESSEL_CHECK(s.microbatch == -1, "forward-only schedule left microbatch {} unfinished",
                   s.microbatch);
    }
  stats_.seconds = seconds_since(start);
  return loss_sum;
}

}  // namespace tessel
