// Reading checkpoints: the tracker, metadata.json, --load and `tessel checkpoint verify`, which
// check the same things (checkpoint.h).
#include "tessel/ckpt/checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessel/ckpt/checkpoint_format.h"
#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/ckpt/shards.h"
#include "tessel/core/error.h"
#include "tessel/core/file_names.h"
#include "tessel/core/json_values.h"
#include "tessel/family/family.h"
#include "tessel/model/weight_settings.h"
#include "tessel/model/transformer.h"

namespace tessel {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

// obj[key], which must be there with the JSON type `is` tests (`kind` names it): a save cut short
// or edited by hand is named by its file and field, not by the JSON library.
const json& field(const json& obj, const char* key, bool (json::*is)() const noexcept,
                  const char* kind, const std::string& source) {
  TESSEL_CHECK(obj.is_object() && obj.contains(key), "{}: no \"{}\" ({} expected)", source, key, kind);
  const json& value = obj[key];
  TESSEL_CHECK((value.*is)(), "{}: \"{}\" is {}, not {}", source, key, value.dump(), kind);
  return value;
}

// The global shape metadata.json gives tensor `name`.
Shape saved_shape(const json& entry, const std::string& name, const std::string& source) {
  const std::string where = fmt::format("{} (tensor '{}')", source, name);
  Shape shape;
  for (const json& d : field(entry, "shape", &json::is_array, "an array", where))
    shape.push_back(json_whole_number(d, where, "a dimension of \"shape\"", 0,
                                      std::numeric_limits<int32_t>::max()));
  return shape;
}

// The files of one save, opened once each after their CRC-32 is checked against metadata.json.
class ShardFiles {
 public:
  ShardFiles(std::string iter_dir, const json& meta) : dir_(std::move(iter_dir)) {
    const std::string source = dir_ + "/metadata.json";
    for (const json& f : meta.at("files")) {
      const std::string where = source + " (an entry of \"files\")";
      const std::string name = field(f, "name", &json::is_string, "a file name", where).get<std::string>();
      file_in_folder(dir_, name, source, "an entry of \"files\"");
      crc_[name] = json_integer<uint32_t>(field(f, "crc32", &json::is_number, "a number", where), source, "crc32");
    }
  }
  // Only the files listed, each a plain name in the save's folder, are ever opened.
  const SafetensorsReader& get(const std::string& name) {
    auto it = readers_.find(name);
    if (it != readers_.end()) return *it->second;
    auto crc = crc_.find(name);
    TESSEL_CHECK(crc != crc_.end(), "{}/metadata.json: file {} is not listed", dir_, name);
    const std::string path = dir_ + "/" + name;
    TESSEL_CHECK(fs::exists(path), "{}: missing checkpoint file", path);
    const uint32_t actual = file_crc32(path);
    TESSEL_CHECK(actual == crc->second,
                 "{}: checksum mismatch (CRC-32 {:08x}, metadata.json says {:08x}): the file is "
                 "truncated or altered", path, actual, crc->second);
    return *readers_.emplace(name, std::make_unique<SafetensorsReader>(path)).first->second;
  }

 private:
  std::string dir_;
  std::map<std::string, uint32_t> crc_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

// This rank's slice of tensor `prefix + name`, rebuilt from every saved slice of it.
void assemble(const json& entry, const std::string& name, const std::string& prefix,
              const Param& p, float* out, ShardFiles& files, const std::string& iter_dir) {
  const int64_t global_numel = shape_numel(p.global_shape);
  std::vector<float> full(global_numel, 0.0f), local;
  std::vector<char> covered(global_numel, 0);
  const std::string meta = iter_dir + "/metadata.json", where = fmt::format("{} (tensor '{}')", meta, name);
  for (const json& s : field(entry, "shards", &json::is_array, "an array", where)) {
    const std::string file = field(s, "file", &json::is_string, "a file name", where).get<std::string>();
    const SafetensorsReader& reader = files.get(file);
    const std::string key = prefix + name;
    TESSEL_CHECK(reader.has(key), "{}/{}: tensor '{}' is missing", iter_dir, file, key);
    Param saved;
    saved.global_shape = p.global_shape;
    saved.local_shape = reader.tensor(key).shape;
    const auto number = [&](const char* what, int64_t lo, int64_t hi) {
      return json_whole_number(field(s, what, &json::is_number, "a number", where), where, what, lo, hi);
    };
    const int rank = static_cast<int>(p.global_shape.size());
    saved.shard.dim = static_cast<int>(number("dim", -1, rank - 1));
    saved.shard.count = static_cast<int>(number("count", 1, std::numeric_limits<int32_t>::max()));
    saved.shard.index = static_cast<int>(number("index", 0, saved.shard.count - 1));
    if (saved.shard.dim >= 0) {
      // Sections of the split dimension, each split alike (params.h); saves before them said
      // "fused_parts": that many equal ones.
      const int64_t size = p.global_shape[saved.shard.dim];
      if (s.contains("fused_parts")) {
        const int64_t parts = number("fused_parts", 1, size);
        if (parts > 1) saved.shard.sections.assign(parts, size / parts);
      } else {
        for (const json& section : field(s, "sections", &json::is_array, "an array", where))
          saved.shard.sections.push_back(json_whole_number(section, where, "sections", 1, size));
      }
      const std::string sections = saved.shard.sections_problem(size);
      TESSEL_CHECK(sections.empty(), "{}: {}", where, sections);
    }
    saved.shard.padded_size = number("padded_size", 0, std::numeric_limits<int64_t>::max());
    TESSEL_CHECK(saved.local_shape.size() == p.global_shape.size(),
                 "{}/{}: tensor '{}' has shape {} for a global shape {}", iter_dir, file, key,
                 shape_str(saved.local_shape), shape_str(p.global_shape));
    if (saved.local_shape == p.global_shape) {  // a whole tensor: its slice is the identity
      reader.read(key, full.data());
      std::fill(covered.begin(), covered.end(), 1);
      continue;
    }
    local.resize(saved.numel());
    reader.read(key, local.data());
    for (int64_t i = 0; i < saved.numel(); ++i) {
      const int64_t g = saved.global_index(i);
      TESSEL_CHECK(g < global_numel, "{}/{}: tensor '{}' does not fit its global shape {}",
                   iter_dir, file, key, shape_str(p.global_shape));
      if (g < 0) continue;
      full[g] = local[i];
      covered[g] = 1;
    }
  }
  for (int64_t g = 0; g < global_numel; ++g)
    TESSEL_CHECK(covered[g], "{}/metadata.json: the saved slices of '{}' do not cover it (element {})",
                 iter_dir, prefix + name, g);
  if (p.local_shape == p.global_shape) {
    std::copy(full.begin(), full.end(), out);
    return;
  }
  take_local_slice(p, full.data(), out);
}


// What a save's values must be to train from: finite weights and first moments, second moments
// finite and ≥ 0 (Adam divides by their square root). `values` may be null (--load checks the
// weights it keeps with require_finite_weights, over every rank's whole slice).
void check_saved_values(const std::string& iter_dir, const std::string& name, const float* values,
                        const float* m, const float* v, int64_t n) {
  const auto refuse = [&](const std::string& tensor, int64_t i, float x, const char* rule) {
    fail("{}: '{}' holds {} at element {} ({}): the save is damaged", iter_dir, tensor, x, i, rule);
  };
  for (int64_t i = 0; i < n; ++i) {
    if (values && !std::isfinite(values[i])) refuse(name, i, values[i], "weights must be finite");
    if (!std::isfinite(m[i])) refuse(kExpAvg + name, i, m[i], "Adam's first moment must be finite");
    if (!(std::isfinite(v[i]) && v[i] >= 0))
      refuse(kExpAvgSq + name, i, v[i], "Adam's second moment must be finite and ≥ 0");
  }
}

// Every parameter of `params` has a tensor of its global shape in metadata.json.
void check_shapes(const json& tensors, const ParamRegistry& params, const std::string& iter_dir) {
  const std::string source = iter_dir + "/metadata.json";
  for (const Param& p : params.params()) {
    TESSEL_CHECK(tensors.contains(p.name), "{}: no tensor '{}' (saved from another model?)", source, p.name);
    const Shape saved = saved_shape(tensors[p.name], p.name, source);
    TESSEL_CHECK(saved == p.global_shape, "{}: tensor '{}' has shape {}, the model {}", source,
                 p.name, shape_str(saved), shape_str(p.global_shape));
  }
}

int64_t saved_step_count(const json& meta, const std::string& iter_dir) {
  return json_whole_number(meta["step_count"], iter_dir + "/metadata.json", "step_count", 0,
                           std::numeric_limits<int64_t>::max());
}

}  // namespace

namespace {

// A Megatron-LM checkpoint where a tessel save was expected (the tracker's name is the same):
// refused naming its format and the way its weights can come in.
[[noreturn]] void refuse_megatron_checkpoint(const std::string& where, const std::string& format) {
  fail("{}: a Megatron-LM checkpoint ({}), not a tessel save: tessel resumes its own saves only. To start from its "
       "weights, convert it to a Hugging Face folder (Megatron-Bridge) and give that to --init-from",
       where, format);
}

// The format of a Megatron checkpoint without a metadata.json, by its files ("" for none): the
// legacy torch format's mp_rank_TT[_PPP] folder a model-parallel rank
// (megatron/training/checkpointing.py), or torch.distributed.checkpoint's .metadata.
std::string megatron_format_of_files(const std::string& iter_dir) {
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(iter_dir, error)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("mp_rank_")) return "torch, the legacy format";
    if (name == ".metadata") return "torch_dcp or fsdp_dtensor, torch.distributed.checkpoint's";
  }
  return "";
}

}  // namespace

int64_t latest_checkpointed_iteration(const std::string& dir) {
  const std::string tracker = dir + "/latest_checkpointed_iteration.txt";
  std::error_code error;
  const fs::file_status status = fs::status(tracker, error);
  TESSEL_CHECK(fs::exists(status), "{}: no checkpoint tracker (is {} a --save folder?)", tracker, dir);
  // A FIFO or a device there is not read (a FIFO would hang the read), nor called missing.
  TESSEL_CHECK(fs::is_regular_file(status), "{} is not a regular file: a checkpoint tracker holds the "
               "iteration of the newest save", tracker);
  std::ifstream in(tracker);
  TESSEL_CHECK(in.good(), "{}: cannot open", tracker);
  std::stringstream text;
  text << in.rdbuf();
  std::string word = text.str();
  while (!word.empty() && std::isspace(static_cast<unsigned char>(word.back()))) word.pop_back();
  if (word == "release") refuse_megatron_checkpoint(tracker, "a release checkpoint");
  TESSEL_CHECK(!word.empty() && word.size() <= 18 &&
                   word.find_first_not_of("0123456789") == std::string::npos,
               "{}: not an iteration number ('{}')", tracker, word.substr(0, 40));
  return std::stoll(word);
}

json read_checkpoint_metadata(const std::string& dir, int64_t iteration) {
  if (iteration < 0) iteration = latest_checkpointed_iteration(dir);
  const std::string iter_dir = checkpoint_iteration_dir(dir, iteration), path = iter_dir + "/metadata.json";
  if (!fs::exists(path))
    if (const std::string format = megatron_format_of_files(iter_dir); !format.empty())
      refuse_megatron_checkpoint(iter_dir, format);
  TESSEL_CHECK(fs::exists(path), "{}: missing (no complete save of iteration {})", path, iteration);
  TESSEL_CHECK(fs::is_regular_file(path), "{}: not a file", path);
  std::ifstream in(path);
  TESSEL_CHECK(in.good(), "{}: cannot open", path);
  json meta;
  try {
    meta = json::parse(in);
  } catch (const json::exception&) {
    fail("{}: not valid JSON", path);
  }
  // A distributed Megatron checkpoint's metadata.json names its backend (megatron/core/dist_checkpointing).
  if (meta.is_object() && meta.contains("sharded_backend"))
    refuse_megatron_checkpoint(iter_dir, meta["sharded_backend"].is_string()
                                             ? meta["sharded_backend"].get<std::string>()
                                             : std::string("distributed"));
  TESSEL_CHECK(meta.is_object() && meta.contains("format") && meta["format"] == "tessel-checkpoint",
               "{}: not a tessel checkpoint", path);
  for (const char* key : {"iteration", "step_count", "seed", "world_size", "data_position"})
    field(meta, key, &json::is_number, "a number", path);
  // Its files are the iteration's its own field names: one moved or copied into another save's
  // folder would resume the tracker's iteration with another's weights.
  TESSEL_CHECK(meta["iteration"] == iteration, "{}: a save of iteration {} in the folder of iteration {}", path,
               meta["iteration"].dump(), iteration);
  field(meta, "files", &json::is_array, "an array", path);
  if (meta.contains("optimizer_state")) field(meta, "optimizer_state", &json::is_boolean, "true or false", path);
  for (const char* key : {"tensors", "model", "run_config"}) field(meta, key, &json::is_object, "an object", path);
  return meta;
}

bool has_optimizer_state(const json& meta) { return meta.value("optimizer_state", true); }

json saved_tokenizer(const std::string& dir) {
  const int64_t iteration = latest_checkpointed_iteration(dir);
  const json meta = read_checkpoint_metadata(dir, iteration);
  return field(meta["run_config"], "tokenizer", &json::is_object, "an object",
               checkpoint_iteration_dir(dir, iteration) + "/metadata.json (run_config)");
}

namespace {

// The save's model against this one, as --init-from's (model/weight_settings.h): the run settings
// (dropout, --init-method-std, --seq-length) may change, under --finetune and on resume alike, as
// Megatron's; every weight setting that differs is named by its flag, all at once. Both models
// pass through the metadata's JSON, so that what it does not record differs in neither; a key
// that still differs with no flag behind it is named as it stands.
void check_saved_model(const json& saved, const ModelConfig& cfg, const std::string& where) {
  const ModelConfig has = model_config_from_hf(saved, where);
  const json model = hf_config_json(with_run_settings_of(cfg, has));
  std::vector<std::string> v = weight_setting_differences(has, model_config_from_hf(model, where), "the save");
  if (v.empty())
    for (const auto& [key, value] : model.items())
      if (!saved.contains(key) || saved[key] != value)
        v.push_back(fmt::format("{} is {}, this model has {}", key, saved.value(key, json()).dump(), value.dump()));
  TESSEL_CHECK(v.empty(), "{}: saved from another model: {}", where, fmt::join(v, "; "));
}

}  // namespace

int64_t load_checkpoint(const std::string& dir, ParamRegistry& params, AdamW& optimizer,
                        const ModelConfig& cfg, int64_t iteration, bool with_optimizer) {
  if (iteration < 0) iteration = latest_checkpointed_iteration(dir);
  const json meta = read_checkpoint_metadata(dir, iteration);
  const std::string iter_dir = checkpoint_iteration_dir(dir, iteration);
  check_saved_model(meta["model"], cfg, iter_dir + "/metadata.json");
  const json& tensors = meta["tensors"];
  check_shapes(tensors, params, iter_dir);
  const int64_t step_count = saved_step_count(meta, iter_dir);
  const bool moments = with_optimizer && has_optimizer_state(meta);

  ShardFiles files(iter_dir, meta);
  std::vector<float> m(params.numel()), v(params.numel()), values;
  for (Param& p : params.params()) {
    const std::string name = p.name;
    const json& entry = tensors[name];
    values.resize(p.numel());
    assemble(entry, name, "", p, values.data(), files, iter_dir);
    params.from_host(p, values.data());
    if (!moments) continue;
    assemble(entry, name, kExpAvg, p, m.data() + p.offset, files, iter_dir);
    assemble(entry, name, kExpAvgSq, p, v.data() + p.offset, files, iter_dir);
    check_saved_values(iter_dir, name, nullptr, m.data() + p.offset, v.data() + p.offset, p.numel());
  }
  if (!moments) return iteration;
  std::vector<FlatRange> owned = optimizer.owned();
  if (owned.empty()) owned.push_back({0, params.numel()});
  int64_t state = 0;
  const DeviceMemory& memory = optimizer.memory();
  for (const FlatRange& r : owned) {
    const int64_t bytes = (r.end - r.begin) * 4;
    memory.from_host(optimizer.exp_avg() + state, m.data() + r.begin, bytes);
    memory.from_host(optimizer.exp_avg_sq() + state, v.data() + r.begin, bytes);
    state += r.end - r.begin;
  }
  optimizer.set_step_count(step_count);
  return iteration;
}

int verify_checkpoint(const std::string& dir, int64_t iteration) {
  if (iteration < 0) iteration = latest_checkpointed_iteration(dir);
  const json meta = read_checkpoint_metadata(dir, iteration);
  const std::string iter_dir = checkpoint_iteration_dir(dir, iteration);
  ShardFiles files(iter_dir, meta);
  int checked = 0;
  for (const json& f : meta["files"]) {
    files.get(f["name"].get<std::string>());
    ++checked;
  }
  // What --load checks besides the checksums, against the model the save describes: every
  // parameter there with its shape and covered by its slices, finite values, valid moments and
  // step count.
  saved_step_count(meta, iter_dir);
  const ModelConfig cfg = model_config_from_hf(meta["model"], iter_dir + "/metadata.json (model)");
  ParamRegistry model;
  TransformerChunk::declare(cfg, {.spec = ChunkSpec{0, cfg.num_layers, true, true}}, ChunkPlace{}, model);
  check_shapes(meta["tensors"], model, iter_dir);
  const bool moments = has_optimizer_state(meta);
  std::vector<float> values, m, v;
  for (const Param& declared : model.params()) {
    Param whole;  // the global tensor, as one rank would hold it whole
    whole.name = declared.name;
    whole.global_shape = whole.local_shape = declared.global_shape;
    const int64_t n = shape_numel(whole.global_shape);
    values.resize(n), m.resize(n), v.resize(n);
    const json& entry = meta["tensors"][whole.name];
    assemble(entry, whole.name, "", whole, values.data(), files, iter_dir);
    if (moments) {
      assemble(entry, whole.name, kExpAvg, whole, m.data(), files, iter_dir);
      assemble(entry, whole.name, kExpAvgSq, whole, v.data(), files, iter_dir);
    }
    check_saved_values(iter_dir, whole.name, values.data(), m.data(), v.data(), n);
  }
  return checked;
}

}  // namespace tessel
