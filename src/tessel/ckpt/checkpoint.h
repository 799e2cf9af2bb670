// Layout-independent training checkpoints (Megatron's --save/--load folders).
//
// DIR/iter_0000100/ holds one safetensors file per rank (rank_00003.safetensors) with, for every
// parameter that rank is the first holder of (DP×CP rank 0 for dense parameters, expert-DP rank 0
// for experts, TP rank 0 for TP-replicated ones), its local values and the Adam moments of the
// same elements ("optim.exp_avg/<name>", "optim.exp_avg_sq/<name>"). Every tensor is stored under
// its global name, with the slice it holds (ShardSpec) in the file's metadata. metadata.json
// (written by rank 0 once every file is complete) lists each tensor's global shape and the files
// holding its slices, the iteration, step count, seed, the run's configuration and a CRC-32 per
// file, and whether the Adam moments are there ("optimizer_state": a save under --no-save-optim
// holds the weights alone). DIR/latest_checkpointed_iteration.txt names the newest complete save; it is replaced
// atomically after metadata.json, so it never points at a half-written save.
//
// Loading rebuilds each global tensor from its saved slices and takes this rank's slice, so any
// TP/PP/DP/CP/EP layout may load a save made under any other.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "tessel/model/config.h"
#include "tessel/core/params.h"
#include "tessel/optim/adamw.h"

namespace tessel {

class ProcessGroups;
class SaveLock;

// CRC-32 (zlib's crc32) of `size` bytes, continuing from `crc`.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);
// CRC-32 of a whole file; throws Error naming the file when it cannot be read.
uint32_t file_crc32(const std::string& path);

// "DIR/iter_0000100".
std::string checkpoint_iteration_dir(const std::string& dir, int64_t iteration);
// A save writes no file through a symbolic link (CheckpointSaver::save refuses one). Throws Error
// naming every iteration folder of the --save folder `dir`, from `first` to `last` (the
// iterations a run may save), that is a link, so that a run refuses them at its start rather
// than at the save after its training.
void require_no_linked_iteration_dirs(const std::string& dir, int64_t first, int64_t last);
// The iteration the tracker names; throws Error naming the tracker when it is missing or bad.
int64_t latest_checkpointed_iteration(const std::string& dir);

// Collective over the world. `run_config` is stored as is (the parallel layout, training flags);
// `seed` and the step count go in too. `distributed_optimizer`: the optimizer's moments are
// sliced over DP×CP (dense) and expert-DP (experts) and are gathered before writing.
void save_checkpoint(const std::string& dir, int64_t iteration, const ParamRegistry& params,
                     const AdamW& optimizer, const ModelConfig& cfg, bool distributed_optimizer,
                     uint64_t seed, const nlohmann::json& run_config, ProcessGroups& groups);

// Saves in three steps: a collective snapshot (the moments gathered, the values copied out of
// training's buffers), the write of this rank's file, and a collective commit (every rank's
// CRC-32 gathered, metadata.json and the tracker written by rank 0). A synchronous save commits
// before save() returns, so training goes on only from a complete save. With `async`
// (--async-save) the file is written on a background thread while training goes on, and
// poll() — called after every iteration — commits it as soon as every rank's writer is done.
// A save not yet committed is not a save: the tracker still names the one before. A failed
// write or commit throws tessel::JobError on every rank at once (the next poll() for a
// background write), naming the file, the error and the save the tracker still names.
//
// `optimizer_state` false (--no-save-optim): the saves hold the weights without Adam's moments,
// and a load of them starts the optimizer afresh, as Megatron's does. The save folder must exist:
// a save makes its iteration's folder only, never the save folder again. `lock` (on the rank
// that holds the folder's lock; null elsewhere) is checked before each save is begun and committed.
class CheckpointSaver {
 public:
  explicit CheckpointSaver(bool async, bool optimizer_state = true, const SaveLock* lock = nullptr);
  ~CheckpointSaver();  // waits for a write in flight, which stays uncommitted
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective, as save_checkpoint. Commits the save in flight first.
  void save(const std::string& dir, int64_t iteration, const ParamRegistry& params,
            const AdamW& optimizer, const ModelConfig& cfg, bool distributed_optimizer,
            uint64_t seed, const nlohmann::json& run_config, ProcessGroups& groups);
  // Collective over the world while a background write is in flight (nothing otherwise):
  // commits it once every rank's writer has finished; raises a failed one.
  void poll(ProcessGroups& groups);
  // Collective: waits for the write in flight and commits it (nothing when none).
  void finish(ProcessGroups& groups);

 private:
  struct Pending;
  void commit(ProcessGroups& groups);
  [[noreturn]] void fail_save(const std::string& error);

  bool async_;
  bool optimizer_state_;
  const SaveLock* lock_;
  std::unique_ptr<Pending> pending_;
  std::thread writer_;
};

// Fills this rank's parameters and its owned Adam moments from a save under any layout, sets the
// step count and returns the saved iteration (training resumes at the next one). `iteration` < 0
// reads the tracker. Throws Error naming the file for a missing, truncated or altered file, for a
// save of another model, and for moments or a step count Adam cannot resume from (non-finite,
// a negative second moment or step count). Without `with_optimizer` (--no-load-optim,
// --finetune), or from a save without the moments (--no-save-optim), the weights alone: the
// optimizer is left as it is (fresh: zero moments, step 0).
int64_t load_checkpoint(const std::string& dir, ParamRegistry& params, AdamW& optimizer,
                        const ModelConfig& cfg, int64_t iteration = -1, bool with_optimizer = true);

// Whether a save's metadata.json (read_checkpoint_metadata) says it holds Adam's moments and step
// count; saves from before the field always do.
bool has_optimizer_state(const nlohmann::json& meta);

// metadata.json of a save (iteration < 0: the tracker's), with the fields the readers index
// there with their types; throws Error naming the file and the field otherwise.
nlohmann::json read_checkpoint_metadata(const std::string& dir, int64_t iteration = -1);
// The tokenizer the tracker's save was trained with (its run_config's "tokenizer").
nlohmann::json saved_tokenizer(const std::string& dir);
// Checks a save as --load does: every file's CRC-32 against metadata.json, then, against the model
// metadata.json describes, every parameter's tensor with its shape, covered by its slices, finite,
// with finite Adam moments (the second ≥ 0) and a step count ≥ 0. Throws Error naming the file and
// the first problem. Returns the number of files checked.
int verify_checkpoint(const std::string& dir, int64_t iteration = -1);

}  // namespace tessel
