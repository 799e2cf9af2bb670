#include "tessel/model/param_groups.h"

#include "tessel/model/embedding.h"

namespace tessel {

bool is_embedding_or_output_param(const Param& p, const ModelConfig& cfg) {
  return p.name == Embedding::word_embeddings_name(cfg) || p.name == kOutputLayerName;
}

}  // namespace tessel
