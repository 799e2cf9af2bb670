#include "checkpoint_command.h"

#include <fmt/format.h>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/core/error.h"
#include "tessel/core/tensor.h"

namespace tessel {

CheckpointCommand::CheckpointCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("checkpoint", "inspect or verify a --save folder");
  cmd_->require_subcommand(1);
  inspect_ = cmd_->add_subcommand("inspect", "what a save holds: iteration, configuration, tensors");
  verify_ = cmd_->add_subcommand("verify", "check a save as --load does: CRC-32s, shapes, coverage, finite values");
  for (CLI::App* sub : {inspect_, verify_}) {
    sub->add_option("dir", dir_, "the --save folder")->required();
    sub->add_option("--iteration", iteration_, "which save (default: the tracker's newest)");
  }
}

void CheckpointCommand::run() const {
  if (*verify_) {
    const int files = verify_checkpoint(dir_, iteration_);
    const int64_t it = iteration_ >= 0 ? iteration_ : latest_checkpointed_iteration(dir_);
    fmt::print("{}: {} files OK\n", checkpoint_iteration_dir(dir_, it), files);
    return;
  }
  const nlohmann::json meta = read_checkpoint_metadata(dir_, iteration_);
  try {
    inspect(meta);
  } catch (const nlohmann::json::exception& e) {  // a field below those read_checkpoint_metadata checks
    const int64_t it = iteration_ >= 0 ? iteration_ : latest_checkpointed_iteration(dir_);
    fail("{}/metadata.json: a malformed entry ({})", checkpoint_iteration_dir(dir_, it), e.what());
  }
}

void CheckpointCommand::inspect(const nlohmann::json& meta) const {
  fmt::print("iteration {} | step count {} | data position {} | seed {} | world {}\n",
             meta.at("iteration").get<int64_t>(), meta.at("step_count").get<int64_t>(),
             meta.at("data_position").get<int64_t>(), meta.at("seed").get<uint64_t>(),
             meta.at("world_size").get<int>());
  fmt::print("model: {}\n", meta.at("model").dump());
  fmt::print("run: {}\n", meta.at("run_config").dump());
  int64_t bytes = 0;
  for (const nlohmann::json& f : meta.at("files")) {
    fmt::print("file {} | {} bytes | crc32 {:08x}\n", f.at("name").get<std::string>(),
               f.at("bytes").get<int64_t>(), f.at("crc32").get<uint32_t>());
    bytes += f.at("bytes").get<int64_t>();
  }
  int64_t values = 0;
  for (const auto& [name, t] : meta.at("tensors").items()) {
    const Shape shape = t.at("shape").get<Shape>();
    values += shape_numel(shape);
    fmt::print("tensor {} {} {} | {} slice(s)\n", name, shape_str(shape),
               t.at("dtype").get<std::string>(), t.at("shards").size());
  }
  fmt::print("{} tensors, {} values ({}), {:.2f} MiB on disk\n", meta.at("tensors").size(), values,
             has_optimizer_state(meta) ? "+ Adam m and v" : "weights only: saved with --no-save-optim",
             bytes / 1048576.0);
}

}  // namespace tessel
