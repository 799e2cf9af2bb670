#include "tessel/model/weight_settings.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <span>

namespace tessel {

std::vector<std::string> weight_setting_differences(const ModelConfig& has, const ModelConfig& asked,
                                                    const std::string& source,
                                                    const std::function<bool(size_t)>& compared) {
  const ModelConfig h = has.explicit_sizes(), a = asked.explicit_sizes();
  const std::span<const ModelField> fields = model_fields();
  std::vector<std::string> v;
  for (size_t i = 0; i < fields.size(); ++i) {
    const ModelField& f = fields[i];
    if (f.run_setting || (compared && !compared(i)) || model_field_json(f, h) == model_field_json(f, a)) continue;
    v.push_back(fmt::format("{} {} but {} has {}", f.flag, model_field_text(f, a), source, model_field_text(f, h)));
  }
  return v;
}

ModelConfig with_run_settings_of(const ModelConfig& cfg, const ModelConfig& from) {
  ModelConfig out = cfg.explicit_sizes();
  for (const ModelField& f : model_fields())
    if (f.run_setting) set_model_field(f, out, model_field_json(f, from), "the weights' model");
  return out;
}

}  // namespace tessel
