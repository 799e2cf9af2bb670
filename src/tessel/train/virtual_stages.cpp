#include "tessel/train/virtual_stages.h"

#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/pipeline/schedule.h"

namespace tessel {

std::vector<std::string> resolve_virtual_stages(int num_layers, const PipelineOptions& p, ParallelConfig& c) {
  const int per_chunk = p.layers_per_virtual_stage;
  const bool layout = !p.layout.empty();
  std::vector<std::string> v;
  if ((per_chunk != 0) + (c.vpp > 1) + layout > 1)
    v.push_back("no more than one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank "
                "and --pipeline-model-parallel-layout may be given (Megatron's rule)");
  if (layout) {
    // Megatron: the layout's entries are PP × VPP model chunks; one that does not parse has none.
    const size_t before = v.size();
    const int stages = layout_stage_count(p.layout, v);
    if (v.size() > before) return v;
    if (c.pp > 0 && stages % c.pp != 0)
      v.push_back(fmt::format("--pipeline-model-parallel-layout has {} stages, not divisible by "
                              "--pipeline-model-parallel-size {}", stages, c.pp));
    else if (v.empty() && c.pp > 0)
      c.vpp = stages / c.pp;
    return v;
  }
  if (per_chunk == 0) return v;
  if (per_chunk < 0) v.push_back(fmt::format("--num-layers-per-virtual-pipeline-stage {} must be positive", per_chunk));
  if (p.first_stage_layers >= 0 || p.last_stage_layers >= 0)
    v.push_back("--num-layers-per-virtual-pipeline-stage takes no --decoder-first/last-pipeline-num-layers: give "
                "uneven stages with --num-virtual-stages-per-pipeline-rank (Megatron's rule)");
  if (c.pp > 0 && num_layers % c.pp != 0)
    v.push_back(fmt::format("--num-layers {} is not divisible by --pipeline-model-parallel-size {}", num_layers, c.pp));
  else if (per_chunk > 0 && c.pp > 0 && num_layers / c.pp % per_chunk != 0)
    v.push_back(fmt::format("the {} layers of a pipeline stage are not divisible by "
                            "--num-layers-per-virtual-pipeline-stage {}", num_layers / c.pp, per_chunk));
  if (v.empty()) c.vpp = num_layers / c.pp / per_chunk;
  return v;
}

StageOptions stage_options(const ParallelConfig& c, const PipelineOptions& p, int mtp_layers) {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  try {
    kind = chosen_schedule_kind(p.schedule, c.vpp);
  } catch (const Error&) {
    // an unknown --schedule: plan_training reports it; the stages are 1F1B's meanwhile
  }
  return {c.pp, chunks_per_rank(kind, c.vpp), p.first_stage_layers, p.last_stage_layers, p.layout,
          schedule_placement(kind), mtp_layers};
}

}  // namespace tessel
