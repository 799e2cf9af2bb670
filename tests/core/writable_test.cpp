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
               {below_file + ": cannot create its temporary file out.txt.tmp.", "Not a directory"});
  if (::geteuid() == 0) return;
  std::filesystem::create_directory(dir.path("ro"));
  ::chmod(dir.path("ro").c_str(), 0555);
  const std::string read_only = dir.path("ro/out.txt");
  expect_error([&] { AtomicFile file(read_only, Durability::kReplaceable); },
               {read_only + ": cannot create its temporary file out.txt.tmp.", "Permission denied"});
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
                .find(target + ": cannot create its temporary file " +
                      std::filesystem::path(next).filename().string() + " (File exists)"),
            std::string::npos);
  EXPECT_EQ(read_file(victim), "untouched");
  EXPECT_TRUE(std::filesystem::is_symlink(next));
  EXPECT_FALSE(std::filesystem::exists(target));
}

// The folder swapped for a link between the temporary's creation and the commit: the file is
// committed in the folder it was begun in (held open), and nothing is written through the link.
TEST(AtomicFile, AFolderSwappedForALinkIsNotWrittenThrough) {
  TestDir dir;
  std::filesystem::create_directories(dir.path("out"));
  std::filesystem::create_directories(dir.path("elsewhere"));
  AtomicFile file(dir.path("out/f.txt"), Durability::kDurable);
  file.write("new");
  std::filesystem::rename(dir.path("out"), dir.path("moved"));
  std::filesystem::create_directory_symlink(dir.path("elsewhere"), dir.path("out"));
  file.commit();
  EXPECT_EQ(read_file(dir.path("moved/f.txt")), "new");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path("elsewhere")));
}

// The start-up probe never writes through a link at its name (a killed run's, or planted).
TEST(RequireWritableDir, ALinkAtTheProbesNameIsNotFollowed) {
  TestDir dir;
  const std::string victim = dir.write("victim", "untouched");
  std::filesystem::create_directories(dir.path("out"));
  const std::string probe = dir.path(fmt::format("out/.tessel-write-probe-{}-3", ::getpid()));
  std::filesystem::create_symlink(victim, probe);
  require_writable_dir("--save", dir.path("out"), 3);
  EXPECT_EQ(read_file(victim), "untouched");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path("out")));
}

// A file written late (a trace at the end, a save's tracker) is checked at start-up: a folder at
// its name, a name that ends in a folder, or a folder that is not there is refused naming the flag.
TEST(RequireWritableFile, AFolderIsRefusedNamingTheFlag) {
  TestDir dir;
  std::filesystem::create_directories(dir.path("trace"));
  expect_error([&] { require_writable_file("--pipeline-timeline", dir.path("trace")); },
               {"--pipeline-timeline " + dir.path("trace") + ": a folder, not a file"});
  expect_error([&] { require_writable_file("--pipeline-timeline", dir.path("new") + "/"); },
               {"--pipeline-timeline " + dir.path("new") + "/: names a folder"});
  expect_error([&] { require_writable_file("--pipeline-timeline", dir.path("new/trace.json")); },
               {"--pipeline-timeline " + dir.path("new/trace.json") + ": cannot write into its folder " +
                dir.path("new") + " (No such file or directory)"});
  EXPECT_FALSE(std::filesystem::exists(dir.path("new")));  // probed, not made
  require_writable_file("--pipeline-timeline", dir.path("trace.json"));
  EXPECT_FALSE(std::filesystem::exists(dir.path("trace.json")));  // the probe leaves nothing
}

// A folder written whole must lie apart from the folders it reads: the same folder, or one that
// holds a source, is refused naming both flags; a folder below a source's is not.
TEST(RequireApartFromSources, AFolderThatHoldsASourceIsRefused) {
  TestDir dir;
  const std::string tok = dir.write("tok.json", "{}");
  expect_error([&] { require_apart_from_sources("--out", dir.path(), {{"--tokenizer-model", tok}}); },
               {"--out " + dir.path() + ": --tokenizer-model " + tok + " is read from this folder"});
  expect_error([&] { require_apart_from_sources("--out", dir.path() + "/./", {{"--init-from", dir.path()}}); },
               {"--init-from " + dir.path() + " is read from this folder"});
  std::filesystem::create_directories(dir.path("hf"));
  expect_error([&] { require_apart_from_sources("--save-hf", dir.path(), {{"--load", dir.path("hf")}}); },
               {"--save-hf " + dir.path() + ": --load " + dir.path("hf") + " is read from inside it"});
  require_apart_from_sources("--out", dir.path("hf/export"), {{"--init-from", dir.path("hf")}, {"--load", ""}});
  require_apart_from_sources("--out", dir.path("hf2"), {{"--init-from", dir.path("hf")}});
}

}  // namespace
}  // namespace tessel
