// The declare-only build of a chunk (TransformerChunk::declare): the real constructors, given
// groups that are places alone (comm/comm.h: each group's size and this rank's index, no
// communicator), and told not to allocate.
#include "tessel/core/error.h"
#include "tessel/model/transformer.h"

namespace tessel {

ChunkTensors TransformerChunk::declare(const ModelConfig& cfg, const ChunkBuild& build, const ChunkPlace& place,
                                       ParamRegistry& registry) {
  const Kernels& k = cpu_kernels();  // nothing is allocated or computed with it
  const TensorParallel tp{CommGroup(GroupPlace{place.tp_rank, place.tp}), place.sequence_parallel, &k};
  // The MoE token group (TP × CP, Megatron's tp_cp group) has this rank first; only its size is read.
  const ChunkGroups groups{
      .tp = tp,
      .cp = ContextParallel(CommGroup(GroupPlace{place.cp_rank, place.cp}), CpCommType::P2P, k),
      .moe = {.ep = CommGroup(GroupPlace{place.ep_rank, place.ep}),
              .etp = CommGroup(GroupPlace{place.etp_rank, place.etp}),
              .token_group = moe_rows_split(tp, place.cp) ? CommGroup(GroupPlace{0, place.tp * place.cp})
                                                          : CommGroup()}};
  const TransformerChunk chunk(k, registry, cfg, build, groups, false);
  return chunk.tensors_;
}

}  // namespace tessel
