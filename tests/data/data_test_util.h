// Shared by the dataset tests: a per-test folder, file helpers, the tessel::Error a call throws,
// and the test-side Python references (Debian's /usr/bin/python3 with python3-numpy, installed by
// scripts/install-test-deps.sh).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/run_command.h"
#include "tessel/core/error.h"

namespace tessel::testing {

class TestDir {
 public:
  TestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("tessel_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() { std::filesystem::remove_all(path_); }
  std::string path(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

 private:
  std::filesystem::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The message of the tessel::Error that `f` throws; fails the test when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no tessel::Error thrown";
  return "";
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
