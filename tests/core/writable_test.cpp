#include "tessel/core/writable.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/fixtures.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::expect_error;
using testing::TestDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// Readers see the old file until commit and the whole new one after it; small writes gathered in
// the buffer and one larger than it come out in order.
TEST(AtomicFile, CommitReplacesTheTargetAtomically) {
  TestDir dir;
  const std::string target = dir.write("out.bin", "old");
  const std::string big(3 << 20, 'x');
  AtomicFile file(target, Durability::kDurable);
  file.write("head,");
  file.write(big.data(), big.size());
  file.write(",tail");
  EXPECT_EQ(read_file(target), "old");
  file.commit();
  EXPECT_EQ(read_file(target), "head," + big + ",tail");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});

  write_file_atomically(target, "replaceable", Durability::kReplaceable);
  EXPECT_EQ(read_file(target), "replaceable");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"});
}

// An error on the way drops the file: the target keeps its bytes, the temporary is gone.
TEST(AtomicFile, DroppedUncommittedLeavesTheTargetAndNoTemporary) {
  TestDir dir;
  const std::string target = dir.write("out.txt", "old");
  {
    AtomicFile file(target, Durability::kDurable);
    file.write("new");
    EXPECT_TRUE(std::filesystem::exists(file.temp_path()));
  }
  EXPECT_EQ(read_file(target), "old");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.txt"});
}

// PATH.tmp.HOST.PID.N: two writers of one path (two threads, or ranks of two nodes) never share a
// temporary; the last commit wins whole.
TEST(AtomicFile, TwoWritersOfOnePathGetTheirOwnTemporaries) {
  TestDir dir;
  const std::string target = dir.path("shared.json");
  AtomicFile first(target, Durability::kReplaceable);
  AtomicFile second(target, Durability::kReplaceable);
  EXPECT_NE(first.temp_path(), second.temp_path());
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string writer = fmt::format("{}.tmp.{}.{}.", target, host, ::getpid());
  EXPECT_TRUE(first.temp_path().starts_with(writer)) << first.temp_path();
  EXPECT_TRUE(second.temp_path().starts_with(writer)) << second.temp_path();
  first.write("first");
  second.write("second");
  first.commit();
  second.commit();
  EXPECT_EQ(read_file(target), "second");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"shared.json"});
}

// A folder no one can create files in: below a regular file, and (for a user other than root,
// whom permissions do not stop) a read-only folder.
TEST(AtomicFile, AnUnwritableFolderFailsNamingThePath) {
  TestDir dir;
  const std::string below_file = dir.write("plain", "") + "/out.txt";
  expect_error([&] { write_file_atomically(below_file, "x", Durability::kDurable); },
               {below_file + ".tmp.", "cannot create", "Not a directory"});
  if (::geteuid() == 0) return;
  std::filesystem::create_directory(dir.path("ro"));
  ::chmod(dir.path("ro").c_str(), 0555);
  const std::string read_only = dir.path("ro/out.txt");
  expect_error([&] { AtomicFile file(read_only, Durability::kReplaceable); },
               {read_only + ".tmp.", "cannot create", "Permission denied"});
  ::chmod(dir.path("ro").c_str(), 0755);
}

// A link planted at the next temporary name is refused, not written through.
TEST(AtomicFile, ALinkAtTheTemporaryNameIsNotFollowed) {
  TestDir dir;
  const std::string target = dir.path("out.txt");
  const std::string victim = dir.write("victim", "untouched");
  const std::string temp = AtomicFile(target, Durability::kReplaceable).temp_path();  // dropped
  const size_t dot = temp.rfind('.');
  const std::string next =
      temp.substr(0, dot + 1) + std::to_string(std::stoll(temp.substr(dot + 1)) + 1);
  std::filesystem::create_symlink(victim, next);
  EXPECT_NE(error_of([&] { AtomicFile file(target, Durability::kReplaceable); })
                .find(next + ": cannot create (File exists)"),
            std::string::npos);
  EXPECT_EQ(read_file(victim), "untouched");
  EXPECT_TRUE(std::filesystem::is_symlink(next));
  EXPECT_FALSE(std::filesystem::exists(target));
}

}  // namespace
}  // namespace tessel
