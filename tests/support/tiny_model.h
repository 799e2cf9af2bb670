// The smallest model that still exercises every piece (GQA for llama, several heads, two layers),
// shared by the model and executor tests.
#pragma once

#include "tessel/model/config.h"

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

}  // namespace tessel::testing
