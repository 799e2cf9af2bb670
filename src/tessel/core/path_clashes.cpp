#include "tessel/core/path_clashes.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace tessel {

namespace {

namespace fs = std::filesystem;

// `path` absolute, its links resolved as far as it exists, without a trailing '/'.
fs::path resolved(const std::string& path) {
  std::error_code error;
  fs::path p = fs::weakly_canonical(path, error);
  if (error) p = fs::absolute(path, error).lexically_normal();
  if (p.filename().empty() && p.has_relative_path()) p = p.parent_path();
  return p;
}

// Where an output file lands: its folder resolved, its own name kept, since a link at the name is
// replaced by the write, not written through.
fs::path written_file(const std::string& path) {
  const fs::path p = fs::absolute(path).lexically_normal();
  const fs::path name = p.filename();
  if (name.empty() || name == "." || name == "..") return resolved(path);
  return resolved(p.parent_path().string()) / name;
}

// `inner` is `folder` or below it.
bool within(const fs::path& inner, const fs::path& folder) {
  return std::mismatch(folder.begin(), folder.end(), inner.begin(), inner.end()).first == folder.end();
}

// One file under two names: the same path, or (both existing, the output not a link) one inode.
bool same_file(const fs::path& output, const fs::path& input) {
  if (output == input) return true;
  std::error_code ec;
  if (fs::is_symlink(output, ec)) return false;
  const bool same = fs::equivalent(output, input, ec);
  return !ec && same;
}

struct Resolved {
  const NamedPath* named;
  fs::path path;
};

std::vector<Resolved> resolve_all(const std::vector<NamedPath>& paths, fs::path (*how)(const std::string&)) {
  std::vector<Resolved> out;
  for (const NamedPath& p : paths)
    if (!p.path.empty()) out.push_back({&p, how(p.path)});
  return out;
}

}  // namespace

std::vector<std::string> path_clashes(const CommandPaths& paths) {
  const std::vector<Resolved> files = resolve_all(paths.output_files, written_file);
  const std::vector<Resolved> folders = resolve_all(paths.output_folders, resolved);
  const std::vector<Resolved> inputs = resolve_all(paths.inputs, resolved);
  std::vector<std::string> v;
  for (size_t i = 0; i < files.size(); ++i)
    for (size_t j = i + 1; j < files.size(); ++j)
      if (files[i].path == files[j].path)
        v.push_back(fmt::format("{} and {} name the same file {}: one would overwrite the other",
                                files[i].named->flag, files[j].named->flag, files[i].path.string()));
  for (const Resolved& f : files)
    for (const Resolved& d : folders)
      if (within(f.path, d.path))
        v.push_back(fmt::format("{} {} is inside {} {}, a folder the run writes: give a file outside it",
                                f.named->flag, f.path.string(), d.named->flag, d.path.string()));
  for (const Resolved& in : inputs) {
    std::error_code ec;
    const bool in_folder = fs::is_directory(in.path, ec);
    const NamedPath& i = *in.named;
    for (const Resolved& f : files) {
      const NamedPath& o = *f.named;
      if (in_folder && within(f.path, in.path))
        v.push_back(fmt::format("{} {} is inside {} {}, a folder the run reads: give a file outside it", o.flag,
                                o.path, i.flag, i.path));
      else if (!in_folder && same_file(f.path, in.path))
        v.push_back(fmt::format("{} {}: {} {} is read from this file: writing it would replace what is still "
                                "to be read; give {} another file", o.flag, o.path, i.flag, i.path, o.flag));
    }
    for (const Resolved& d : folders) {
      const NamedPath& o = *d.named;
      if (!within(in.path, d.path) || (i.may_share_with == o.flag && in.path == d.path)) continue;
      const fs::path read_from = in_folder ? in.path : in.path.parent_path();
      v.push_back(fmt::format("{} {}: {} {} is read from {}: writing there would replace what is still to be "
                              "read; give {} another folder", o.flag, o.path, i.flag, i.path,
                              read_from == d.path ? "this folder" : "inside it", o.flag));
    }
  }
  return v;
}

}  // namespace tessel
