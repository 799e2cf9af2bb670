// ---- seed example 7 (八): pipeline parallel ----------------------------------------------------
// The seed's model: 8 layers on activations [batch 4, sequence 4, hidden 8]; each layer here is
// h ← h + GELU(h·W) with its own W [8, 8]. PP 2 puts layers 1–4 on stage 0 (rank 0) and 5–8 on
// stage 1 (rank 1). Forward: rank 0 runs its layers and sends H4 [4, 4, 8] to rank 1, which runs
// the rest and takes the loss L = ½·ΣH8². Backward runs the other way: rank 1 takes its layers
// back to dL/dH4 and sends it to rank 0, which takes its own back to the input. Only the
// activation and its gradient cross between the stages, by the PP group's point-to-point calls,
// as the pipeline executor's. The check: the whole model in one process, on every rank.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "demo_output.h"
#include "demo_runs.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

namespace {

constexpr int kLayers = 8;
constexpr int64_t kBatch = 4, kSequence = 4, kHidden = 8;
constexpr int64_t kRows = kBatch * kSequence;        // N: the activation's rows
constexpr int64_t kActivation = kRows * kHidden;     // [4, 4, 8]
constexpr int64_t kWeight = kHidden * kHidden;       // one layer's W
constexpr int kActivationTag = 1, kGradientTag = 2;  // the two messages between the stages

// Layers [first, last) (0-based) of the model whose weights (kLayers, C, C) are `weights`, with
// what their backward reads and the weight gradients it leaves.
struct LayerRun {
  int first, last;
  const float* weights;
  std::vector<float> inputs, pre;  // (last − first, N, C) each layer's input and its h·W
  std::vector<float> d_weights;    // (last − first, C, C)

  LayerRun(int first_layer, int end_layer, const float* all_weights)
      : first(first_layer),
        last(end_layer),
        weights(all_weights),
        inputs((end_layer - first_layer) * kActivation),
        pre((end_layer - first_layer) * kActivation),
        d_weights((end_layer - first_layer) * kWeight, 0.0f) {}

  // h (N, C): the first layer's input in, the last layer's output out.
  void forward(float* h) {
    const Kernels& k = cpu_kernels();
    std::vector<float> act(kActivation);
    for (int l = first; l < last; ++l) {
      float* in = inputs.data() + (l - first) * kActivation;
      float* p = pre.data() + (l - first) * kActivation;
      std::copy(h, h + kActivation, in);
      k.linear_forward(p, in, weights + l * kWeight, nullptr, kRows, kHidden, kHidden,
                       WeightLayout::InOut);
      k.gelu_forward(act.data(), p, kActivation);
      k.residual_forward(h, h, act.data(), kActivation);
    }
  }
  // dh (N, C): the gradient of the last layer's output in, of the first layer's input out (the
  // residual passes dh through; the branch adds its own share).
  void backward(float* dh) {
    const Kernels& k = cpu_kernels();
    std::vector<float> d_pre(kActivation);
    for (int l = last - 1; l >= first; --l) {
      std::fill(d_pre.begin(), d_pre.end(), 0.0f);
      k.gelu_backward(d_pre.data(), dh, pre.data() + (l - first) * kActivation, kActivation);
      k.linear_backward(dh, d_weights.data() + (l - first) * kWeight, nullptr, d_pre.data(),
                        inputs.data() + (l - first) * kActivation, weights + l * kWeight, kRows,
                        kHidden, kHidden, WeightLayout::InOut);
    }
  }
};

float half_sum_of_squares(const float* h) {
  double sum = 0.0;
  for (int64_t i = 0; i < kActivation; ++i) sum += 0.5 * static_cast<double>(h[i]) * h[i];
  return static_cast<float>(sum);
}

// "[4, 4, 8]; [0, 0, :] = [...]": the tensor's shape and its first token's hidden vector.
std::string activation_text(const float* h) {
  return fmt::format("[{}, {}, {}]; [0, 0, :] = {}", kBatch, kSequence, kHidden,
                     list_text(h, kHidden));
}

}  // namespace

void demo_pp(ProcessGroups& groups, uint64_t seed) {
  Comm& pp = groups.pp();
  const int stage = pp.rank(), stages = pp.size();
  const int per_stage = kLayers / stages;
  std::vector<float> weights(kLayers * kWeight), x(kActivation);  // (L, C, C), (B, T, C)
  for (int64_t i = 0; i < kLayers * kWeight; ++i)
    weights[i] = 0.5f * random_normal(seed, 0, i) / std::sqrt(static_cast<float>(kHidden));
  for (int64_t i = 0; i < kActivation; ++i) x[i] = random_normal(seed, 1, i);

  // This stage's layers, and its half of the run: the activation in or out, the gradient back.
  LayerRun mine(stage * per_stage, (stage + 1) * per_stage, weights.data());
  std::vector<float> h4(kActivation), d_h4(kActivation), h(kActivation), dx(kActivation);
  float loss = 0.0f;
  if (stage == 0) {
    h = x;
    mine.forward(h.data());
    h4 = h;
    pp.isend(h4.data(), kActivation, 1, kActivationTag).wait();
    pp.irecv(d_h4.data(), kActivation, 1, kGradientTag).wait();
    dx = d_h4;
    mine.backward(dx.data());
  } else {
    pp.irecv(h4.data(), kActivation, 0, kActivationTag).wait();
    h = h4;
    mine.forward(h.data());
    loss = half_sum_of_squares(h.data());
    d_h4 = h;  // dL/dH8 = H8
    mine.backward(d_h4.data());
    pp.isend(d_h4.data(), kActivation, 0, kGradientTag).wait();
  }

  // The check: all 8 layers in one process; this stage's H4, dL/dH4, loss and weight gradients.
  LayerRun whole(0, kLayers, weights.data());
  std::vector<float> ref = x;
  whole.forward(ref.data());
  const float ref_loss = half_sum_of_squares(ref.data());
  std::vector<float> ref_d = ref;
  whole.backward(ref_d.data());
  float diff = std::max(
      max_abs_difference(h4.data(), whole.inputs.data() + per_stage * kActivation, kActivation),
      max_abs_difference(mine.d_weights.data(), whole.d_weights.data() + mine.first * kWeight,
                         per_stage * kWeight));
  // Stage 0 also compares dL/dH4 and dL/dX; stage 1 its loss (H8's).
  diff = std::max(diff, stage == 0 ? max_abs_difference(dx.data(), ref_d.data(), kActivation)
                                   : std::fabs(loss - ref_loss) / std::max(1.0f, ref_loss));

  Comm& world = groups.world();
  print_from_rank0(world,
                   fmt::format("seed example 7: {} layers over PP {}, activations [{}, {}, {}] "
                               "(batch, sequence, hidden); each layer h ← h + GELU(h·W)\n",
                               kLayers, stages, kBatch, kSequence, kHidden));
  print_by_rank(world, fmt::format("rank {} is stage {}: layers {}–{}\n", stage, stage,
                                   mine.first + 1, mine.last));
  print_by_rank(world, stage == 0
                           ? fmt::format("rank 0 forward layers 1–{}, sends H{} to rank 1: {}\n",
                                         per_stage, per_stage, activation_text(h4.data()))
                           : fmt::format("rank 1 receives H{} from rank 0: {}\n"
                                         "rank 1 forward layers {}–{}, loss ½·ΣH{}² = {:.6g}\n",
                                         per_stage, activation_text(h4.data()), mine.first + 1,
                                         mine.last, kLayers, loss));
  print_by_rank(world, stage == 1 ? fmt::format("rank 1 backward layers {}–{}, sends dL/dH{} to "
                                                "rank 0: {}\n",
                                                mine.last, mine.first + 1, per_stage,
                                                activation_text(d_h4.data()))
                                  : std::string());
  print_by_rank(world, stage == 0 ? fmt::format("rank 0 receives dL/dH{} from rank 1: {}\n"
                                                "rank 0 backward layers {}–1: dL/dX {}\n",
                                                per_stage, activation_text(d_h4.data()), per_stage,
                                                activation_text(dx.data()))
                                  : std::string());
  print_by_rank(world, fmt::format("rank {} against all {} layers in one process: max difference "
                                   "{:.1e}\n",
                                   stage, kLayers, diff));
  check_against_one_process(groups.world(), diff, "demo pp: the pipeline's result");
}

}  // namespace tessel
