// The embedding, vocabulary-parallel as Megatron's VocabParallelEmbedding: each TP rank holds
// V_l rows of the (padded) word embeddings, looks up the tokens of its shard (zeros for the
// rest), and the partial rows are summed over TP (reduce-scattered under sequence parallel);
// GPT-2's learned position embeddings, replicated, are added to this rank's rows.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

class Embedding {
 public:
  struct Saved {
    Tensor vocab_ids;  // (N) i32: each token's row in this rank's shard, or -1
    const int32_t* position_ids = nullptr;  // (N) the learned positions' rows
    const int32_t* sample_ids = nullptr;    // (N) the rows' samples: the dropout's key (none: no dropout)
  };

  // Declares the word embeddings and, for gpt2, transformer.wpe.weight [max positions, C]. N rows
  // (ctx.rows(), B·T_l) at ctx.positions. `word_embeddings` ≥ 0: a lookup of those already
  // declared (multi-token prediction's, llama), declaring nothing. `layer`: where its dropout
  // site lies (kernels/dropout.h: −1 the model's, multi-token prediction's after the layers).
  explicit Embedding(const LayerContext& ctx, int word_embeddings = -1, int layer = -1);
  // The word embeddings alone (gpt2 transformer.wte.weight / llama model.embed_tokens.weight
  // [V, C], split over TP by rows, padded as Megatron's --make-vocab-size-divisible-by): also a
  // last pipeline stage's copy of GPT-2's tied LM head. Returns the registry index.
  static int declare_word_embeddings(ParamRegistry& registry, const ModelConfig& cfg,
                                     const TensorParallel& tp);
  static std::string word_embeddings_name(const ModelConfig& cfg);

  void list_saved(Saved& s, TensorList& buffers) const;
  // out_local (N_l, C) = the embeddings of tokens (N) i32, dropped by --hidden-dropout when
  // packed.sample_ids are given (training). Throws for a token outside the vocabulary.
  // packed.position_ids, when given, are the rows' positions (else their place in the sequence).
  void forward(Saved& s, float* out_local, const int32_t* tokens, const PackedRows& packed,
               ChunkScratch& scratch) const;
  // Incremental decoding (one sequence, one process): out (n, C) = the embeddings of tokens (n)
  // i32 at positions start … start+n−1.
  void decode(Saved& s, float* out, const int32_t* tokens, int64_t start, int64_t n) const;
  // The embeddings' gradients from d_out_local (N_l, C), accumulated.
  void backward(const Saved& s, const float* d_out_local, ChunkScratch& scratch) const;

  int word_embeddings() const { return wte_; }
  int position_embeddings() const { return wpe_; }  // -1 for llama

 private:
  const Kernels& k_;
  ParamView params_;
  TensorParallel tp_;
  int64_t N_, C_, vocab_size_, vocab_start_, V_valid_;
  Tensor positions_;
  int wte_ = -1, wpe_ = -1;
  float dropout_;  // --hidden-dropout
  uint32_t dropout_site_;
  DropoutKeys dropout_keys_;
};

// Token ids (tokens or targets) must lie in the vocabulary: a clear error naming the id, never a
// silent zero embedding. ids (n) i32 in k's memory, each in [lowest, vocab): targets may be -1,
// a position left out of the loss.
void check_token_ids(const Kernels& k, const int32_t* ids, int64_t n, int32_t vocab,
                     const char* what, int32_t lowest);

}  // namespace tessel
