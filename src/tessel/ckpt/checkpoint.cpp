#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/checkpoint_format.h"

#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <memory>
#include <thread>
#include <vector>

#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/save_lock.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/comm/comm.h"
#include "tessel/parallel/groups.h"
#include "tessel/core/error.h"
#include "tessel/core/json_values.h"
#include "tessel/core/writable.h"
#include "tessel/model/moe/moe.h"

namespace tessel {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using namespace checkpoint_format;

// What the tracker names, for a failed save's message.
std::string tracker_state(const std::string& dir) {
  try {
    return fmt::format("{}/latest_checkpointed_iteration.txt still names iteration {}", dir,
                       latest_checkpointed_iteration(dir));
  } catch (const Error&) {
    return fmt::format("no save in {} is complete", dir);
  }
}

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
          {"sections", split ? p.shard.sections : std::vector<int64_t>{}},
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

void require_no_linked_iteration_dirs(const std::string& dir, int64_t first, int64_t last) {
  // The folder's entries, not the iterations: a run may save any of millions of them.
  std::vector<std::string> linked;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    // iter_ and up to 18 digits, the names a save makes (checkpoint_iteration_dir) and no others
    if (!name.starts_with("iter_") || name.size() < 6 || name.size() > 23 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    const int64_t iteration = std::stoll(name.substr(5));
    if (iteration < first || iteration > last || checkpoint_iteration_dir(dir, iteration) != dir + "/" + name) continue;
    if (it->is_symlink(error)) linked.push_back(fmt::format("{} (iteration {})", it->path().string(), iteration));
  }
  std::sort(linked.begin(), linked.end());
  TESSEL_CHECK(linked.empty(), "--save {}: {} {} a symbolic link: tessel writes no save through a link, and this run "
               "saves up to iteration {}; remove the link or give another --save", dir, fmt::join(linked, ", "),
               linked.size() == 1 ? "is" : "are each", last);
}

// One rank's part of a save between its snapshot and its commit: the values and whole moments
// copied out of training's buffers, and what the commit needs.
struct CheckpointSaver::Pending {
  std::string dir, iter_dir, path;
  int64_t iteration = 0, step_count = 0;
  uint64_t seed = 0;
  bool optimizer_state = true;  // the moments written beside the values
  json model, run_config;
  std::vector<float> values, m, v;  // (registry numel) each
  std::vector<SafetensorsEntry> entries;  // into values, m and v
  std::string slices;
  uint32_t crc = 0;
  std::optional<std::string> error;  // why the write failed
  std::atomic<bool> written = false;  // set last by the writer, with or without an error

  void write() {
    try {
      write_safetensors(path, entries, {{kSlicesKey, slices}});
      crc = file_crc32(path);
    } catch (const std::exception& e) {
      error = e.what();
    }
    written = true;
  }

  // metadata.json, then the tracker (rank 0, once every file is written).
  void write_metadata(const std::vector<float>& crcs, int world_size) const {
    json meta = {{"format", "tessel-checkpoint"},
                 {"version", 1},
                 {"iteration", iteration},
                 {"data_position", iteration},  // the samples consumed: run_config's consumed_train_samples
                 {"step_count", step_count},
                 {"optimizer_state", optimizer_state},
                 {"seed", seed},
                 {"model", model},
                 {"run_config", run_config},
                 {"world_size", world_size}};
    json files = json::array(), tensors = json::object();
    for (int r = 0; r < world_size; ++r) {
      const std::string name = rank_file_name(r), file = iter_dir + "/" + name;
      const uint32_t c = (static_cast<uint32_t>(crcs[2 * r]) << 16) | static_cast<uint32_t>(crcs[2 * r + 1]);
      files.push_back({{"name", name}, {"crc32", c}, {"bytes", fs::file_size(file)}});
      const SafetensorsReader reader(file);
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
    write_file_atomically(iter_dir + "/metadata.json", meta.dump(1), Durability::kDurable);
    write_file_atomically(dir + "/latest_checkpointed_iteration.txt", std::to_string(iteration) + "\n",
                          Durability::kDurable);
  }
};

CheckpointSaver::CheckpointSaver(bool async, bool optimizer_state, const SaveLock* lock)
    : async_(async), optimizer_state_(optimizer_state), lock_(lock) {}

CheckpointSaver::~CheckpointSaver() {
  if (writer_.joinable()) writer_.join();
}

void CheckpointSaver::save(const std::string& dir, int64_t iteration, const ParamRegistry& params,
                           const AdamW& optimizer, const ModelConfig& cfg,
                           bool distributed_optimizer, uint64_t seed, const json& run_config,
                           ProcessGroups& groups) {
  finish(groups);
  pending_ = std::make_unique<Pending>();
  Pending* s = pending_.get();
  s->dir = dir;
  s->iter_dir = checkpoint_iteration_dir(dir, iteration);
  s->path = s->iter_dir + "/" + rank_file_name(groups.world_rank());
  s->iteration = iteration;
  s->step_count = optimizer.step_count();
  s->seed = seed;
  s->optimizer_state = optimizer_state_;
  s->model = hf_config_json(cfg);
  s->run_config = run_config;
  try {
    check_together(groups.world(), [&] {
      // The save folder is never made here (the run made it at its start): one deleted under
      // the run stops it, named by the lock's holder, instead of being made again unlocked.
      if (lock_ != nullptr) lock_->check();
      std::error_code error;
      // Checked at the run's start too (require_no_linked_iteration_dirs); one made since is met here.
      TESSEL_CHECK(!fs::is_symlink(fs::symlink_status(s->iter_dir, error)),
                   "{}: a symbolic link: tessel writes no save through a link", s->iter_dir);
      fs::create_directory(s->iter_dir, error);
      TESSEL_CHECK(!error, "{}: cannot create the folder ({})", s->iter_dir, error.message());
      // A save of this iteration made before (an earlier run) stops being complete before any
      // of its files is replaced: its checksums would no longer match.
      if (groups.world_rank() == 0) fs::remove(s->iter_dir + "/metadata.json", error);
    });
  } catch (const JobError& e) {
    fail_save(e.what());
  }
  if (optimizer_state_) spread_moments(optimizer, params.numel(), s->m, s->v);
  if (optimizer_state_ && distributed_optimizer) {
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
    if (!optimizer_state_) continue;
    s->entries.push_back({kExpAvg + name, p.local_shape, s->m.data() + p.offset});
    s->entries.push_back({kExpAvgSq + name, p.local_shape, s->v.data() + p.offset});
  }
  s->slices = slices.dump();
  if (async_) {
    writer_ = std::thread([s] { s->write(); });
    return;
  }
  s->write();
  commit(groups);
}

void CheckpointSaver::poll(ProcessGroups& groups) {
  if (!pending_ || !writer_.joinable()) return;
  // How many ranks' writers are done, and how many of them failed.
  double done[2] = {pending_->written ? 1.0 : 0.0, pending_->written && pending_->error ? 1.0 : 0.0};
  groups.world().all_reduce(done, 2, ReduceOp::Sum);
  if (done[0] == groups.world().size() || done[1] > 0) finish(groups);
}

void CheckpointSaver::finish(ProcessGroups& groups) {
  if (!pending_) return;
  if (writer_.joinable()) writer_.join();
  commit(groups);
}

void CheckpointSaver::fail_save(const std::string& error) {
  const std::string dir = pending_->dir;
  const int64_t iteration = pending_->iteration;
  pending_.reset();
  throw JobError(fmt::format("the checkpoint save of iteration {} failed: {}; {}", iteration, error,
                             tracker_state(dir)));
}

void CheckpointSaver::commit(ProcessGroups& groups) {
  Comm& world = groups.world();
  if (std::optional<RankMessage> failed = first_error(world, pending_->error))
    fail_save(failed->rank == 0 ? failed->message
                                : fmt::format("[rank {}] {}", failed->rank, failed->message));
  // Every rank's CRC-32, as two exact 16-bit halves.
  const uint32_t crc = pending_->crc;
  const float mine[2] = {static_cast<float>(crc >> 16), static_cast<float>(crc & 0xFFFF)};
  std::vector<float> crcs(2 * world.size());
  world.all_gather(mine, crcs.data(), 2);
  try {
    check_together(world, [&] {
      if (lock_ != nullptr) lock_->check();
      if (groups.world_rank() == 0) pending_->write_metadata(crcs, world.size());
    });
  } catch (const JobError& e) {
    fail_save(e.what());
  }
  pending_.reset();
}

void save_checkpoint(const std::string& dir, int64_t iteration, const ParamRegistry& params,
                     const AdamW& optimizer, const ModelConfig& cfg, bool distributed_optimizer,
                     uint64_t seed, const json& run_config, ProcessGroups& groups) {
  CheckpointSaver saver(false);
  saver.save(dir, iteration, params, optimizer, cfg, distributed_optimizer, seed, run_config, groups);
  saver.finish(groups);
}

}  // namespace tessel
