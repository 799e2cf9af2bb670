// The test names themselves: ctest discovers them from --gtest_list_tests, so every value a test
// is instantiated over must print readably (a printer, not gtest's fallback of the value's bytes,
// which hold addresses and change from run to run) and the listing must be the same every run.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/run_command.h"

namespace tessel {
namespace {

TEST(TestListing, ParametersPrintReadablyAndTheSameEveryRun) {
  const std::string list =
      std::filesystem::read_symlink("/proc/self/exe").string() + " --gtest_list_tests";
  const testing::CommandResult first = testing::run_command(list);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("GetParam() = "), std::string::npos) << "no parameterized test?";
  size_t line_start = 0;
  for (size_t end; (end = first.output.find('\n', line_start)) != std::string::npos;
       line_start = end + 1) {
    const std::string line = first.output.substr(line_start, end - line_start);
    EXPECT_EQ(line.find("-byte object <"), std::string::npos) << "a parameter without a printer: " << line;
  }
  const testing::CommandResult second = testing::run_command(list);
  EXPECT_EQ(second.output, first.output);
}

}  // namespace
}  // namespace tessel
