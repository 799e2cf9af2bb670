// The model flags of `tessel train`, `plan`, `layout` and `export`: one CLI11 option per model
// field (model/config.h's model_fields(), Megatron's names and their help) and --model-config.
// A flag given replaces its field in whatever model it is applied to: the defaults, a model file,
// a `plan --model` preset, an --init-from config.json.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "architecture_flags.h"
#include "tessel/model/config.h"

namespace tessel {

// The defaults of the commands that have a tokenizer (train, export): --vocab-size 0 takes its size.
ModelConfig tokenizer_sized_defaults();

class ModelFlags {
 public:
  // `defaults`: the model when no flag is given, --help's defaults.
  explicit ModelFlags(const ModelConfig& defaults) : defaults_(defaults), parsed_(defaults) {}
  // Adds the flags to `app` (once). They parse into this object, which must outlive app.parse().
  void add_to(CLI::App& app);

  // After app.parse():
  const std::string& model_file() const { return model_file_; }  // --model-config, or empty
  bool any_given() const;                                        // a model flag or --model-config
  // Whether the flag of this field was given: given(&ModelConfig::seq_length),
  // given(&MoeConfig::num_experts).
  template <typename Member>
  bool given(Member member) const {
    const std::span<const ModelField> fields = model_fields();
    for (size_t i = 0; i < fields.size(); ++i)
      if (const Member* m = std::get_if<Member>(&fields[i].member); m != nullptr && *m == member)
        return options_[i]->count() > 0;
    return false;
  }
  // Sets every field whose flag was given, in model_fields()' order, then the architecture that
  // Megatron's architecture flags give (apps/architecture_flags.h). Throws one Error listing
  // every rule those break.
  void apply(ModelConfig& cfg) const;
  // The model of `tessel train` and `export`: the defaults, or --model-config's file (tessel's JSON
  // or a Hugging Face config.json), or the config.json beside `init_from` (when there is one: a
  // flag given for a field of the weights' model must agree with it); then the flags given.
  ModelConfig resolve(const std::string& init_from) const;

 private:
  // The value a given flag sets, as model/config.h's set_model_field takes it.
  nlohmann::json given_value(size_t field) const;
  // Throws one Error listing every flag given for a field of the weights' model that `file`
  // (init_from's config.json) has another value of.
  void check_agrees(const ModelConfig& file, const ModelConfig& wanted, const std::string& init_from) const;

  ModelConfig defaults_;
  ModelConfig parsed_;                 // the number and switch flags parse into their fields here
  std::vector<std::string> texts_;     // the word and pattern flags (--arch, ...) parse here, by field
  std::vector<CLI::Option*> options_;  // one per model field
  CLI::Option* model_file_option_ = nullptr;
  ArchitectureFlags architecture_;
  std::string model_file_;
};

}  // namespace tessel
