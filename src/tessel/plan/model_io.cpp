// Model files for the planner: tessel's own JSON (the flag names with '_') and Hugging Face
// config.json files, read for their sizes only through their family's row (family/family.h: the
// planner needs no weights, so it reads more model types than the importer can load).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/family/family.h"
#include "tessel/model/config.h"
#include "tessel/plan/model.h"

namespace tessel {

namespace {

using nlohmann::json;

// The planner's keys beyond tessel's model file (model_fields()): what only the planner models.
bool planner_key(PlanModel& m, const std::string& key, const json& value) {
  if (key == "name")
    m.name = value.get<std::string>();
  else if (key == "multi_latent_attention") m.multi_latent_attention = value.get<bool>();
  else if (key == "q_lora_rank") m.mla.q_lora_rank = value.get<int>();
  else if (key == "kv_lora_rank") m.mla.kv_lora_rank = value.get<int>();
  else if (key == "qk_head_dim") m.mla.qk_head_dim = value.get<int>();
  else if (key == "qk_pos_emb_head_dim") m.mla.qk_pos_emb_head_dim = value.get<int>();
  else if (key == "v_head_dim")
    m.mla.v_head_dim = value.get<int>();
  else return false;
  return true;
}

PlanModel model_from_hf(const json& j, const std::string& source) {
  PlannerSizes sizes = planner_sizes_from_hf(j, source);
  PlanModel m;
  m.name = j.at("model_type").get<std::string>();
  m.cfg = std::move(sizes.cfg);
  m.multi_latent_attention = sizes.multi_latent_attention;
  m.mla = sizes.mla;
  return m;
}

}  // namespace

void plan_model_from_json(const json& j, PlanModel& m, const std::string& source) {
  TESSEL_CHECK(j.is_object(), "{}: expected a JSON object", source);
  json sizes = json::object();
  try {
    for (auto& [key, value] : j.items())
      if (!planner_key(m, key, value)) sizes[key] = value;
  } catch (const json::exception& e) {
    fail("{}: {}", source, e.what());
  }
  model_config_from_json(sizes, m.cfg, source);
}

PlanModel load_plan_model(const std::string& path) {
  const json j = read_model_file(path);
  PlanModel m;
  try {
    if (j.is_object() && j.contains("model_type")) m = model_from_hf(j, path);
    else plan_model_from_json(j, m, path);
  } catch (const json::exception& e) {
    fail("{}: {}", path, e.what());
  }
  // A Hugging Face config names its model in _name_or_path when it was saved from one.
  const json named = j.is_object() ? j.value("_name_or_path", json()) : json();
  if (named.is_string() && !named.get<std::string>().empty()) m.name = named.get<std::string>();
  else if (m.name.empty() || m.name == j.value("model_type", "")) m.name = path;
  return m;
}

json plan_model_to_json(const PlanModel& m) {
  json j = model_config_to_json(m.cfg);
  j["name"] = m.name;
  if (m.multi_latent_attention) {
    j["multi_latent_attention"] = true;
    j["q_lora_rank"] = m.mla.q_lora_rank;
    j["kv_lora_rank"] = m.mla.kv_lora_rank;
    j["qk_head_dim"] = m.mla.qk_head_dim;
    j["qk_pos_emb_head_dim"] = m.mla.qk_pos_emb_head_dim;
    j["v_head_dim"] = m.mla.v_head_dim;
  }
  return j;
}

}  // namespace tessel
