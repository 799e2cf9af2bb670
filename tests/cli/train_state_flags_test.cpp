// Megatron's checkpoint-loading switches, --decoupled-lr and --calculate-per-token-loss as a user
// meets them in `tessel train`: a resume without the optimizer (--no-load-optim, or a save made
// with --no-save-optim) keeps the weights and the iteration and starts Adam and the schedule
// again; --finetune takes the weights alone from iteration 0; the rng switches say they change
// nothing; the decoupled group steps at its own rate; the per-token loss changes the gradient only
// where tokens are masked.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_tessel;

const std::string kTrain =
    "train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 --log-interval 1 --lr 3e-3 --min-lr 3e-4 "
    "--lr-warmup-iters 2 --train-iters 4 --eval-iters 0 ";

// Each --log-json record: iteration, loss and learning rate.
struct Record {
  int64_t iteration;
  double loss, lr;
};
std::vector<Record> records(const std::string& log) {
  std::vector<Record> out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back({j["iteration"].get<int64_t>(), j["loss"].get<double>(), j["lr"].get<double>()});
  }
  return out;
}

CommandResult train(const std::string& flags) {
  const CommandResult r = run_tessel(kTrain + flags);
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
  return r;
}

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// A save after iteration 2 of a 4-iteration run, with or without the optimizer's state.
std::string save_at_2(const testing::TestDir& dir, const std::string& name, const std::string& flags = "") {
  train("--save " + dir.path(name) + " --exit-interval 2 " + flags);
  return dir.path(name);
}

TEST(TrainStateCli, AResumeWithoutTheOptimizerKeepsTheIterationAndRestartsAdam) {
  testing::TestDir dir;
  train("--log-json " + dir.path("straight.jsonl"));
  const std::vector<Record> straight = records(dir.path("straight.jsonl"));
  ASSERT_EQ(straight.size(), 4u);

  const std::string full = save_at_2(dir, "full");
  const CommandResult fresh = train("--load " + full + " --no-load-optim --log-json " + dir.path("fresh.jsonl"));
  EXPECT_TRUE(says(fresh, "resumed from " + full + " after iteration 2 with a fresh optimizer (--no-load-optim)"))
      << fresh.output;
  const std::vector<Record> resumed = records(dir.path("fresh.jsonl"));
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0].iteration, 3);
  // The weights of iteration 2 on the batch of iteration 3: the straight run's loss; the
  // schedule starts again (iteration 1's rate), so iteration 4 goes elsewhere.
  EXPECT_EQ(resumed[0].loss, straight[2].loss);
  EXPECT_EQ(resumed[0].lr, straight[0].lr);
  EXPECT_EQ(resumed[1].lr, straight[1].lr);
  EXPECT_NE(resumed[1].loss, straight[3].loss);

  // A save without the moments: said by inspect, verified, and resumed as --no-load-optim does.
  const std::string weights = save_at_2(dir, "weights", "--no-save-optim");
  const CommandResult inspect = run_tessel("checkpoint inspect " + weights);
  EXPECT_TRUE(says(inspect, "weights only: saved with --no-save-optim")) << inspect.output;
  EXPECT_EQ(run_tessel("checkpoint verify " + weights).exit_code, 0);
  const SafetensorsReader file(weights + "/iter_0000002/rank_00000.safetensors");
  EXPECT_FALSE(file.has("optim.exp_avg/transformer.wte.weight"));
  const CommandResult plain = train("--load " + weights + " --log-json " + dir.path("plain.jsonl"));
  EXPECT_TRUE(says(plain, "with a fresh optimizer: the save holds no optimizer state (--no-save-optim)"))
      << plain.output;
  const std::vector<Record> from_weights = records(dir.path("plain.jsonl"));
  ASSERT_EQ(from_weights.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(from_weights[i].loss, resumed[i].loss) << i;
    EXPECT_EQ(from_weights[i].lr, resumed[i].lr) << i;
  }
  // With the optimizer: the straight run, bit for bit.
  train("--load " + full + " --log-json " + dir.path("full.jsonl"));
  const std::vector<Record> whole = records(dir.path("full.jsonl"));
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[1].loss, straight[3].loss);
}

TEST(TrainStateCli, FinetuneTakesTheWeightsFromIterationZero) {
  testing::TestDir dir;
  train("--log-json " + dir.path("straight.jsonl"));
  const std::vector<Record> straight = records(dir.path("straight.jsonl"));
  const std::string saved = save_at_2(dir, "saved");
  const CommandResult r = train("--load " + saved + " --finetune --log-json " + dir.path("tuned.jsonl"));
  EXPECT_TRUE(says(r, "--finetune: the weights of " + saved + " (iteration 2), trained from iteration 0 with a fresh "
                      "optimizer")) << r.output;
  const std::vector<Record> tuned = records(dir.path("tuned.jsonl"));
  ASSERT_EQ(tuned.size(), 4u);  // iterations 1 to 4 again, on the first samples
  EXPECT_EQ(tuned[0].iteration, 1);
  EXPECT_EQ(tuned[0].lr, straight[0].lr);
  EXPECT_LT(tuned[0].loss, straight[0].loss);  // trained weights on the first batch
}

TEST(TrainStateCli, RngSwitchesSayTheyChangeNothing) {
  const CommandResult r = train("--train-iters 3 --no-load-rng --no-save-rng");
  EXPECT_TRUE(says(r, "--no-load-rng, --no-save-rng: no effect: tessel keeps no generator state")) << r.output;
  EXPECT_TRUE(says(train("--train-iters 3 --finetune"), "--finetune: no effect without --load"));
}

TEST(TrainStateCli, DecoupledLrStepsTheEmbeddingAtItsOwnRate) {
  testing::TestDir dir;
  train("--log-json " + dir.path("plain.jsonl"));
  // The same rates by another route: the same run, bit for bit.
  train("--decoupled-lr 3e-3 --decoupled-min-lr 3e-4 --log-json " + dir.path("same.jsonl"));
  const std::vector<Record> plain = records(dir.path("plain.jsonl")), same = records(dir.path("same.jsonl"));
  ASSERT_EQ(plain.size(), same.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i].loss, same[i].loss) << i;
  // Rate 0: the tied embedding keeps its initial values, the layers train.
  ASSERT_EQ(run_tessel("export --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
                       "--seed 1234 --out " + dir.path("initial")).exit_code, 0);
  train("--decoupled-lr 0 --decoupled-min-lr 0 --save-hf " + dir.path("trained"));
  const SafetensorsReader initial(dir.path("initial/model.safetensors")), trained(dir.path("trained/model.safetensors"));
  const auto values = [](const SafetensorsReader& r, const std::string& name) {
    std::vector<float> v(r.tensor(name).numel());
    r.read(name, v.data());
    return v;
  };
  EXPECT_EQ(values(trained, "transformer.wte.weight"), values(initial, "transformer.wte.weight"));
  EXPECT_NE(values(trained, "transformer.wpe.weight"), values(initial, "transformer.wpe.weight"));
  EXPECT_NE(values(trained, "transformer.h.0.mlp.c_fc.weight"), values(initial, "transformer.h.0.mlp.c_fc.weight"));
}

// With documents' ends masked out of the loss the two normalisations differ in the gradient,
// not in the first loss logged (the per-token mean either way, as Megatron logs it).
TEST(TrainStateCli, PerTokenLossChangesTheGradientWhereTokensAreMasked) {
  testing::TestDir dir;
  const std::string corpus = TESSEL_SOURCE_DIR "/data/kjv-genesis-esther.txt";
  ASSERT_EQ(run_tessel("tokenizer train --input " + corpus + " --vocab-size 300 --model-type byte-bpe --output " +
                       dir.path("tok")).exit_code, 0);
  // One document per verse (a blank line after each): an end of document in most samples, and
  // microbatches of one sample, whose counts of masked tokens differ.
  std::ifstream verses(corpus);
  std::string documents;
  for (std::string line; documents.size() < 20000 && std::getline(verses, line);) documents += line + "\n\n";
  const std::string data = "--vocab-size 300 --tokenizer-type HuggingFaceTokenizer --tokenizer-model " +
                           dir.path("tok") + " --eod-mask-loss --micro-batch-size 1 --global-batch-size 8 --data-path " +
                           dir.write("docs.txt", documents) + " ";
  train(data + "--log-json " + dir.path("mean.jsonl"));
  train(data + "--calculate-per-token-loss --log-json " + dir.path("token.jsonl"));
  const std::vector<Record> mean = records(dir.path("mean.jsonl")), token = records(dir.path("token.jsonl"));
  ASSERT_EQ(mean.size(), 4u);
  ASSERT_EQ(token.size(), 4u);
  // Iteration 1 steps at the warmup's rate 0: the first two losses are the same.
  EXPECT_EQ(mean[0].loss, token[0].loss);
  EXPECT_EQ(mean[1].loss, token[1].loss);
  EXPECT_NE(mean[2].loss, token[2].loss);
  EXPECT_NE(mean[3].loss, token[3].loss);
}

}  // namespace
}  // namespace tessel
