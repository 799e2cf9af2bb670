#include "tessel/core/file_names.h"

#include <filesystem>

#include "tessel/core/error.h"

namespace tessel {

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string file_in_folder(const std::string& dir, const std::string& name, const std::string& source,
                           const std::string& entry) {
  TESSEL_CHECK(plain_file_name(name),
               "{}: {} names the file \"{}\", which is not a file name in this folder (a plain name: "
               "no '/', not \"..\", not empty)", source, entry, name);
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace tessel
