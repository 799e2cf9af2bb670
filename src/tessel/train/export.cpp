#include "tessel/train/export.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/finite_weights.h"
#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/hf_import.h"
#include "tessel/ckpt/save_lock.h"
#include "tessel/ckpt/shards.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/transformer.h"
#include "tessel/optim/adamw.h"
#include "tessel/train/numerics.h"

namespace tessel {

namespace {

// Names and shapes of the parameters of some model chunks, as their declare-only build gives them.
void declare_chunks(const ModelConfig& cfg, const std::vector<ChunkSpec>& specs, ParamRegistry& reg) {
  for (const ChunkSpec& spec : specs) TransformerChunk::declare(cfg, {.spec = spec}, ChunkPlace{}, reg);
}

// "model.layers.3.mlp.experts.5.up_proj.weight" with the expert index moved by `offset`.
std::string shift_expert(const std::string& name, int offset) {
  const std::string key = ".experts.";
  const size_t at = name.find(key) + key.size(), end = name.find('.', at);
  return name.substr(0, at) + std::to_string(std::stoi(name.substr(at, end - at)) + offset) +
         name.substr(end);
}

using HostTensors = std::map<std::string, std::vector<float>>;

// Expert-DP replica 0, ETP rank 0: EP rank 0 receives every other EP rank's experts under their
// global names. Returns false on the ranks that sent theirs (they are done).
bool gather_experts(const ParamRegistry& params, const ModelConfig& cfg, Comm& ep, HostTensors& tensors) {
  if (ep.size() == 1) return true;
  const int local_experts = cfg.moe.num_experts / ep.size();
  if (ep.rank() != 0) {
    std::vector<Request> sends;
    int tag = 0;
    for (const Param& p : params.params())
      if (is_expert_param(p))
        sends.push_back(ep.isend(tensors[p.name].data(), shape_numel(p.global_shape), 0, tag++));
    wait_all(sends);
    return false;
  }
  for (int r = 1; r < ep.size(); ++r) {
    int tag = 0;
    for (const Param& p : params.params()) {
      if (!is_expert_param(p)) continue;
      std::vector<float>& t = tensors[shift_expert(p.name, r * local_experts)];
      t.resize(shape_numel(p.global_shape));
      ep.irecv(t.data(), t.size(), r, tag++).wait();
    }
  }
  return true;
}

// The first replica's stages: stage 0 receives every other stage's tensors. Returns false on the
// stages that sent theirs.
bool gather_stages(const TrainPlan& plan, Comm& pp, HostTensors& tensors) {
  if (pp.rank() != 0) {
    ParamRegistry mine;
    declare_chunks(plan.model, plan.stage_chunks(pp.rank()), mine);
    std::vector<Request> sends;
    for (size_t i = 0; i < mine.params().size(); ++i) {
      std::vector<float>& t = tensors[mine.params()[i].name];
      sends.push_back(pp.isend(t.data(), t.size(), 0, static_cast<int>(i)));
    }
    wait_all(sends);
    return false;
  }
  for (int stage = 1; stage < pp.size(); ++stage) {
    ParamRegistry theirs;
    declare_chunks(plan.model, plan.stage_chunks(stage), theirs);
    for (size_t i = 0; i < theirs.params().size(); ++i) {
      const Param& p = theirs.params()[i];
      const int64_t n = shape_numel(p.global_shape);  // sent whole, without a vocabulary's padding
      std::vector<float>& t = tensors[p.name];  // a tied head's copy of the embedding overwrites
      t.resize(n);                              // the same values
      pp.irecv(t.data(), n, stage, static_cast<int>(i)).wait();
    }
  }
  return true;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> export_sources(const std::optional<TokenizerOptions>& tokenizer,
                                                                const std::string& init_from,
                                                                const std::string& load) {
  std::vector<std::pair<std::string, std::string>> sources = {{"--init-from", init_from}, {"--load", load}};
  if (!tokenizer) return sources;
  sources.insert(sources.end(), {{"--tokenizer-model", tokenizer->tokenizer_model},
                                 {"--vocab-file", tokenizer->vocab_file},
                                 {"--merge-file", tokenizer->merge_file}});
  return sources;
}

void export_gathered(const ParamRegistry& params, const TrainPlan& plan, ProcessGroups& groups) {
  HostTensors tensors;
  for (const Param& p : params.params())
    tensors[p.name] =
        gather_global(params, p, p.shard.group == ShardGroup::ETP ? groups.etp() : groups.tp());
  const RankCoords& at = groups.coords();
  if (at.etp != 0 || at.edp != 0) return;
  if (!gather_experts(params, plan.model, groups.ep(), tensors)) return;
  // The rank of EP coordinate 0 and expert-DP coordinate 0 is the first DP replica.
  if (at.tp != 0 || at.cp != 0) return;
  if (!gather_stages(plan, groups.pp(), tensors)) return;
  const ModelConfig& cfg = plan.model;
  ParamRegistry whole;
  declare_chunks(cfg, {ChunkSpec{0, cfg.num_layers, true, true}}, whole);
  whole.finalize();
  // The tensors are global; the registry's vocabulary rows are padded (to a multiple of 128).
  std::vector<float> values;
  for (Param& p : whole.params()) {
    values.resize(p.numel());
    take_local_slice(p, tensors.at(p.name).data(), values.data());
    whole.from_host(p, values.data());
  }
  const std::string& dir = plan.options.checkpoint.save_hf;
  require_finite_weights(cpu_kernels(), whole, "--save-hf " + dir);
  const CheckpointOptions& ckpt = plan.options.checkpoint;
  export_hf(whole, cfg, dir, hf_export_model_type(cfg, ckpt.save_hf_model_type, ckpt.init_from));
}

std::string hf_export_model_type(const ModelConfig& cfg, const std::string& requested, const std::string& init_from) {
  const std::vector<std::string>& offered = family_writing(cfg).export_types;
  if (offered.empty()) return "";
  if (!requested.empty() || init_from.empty()) return requested;
  const std::string beside = hf_model_type_beside(init_from);
  return std::find(offered.begin(), offered.end(), beside) != offered.end() ? beside : "";
}

int64_t export_model(ModelConfig cfg, std::optional<TokenizerOptions> tokenizer_options,
                     const ExportSource& source, const std::string& out_dir,
                     const std::string& hf_model_type, int64_t max_shard_bytes) {
  // The model's --vocab-size is the tokenizer's too where it reads one (NullTokenizer), as in `train`.
  if (tokenizer_options && tokenizer_options->vocab_size == 0) tokenizer_options->vocab_size = cfg.vocab_size;
  const std::unique_ptr<Tokenizer> tokenizer =
      tokenizer_options ? make_tokenizer(*tokenizer_options) : std::make_unique<ByteTokenizer>();
  if (cfg.vocab_size == 0) cfg.vocab_size = tokenizer->vocab_size();
  TESSEL_CHECK(cfg.vocab_size >= tokenizer->vocab_size(), "--vocab-size {} is smaller than the {}'s {}",
               cfg.vocab_size, tokenizer->type(), tokenizer->vocab_size());
  cfg.validate();
  // Every reason a model has no Hugging Face form, before any weights are read.
  const std::vector<std::string> refused = hf_export_violations(cfg);
  TESSEL_CHECK(refused.empty(), "export to {}: {}", out_dir, fmt::join(refused, "; "));
  require_apart_from_sources("--out", out_dir, export_sources(tokenizer_options, source.init_from, source.load));
  require_writable_dir("--out", out_dir);
  // Held until the folder is whole: a second export into it is refused, not mixed in.
  const SaveLock lock(out_dir, "--out");
  const Kernels& k = cpu_kernels();
  ParamRegistry params;
  declare_chunks(cfg, {ChunkSpec{0, cfg.num_layers, true, true}}, params);
  params.finalize(k.memory);
  if (!source.load.empty()) {
    // Without tokenizer flags the model goes out with the byte tokenizer: only a save trained
    // with it may (a save records its tokenizer's identity, not its files).
    const std::string why = tokenizer_mismatch(saved_tokenizer(source.load), tokenizer_identity(*tokenizer));
    TESSEL_CHECK(why.empty(), "--load {}: {}{}", source.load, why,
                 tokenizer_options ? "" : "; give the tokenizer flags it was trained with, so that its files go "
                                          "with the model");
    AdamW moments(k, params, OptimizerConfig{});  // read along, not written out
    load_checkpoint(source.load, params, moments, cfg);
  } else if (source.init_from.empty()) {
    params.init_values(source.seed);
  } else {
    load_hf_weights(params, cfg, source.init_from);
  }
  require_finite_weights(k, params,
                         !source.load.empty()        ? source.load
                         : !source.init_from.empty() ? source.init_from
                                                     : std::string("the initial weights"));
  export_hf(params, cfg, out_dir, hf_model_type, max_shard_bytes);
  if (tokenizer_options) save_tokenizer_files(*tokenizer_options, *tokenizer, out_dir);
  return params.numel();
}

}  // namespace tessel
