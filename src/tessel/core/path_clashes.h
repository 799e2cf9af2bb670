// The files and folders one command writes, checked before it starts against each other and
// against what it reads: two flags naming one file, a file inside a folder the command fills, a
// file written over one the command reads (a --log-json named as the --data-path's .bin), a file
// written inside a folder it reads (a --pipeline-timeline among --load's rank files), or a folder
// written that holds what it reads (a tokenizer's --output holding its --input) would have one
// write destroy an output or an input with every write succeeding, and the command exit 0.
//
// Paths are compared as the file system resolves them: a folder through its links, an output
// file by its resolved folder and its own name (a link planted there is replaced, never written
// through: writable.h), an input file through its links; an output and an input that are one
// file under two names (a hard link) are one file.
#pragma once

#include <string>
#include <vector>

namespace tessel {

// A path a command names, with the flag that names it. An empty path is none.
struct NamedPath {
  std::string flag;
  std::string path;
  // An input only: the output folder flag that may be this very folder (--load, beside --save:
  // Megatron's resume writes new iterations next to the one it reads, once that one is read).
  std::string may_share_with = {};
};

struct CommandPaths {
  std::vector<NamedPath> output_files;    // written whole
  std::vector<NamedPath> output_folders;  // filled with files
  std::vector<NamedPath> inputs;          // read: a file, or a folder where the path is one
};

// Every clash, one message each, naming both flags.
std::vector<std::string> path_clashes(const CommandPaths& paths);

}  // namespace tessel
