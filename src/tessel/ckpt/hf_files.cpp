#include "tessel/ckpt/hf_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "tessel/core/error.h"
#include "tessel/core/file_names.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

nlohmann::json read_index(const std::string& index) {
  std::ifstream in(index);
  TESSEL_CHECK(in.good(), "{}: cannot open", index);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    fail("{}: not valid JSON ({})", index, what);
  }
}

// The shard files save_pretrained names: model-00001-of-00004.safetensors.
bool is_shard_name(const std::string& name) {
  static const std::regex shard(R"(model-[0-9]{5,}-of-[0-9]{5,}\.safetensors)");
  return std::regex_match(name, shard);
}

}  // namespace

void write_hf_weight_files(const std::string& dir, const std::vector<SafetensorsEntry>& tensors,
                           int64_t max_shard_bytes) {
  // Tensors in order, a new shard where the next would take the current one over the limit.
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const SafetensorsEntry& t : tensors) {
    const int64_t bytes = shape_numel(t.shape) * static_cast<int64_t>(sizeof(float));
    if (max_shard_bytes > 0 && in_shard > 0 && in_shard + bytes > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(t);
    in_shard += bytes, total += bytes;
  }
  const fs::path folder(dir);
  std::error_code made;
  fs::create_directories(folder, made);
  TESSEL_CHECK(!made, "{}: cannot create folder ({})", dir, made.message());
  // transformers refuses safetensors files whose metadata lacks format "pt".
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::set<std::string> written;
  if (shards.size() == 1) {
    write_safetensors((folder / kSingle).string(), tensors, metadata);
    written.insert(kSingle);
  } else {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, shards.size());
      write_safetensors((folder / name).string(), shards[i], metadata);
      for (const SafetensorsEntry& t : shards[i]) map[t.name] = name;
      written.insert(name);
    }
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    write_file_atomically((folder / kIndex).string(), index.dump(2) + "\n", Durability::kDurable);
    written.insert(kIndex);
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (!written.count(name) && (name == kSingle || name == kIndex || is_shard_name(name))) fs::remove(e.path(), ec);
  }
}

HfWeightFiles::HfWeightFiles(const std::string& path) {
  const fs::path given(path);
  // A folder reads its model.safetensors, else its index; an index may also be named itself.
  const bool index = given.filename() == kIndex || (fs::is_directory(given) && !fs::exists(given / kSingle));
  if (!index) {
    source_ = fs::is_directory(given) ? (given / kSingle).string() : path;
    shard_files_ = {source_};
    readers_.resize(1);
    for (const SafetensorsTensor& t : open(0).tensors()) {
      shard_of_.emplace(t.name, 0);
      names_.push_back(t.name);
    }
    return;
  }
  const fs::path folder = given.filename() == kIndex ? given.parent_path() : given;
  source_ = (folder / kIndex).string();
  TESSEL_CHECK(fs::exists(source_), "{}: no {} or {} in this folder", path, kSingle, kIndex);
  const nlohmann::json json = read_index(source_);
  const auto map = json.is_object() ? json.find("weight_map") : json.end();
  TESSEL_CHECK(map != json.end() && map->is_object() && !map->empty(),
               "{}: no weight_map object naming each tensor's file", source_);
  std::unordered_map<std::string, int> shard_index;
  for (const auto& [name, file] : map->items()) {
    TESSEL_CHECK(file.is_string(), "{}: weight_map places tensor '{}' in {}, not a file name", source_, name,
                 file.dump());
    const std::string shard = file_in_folder(folder.string(), file.get<std::string>(), source_,
                                             fmt::format("weight_map (tensor '{}')", name));
    auto [it, added] = shard_index.emplace(file.get<std::string>(), static_cast<int>(shard_files_.size()));
    if (added) shard_files_.push_back(shard), shard_tensors_.push_back(0);
    shard_of_.emplace(name, it->second);
    ++shard_tensors_[it->second];
    names_.push_back(name);
  }
  readers_.resize(shard_files_.size());
}

int HfWeightFiles::shard_of(const std::string& name) const {
  auto it = shard_of_.find(name);
  TESSEL_CHECK(it != shard_of_.end(), "{}: no tensor named '{}'", source_, name);
  return it->second;
}

const std::string& HfWeightFiles::file_of(const std::string& name) const { return shard_files_[shard_of(name)]; }

const SafetensorsReader& HfWeightFiles::open(int shard) {
  if (readers_[shard]) return *readers_[shard];
  auto reader = std::make_unique<SafetensorsReader>(shard_files_[shard]);
  if (!shard_tensors_.empty()) {  // a shard of an index: the two must agree
    for (const SafetensorsTensor& t : reader->tensors()) {
      auto it = shard_of_.find(t.name);
      TESSEL_CHECK(it != shard_of_.end() && it->second == shard,
                   "{}: holds tensor '{}', which {} {}", shard_files_[shard], t.name, source_,
                   it == shard_of_.end() ? std::string("does not list")
                                         : "places in " + shard_files_[it->second]);
    }
    // Every tensor the shard holds is one the index places there: fewer means one is missing.
    if (static_cast<int64_t>(reader->tensors().size()) != shard_tensors_[shard])
      for (const auto& [name, s] : shard_of_)
        TESSEL_CHECK(s != shard || reader->has(name), "{}: tensor '{}' is not in {}, where the index places it",
                     source_, name, shard_files_[shard]);
  }
  opened_order_.push_back(shard);
  return *(readers_[shard] = std::move(reader));
}

const SafetensorsTensor& HfWeightFiles::tensor(const std::string& name) { return open(shard_of(name)).tensor(name); }

const SafetensorsTensor* HfWeightFiles::opened_tensor(const std::string& name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end() || !readers_[it->second]) return nullptr;
  return &readers_[it->second]->tensor(name);
}

void HfWeightFiles::read(const std::string& name, int64_t first, int64_t count, float* out) {
  open(shard_of(name)).read(name, first, count, out);
}

std::vector<std::string> HfWeightFiles::opened_files() const {
  std::vector<std::string> files;
  for (int shard : opened_order_) files.push_back(shard_files_[shard]);
  return files;
}

}  // namespace tessel
