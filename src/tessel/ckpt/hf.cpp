#include "tessel/ckpt/hf.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/ckpt/hf_layout.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace fs = std::filesystem;

void export_hf(const ParamRegistry& registry, const ModelConfig& cfg, const std::string& dir,
               const std::string& model_type, int64_t max_shard_bytes) {
  const std::vector<std::string> refused = hf_export_violations(cfg);
  TESSEL_CHECK(refused.empty(), "export to {}: {}", dir, fmt::join(refused, "; "));
  const Family& family = family_writing(cfg);
  const std::vector<std::string>& offered = family.export_types;
  if (!model_type.empty() && std::find(offered.begin(), offered.end(), model_type) == offered.end()) {
    const Family* other = family_reading(model_type);
    fail("export to {}: model_type {} is for {}", dir, model_type,
         other != nullptr ? other->writes_what : "no model tessel writes");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "{}: cannot create folder ({})", dir, ec.message());
  write_hf_weights(registry, family.layout(model_type), gdn_heads(cfg), dir, max_shard_bytes);
  write_file_atomically((fs::path(dir) / "config.json").string(), family.write(cfg, model_type).dump(2) + "\n",
                        Durability::kDurable);
}

namespace {

// config.json in the folder `path` names (or the folder holding the file `path` names).
std::string config_file_beside(const std::string& path) {
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  return (dir / "config.json").string();
}

}  // namespace

std::optional<nlohmann::json> hf_config_json_beside(const std::string& path) {
  const std::string config = config_file_beside(path);
  if (!fs::exists(config)) return std::nullopt;
  std::ifstream in(config);
  TESSEL_CHECK(in.good(), "{}: cannot open", config);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    fail("{}: not valid JSON ({})", config, what);
  }
  return j;
}

std::optional<ModelConfig> hf_config_beside(const std::string& path) {
  const std::optional<nlohmann::json> j = hf_config_json_beside(path);
  if (!j) return std::nullopt;
  return model_config_from_hf(*j, config_file_beside(path));
}

std::string hf_model_type_beside(const std::string& path) {
  const std::optional<nlohmann::json> j = hf_config_json_beside(path);
  if (!j || !j->is_object() || !j->contains("model_type") || !(*j)["model_type"].is_string()) return "";
  return (*j)["model_type"].get<std::string>();
}

}  // namespace tessel
