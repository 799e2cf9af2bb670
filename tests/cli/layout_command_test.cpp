// `tessel layout`: the seed's worked examples 1-3, 5-7 and 9-12 as the command prints them, its
// JSON, and its errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "support/run_command.h"
#include "tessel/parallel/layout.h"

namespace {

using Groups = std::vector<std::vector<int>>;
using Result = tessel::testing::CommandResult;

Result run_layout(const std::string& args) { return tessel::testing::run_tessel("layout " + args); }

Result run_ok(const std::string& args) {
  Result r = run_layout(args);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
  return r;
}

// A refused layout: exit 1, every rule broken on the one error line.
Result run_refused(const std::string& args) {
  Result r = run_layout(args);
  EXPECT_EQ(r.exit_code, 1) << args << ": " << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  return r;
}

void expect_contains(const Result& r, const std::string& text) {
  EXPECT_NE(r.output.find(text), std::string::npos) << "missing: " << text << "\n" << r.output;
}

// A line of the group lists or of --rank: the kind's name, spaces, then `rest`.
void expect_line(const Result& r, const std::string& kind, const std::string& rest) {
  std::string escaped;
  for (char ch : rest) {
    if (std::string("()[]{}.*+?^$|\\").find(ch) != std::string::npos) escaped += '\\';
    escaped += ch;
  }
  std::regex line("(^|\n) +" + kind + " +" + escaped);
  EXPECT_TRUE(std::regex_search(r.output, line)) << "no line '" << kind << " " << rest << "' in\n" << r.output;
}

TEST(LayoutCli, SeedExample1GlobalBatch) {
  Result r = run_ok("--world 4 --micro-batch-size 2 --num-microbatches 8");
  expect_contains(r, "global batch = micro batch × DP × microbatches = 2 × 4 × 8 = 64");
  r = run_ok("--world 4 --micro-batch-size 2 --global-batch-size 64");
  expect_contains(r, "global batch = micro batch × DP × microbatches = 2 × 4 × 8 = 64");
  // With TP 2 on 8 ranks, DP is 4 again.
  r = run_ok("--world 8 --tp 2 --micro-batch-size 2 --num-microbatches 8");
  expect_contains(r, "= 2 × 4 × 8 = 64");
}

TEST(LayoutCli, SeedExample2DataParallelSize) {
  Result r = run_ok("--world 16 --tp 2 --pp 4 --cp 1");
  expect_contains(r, "DP = world / (TP × CP × PP) = 16 / (2 × 1 × 4) = 2");
  r = run_ok("--world 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --context-parallel-size 1");
  expect_contains(r, "DP = world / (TP × CP × PP) = 16 / (2 × 1 × 4) = 2");
}

TEST(LayoutCli, SeedExample3BothOrders) {
  Result seed = run_ok("--world 8 --tp 2 --pp 2 --order tp-pp-dp");
  expect_line(seed, "tp", "4 groups of 2: (0,1) (2,3) (4,5) (6,7)");
  expect_line(seed, "pp", "4 groups of 2: (0,2) (1,3) (4,6) (5,7)");
  expect_line(seed, "dp", "4 groups of 2: (0,4) (1,5) (2,6) (3,7)");
  // The table's row for rank 0: its coordinates, then its TP, DP and PP groups.
  expect_contains(seed, "   0 |  0  0  0 | (0,1)     (0,4)     (0,2)\n");
  Result gpu0 = run_ok("--world 8 --tp 2 --pp 2 --order tp-pp-dp --rank 0");
  expect_line(gpu0, "tp", "(0,1) ");
  expect_line(gpu0, "pp", "(0,2) ");
  expect_line(gpu0, "dp", "(0,4) ");
  EXPECT_EQ(gpu0.output.find("groups of"), std::string::npos) << "--rank shows one rank only";

  Result megatron = run_ok("--world 8 --tp 2 --pp 2 --groups all");
  expect_line(megatron, "tp", "4 groups of 2: (0,1) (2,3) (4,5) (6,7)");
  expect_line(megatron, "pp", "4 groups of 2: (0,4) (1,5) (2,6) (3,7)");
  expect_line(megatron, "dp", "4 groups of 2: (0,2) (1,3) (4,6) (5,7)");
  expect_line(megatron, "mp", "2 groups of 4: (0,1,4,5) (2,3,6,7)");
  Result rank0 = run_ok("--world 8 --tp 2 --pp 2 --rank 0");
  expect_line(rank0, "pp", "(0,4) ");
  expect_line(rank0, "dp", "(0,2) ");
}

TEST(LayoutCli, SeedExample5HeadsPerTpRank) {
  Result r = run_ok("--world 2 --tp 2 --num-attention-heads 8");
  expect_contains(r, "attention heads per TP rank: rank 0 heads 0–3, rank 1 heads 4–7");
  r = run_ok("--world 4 --tp 4 --num-attention-heads 64");
  expect_contains(r, "attention heads: 64 / TP 4 = 16 per TP rank");
  expect_contains(r, "rank 0 heads 0–15, rank 1 heads 16–31, rank 2 heads 32–47, rank 3 heads 48–63");
}

TEST(LayoutCli, SeedExample6MlpNeuronsPerTpRank) {
  Result r = run_ok("--world 2 --tp 2 --hidden-size 8 --ffn-hidden-size 32");
  expect_contains(r, "MLP 8 → 32 → 8: 32 / TP 2 = 16 neurons per TP rank");
  expect_contains(r, "MLP neurons per TP rank: rank 0 neurons 0–15, rank 1 neurons 16–31");
  expect_contains(r, "partial sums (8 values per token) are all-reduced");
}

// Seed example 7: 8 layers on PP 2; the stages exchange [4, 4, 8] activations and gradients.
TEST(LayoutCli, SeedExample7PipelineStages) {
  Result r = run_ok("--world 2 --pp 2 --num-layers 8 --micro-batch-size 4 --seq-length 4 --hidden-size 8");
  expect_contains(r, "stage 0: layers 1–4 + embedding\n");
  expect_contains(r, "stage 1: layers 5–8 + final norm, LM head, loss\n");
  expect_contains(r, "stage 0 sends its output activation [micro batch, sequence, hidden] = [4, 4, 8] forward to "
                     "stage 1 and receives its gradient back; stage 1, the last, computes the loss and sends "
                     "nothing forward\n");
  // The last stage sends nothing forward, with more stages and with model chunks too.
  r = run_ok("--world 4 --pp 4 --num-layers 8");
  expect_contains(r, "stages 0–2 each send its output activation");
  expect_contains(r, "stage 3, the last, computes the loss and sends nothing forward\n");
  EXPECT_EQ(r.output.find("each stage sends"), std::string::npos) << r.output;
  r = run_ok("--world 2 --pp 2 --vpp 2 --num-layers 8");
  expect_contains(r, "forward to the next (stage 1's chunk k to stage 0's chunk k+1) and receives its gradient back; "
                     "the last, stage 1's chunk 1, computes the loss");
}

// Seed example 9: 8 layers, PP 2, VPP 2 — each stage holds two chunks, every other piece.
TEST(LayoutCli, SeedExample9VirtualStages) {
  Result r = run_ok("--world 2 --pp 2 --vpp 2 --num-layers 8");
  expect_contains(r, "stage 0: chunk 0 = layers 1–2 + embedding; chunk 1 = layers 5–6\n");
  expect_contains(r, "stage 1: chunk 0 = layers 3–4; chunk 1 = layers 7–8 + final norm, LM head, loss\n");
}

// Seed example 12: 60 layers over PP 8 is 7.5 per stage: refused evenly, accepted with lighter
// first and last stages.
TEST(LayoutCli, SeedExample12UnevenStages) {
  Result bad = run_refused("--world 8 --pp 8 --num-layers 60");
  expect_contains(bad, "--num-layers 60 is not divisible by --pipeline-model-parallel-size 8 (60 / 8 = 7.5 layers "
                       "a stage); splits that work: --decoder-first-pipeline-num-layers 6 "
                       "--decoder-last-pipeline-num-layers 6 (8 layers on each other stage), or "
                       "--pipeline-model-parallel-layout 'E(t*7|)*2(t*8|)*4t*7|t*7L' (7, 7, 8, 8, 8, 8, 7, 7 "
                       "layers a stage)");
  Result r = run_ok("--world 8 --pp 8 --num-layers 60 --decoder-first-pipeline-num-layers 6 "
                    "--decoder-last-pipeline-num-layers 6");
  expect_contains(r, "stage 0: layers 1–6 + embedding\n");
  for (int s = 1; s < 7; ++s)
    expect_contains(r, "stage " + std::to_string(s) + ": layers " + std::to_string(7 + 8 * (s - 1)) + "–" +
                           std::to_string(6 + 8 * s) + "\n");
  expect_contains(r, "stage 7: layers 55–60 + final norm, LM head, loss\n");
  Result layout = run_layout("--world 2 --pp 2 --num-layers 8 --pipeline-model-parallel-layout 'Ett|tttt)L'");
  EXPECT_EQ(layout.exit_code, 1);
  expect_contains(layout, "--pipeline-model-parallel-layout");
}

// Every split a refusal offers is accepted as it is written, with and without model chunks.
TEST(LayoutCli, TheSplitsOfferedForLayersThatDoNotDivideWork) {
  for (const char* sizes : {"--world 8 --pp 8 --num-layers 60", "--world 8 --pp 8 --num-layers 9",
                            "--world 3 --pp 3 --num-layers 7", "--world 2 --pp 2 --num-layers 7",
                            "--world 2 --pp 2 --num-layers 10 --vpp 2", "--world 4 --pp 4 --num-layers 50 --vpp 3"}) {
    const Result bad = run_refused(sizes);
    // A layout string gives the model chunks itself, in place of --vpp.
    const std::string stages = std::regex_replace(std::string(sizes), std::regex(" --vpp \\d+"), "");
    const std::regex offered("(--decoder-first-pipeline-num-layers \\d+ --decoder-last-pipeline-num-layers \\d+)|"
                             "(--pipeline-model-parallel-layout '[^']+')");
    int splits = 0;
    for (auto m = std::sregex_iterator(bad.output.begin(), bad.output.end(), offered); m != std::sregex_iterator();
         ++m, ++splits)
      run_ok(stages + " " + m->str());
    EXPECT_EQ(splits, std::string(sizes).find("--vpp") == std::string::npos ? 2 : 1) << bad.output;
  }
}

// Seed example 10: 8 experts over EP 2, 512 over EP 8.
TEST(LayoutCli, SeedExample10ExpertsPerEpRank) {
  expect_contains(run_ok("--world 2 --ep 2 --num-experts 8"),
                  "experts: 8 / EP 2 = 4 per EP rank: rank 0 experts 0–3, rank 1 experts 4–7\n");
  Result r = run_ok("--world 8 --ep 8 --num-experts 512");
  expect_contains(r, "512 / EP 8 = 64 per EP rank");
  expect_contains(r, "rank 7 experts 448–511\n");
  expect_line(r, "ep", "1 group of 8: (0,1,2,3,4,5,6,7)");
  Result bad = run_layout("--world 8 --ep 8 --num-experts 12");
  EXPECT_EQ(bad.exit_code, 1);
  expect_contains(bad, "--num-experts 12 is not divisible by --expert-model-parallel-size 8");
}

// Seed example 11: sequence 8 over CP 2 — the seed's simple split and Megatron's balanced one.
TEST(LayoutCli, SeedExample11ContextSplit) {
  Result r = run_ok("--world 2 --cp 2 --seq-length 8");
  expect_contains(r, "simple split: rank 0 positions 0–3 (10 pairs), rank 1 positions 4–7 (26 pairs)\n");
  expect_contains(r, "causal attention: position t attends to positions 0…t, t+1 query-key pairs, so later "
                     "positions cost more and the simple split leaves rank 1 the most work\n");
  expect_contains(r, "rank i holding chunks i and 2·CP−1−i = 3−i, an early chunk with a late one\n");
  expect_contains(r, "rank 0 chunks {0,3}: positions [0,1,6,7] (18 pairs)\n");
  expect_contains(r, "rank 1 chunks {1,2}: positions [2,3,4,5] (18 pairs)\n");
  Result bad = run_layout("--world 2 --cp 2 --seq-length 6");
  EXPECT_EQ(bad.exit_code, 1);
  expect_contains(bad, "--seq-length 6");
}

// --groups picks the kinds the table, the lists and --rank show; by default the seed's three.
TEST(LayoutCli, GroupsChooseTheKindsShown) {
  Result r = run_ok("--world 8 --tp 2 --pp 2");
  for (const char* kind : {"tp", "dp", "pp"}) expect_line(r, kind, "4 groups of 2");
  for (const char* kind : {"cp ", "mp ", "tp_dp_cp", "embedding", "etp", "edp"})
    EXPECT_EQ(r.output.find(std::string("\n  ") + kind), std::string::npos) << kind << "\n" << r.output;
  expect_contains(r, "  not shown: cp, dp_cp, tp_cp, mp, tp_dp_cp, embedding, ep, etp, edp, tp_ep (--groups all, or "
                     "name them)\n");
  expect_contains(r, "rank | tp dp pp | tp group  dp group  pp group\n");

  r = run_ok("--world 8 --tp 2 --pp 2 --groups pp,mp");
  expect_line(r, "pp", "4 groups of 2: (0,4) (1,5) (2,6) (3,7)");
  expect_line(r, "mp", "2 groups of 4: (0,1,4,5) (2,3,6,7)");
  expect_contains(r, "rank | pp | pp group  mp group\n");
  EXPECT_EQ(std::regex_search(r.output, std::regex("\n +tp ")), false) << r.output;
  r = run_ok("--world 8 --tp 2 --pp 2 --groups all");
  for (const char* kind : {"tp", "cp", "dp", "dp_cp", "pp", "tp_cp", "mp", "tp_dp_cp", "embedding", "ep", "etp",
                           "edp", "tp_ep"})
    expect_line(r, kind, "");
  EXPECT_EQ(r.output.find("not shown"), std::string::npos);
  r = run_ok("--world 8 --tp 2 --pp 2 --rank 0 --groups dp");
  expect_contains(r, "rank 0: dp 0\n");
  expect_line(r, "dp", "(0,2) ");
  // Expert layers: EP, and EDP where it differs from DP.
  r = run_ok("--world 4 --ep 2");
  for (const char* kind : {"dp", "ep", "edp"}) expect_line(r, kind, "");

  r = run_refused("--world 8 --groups tp,tensor");
  expect_contains(r, "--groups tp,tensor: no group kind 'tensor' (known: tp, cp, dp, dp_cp, pp");
  EXPECT_NE(run_layout("--world 8 --groups tp --json").exit_code, 0);
}

// The seed lists tp-pp-dp's groups; Megatron's default order gives others, and says so.
TEST(LayoutCli, AnOrderOtherThanTheSeedsIsNamed) {
  expect_contains(run_ok("--world 8 --tp 2 --pp 2"),
                  "order tp-cp-ep-dp-pp (Megatron's default) is not the seed's tp-pp-dp (pipeline stages before data "
                  "replicas): rank 0 is in tp (0,1), dp (0,2), pp (0,4) here, and in tp (0,1), dp (0,4), pp (0,2) "
                  "with --order tp-pp-dp\n");
  // Where the seed's order is no valid one (it leaves out CP 2), and where it gives the same groups.
  for (const char* same : {"--world 8 --tp 2 --pp 2 --order tp-pp-dp", "--world 8 --tp 2", "--world 8 --pp 8",
                           "--world 8 --cp 2 --pp 2"}) {
    const Result r = run_ok(same);
    EXPECT_EQ(r.output.find("seed's"), std::string::npos) << same << "\n" << r.output;
  }
}

// A parallelism of size 1 is not described: TP 1 splits no heads and reduces nothing, EP 1 splits
// no experts, PP 1 sends nothing, and a model without experts has no expert grid to explain.
TEST(LayoutCli, ASizeOfOneIsNotDescribed) {
  const Result r = run_ok("--world 4 --cp 2 --pp 2 --seq-length 8 --hidden-size 8 --ffn-hidden-size 32 "
                          "--num-attention-heads 4 --num-experts 8 --num-layers 4");
  for (const char* absent : {"TP 1 splits", "all-reduced", "per TP rank", "EP 1", "expert layers:", "experts:", "edp group"})
    EXPECT_EQ(r.output.find(absent), std::string::npos) << absent << "\n" << r.output;
  expect_contains(r, "context parallel: sequence 8 over CP 2\n");
  expect_contains(r, "stage 1: layers 3–4 + final norm, LM head, loss\n");
  const Result one = run_ok("--world 2 --tp 2 --num-layers 8 --hidden-size 8");
  expect_contains(one, "TP 2 splits the model:\n");
  EXPECT_EQ(one.output.find("pipeline:"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find("sends"), std::string::npos) << one.output;
}

TEST(LayoutCli, JsonIsOneObject) {
  Result r = run_ok("--world 8 --tp 2 --pp 2 --order tp-pp-dp --json");
  nlohmann::json j = nlohmann::json::parse(r.output);  // throws on anything around the object
  EXPECT_EQ(j["world"], 8);
  EXPECT_EQ(j["order"], "tp-pp-dp");
  ASSERT_EQ(j["groups"].size(), static_cast<size_t>(tessel::kNumGroupKinds));
  EXPECT_EQ(j["groups"]["tp"].get<Groups>(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(j["groups"]["pp"].get<Groups>(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(j["groups"]["dp"].get<Groups>(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(j["groups"]["tp_dp_cp"].get<Groups>(), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  for (const char* kind : {"tp", "cp", "dp", "dp_cp", "pp", "tp_cp", "mp", "tp_dp_cp", "embedding", "ep",
                           "etp", "edp", "tp_ep"})
    EXPECT_TRUE(j["groups"].contains(kind)) << kind;
  ASSERT_EQ(j["ranks"].size(), 8u);
  nlohmann::json rank6 = {{"rank", 6}, {"tp", 0}, {"cp", 0}, {"dp", 1}, {"pp", 1},
                          {"ep", 0}, {"etp", 0}, {"edp", 1}};
  EXPECT_EQ(j["ranks"][6], rank6);

  // Expert groups in JSON: world 8, CP 2, PP 2, EP 2.
  j = nlohmann::json::parse(run_ok("--world 8 --cp 2 --pp 2 --ep 2 --json").output);
  EXPECT_EQ(j["groups"]["ep"].get<Groups>(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(j["groups"]["edp"].get<Groups>(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(j["groups"]["dp_cp"].get<Groups>(), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(LayoutCli, BadInputListsEveryRuleOnOneLine) {
  Result r = run_refused("--world 8 --tp 4 --num-attention-heads 6 --micro-batch-size 2 --global-batch-size 6");
  expect_contains(r, "--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4");
  expect_contains(r, "--global-batch-size 6 is not divisible by --micro-batch-size 2 × DP 2 = 4");

  r = run_refused("--world 10 --tp 4 --order tp-pp-xx");
  expect_contains(r, "world size 10 is not divisible by TP × CP × PP");
  expect_contains(r, "unknown axis 'xx'");

  r = run_refused("--world 8 --rank 8");
  expect_contains(r, "--rank 8 is outside the world of 8 ranks");
}

// The global batch the count gives, micro batch × DP × microbatches, is checked before it is
// multiplied: past 2^63 it is refused naming the flags (it wrapped to a negative batch), beside
// the other rules, and the batch rules do not speak of the wrapped product.
TEST(LayoutCli, GlobalBatchPastTwoTo63IsRefusedNamingTheFlags) {
  Result r = run_refused("--world 4 --micro-batch-size 4611686018427387904 --num-microbatches 8 --rank 9");
  expect_contains(r, "--micro-batch-size 4611686018427387904 × DP 4 × --num-microbatches 8 is past 2^63 samples");
  expect_contains(r, "--rank 9 is outside the world of 4 ranks");
  EXPECT_EQ(r.output.find("--global-batch-size"), std::string::npos) << r.output;
  // 2^40 × 2 × 2^22 is 2^63, one past the largest number; a microbatch fewer is a batch.
  r = run_refused("--world 2 --micro-batch-size 1099511627776 --num-microbatches 4194304");
  expect_contains(r, "--micro-batch-size 1099511627776 × DP 2 × --num-microbatches 4194304 is past 2^63 samples");
  r = run_ok("--world 2 --micro-batch-size 1099511627776 --num-microbatches 4194303");
  expect_contains(r, "= 1099511627776 × 2 × 4194303 = 9223369837831520256");
  // A count past the schedules' bound is named by its flag, not as a --global-batch-size not given.
  r = run_refused("--world 2 --micro-batch-size 1 --num-microbatches 2000000000");
  expect_contains(r, "--num-microbatches 2000000000 is past tessel's bound of 4194304");
  EXPECT_EQ(r.output.find("--global-batch-size"), std::string::npos) << r.output;
}

}  // namespace
