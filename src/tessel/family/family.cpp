#include "tessel/family/family.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/family/config_json.h"

namespace tessel {

// Each family's row, defined in its own file.
const Family& gpt2_family();
const Family& llama_family();
const Family& deepseek_v3_family();
const Family& qwen3_next_family();

namespace {

bool has(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

std::vector<std::string> import_types() {
  std::vector<std::string> all;
  for (const Family* f : families()) all.insert(all.end(), f->model_types.begin(), f->model_types.end());
  return all;
}

std::vector<std::string> planner_types(const Family& f) {
  std::vector<std::string> all = f.model_types;
  all.insert(all.end(), f.planner_only_types.begin(), f.planner_only_types.end());
  return all;
}

}  // namespace

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> list = {&gpt2_family(), &llama_family(), &deepseek_v3_family(),
                                                  &qwen3_next_family()};
  return list;
}

const Family* family_reading(const std::string& model_type) {
  for (const Family* f : families())
    if (f->read != nullptr && has(f->model_types, model_type)) return f;
  return nullptr;
}

const Family* family_sizing(const std::string& model_type) {
  for (const Family* f : families())
    if (has(planner_types(*f), model_type)) return f;
  return nullptr;
}

const Family& family_writing(const ModelConfig& cfg) {
  for (const Family* f : families())
    if (f->writes != nullptr && f->writes(cfg)) return *f;
  fail("no model family writes a {} model", arch_name(cfg.arch));
}

std::vector<std::string> export_model_types() {
  std::vector<std::string> all;
  for (const Family* f : families()) all.insert(all.end(), f->export_types.begin(), f->export_types.end());
  return all;
}

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& source) {
  TESSEL_CHECK(j.is_object(), "{}: expected a JSON object", source);
  auto type = j.find("model_type");
  TESSEL_CHECK(type != j.end() && type->is_string(),
               "{}: no model_type (not a Hugging Face config.json?)", source);
  const std::string model_type = type->get<std::string>();
  const Family* family = family_reading(model_type);
  if (family == nullptr) {
    std::vector<std::string> known = import_types();
    const std::string last = known.back();
    known.pop_back();
    fail("{}: model_type '{}' is not supported (tessel reads {} and {})", source, model_type,
         fmt::join(known, ", "), last);
  }
  ModelConfig cfg = config_json::read_every_key(source, [&] { return family->read(j, model_type, source); });
  cfg.seq_length = cfg.max_position_embeddings;
  try {
    cfg.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return cfg;
}

nlohmann::json hf_config_json(const ModelConfig& cfg) { return family_writing(cfg).write(cfg, ""); }

std::vector<std::string> hf_export_violations(const ModelConfig& cfg) {
  return family_writing(cfg).export_violations(cfg);
}

PlannerSizes planner_sizes_from_hf(const nlohmann::json& j, const std::string& source) {
  const std::string type = config_json::required<std::string>(j, "model_type", source);
  const Family* family = family_sizing(type);
  if (family == nullptr) {
    std::vector<std::string> known;
    for (const Family* f : families())
      for (const std::string& t : planner_types(*f)) known.push_back(t);
    fail("{}: model_type '{}' is not known to the planner ({})", source, type, fmt::join(known, ", "));
  }
  return config_json::read_every_key(source, [&] { return family->planner_sizes(j, type, source); });
}

}  // namespace tessel
