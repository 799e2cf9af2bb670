#include "export_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/family/family.h"
#include "tokenizer_flags.h"

namespace tessel {

namespace {

// save_pretrained's sizes: a number of bytes, or one with KB, MB, GB (powers of 1000) or KiB,
// MiB, GiB (of 1024), any case. 0 (the default): one file.
int64_t shard_size_bytes(const std::string& text) {
  static const std::regex size(R"(\s*([0-9]+(\.[0-9]+)?)\s*([kmg]i?b)?\s*)", std::regex::icase);
  std::smatch m;
  TESSEL_CHECK(std::regex_match(text, m, size),
               "--max-shard-size {}: not a size (bytes, or a number with KB, MB, GB, KiB, MiB or GiB)", text);
  std::string unit = m[3].str();
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::map<std::string, double> scale = {{"", 1.0},     {"kb", 1e3},        {"mb", 1e6},
                                               {"gb", 1e9},   {"kib", 1 << 10},   {"mib", 1 << 20},
                                               {"gib", 1 << 30}};
  const double bytes = std::stod(m[1].str()) * scale.at(unit);
  TESSEL_CHECK(bytes < 1e18, "--max-shard-size {}: too large", text);
  return static_cast<int64_t>(bytes);
}

}  // namespace

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
      ->check(CLI::IsMember(export_model_types()));
  c.add_option("--max-shard-size", max_shard_size_,
               "split the weights into shard files of at most this size and an index, as "
               "save_pretrained does (bytes, or 5GB, 500MB, 2GiB, ...; default: one file)");
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
  const int64_t shard_bytes = max_shard_size_.empty() ? 0 : shard_size_bytes(max_shard_size_);
  const int64_t parameters = export_model(cfg, tokenizer, source_, out_dir_,
                                          hf_export_model_type(cfg, hf_model_type_, source_.init_from), shard_bytes);
  const bool sharded = std::filesystem::exists(std::filesystem::path(out_dir_) / "model.safetensors.index.json");
  fmt::print("wrote {}/{} and config.json{} ({:.2f}M parameters)\n", out_dir_,
             sharded ? "model.safetensors.index.json, its shards" : "model.safetensors",
             tokenizer ? " and the tokenizer" : "", parameters / 1e6);
}

}  // namespace tessel
