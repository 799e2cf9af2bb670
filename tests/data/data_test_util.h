// Shared by the dataset tests: file helpers (the per-test folder: support/fixtures.h) and the test-side Python references (Debian's /usr/bin/python3 with python3-numpy, installed by
// scripts/install-test-deps.sh).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/run_command.h"
#include "support/fixtures.h"
#include "tessel/core/error.h"

namespace tessel::testing {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs tests/data/SCRIPT with Debian's Python; the test fails with its output when it fails.
inline CommandResult run_python(const std::string& script_and_args) {
  const CommandResult r = run_command(std::string("/usr/bin/python3 -B ") + TESSEL_SOURCE_DIR +
                                      "/tests/data/" + script_and_args);
  if (r.output.find("No module named 'numpy'") != std::string::npos)
    ADD_FAILURE() << "python3-numpy is missing: run scripts/install-test-deps.sh";
  return r;
}

}  // namespace tessel::testing
