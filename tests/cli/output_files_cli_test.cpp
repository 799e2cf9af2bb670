// The files commands write, as a user meets them: never through a link planted in a folder
// (a save folder's lock, a log), never half a file where a whole one was (a tokenizer train whose write
// fails), never into the folder the command reads from or beside a second writer (an export),
// and an output that cannot be written refused before the work rather than after it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "tessel/ckpt/save_lock.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;
using testing::run_tessel;

const std::string kCorpus = TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt";
const std::string kModel =
    "--arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 ";
const std::string kTrain = "train " + kModel +
                           "--micro-batch-size 2 --global-batch-size 4 --threads 1 --eval-iters 0 "
                           "--data-path " + kCorpus + " ";

// Every file of a folder with its bytes.
std::map<std::string, std::string> files_in(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename()] = read_text_file(e.path());
  return files;
}

void expect_in(const CommandResult& r, const std::string& text) {
  EXPECT_NE(r.output.find(text), std::string::npos) << "no \"" << text << "\" in:\n" << r.output;
}

// A resumed save folder whose lock file is a link (a folder received from someone else): the run
// is refused and the file the link names keeps its bytes; the lock used to truncate it, write its
// "pid ... on host ..." line there and empty it at the end.
TEST(OutputFilesCli, ALockFileThatIsALinkIsRefusedNotWrittenThrough) {
  testing::TestDir dir;
  const std::string save = " --save " + dir.path("ckpt") + " --load " + dir.path("ckpt");
  ASSERT_EQ(run_tessel(kTrain + "--train-iters 2" + save).exit_code, 0);
  const std::string victim = dir.write("victim.txt", "someone's data\n");
  fs::remove(dir.path("ckpt/.tessel-save.lock"));
  fs::create_symlink(victim, dir.path("ckpt/.tessel-save.lock"));
  const CommandResult r = run_tessel(kTrain + "--train-iters 4 --override-opt_param-scheduler" + save);
  EXPECT_NE(r.exit_code, 0);
  expect_in(r, "--save " + dir.path("ckpt") + ": the lock file " + dir.path("ckpt/.tessel-save.lock") +
                   " is a symbolic link");
  EXPECT_EQ(read_text_file(victim), "someone's data\n");
  EXPECT_TRUE(fs::is_symlink(dir.path("ckpt/.tessel-save.lock")));
}

// `tokenizer train` whose writes fail (a file size limit: EFBIG) leaves the folder's earlier
// tokenizer whole, for the byte-level BPE and for SentencePiece; it used to leave the first
// kilobyte of a new tokenizer.json or tokenizer.model.
TEST(OutputFilesCli, AFailedTokenizerTrainLeavesTheOldFilesWhole) {
  testing::TestDir dir;
  const std::string corpus = read_text_file(kCorpus);
  const std::string input = dir.write("input.txt", corpus.substr(0, corpus.find('\n', 200000) + 1));
  for (const auto& [type, vocab] : {std::pair{"byte-bpe", 300}, std::pair{"bpe", 500}}) {
    const std::string out = dir.path(type);
    const std::string train = fmt::format("tokenizer train --model-type {} --threads 1 --input {} --output {} "
                                          "--vocab-size ", type, input, out);
    ASSERT_EQ(run_tessel(train + std::to_string(vocab)).exit_code, 0);
    const std::map<std::string, std::string> before = files_in(out);
    // The shell ignores SIGXFSZ, so that a write past the limit fails with EFBIG instead.
    const CommandResult r = run_command("trap '' XFSZ; ulimit -f 1; " + std::string(TESSEL_BINARY) + " " + train +
                                        std::to_string(vocab + 100));
    EXPECT_NE(r.exit_code, 0) << r.output;
    expect_in(r, "File too large");
    EXPECT_EQ(files_in(out), before) << type;
  }
}

// An empty input is refused by tessel, naming the files, not by libsentencepiece's assertion
// ("Internal: ./src/trainer_interface.cc(428) [!sentences_.empty()]").
TEST(OutputFilesCli, AnEmptyInputToTokenizerTrainIsRefusedByName) {
  testing::TestDir dir;
  const std::string empty = dir.write("empty.txt", "\n\n");
  for (const std::string type : {"bpe", "unigram", "byte-bpe"}) {
    const CommandResult r = run_tessel("tokenizer train --model-type " + type + " --vocab-size 300 --input " + empty +
                                       " --output " + dir.path("tok"));
    EXPECT_EQ(r.exit_code, 1) << type << ": " << r.output;
    expect_in(r, "tokenizer train: --input " + empty + ": no text to train on");
    EXPECT_EQ(r.output.find("libsentencepiece"), std::string::npos) << r.output;
  }
}

// An export into the folder its tokenizer is read from is refused before anything is written
// there; it used to write the weights and config.json, then fail copying the tokenizer onto
// itself ("File exists").
TEST(OutputFilesCli, AnExportIntoItsTokenizersFolderIsRefusedBeforeAnyWrite) {
  testing::TestDir dir;
  const std::string tok = dir.path("tok");
  ASSERT_EQ(run_tessel("tokenizer train --model-type byte-bpe --vocab-size 300 --input " + kCorpus + " --output " + tok)
                .exit_code,
            0);
  const std::map<std::string, std::string> before = files_in(tok);
  const CommandResult r =
      run_tessel("export " + kModel + "--tokenizer-type hf --tokenizer-model " + tok + "/tokenizer.json --out " + tok);
  EXPECT_NE(r.exit_code, 0);
  expect_in(r, "--out " + tok + ": --tokenizer-model " + tok + "/tokenizer.json is read from this folder");
  EXPECT_EQ(files_in(tok), before);
  // A folder below the output one is read from too.
  const CommandResult above = run_tessel("export " + kModel + "--tokenizer-type hf --tokenizer-model " + tok +
                                         " --out " + dir.path(""));
  EXPECT_NE(above.exit_code, 0);
  expect_in(above, "is read from inside it");
  EXPECT_EQ(files_in(tok), before);
}

// A second export into a folder another one is writing (its lock held here) is refused and
// writes nothing; the two used to mix one model's config with the other's weights, both exiting 0.
TEST(OutputFilesCli, ASecondExportIntoOneFolderIsRefused) {
  testing::TestDir dir;
  const std::string out = dir.path("out");
  fs::create_directories(out);
  {
    const SaveLock first(out, "--out");
    const CommandResult r = run_tessel("export " + kModel + "--out " + out);
    EXPECT_NE(r.exit_code, 0);
    expect_in(r, "--out " + out + ": another run is writing this folder (pid ");
    EXPECT_FALSE(fs::exists(out + "/config.json"));
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  }
  const CommandResult alone = run_tessel("export " + kModel + "--out " + out);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_TRUE(fs::exists(out + "/config.json"));
}

// --pipeline-timeline naming a folder is refused before the first iteration, not after training.
TEST(OutputFilesCli, APipelineTimelineThatIsAFolderIsRefusedBeforeTraining) {
  testing::TestDir dir;
  fs::create_directories(dir.path("trace"));
  const CommandResult r = run_tessel(kTrain + "--train-iters 2 --pipeline-timeline " + dir.path("trace"));
  EXPECT_NE(r.exit_code, 0);
  expect_in(r, "--pipeline-timeline " + dir.path("trace") + ": a folder, not a file");
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;
}

// Outputs of the quick commands that cannot be written are named by their flag before any work:
// the --svg used to fail renaming its temporary over the folder, --dump-samples with the
// library's "filesystem error" after the indices were built.
TEST(OutputFilesCli, OutputsThatCannotBeWrittenAreNamedByTheirFlag) {
  testing::TestDir dir;
  fs::create_directories(dir.path("plot"));
  const CommandResult svg = run_tessel("schedule --pp 2 --microbatches 4 --svg " + dir.path("plot"));
  EXPECT_NE(svg.exit_code, 0);
  expect_in(svg, "--svg " + dir.path("plot") + ": a folder, not a file");
  const std::string file = dir.write("file.txt", "text\n");
  const CommandResult dump = run_tessel("data index --data-path " + kCorpus + " --seq-length 32 --train-samples 10 "
                                        "--data-cache-path " + dir.path("cache") + " --dump-samples " + file);
  EXPECT_NE(dump.exit_code, 0);
  expect_in(dump, "--dump-samples " + file + ": cannot create the folder");
  EXPECT_FALSE(fs::exists(dir.path("cache"))) << dump.output;
}

// A --log-json that is a link, in a new run and in a resumed one: the link is replaced by the log
// and the file it names keeps its bytes; a new run's log used to be opened through it, truncating
// that file and writing the records there.
TEST(OutputFilesCli, ALogJsonThatIsALinkIsReplacedNotWrittenThrough) {
  testing::TestDir dir;
  const std::string victim = dir.write("victim.txt", "someone's data\n"), log = dir.path("log.jsonl");
  const std::string save = " --save " + dir.path("ckpt") + " --load " + dir.path("ckpt");
  for (const int iterations : {2, 4}) {
    fs::remove(log);
    fs::create_symlink(victim, log);
    const CommandResult r = run_tessel(kTrain + save + " --override-opt_param-scheduler --log-json " + log +
                                       " --train-iters " + std::to_string(iterations));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(read_text_file(victim), "someone's data\n") << iterations;
    EXPECT_FALSE(fs::is_symlink(log)) << iterations;
    EXPECT_NE(read_text_file(log).find(fmt::format("\"iteration\":{},", iterations)), std::string::npos) << iterations;
  }
}

// A second run given the --log-json a first one is writing is refused; it used to truncate the
// file under the first, whose next records landed past a hole of zero bytes.
TEST(OutputFilesCli, ALogJsonAnotherRunWritesIsRefused) {
  testing::TestDir dir;
  const std::string log = dir.path("log.jsonl"), tessel = std::string(TESSEL_BINARY) + " ";
  const CommandResult r = run_command(
      "{ " + tessel + kTrain + "--train-iters 1000000 --log-interval 1 --log-json " + log + " > /dev/null 2>&1 & " +
      "first=$!; for i in $(seq 1200); do [ -s " + log + " ] && break; sleep 0.05; done; " + tessel + kTrain +
      "--train-iters 2 --log-json " + log + "; second=$?; kill $first; wait $first; exit $second; }");
  EXPECT_NE(r.exit_code, 0);
  expect_in(r, "--log-json " + log + ": cannot create it (" + log + ": another process is writing it");
  const std::string records = read_text_file(log);
  EXPECT_EQ(records.find('\0'), std::string::npos);
  EXPECT_NE(records.find("\"iteration\":1,"), std::string::npos) << records.substr(0, 400);
}

// A save tracker of another user in a sticky shared folder (/tmp), which rename cannot replace:
// the run (of another user: setpriv) is refused before training, not at its first save after it.
TEST(OutputFilesCli, AnotherUsersTrackerInAStickyFolderIsRefusedBeforeTraining) {
  if (::geteuid() != 0 || !fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "needs root and setpriv";
  testing::TestDir dir;
  const std::string shared = dir.path("shared");
  fs::create_directories(shared);
  fs::permissions(dir.path(), fs::perms(0755));
  fs::permissions(shared, fs::perms(01777));
  const std::string tracker = dir.write("shared/latest_checkpointed_iteration.txt", "5\n");
  const CommandResult r = run_command(
      "setpriv --reuid 65534 --regid 65534 --clear-groups " + std::string(TESSEL_BINARY) + " train --mock-data " +
      kModel + "--tokenizer-type NullTokenizer --vocab-size 512 --micro-batch-size 2 --global-batch-size 4 "
               "--threads 1 --eval-iters 0 --train-iters 2 --save " + shared);
  EXPECT_NE(r.exit_code, 0);
  expect_in(r, "--save " + tracker + ": the file belongs to another user (uid 0) in a sticky folder");
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;
  EXPECT_EQ(files_in(shared), (std::map<std::string, std::string>{{"latest_checkpointed_iteration.txt", "5\n"}}));
}

// An iteration folder under --save that is a symbolic link (the issue 43 re-probe: refused only
// at the save after training) is refused at the start, named with its iteration; one of an
// iteration the run does not save stays.
TEST(OutputFilesCli, ALinkedIterationFolderUnderSaveIsRefusedBeforeTraining) {
  testing::TestDir dir;
  const std::string save = dir.path("s"), elsewhere = dir.path("elsewhere");
  fs::create_directories(save);
  fs::create_directories(elsewhere);
  fs::create_directory_symlink(elsewhere, save + "/iter_0000002");
  fs::create_directory_symlink(elsewhere, save + "/iter_0000009");
  CommandResult r = run_tessel(kTrain + "--train-iters 2 --save " + save);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_in(r, "--save " + save + ": " + save + "/iter_0000002 (iteration 2) is a symbolic link: tessel writes no "
               "save through a link, and this run saves up to iteration 2");
  EXPECT_EQ(r.output.find("iter_0000009"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(elsewhere));
  fs::remove(save + "/iter_0000002");
  r = run_tessel(kTrain + "--train-iters 2 --save " + save);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// One run's outputs against each other, before it starts (the issue 43 re-probe: the log was
// replaced by the timeline, or by the save's tracker file, and the run exited 0).
TEST(OutputFilesCli, ARunsOutputsMustNotOverwriteEachOther) {
  testing::TestDir dir;
  const std::string x = dir.path("x.json");
  auto real = [](const std::string& path) { return fs::weakly_canonical(path).string(); };
  CommandResult r = run_tessel(kTrain + "--train-iters 1 --log-json " + x + " --pipeline-timeline " + dir.path(".") +
                               "/x.json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--log-json and --pipeline-timeline name the same file " + real(x)), std::string::npos) << r.output;
  r = run_tessel(kTrain + "--train-iters 1 --save " + dir.path("s") + " --log-json " + dir.path("s") +
                 "/latest_checkpointed_iteration.txt --tensorboard-dir " + dir.path("tb"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--log-json " + real(dir.path("s") + "/latest_checkpointed_iteration.txt") +
                          " is inside --save " + real(dir.path("s")) + ", a folder the run writes"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.path("s") + "/latest_checkpointed_iteration.txt"));
  r = run_tessel(kTrain + "--train-iters 1 --save " + dir.path("s") + " --log-json " + dir.path("s.jsonl"));
  EXPECT_EQ(r.exit_code, 0) << r.output;  // a sibling that shares the folder's name as a prefix
}

// A run's outputs against what it reads (the issue 43 re-probe: --log-json replaced the data's
// .bin, --pipeline-timeline a rank file of the save resumed from, --log-json the --model-config,
// each exit 0): refused before training, every clash named by both flags, the inputs untouched.
TEST(OutputFilesCli, ARunsOutputsMustNotOverwriteItsInputs) {
  testing::TestDir dir;
  ASSERT_EQ(run_tessel("preprocess --input " + kCorpus + " --output-prefix " + dir.path("kjv")).exit_code, 0);
  const std::string data = dir.path("kjv_text_document"), bin = data + ".bin";
  const std::string kData = "train " + kModel + "--micro-batch-size 2 --global-batch-size 4 --threads 1 "
                            "--eval-iters 0 --lr-decay-iters 4 --data-path " + data + " ";
  ASSERT_EQ(run_tessel(kData + "--train-iters 1 --save " + dir.path("b")).exit_code, 0);
  const std::string rank = dir.path("b/iter_0000001/rank_00000.safetensors");
  const std::string bin_bytes = read_text_file(bin), rank_bytes = read_text_file(rank);
  CommandResult r = run_tessel(kData + "--train-iters 2 --load " + dir.path("b") + " --log-json " + bin +
                               " --pipeline-timeline " + rank + " --save-hf " + dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_in(r, "--log-json " + bin + ": --data-path " + bin + " is read from this file");
  expect_in(r, "--pipeline-timeline " + rank + " is inside --load " + dir.path("b") + ", a folder the run reads");
  expect_in(r, "--save-hf " + dir.path() + ": --data-path " + bin + " is read from this folder");
  EXPECT_EQ(read_text_file(bin), bin_bytes);
  EXPECT_EQ(read_text_file(rank), rank_bytes);
  const std::string model = dir.write("model.json", R"({"num_layers": 2})");
  r = run_tessel(kData + "--train-iters 1 --model-config " + model + " --log-json " + model);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_in(r, "--log-json " + model + ": --model-config " + model + " is read from this file");
  EXPECT_EQ(read_text_file(model), R"({"num_layers": 2})");
  // Resuming into the folder it reads is Megatron's --save X --load X.
  r = run_tessel(kData + "--train-iters 2 --load " + dir.path("b") + " --save " + dir.path("b"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// tokenizer train and preprocess under the same rule: an --output folder holding the --input, an
// --output-prefix whose .bin is the --input.
TEST(OutputFilesCli, TokenizerTrainAndPreprocessMustNotOverwriteTheirInput) {
  testing::TestDir dir;
  fs::create_directories(dir.path("tt"));
  const std::string corpus = dir.write("tt/tokenizer.json", read_text_file(kCorpus).substr(0, 20000));
  CommandResult r = run_tessel("tokenizer train --input " + corpus + " --vocab-size 300 --model-type byte-bpe "
                               "--output " + dir.path("tt"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_in(r, "--output " + dir.path("tt") + ": --input " + corpus + " is read from this folder");
  EXPECT_EQ(read_text_file(corpus), read_text_file(kCorpus).substr(0, 20000));
  const std::string input = dir.write("x_text_document.bin", read_text_file(kCorpus).substr(0, 20000));
  r = run_tessel("preprocess --input " + input + " --output-prefix " + dir.path("x"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  expect_in(r, "--output-prefix " + input + ": --input " + input + " is read from this file");
  EXPECT_EQ(read_text_file(input), read_text_file(kCorpus).substr(0, 20000));
}

}  // namespace
}  // namespace tessel
