// Names of files that one file gives for others beside it (a save's metadata.json its rank files,
// a tokenizer_config.json its vocabulary, an index its weight shards). Such a name is data from
// whoever wrote the folder: a path in it ("../other_run/rank_00000.safetensors", "/etc/...")
// would read, verify or load files outside the folder, so every reader takes it through here.
#pragma once

#include <string>

namespace tessel {

// A name of one file in a folder: not empty, not "." or "..", without '/' or NUL.
bool plain_file_name(const std::string& name);

// dir/name, for the name that the file `source` gives as `entry` ("an entry of \"files\"");
// throws tessel::Error naming the file, the entry and the name unless it is a plain one.
std::string file_in_folder(const std::string& dir, const std::string& name, const std::string& source,
                           const std::string& entry);

}  // namespace tessel
