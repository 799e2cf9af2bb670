// The weight files of a Hugging Face model, read and written: one safetensors file, a folder's
// model.safetensors, or a folder's model.safetensors.index.json with the shard files its
// weight_map names (what transformers' save_pretrained writes for a model over its
// max_shard_size). A shard's header is read the first time one of its tensors is asked for and
// its data only as read() asks, so a rank that loads one pipeline stage or a few experts opens
// only the shards holding them and reads only their bytes.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/ckpt/safetensors.h"

namespace tessel {

// Writes `tensors` (F32, in order) into the folder `dir` (created if need be) as save_pretrained
// does: one model.safetensors, or, when `max_shard_bytes` > 0 and they hold more, shards
// model-00001-of-0000N.safetensors of at most that many bytes of data each (a larger tensor alone
// in its own) and model.safetensors.index.json (metadata.total_size, weight_map). The files of
// the other form and the shards of an earlier write that this one did not replace are removed
// after the new files are in place.
void write_hf_weight_files(const std::string& dir, const std::vector<SafetensorsEntry>& tensors,
                           int64_t max_shard_bytes = 0);

class HfWeightFiles {
 public:
  // `path`: a safetensors file, a folder with model.safetensors or model.safetensors.index.json
  // (the one file first, as transformers), or the index itself. Errors name the file or the index
  // and the problem.
  explicit HfWeightFiles(const std::string& path);

  // What errors about the whole set name: the file, or the index.
  const std::string& source() const { return source_; }
  // Every tensor's name: in the file's order, or the index's weight_map's (sorted by name).
  const std::vector<std::string>& names() const { return names_; }
  // The path of the file holding tensor `name`.
  const std::string& file_of(const std::string& name) const;

  // The tensor's header entry, reading its shard's header first if no tensor of that shard was
  // asked for yet. A shard must hold exactly the tensors the index places in it.
  const SafetensorsTensor& tensor(const std::string& name);
  // The header entry when its file is open already, else nullptr.
  const SafetensorsTensor* opened_tensor(const std::string& name) const;
  // Elements [first, first + count) of tensor `name`, converted to float, into out.
  void read(const std::string& name, int64_t first, int64_t count, float* out);

  // The files whose headers were read, in the order they were opened.
  std::vector<std::string> opened_files() const;

 private:
  int shard_of(const std::string& name) const;  // throws for a name the files do not hold
  const SafetensorsReader& open(int shard);

  std::string source_;
  std::vector<std::string> shard_files_;  // paths, in the order the index first names them
  std::vector<int64_t> shard_tensors_;    // how many tensors the index places in each
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;  // per shard, null until opened
  std::vector<int> opened_order_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> shard_of_;
};

}  // namespace tessel
