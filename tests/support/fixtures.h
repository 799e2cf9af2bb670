// Test fixtures: a fresh folder per test under the temporary directory, removed afterwards, and
// the tessel::Error a call throws.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>

#include "tessel/core/error.h"

namespace tessel::testing {

// Named after the test suite, the test and the process.
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
  std::string path(const std::string& name = "") const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

 private:
  std::filesystem::path path_;
};

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

// Runs `f`, which must throw tessel::Error on one line containing every one of `parts`.
inline void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
    return;
  }
  ADD_FAILURE() << "no tessel::Error thrown";
}

}  // namespace tessel::testing
