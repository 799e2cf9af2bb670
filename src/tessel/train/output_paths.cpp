#include "tessel/train/output_paths.h"

#include <filesystem>

#include "tessel/core/error.h"
#include "tessel/core/path_clashes.h"
#include "tessel/data/dataset_builder.h"

namespace tessel {

namespace {

// The files a data flag's blend reads: each prefix's .bin and .idx, or the text file itself when
// neither exists (data/dataset_builder.h's rule).
void add_data_inputs(const std::string& flag, const std::vector<std::string>& words, std::vector<NamedPath>& inputs) {
  if (words.empty()) return;
  DataBlend blend;
  try {
    blend = parse_data_blend(words, flag);
  } catch (const ConfigError&) {
    return;  // a malformed blend is the data check's to report; its words name no files yet
  }
  for (const std::string& prefix : blend.prefixes) {
    const bool indexed = std::filesystem::exists(prefix + ".bin") || std::filesystem::exists(prefix + ".idx");
    if (!indexed) inputs.push_back({flag, prefix});
    if (indexed) inputs.insert(inputs.end(), {{flag, prefix + ".bin"}, {flag, prefix + ".idx"}});
  }
}

}  // namespace

std::vector<std::string> output_path_violations(const TrainOptions& o) {
  CommandPaths paths;
  paths.output_files = {{"--log-json", o.log.json}, {"--pipeline-timeline", o.log.pipeline_timeline}};
  if (o.log.profile.on && o.log.pipeline_timeline.empty())
    paths.output_files.push_back({"--profile's trace", o.log.profile.path});
  paths.output_folders = {{"--save", o.checkpoint.save},
                          {"--save-hf", o.checkpoint.save_hf},
                          {"--tensorboard-dir", o.log.tensorboard.dir}};
  const DataOptions& d = o.data;
  add_data_inputs("--data-path", d.path, paths.inputs);
  add_data_inputs("--train-data-path", d.train_path, paths.inputs);
  add_data_inputs("--valid-data-path", d.valid_path, paths.inputs);
  add_data_inputs("--test-data-path", d.test_path, paths.inputs);
  const TokenizerOptions& t = d.tokenizer;
  paths.inputs.insert(paths.inputs.end(), {// Megatron's resume: --save X --load X writes the new
                                           // iterations beside the one read, once it is read.
                                           {"--load", o.checkpoint.load, "--save"},
                                           {"--init-from", o.checkpoint.init_from},
                                           {"--model-config", o.model_config},
                                           {"--tokenizer-model", t.tokenizer_model},
                                           {"--vocab-file", t.vocab_file},
                                           {"--merge-file", t.merge_file}});
  return path_clashes(paths);
}

}  // namespace tessel
