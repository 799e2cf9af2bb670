#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/shards.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/parallel/groups.h"
#include "tessel/core/error.h"
#include "tessel/model/moe/moe.h"

namespace tessel {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kExpAvg = "optim.exp_avg/";
const char* const kExpAvgSq = "optim.exp_avg_sq/";
const char* const kSlicesKey = "tessel.slices";

// Writes `text` to `path` through a temporary file that is flushed to disk and renamed over it.
void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TESSEL_CHECK(fd >= 0, "{}: cannot create", tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      fail("{}: write failed", tmp);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  TESSEL_CHECK(synced, "{}: fsync failed", tmp);
  TESSEL_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot rename to {}", tmp, path);
}

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

// The first holder of each parameter writes it: DP×CP rank 0 (expert-DP rank 0 for experts:
// every ETP rank its slice), and TP rank 0 for those replicated over TP.
bool writes_param(const Param& p, ProcessGroups& groups) {
  const RankCoords& at = groups.coords();
  if (p.replicated() && at.tp != 0) return false;
  if (is_expert_param(p)) return at.edp == 0;
  return at.dp == 0 && at.cp == 0;
}

// The slice a file holds, as metadata, whichever group it is split over (an expert is stored
// under its global name, whole or as its ETP slice).
json slice_json(const Param& p) {
  const bool split = p.shard.dim >= 0;
  return {{"shape", p.global_shape},
          {"dim", split ? p.shard.dim : -1},
          {"index", split ? p.shard.index : 0},
          {"count", split ? p.shard.count : 1},
          {"fused_parts", split ? p.shard.fused_parts : 1},
          {"padded_size", split ? p.shard.padded_size : 0}};
}

// The owned Adam state spread over whole flat buffers (zeros elsewhere).
void spread_moments(const AdamW& optimizer, int64_t numel, std::vector<float>& m,
                    std::vector<float>& v) {
  m.assign(numel, 0.0f);
  v.assign(numel, 0.0f);
  std::vector<FlatRange> owned = optimizer.owned();
  if (owned.empty()) owned.push_back({0, numel});
  int64_t state = 0;
  const DeviceMemory& memory = optimizer.memory();
  for (const FlatRange& r : owned) {
    const int64_t bytes = (r.end - r.begin) * 4;
    memory.to_host(m.data() + r.begin, optimizer.exp_avg() + state, bytes);
    memory.to_host(v.data() + r.begin, optimizer.exp_avg_sq() + state, bytes);
    state += r.end - r.begin;
  }
}

// Sums the owned slices of the distributed optimizer into whole moments: dense parameters over
// DP×CP, experts over expert-DP. Every other rank holds zeros there, so the sums are exact.
void gather_moments(const ParamRegistry& params, std::vector<float>& buffer, ProcessGroups& groups) {
  std::vector<float> experts(buffer.size(), 0.0f);
  for (const Param& p : params.params()) {
    if (!is_expert_param(p)) continue;
    std::copy(buffer.begin() + p.offset, buffer.begin() + p.offset + p.numel(), experts.begin() + p.offset);
    std::fill(buffer.begin() + p.offset, buffer.begin() + p.offset + p.numel(), 0.0f);
  }
  groups.dp_cp().all_reduce(buffer.data(), static_cast<int64_t>(buffer.size()));
  groups.edp().all_reduce(experts.data(), static_cast<int64_t>(experts.size()));
  for (const Param& p : params.params())
    if (is_expert_param(p))
      std::copy(experts.begin() + p.offset, experts.begin() + p.offset + p.numel(), buffer.begin() + p.offset);
}

// The files of one save, opened once each after their CRC-32 is checked against metadata.json.
class ShardFiles {
 public:
  ShardFiles(std::string iter_dir, const json& meta) : dir_(std::move(iter_dir)) {
    for (const json& f : meta.at("files")) crc_[f.at("name").get<std::string>()] = f.at("crc32").get<uint32_t>();
  }
  const SafetensorsReader& get(const std::string& name) {
    auto it = readers_.find(name);
    if (it != readers_.end()) return *it->second;
    const std::string path = dir_ + "/" + name;
    TESSEL_CHECK(fs::exists(path), "{}: missing checkpoint file", path);
    auto crc = crc_.find(name);
    TESSEL_CHECK(crc != crc_.end(), "{}/metadata.json: file {} is not listed", dir_, name);
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
  for (const json& s : entry.at("shards")) {
    const std::string file = s.at("file").get<std::string>();
    const SafetensorsReader& reader = files.get(file);
    const std::string key = prefix + name;
    TESSEL_CHECK(reader.has(key), "{}/{}: tensor '{}' is missing", iter_dir, file, key);
    Param saved;
    saved.global_shape = p.global_shape;
    saved.local_shape = reader.tensor(key).shape;
    saved.shard.dim = s.at("dim").get<int>();
    saved.shard.index = s.at("index").get<int>();
    saved.shard.count = s.at("count").get<int>();
    saved.shard.fused_parts = s.at("fused_parts").get<int>();
    saved.shard.padded_size = s.at("padded_size").get<int64_t>();
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

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), size));
}

uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "{}: cannot open", path);
  std::vector<char> buffer(1 << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32_update(crc, buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return crc;
}

std::string checkpoint_iteration_dir(const std::string& dir, int64_t iteration) {
  return fmt::format("{}/iter_{:07d}", dir, iteration);
}

int64_t latest_checkpointed_iteration(const std::string& dir) {
  const std::string tracker = dir + "/latest_checkpointed_iteration.txt";
  std::ifstream in(tracker);
  TESSEL_CHECK(in.good(), "{}: no checkpoint tracker (is {} a --save folder?)", tracker, dir);
  int64_t iteration = -1;
  in >> iteration;
  TESSEL_CHECK(!in.fail() && iteration >= 0, "{}: not an iteration number", tracker);
  return iteration;
}

// One rank's part of a save between its snapshot and its commit: the values and whole moments
// copied out of training's buffers, and what the commit needs.
struct CheckpointSaver::Pending {
  std::string dir, iter_dir, path;
  int64_t iteration = 0, step_count = 0;
  uint64_t seed = 0;
  json model, run_config;
  std::vector<float> values, m, v;  // (registry numel) each
  std::vector<SafetensorsEntry> entries;  // into values, m and v
  std::string slices;
  uint32_t crc = 0;
  std::exception_ptr error;  // from the background writer

  void write() {
    try {
      write_safetensors(path, entries, {{kSlicesKey, slices}});
      crc = file_crc32(path);
    } catch (...) {
      error = std::current_exception();
    }
  }
};

CheckpointSaver::CheckpointSaver(bool async) : async_(async) {}

CheckpointSaver::~CheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void CheckpointSaver::save(const std::string& dir, int64_t iteration, const ParamRegistry& params,
                           const AdamW& optimizer, const ModelConfig& cfg,
                           bool distributed_optimizer, uint64_t seed, const json& run_config,
                           ProcessGroups& groups) {
  finish(groups);
  auto s = std::make_unique<Pending>();
  s->dir = dir;
  s->iter_dir = checkpoint_iteration_dir(dir, iteration);
  s->path = s->iter_dir + "/" + rank_file_name(groups.world_rank());
  s->iteration = iteration;
  s->step_count = optimizer.step_count();
  s->seed = seed;
  s->model = hf_config_json(cfg);
  s->run_config = run_config;
  fs::create_directories(s->iter_dir);
  // A save of this iteration made before (an earlier run) stops being complete before any of its
  // files is replaced: its checksums would no longer match.
  if (groups.world_rank() == 0) fs::remove(s->iter_dir + "/metadata.json");
  groups.world().barrier();
  spread_moments(optimizer, params.numel(), s->m, s->v);
  if (distributed_optimizer) {
    gather_moments(params, s->m, groups);
    gather_moments(params, s->v, groups);
  }
  s->values.resize(params.numel());
  for (const Param& p : params.params()) {
    const std::vector<float> values = params.to_host(p);
    std::copy(values.begin(), values.end(), s->values.begin() + p.offset);
  }
  json slices = json::object();
  for (const Param& p : params.params()) {
    if (!writes_param(p, groups)) continue;
    const std::string& name = p.name;
    if (slices.contains(name)) continue;  // a tied embedding's second copy
    slices[name] = slice_json(p);
    s->entries.push_back({name, p.local_shape, s->values.data() + p.offset});
    s->entries.push_back({kExpAvg + name, p.local_shape, s->m.data() + p.offset});
    s->entries.push_back({kExpAvgSq + name, p.local_shape, s->v.data() + p.offset});
  }
  s->slices = slices.dump();
  pending_ = std::move(s);
  if (async_) {
    writer_ = std::thread([p = pending_.get()] { p->write(); });
  } else {
    pending_->write();
  }
}

void CheckpointSaver::finish(ProcessGroups& groups) {
  if (!pending_) return;
  if (writer_.joinable()) writer_.join();
  const std::unique_ptr<Pending> s = std::move(pending_);
  if (s->error) std::rethrow_exception(s->error);
  // Every rank's CRC-32, as two exact 16-bit halves; the gather also waits for every file.
  const float mine[2] = {static_cast<float>(s->crc >> 16), static_cast<float>(s->crc & 0xFFFF)};
  Comm& world = groups.world();
  std::vector<float> crcs(2 * world.size());
  world.all_gather(mine, crcs.data(), 2);
  if (groups.world_rank() == 0) {
    json meta = {{"format", "tessel-checkpoint"},
                 {"version", 1},
                 {"iteration", s->iteration},
                 {"data_position", s->iteration},  // sampling depends on (seed, iteration) only
                 {"step_count", s->step_count},
                 {"seed", s->seed},
                 {"model", s->model},
                 {"run_config", s->run_config},
                 {"world_size", world.size()}};
    json files = json::array(), tensors = json::object();
    for (int r = 0; r < world.size(); ++r) {
      const std::string name = rank_file_name(r), path = s->iter_dir + "/" + name;
      const uint32_t c = (static_cast<uint32_t>(crcs[2 * r]) << 16) | static_cast<uint32_t>(crcs[2 * r + 1]);
      files.push_back({{"name", name}, {"crc32", c}, {"bytes", fs::file_size(path)}});
      const SafetensorsReader reader(path);
      const json theirs = json::parse(reader.metadata().at(kSlicesKey));
      for (const auto& [tensor, slice] : theirs.items()) {
        json& t = tensors[tensor];
        t["shape"] = slice.at("shape");
        t["dtype"] = "F32";
        json shard = slice;
        shard.erase("shape");
        shard["file"] = name;
        t["shards"].push_back(shard);
      }
    }
    meta["files"] = files;
    meta["tensors"] = tensors;
    write_file_atomic(s->iter_dir + "/metadata.json", meta.dump(1));
    write_file_atomic(s->dir + "/latest_checkpointed_iteration.txt", std::to_string(s->iteration) + "\n");
  }
  world.barrier();
}

void save_checkpoint(const std::string& dir, int64_t iteration, const ParamRegistry& params,
                     const AdamW& optimizer, const ModelConfig& cfg, bool distributed_optimizer,
                     uint64_t seed, const json& run_config, ProcessGroups& groups) {
  CheckpointSaver saver(false);
  saver.save(dir, iteration, params, optimizer, cfg, distributed_optimizer, seed, run_config, groups);
  saver.finish(groups);
}

json read_checkpoint_metadata(const std::string& dir, int64_t iteration) {
  if (iteration < 0) iteration = latest_checkpointed_iteration(dir);
  const std::string path = checkpoint_iteration_dir(dir, iteration) + "/metadata.json";
  std::ifstream in(path);
  TESSEL_CHECK(in.good(), "{}: missing (no complete save of iteration {})", path, iteration);
  json meta;
  try {
    meta = json::parse(in);
  } catch (const json::exception&) {
    fail("{}: not valid JSON", path);
  }
  TESSEL_CHECK(meta.value("format", "") == "tessel-checkpoint", "{}: not a tessel checkpoint", path);
  return meta;
}

int64_t load_checkpoint(const std::string& dir, ParamRegistry& params, AdamW& optimizer,
                        const ModelConfig& cfg, int64_t iteration) {
  if (iteration < 0) iteration = latest_checkpointed_iteration(dir);
  const json meta = read_checkpoint_metadata(dir, iteration);
  const std::string iter_dir = checkpoint_iteration_dir(dir, iteration);
  const json model = hf_config_json(cfg);
  for (const auto& [key, value] : model.items())
    TESSEL_CHECK(meta.at("model").contains(key) && meta.at("model").at(key) == value,
                 "{}/metadata.json: saved from another model ({} is {}, this model has {})",
                 iter_dir, key, meta.at("model").value(key, json()).dump(), value.dump());
  const json& tensors = meta.at("tensors");
  for (const Param& p : params.params()) {
    const std::string name = p.name;
    TESSEL_CHECK(tensors.contains(name), "{}/metadata.json: no tensor '{}' (saved from another model?)",
                 iter_dir, name);
    const Shape saved = tensors.at(name).at("shape").get<Shape>();
    TESSEL_CHECK(saved == p.global_shape, "{}/metadata.json: tensor '{}' has shape {}, the model {}",
                 iter_dir, name, shape_str(saved), shape_str(p.global_shape));
  }

  ShardFiles files(iter_dir, meta);
  std::vector<float> m(params.numel()), v(params.numel()), values;
  for (Param& p : params.params()) {
    const std::string name = p.name;
    const json& entry = tensors.at(name);
    values.resize(p.numel());
    assemble(entry, name, "", p, values.data(), files, iter_dir);
    params.from_host(p, values.data());
    assemble(entry, name, kExpAvg, p, m.data() + p.offset, files, iter_dir);
    assemble(entry, name, kExpAvgSq, p, v.data() + p.offset, files, iter_dir);
  }
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
  optimizer.set_step_count(meta.at("step_count").get<int64_t>());
  return iteration;
}

int verify_checkpoint(const std::string& dir, int64_t iteration) {
  if (iteration < 0) iteration = latest_checkpointed_iteration(dir);
  const json meta = read_checkpoint_metadata(dir, iteration);
  ShardFiles files(checkpoint_iteration_dir(dir, iteration), meta);
  int checked = 0;
  for (const json& f : meta.at("files")) {
    files.get(f.at("name").get<std::string>());
    ++checked;
  }
  return checked;
}

}  // namespace tessel
