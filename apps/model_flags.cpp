#include "model_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <variant>

#include "tessel/ckpt/hf.h"
#include "tessel/core/error.h"
#include "tessel/family/family.h"
#include "tessel/model/weight_settings.h"

namespace tessel {

namespace {

// Numbers and switches parse into their field; words and MoE layer patterns as text, which
// set_model_field reads.
template <typename Value>
constexpr bool kParsedInPlace = std::is_arithmetic_v<std::decay_t<Value>>;

// --model-config's file: tessel's JSON over `defaults`, or a Hugging Face config.json.
ModelConfig read_model_config(const std::string& path, const ModelConfig& defaults) {
  const nlohmann::json j = read_model_file(path);
  if (j.is_object() && j.contains("model_type")) return model_config_from_hf(j, path);
  ModelConfig cfg = defaults;
  model_config_from_json(j, cfg, path);
  return cfg;
}

}  // namespace

ModelConfig tokenizer_sized_defaults() {
  ModelConfig cfg;
  cfg.vocab_size = 0;
  return cfg;
}

void ModelFlags::add_to(CLI::App& app) {
  model_file_option_ =
      app.add_option("--model-config", model_file_,
                     "model file: tessel's JSON (keys = flag names with _) or a Hugging Face config.json");
  const std::span<const ModelField> fields = model_fields();
  texts_.resize(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    const ModelField& f = fields[i];
    options_.push_back(visit_model_field(f, parsed_, [&](auto& value) -> CLI::Option* {
      using Value = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<Value, bool>) {
        return app.add_flag(f.flag, value, f.help);
      } else if constexpr (kParsedInPlace<Value>) {
        return app.add_option(f.flag, value, f.help)->capture_default_str();
      } else {
        texts_[i] = model_field_text(f, defaults_);
        return app.add_option(f.flag, texts_[i], f.help)->capture_default_str();
      }
    }));
  }
  architecture_.add_to(app);
}

bool ModelFlags::any_given() const {
  return model_file_option_->count() > 0 || architecture_.any_given() ||
         std::any_of(options_.begin(), options_.end(), [](const CLI::Option* o) { return o->count() > 0; });
}

nlohmann::json ModelFlags::given_value(size_t field) const {
  return visit_model_field(model_fields()[field], parsed_, [&](const auto& value) -> nlohmann::json {
    if constexpr (kParsedInPlace<decltype(value)>)
      return value;
    else
      return texts_[field];
  });
}

void ModelFlags::apply(ModelConfig& cfg) const {
  const std::span<const ModelField> fields = model_fields();
  std::vector<std::string> v;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (options_[i]->count() > 0) {
      const nlohmann::json value = given_value(i);
      // JSON has no NaN or infinity (set_model_field would see null): refused here, as typed.
      if (value.is_number_float() && !std::isfinite(value.get<double>()))
        v.push_back(fmt::format("{} {} is not a finite number", fields[i].flag, options_[i]->results().back()));
      else
        set_model_field(fields[i], cfg, value, "the command line");
    } else if (architecture_.gated_delta_net() && !cfg.linear.enabled() &&
             std::holds_alternative<AttentionVariant>(fields[i].member))
      set_model_field(fields[i], cfg, "gdn", "--linear-attention-type");
  }
  architecture_.apply(cfg, given(&ModelConfig::num_query_groups), v);
  if (!v.empty()) throw Error(fmt::format("the model flags: {}", fmt::join(v, "; ")));
}

void ModelFlags::check_agrees(const ModelConfig& file, const ModelConfig& wanted,
                              const std::string& init_from) const {
  const std::span<const ModelField> fields = model_fields();
  // Files with plain norm weights are read as zero-centred ones too, 1 taken away from each
  // (family/weights.h): --apply-layernorm-1p chooses how the model holds the same norms.
  const bool norms_either_way = family_writing(file).layout("").plain_norms;
  // The flags given only: the others take the file's values.
  std::vector<std::string> v = weight_setting_differences(file, wanted, init_from, [&](size_t i) {
    const auto* member = std::get_if<bool ModelConfig::*>(&fields[i].member);
    const bool either_way = norms_either_way && member != nullptr && *member == &ModelConfig::layernorm_1p;
    return options_[i]->count() > 0 && !either_way;
  });
  if (architecture_.any_given() && wanted.arch != file.arch)
    v.push_back(fmt::format("the architecture flags say {} but {} is {}", arch_name(wanted.arch), init_from,
                            arch_name(file.arch)));
  if (!v.empty()) throw Error(fmt::format("--init-from does not match the flags: {}", fmt::join(v, "; ")));
}

ModelConfig ModelFlags::resolve(const std::string& init_from) const {
  ModelConfig cfg = model_file_.empty() ? defaults_ : read_model_config(model_file_, defaults_);
  if (!init_from.empty()) {
    if (std::optional<ModelConfig> file = hf_config_beside(init_from)) {
      ModelConfig wanted = cfg;
      apply(wanted);
      check_agrees(*file, wanted, init_from);
      // The weights' model, trained on sequences of the default length where its positions allow.
      cfg = *file;
      cfg.seq_length = std::min(defaults_.seq_length, file->max_positions());
    }
  }
  apply(cfg);
  return cfg;
}

}  // namespace tessel
