#include <gtest/gtest.h>

#include "tessel/core/error.h"
#include "tessel/pipeline/stages.h"

namespace tessel {
namespace {

// (first layer, count, embedding, head) of every model chunk.
std::vector<std::tuple<int, int, bool, bool>> describe(const std::vector<ChunkSpec>& chunks) {
  std::vector<std::tuple<int, int, bool, bool>> d;
  for (const ChunkSpec& c : chunks) d.emplace_back(c.first_layer, c.num_layers, c.has_embedding, c.has_head);
  return d;
}

// Seed example 7: 8 layers on PP 2 -> stage 0 layers 1-4, stage 1 layers 5-8.
TEST(Stages, EvenSplit) {
  auto chunks = assign_layers(8, {.pipeline_size = 2});
  EXPECT_EQ(describe(chunks), (std::vector<std::tuple<int, int, bool, bool>>{{0, 4, true, false}, {4, 4, false, true}}));
}

// Seed example 9: 8 layers, PP 2, VPP 2 -> rank 0 holds layers 1-2 and 5-6, rank 1 3-4 and 7-8.
TEST(Stages, VirtualStagesInterleave) {
  auto chunks = assign_layers(8, {.pipeline_size = 2, .virtual_stages = 2});
  const StageOptions vpp2{.pipeline_size = 2, .virtual_stages = 2};
  auto r0 = rank_chunks(chunks, vpp2, 0), r1 = rank_chunks(chunks, vpp2, 1);
  EXPECT_EQ(describe(r0), (std::vector<std::tuple<int, int, bool, bool>>{{0, 2, true, false}, {4, 2, false, false}}));
  EXPECT_EQ(describe(r1), (std::vector<std::tuple<int, int, bool, bool>>{{2, 2, false, false}, {6, 2, false, true}}));
}

// Seed example 12: 60 layers on PP 8 is 7.5 per stage; lighter first and last stages split it.
TEST(Stages, UnevenSplit) {
  auto chunks = assign_layers(60, {.pipeline_size = 8, .first_stage_layers = 6, .last_stage_layers = 6});
  ASSERT_EQ(chunks.size(), 8u);
  EXPECT_EQ(chunks[0].num_layers, 6);
  for (int k = 1; k < 7; ++k) EXPECT_EQ(chunks[k].num_layers, 8);
  EXPECT_EQ(chunks[7].first_layer, 54);
  auto seven = assign_layers(7, {.pipeline_size = 2, .first_stage_layers = 3});
  EXPECT_EQ(describe(seven), (std::vector<std::tuple<int, int, bool, bool>>{{0, 3, true, false}, {3, 4, false, true}}));
}

TEST(Stages, LayoutString) {
  auto chunks = assign_layers(8, {.pipeline_size = 2, .virtual_stages = 2, .layout = "Et|(ttt|)*2tL"});
  std::vector<int> counts;
  for (const ChunkSpec& c : chunks) counts.push_back(c.num_layers);
  EXPECT_EQ(counts, (std::vector<int>{1, 3, 3, 1}));
  EXPECT_TRUE(chunks.front().has_embedding);
  EXPECT_TRUE(chunks.back().has_head);
}

// Megatron's 'm': the MTP layers, after every Transformer layer, with the loss in the last chunk.
TEST(Stages, LayoutWithMtpLayers) {
  auto chunks = assign_layers(4, {.pipeline_size = 2, .virtual_stages = 2, .layout = "Et|(t|)*2tmL", .mtp_layers = 1});
  std::vector<int> counts;
  for (const ChunkSpec& c : chunks) counts.push_back(c.num_layers);
  EXPECT_EQ(counts, (std::vector<int>{1, 1, 1, 1}));
  auto names = [](const std::vector<std::string>& v, const char* rule) {
    for (const std::string& s : v)
      if (s.find(rule) != std::string::npos) return true;
    return false;
  };
  auto v = stage_violations(4, {.pipeline_size = 2, .layout = "Ettt|tL", .mtp_layers = 1});
  EXPECT_TRUE(names(v, "holds 0 MTP layers 'm' but --mtp-num-layers is 1")) << v.size();
  v = stage_violations(4, {.pipeline_size = 2, .layout = "Ett|tmtL", .mtp_layers = 1});
  EXPECT_TRUE(names(v, "every Transformer layer 't' must come before the MTP layers 'm'"));
  v = stage_violations(4, {.pipeline_size = 2, .virtual_stages = 2, .layout = "Et|t|ttm|L", .mtp_layers = 1});
  EXPECT_TRUE(names(v, "standalone MTP stage) are not built"));
  EXPECT_TRUE(stage_violations(4, {.pipeline_size = 2, .layout = "Ett|ttm,L", .mtp_layers = 1}).empty());
}

// Megatron's validate_layer_layout: the layout's first layer is the embedding 'E' and its last the
// loss 'L', each given once; "EEttL" and "EtLt" ran as if they were "EttL".
TEST(Stages, LayoutHasOneEmbeddingFirstAndOneLossLast) {
  auto names = [](const std::string& layout, const std::string& rule, int mtp = 0) {
    for (const std::string& s : stage_violations(4, {.pipeline_size = 2, .layout = layout, .mtp_layers = mtp}))
      if (s.find(rule) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(names("EEtt|ttL", "the embedding 'E' is given 2 times"));
  EXPECT_TRUE(names("Ett|ttLL", "the loss 'L' is given 2 times"));
  EXPECT_TRUE(names("tEt|ttL", "the first layer must be the embedding 'E'"));
  EXPECT_TRUE(names("Ett|tLt", "the last layer must be the loss 'L'"));
  EXPECT_TRUE(names("Ett|ttLm", "the last layer must be the loss 'L'", 1));
  EXPECT_TRUE(stage_violations(4, {.pipeline_size = 2, .layout = "E,tt|tt L"}).empty());
}

// A layout is expanded only within bounds: a repeat or nesting past any model is refused, not run.
TEST(Stages, LayoutExpansionIsBounded) {
  auto one = [](const std::string& layout) {
    auto v = stage_violations(8, {.pipeline_size = 2, .layout = layout});
    return v.empty() ? std::string() : v.front();
  };
  EXPECT_NE(one("Et*4|t*4000000000000000000000L").find("expands past 1000000 entries"), std::string::npos);
  EXPECT_NE(one("E(t*1000)*1001|L").find("expands past 1000000 entries"), std::string::npos);
  EXPECT_NE(one(std::string(100000, '(') + "t").find("nested past 64 deep"), std::string::npos);
  EXPECT_EQ(one("E((((t*4))))|t*4L"), "");
}

// As Megatron's parse_str_to_list, a character that names no layer (or a bracket or repeat that
// does not parse) is the layout's one problem: the rules of its entries are not asked of it.
TEST(Stages, ALayoutThatDoesNotParseIsItsOwnProblem) {
  EXPECT_EQ(stage_violations(4, {.pipeline_size = 2, .layout = "x"}),
            (std::vector<std::string>{"--pipeline-model-parallel-layout: unknown layer 'x' (t, m, E, L)"}));
  EXPECT_EQ(stage_violations(4, {.pipeline_size = 2, .layout = "Ett|ttXX|L"}).size(), 1u);
  std::vector<std::string> errors;
  EXPECT_EQ(layout_stage_count("Et|t*|tL", errors), 0);
  EXPECT_EQ(errors, (std::vector<std::string>{"--pipeline-model-parallel-layout: '*' needs a repeat count"}));
}

TEST(Stages, BadSplitsNameTheRule) {
  EXPECT_NE(stage_violations(7, {.pipeline_size = 2})[0].find("--num-layers 7 is not divisible"), std::string::npos);
  EXPECT_NE(stage_violations(8, {.pipeline_size = 2, .layout = "Ett|tt|tL"})[0].find("PP × VPP is 2"),
            std::string::npos);
  auto v = stage_violations(8, {.pipeline_size = 2, .layout = "tttt|Etttt"});
  EXPECT_GE(v.size(), 2u);  // E outside the first stage, no L in the last
  EXPECT_FALSE(stage_violations(8, {.pipeline_size = 2, .layout = "(tt|L"}).empty());
  EXPECT_THROW(assign_layers(60, {.pipeline_size = 8, .first_stage_layers = 5}), ConfigError);
}

}  // namespace
}  // namespace tessel
