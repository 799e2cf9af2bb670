#include "tessel/train/output_paths.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

namespace tessel {

namespace {

namespace fs = std::filesystem;

struct Output {
  const char* flag;
  fs::path path;  // absolute, with . and .. and the links that exist resolved
};

fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

// `inner` is `folder` or below it.
bool within(const fs::path& inner, const fs::path& folder) {
  auto [f, i] = std::mismatch(folder.begin(), folder.end(), inner.begin(), inner.end());
  return f == folder.end() || (std::next(f) == folder.end() && f->empty());  // a trailing '/'
}

}  // namespace

std::vector<std::string> output_path_violations(const TrainOptions& o) {
  std::vector<Output> files, folders;
  auto file = [&](const char* flag, const std::string& path) {
    if (!path.empty()) files.push_back({flag, resolved(path)});
  };
  auto folder = [&](const char* flag, const std::string& path) {
    if (!path.empty()) folders.push_back({flag, resolved(path)});
  };
  file("--log-json", o.log.json);
  file("--pipeline-timeline", o.log.pipeline_timeline);
  if (o.log.profile.on && o.log.pipeline_timeline.empty()) file("--profile's trace", o.log.profile.path);
  folder("--save", o.checkpoint.save);
  folder("--save-hf", o.checkpoint.save_hf);
  folder("--tensorboard-dir", o.log.tensorboard.dir);
  std::vector<std::string> v;
  for (size_t i = 0; i < files.size(); ++i)
    for (size_t j = i + 1; j < files.size(); ++j)
      if (files[i].path == files[j].path)
        v.push_back(fmt::format("{} and {} name the same file {}: one would overwrite the other", files[i].flag,
                                files[j].flag, files[i].path.string()));
  for (const Output& f : files)
    for (const Output& d : folders)
      if (within(f.path, d.path))
        v.push_back(fmt::format("{} {} is inside {} {}, a folder the run writes: give a file outside it", f.flag,
                                f.path.string(), d.flag, d.path.string()));
  return v;
}

}  // namespace tessel
