// The smallest model that still exercises every piece (GQA for llama, several heads, two layers),
// shared by the model and executor tests; and a whole model of one process built from it.
#pragma once

#include <vector>

#include "tessel/core/philox.h"
#include "tessel/model/config.h"
#include "tessel/model/transformer.h"

namespace tessel::testing {

inline ModelConfig tiny_config(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = arch == Arch::Llama ? 2 : 0;
  c.ffn_hidden_size = 24;
  c.seq_length = 6;
  c.vocab_size = 11;
  return c;
}

// A whole model (embedding and head) of one process, initialised from seed 7, with random tokens
// and targets for `batch` sequences, each a sample of its own in the run (the dropout masks' key).
struct TinyModel {
  ParamRegistry params;
  TransformerChunk chunk;
  ChunkActivations acts;
  std::vector<int32_t> tokens, targets, samples;

  TinyModel(const ModelConfig& cfg, int64_t batch)
      : chunk(cpu_kernels(), params, cfg,
              {.spec = ChunkSpec{0, cfg.num_layers, true, true}, .micro_batch = batch, .seed = 21},
              ChunkGroups::one_process(cpu_kernels())) {
    params.finalize();
    chunk.bind(params);
    params.init_values(7);
    acts = chunk.make_activations();
    const int64_t n = batch * cfg.seq_length;
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(static_cast<int32_t>(random_bits(3, 1, i) % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>(random_bits(3, 2, i) % cfg.vocab_size));
      samples.push_back(static_cast<int32_t>(40 + i / cfg.seq_length));
    }
  }
  // Weights scaled up from the 0.02 initialisation, the others moved off theirs, so that
  // attention and the nonlinearities are far from linear: what a gradient check needs.
  void spread_weights() {
    for (Param& p : params.params())
      if (p.init == ParamInit::Normal)
        for (int64_t i = 0; i < p.numel(); ++i) p.value[i] *= 15.0f;
      else
        for (int64_t i = 0; i < p.numel(); ++i) p.value[i] += 0.3f * random_normal(5, p.offset, i);
  }
  // The mean loss of a forward; `training`: with the rows' samples, as a forward with gradients
  // gets them (dropout applies), else as evaluation's (none).
  double loss(bool training = false, float grad_scale = 0.0f) {
    InputRows rows{{"tokens", tokens.data()}, {"targets", targets.data()}};
    if (training) rows["sample_ids"] = samples.data();
    return chunk.forward(acts, rows, nullptr, grad_scale) / tokens.size();
  }
};

}  // namespace tessel::testing
