// The declare-only build of a chunk (TransformerChunk::declare): the real constructors, given
// groups that know their size and this rank's place but cannot communicate, and told not to
// allocate.
#include "tessel/core/error.h"
#include "tessel/model/transformer.h"

namespace tessel {

namespace {

// A group of a declare-only build: its size and this rank's index; a chunk that only declares
// never communicates, so every call is an error.
class PlaceComm final : public Comm {
 public:
  PlaceComm(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(float*, int64_t, ReduceOp) override { refuse(); }
  void all_reduce(double*, int64_t, ReduceOp) override { refuse(); }
  Request all_reduce_async(float*, int64_t, ReduceOp) override { refuse(); }
  Request all_reduce_async(double*, int64_t, ReduceOp) override { refuse(); }
  void all_gather(const float*, float*, int64_t) override { refuse(); }
  Request all_gather_async(const float*, float*, int64_t) override { refuse(); }
  void reduce_scatter(const float*, float*, int64_t) override { refuse(); }
  Request reduce_scatter_async(const float*, float*, int64_t) override { refuse(); }
  void all_gather_v(const float*, float*, const int64_t*, const int64_t*) override { refuse(); }
  void reduce_scatter_v(const float*, float*, const int64_t*) override { refuse(); }
  void all_to_all_v(const float*, const int64_t*, const int64_t*, float*, const int64_t*,
                    const int64_t*) override {
    refuse();
  }
  void broadcast(float*, int64_t, int) override { refuse(); }
  void barrier() override { refuse(); }
  Request isend(const float*, int64_t, int, int) override { refuse(); }
  Request irecv(float*, int64_t, int, int) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { fail("a declare-only model chunk does not communicate"); }

  int rank_, size_;
};

}  // namespace

ChunkTensors TransformerChunk::declare(const ModelConfig& cfg, ChunkSpec spec, int64_t micro_batch,
                                       const ChunkPlace& place, ParamRegistry& registry,
                                       const RecomputeOptions& recompute) {
  const Kernels& k = cpu_kernels();  // nothing is allocated or computed with it
  PlaceComm tp_comm(place.tp_rank, place.tp), cp_comm(place.cp_rank, place.cp), ep(place.ep_rank, place.ep),
      etp(place.etp_rank, place.etp);
  const TensorParallel tp{&tp_comm, place.sequence_parallel, &k};
  // The MoE token group (TP × CP, Megatron's tp_cp) has this rank first; only its size is read.
  PlaceComm token_group(0, place.tp * place.cp);
  const MoeGroups moe{
      .ep = &ep, .etp = &etp, .token_group = moe_rows_split(tp, place.cp) ? &token_group : nullptr};
  const TransformerChunk chunk(k, cfg, spec, micro_batch, tp, registry,
                               ContextParallel(&cp_comm, CpCommType::P2P, k), moe, recompute, false);
  return chunk.tensors_;
}

}  // namespace tessel
