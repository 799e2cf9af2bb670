#include "tessel/core/path_clashes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/fixtures.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;
using testing::TestDir;

// One clash expected, with `text` in it.
void expect_one(const CommandPaths& paths, const std::string& text) {
  const std::vector<std::string> v = path_clashes(paths);
  ASSERT_EQ(v.size(), 1u) << ::testing::PrintToString(v);
  EXPECT_NE(v[0].find(text), std::string::npos) << v[0];
}

// An output file written over an input file, under its own name, through a folder's link or as
// a hard link of it, is refused naming both flags (a --log-json named as the data's .bin
// replaced it, exit 0).
TEST(PathClashes, AnOutputFileThatIsAnInputIsRefused) {
  TestDir dir;
  const std::string bin = dir.write("d_text_document.bin", "data");
  expect_one({.output_files = {{"--log-json", bin}}, .inputs = {{"--data-path", bin}}},
             "--log-json " + bin + ": --data-path " + bin + " is read from this file");
  fs::create_directory_symlink(dir.path(), dir.path("via"));
  expect_one({.output_files = {{"--log-json", dir.path("via/d_text_document.bin")}}, .inputs = {{"--data-path", bin}}},
             "is read from this file");
  ASSERT_EQ(::link(bin.c_str(), dir.path("hard").c_str()), 0);
  expect_one({.output_files = {{"--log-json", dir.path("hard")}}, .inputs = {{"--data-path", bin}}},
             "is read from this file");
  // A link at the output's name is replaced, not written through: no clash.
  fs::create_symlink(bin, dir.path("soft"));
  EXPECT_TRUE(path_clashes({.output_files = {{"--log-json", dir.path("soft")}}, .inputs = {{"--data-path", bin}}}).empty());
}

// A file written inside a folder the command reads (a rank file of --load's save), and a folder
// written that holds an input, are refused; --load may be the --save folder itself (resume).
TEST(PathClashes, FoldersReadAndWrittenAreRefusedButResumeIsNot) {
  TestDir dir;
  fs::create_directories(dir.path("ckpt/iter_0000002"));
  const std::string rank = dir.write("ckpt/iter_0000002/rank_00000.safetensors", "w");
  expect_one({.output_files = {{"--pipeline-timeline", rank}}, .inputs = {{"--load", dir.path("ckpt")}}},
             "--pipeline-timeline " + rank + " is inside --load " + dir.path("ckpt") + ", a folder the run reads");
  const std::string corpus = dir.write("tt/tokenizer.json", "{}");
  expect_one({.output_folders = {{"--output", dir.path("tt")}}, .inputs = {{"--input", corpus}}},
             "--output " + dir.path("tt") + ": --input " + corpus + " is read from this folder");
  EXPECT_TRUE(path_clashes({.output_folders = {{"--save", dir.path("ckpt")}},
                            .inputs = {{"--load", dir.path("ckpt") + "/", "--save"}}})
                  .empty());
  expect_one({.output_folders = {{"--tensorboard-dir", dir.path("ckpt")}},
              .inputs = {{"--load", dir.path("ckpt"), "--save"}}},
             "--load " + dir.path("ckpt") + " is read from this folder");
  // Every clash is listed, not the first alone.
  EXPECT_EQ(path_clashes({.output_files = {{"--pipeline-timeline", rank}, {"--log-json", corpus}},
                          .inputs = {{"--load", dir.path("ckpt")}, {"--tokenizer-model", corpus}}})
                .size(),
            2u);
}

}  // namespace
}  // namespace tessel
