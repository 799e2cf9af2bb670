#include "export_command.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/data/tokenizer_files.h"
#include "tokenizer_flags.h"

namespace tessel {

ExportCommand::ExportCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("export", "write a model as a Hugging Face folder");
  CLI::App& c = *cmd_;
  model_.add_to(c);
  c.add_option("--out", out_dir_, "output folder")->required();
  c.add_option("--seed", source_.seed, "initialisation seed")->capture_default_str();
  c.add_option("--init-from", source_.init_from, "weights to convert instead of a fresh initialisation");
  c.add_option("--load", source_.load, "consolidate the newest save of this --save folder (any layout)")
      ->excludes("--init-from");
  c.add_option("--hf-model-type", hf_model_type_,
               "a Gated DeltaNet model's config.json model_type and checkpoint layout (default: "
               "--init-from's, else qwen3_5_moe_text)")
      ->check(CLI::IsMember({"qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"}));
  add_tokenizer_flags(c, tokenizer_);
}

void ExportCommand::run() const {
  // A save carries its model's config.json: the sizes come from there, not from flags.
  const ModelConfig cfg = source_.load.empty()
                              ? model_.resolve(source_.init_from)
                              : model_config_from_hf(read_checkpoint_metadata(source_.load).at("model"),
                                                     source_.load + " (metadata.json)");
  // The tokenizer named by flags, else the one beside --init-from's weights (or none: bytes).
  std::optional<TokenizerOptions> tokenizer;
  if (tokenizer_flags_given(*cmd_))
    tokenizer = tokenizer_;
  else if (!source_.init_from.empty())
    tokenizer = tokenizer_in_folder(source_.init_from);
  // A Qwen3-Next folder stays in its family's layout unless asked otherwise.
  const int64_t parameters = export_model(cfg, tokenizer, source_, out_dir_,
                                          gdn_hf_model_type(cfg, hf_model_type_, source_.init_from));
  fmt::print("wrote {}/model.safetensors and config.json{} ({:.2f}M parameters)\n", out_dir_,
             tokenizer ? " and the tokenizer" : "", parameters / 1e6);
}

}  // namespace tessel
