// Incremental decoding (infer/decoder.h, TransformerChunk::decode) against the forward of the
// whole sequence, for every family tessel builds: the logits a prefill or a decoding step gives
// (its last position's) equal the full forward's there; greedy generation draws the tokens the
// full-context generation it replaced drew; a prompt longer than one delta-rule chunk (64) is
// prefilled by the chunked rule across chunks and decoding goes on from its final state; a full
// context slides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/infer/decoder.h"
#include "tessel/infer/generate.h"
#include "tessel/model/transformer.h"

namespace tessel {
namespace {

struct Family {
  const char* name;
  ModelConfig (*config)();
  int64_t prompt;  // tokens
};

ModelConfig base(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 48;
  c.seq_length = 48;
  c.vocab_size = 61;
  return c;
}

ModelConfig gpt2() { return base(Arch::GPT2); }

ModelConfig llama_gqa() {
  ModelConfig c = base(Arch::Llama);
  c.num_query_groups = 2;
  return c;
}

ModelConfig qwen3() {
  ModelConfig c = llama_gqa();
  c.qk_layernorm = true;
  return c;
}

// Qwen2-MoE: q/k/v biases, experts routed as its norm_topk_prob false (pre-softmax), a gated
// shared expert; one dense layer besides.
ModelConfig qwen2_moe() {
  ModelConfig c = llama_gqa();
  c.add_qkv_bias = true;
  c.num_layers = 3;
  c.moe.num_experts = 8;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 16;
  c.moe.layer_pattern = {1, 0, 1};
  c.moe.shared_expert_size = 24;
  c.moe.shared_expert_gate = true;
  c.moe.pre_softmax = true;
  return c;
}

// Qwen3-Next: three Gated DeltaNet layers, then gated attention (QK-norm, partial RoPE, its own
// head dim), zero-centred norms, MoE with the gated shared expert in every layer.
ModelConfig qwen3_next() {
  ModelConfig c = llama_gqa();
  c.num_layers = 4;
  c.linear = {.layer_pattern = {1, 1, 1, 0}, .conv_kernel_dim = 4, .key_head_dim = 8, .value_head_dim = 8,
              .num_key_heads = 2, .num_value_heads = 4};
  c.attention_output_gate = true;
  c.qk_layernorm = true;
  c.layernorm_1p = true;
  c.kv_channels = 16;
  c.rotary_percent = 0.25f;
  c.moe.num_experts = 8;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 16;
  c.moe.shared_expert_size = 16;
  c.moe.shared_expert_gate = true;
  return c;
}

// A prompt of 100 tokens: two delta-rule chunks in the prefill.
ModelConfig qwen3_next_long() {
  ModelConfig c = qwen3_next();
  c.seq_length = 160;
  return c;
}

ModelConfig llama_long() {
  ModelConfig c = llama_gqa();
  c.seq_length = 160;
  return c;
}

const Family kFamilies[] = {{"gpt2", gpt2, 9},           {"llama_gqa", llama_gqa, 9},
                            {"qwen3", qwen3, 9},         {"qwen2_moe", qwen2_moe, 9},
                            {"qwen3_next", qwen3_next, 9}, {"qwen3_next_long_prompt", qwen3_next_long, 100},
                            {"llama_long_prompt", llama_long, 100}};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

constexpr int64_t kGenerated = 20;

// A whole model of one process for one sequence, its weights drawn and scaled up from the 0.02
// initialisation (the norms' gains moved off 1) so that the logits are far apart (a spread of
// about 1.5): greedy choices are then no coin-flips of rounding. (Scaled further, the hybrid's
// rounding grows: ×8 gives 1.4e-5 at the rows where the prefill's delta-rule chunks start
// elsewhere than the full forward's, ×4 1.3e-6 at most over all families.)
struct Model {
  ModelConfig cfg;
  ParamRegistry params;
  TransformerChunk chunk;
  int64_t T, V;

  explicit Model(const ModelConfig& c)
      : cfg(c),
        chunk(cpu_kernels(), params, c, {.spec = ChunkSpec{0, c.num_layers, true, true}},
              ChunkGroups::one_process(cpu_kernels())),
        T(c.seq_length),
        V(chunk.vocab_shard_size()) {
    params.finalize();
    chunk.bind(params);
    params.init_values(11);
    for (Param& p : params.params())
      for (int64_t i = 0; i < p.numel(); ++i)
        if (p.init == ParamInit::Normal) p.value[i] *= 4.0f;
        else if (p.init != ParamInit::LogUniform) p.value[i] += 0.2f * random_normal(5, p.offset, i);
  }

  // The logits (rows, V) of the forward of the whole sequence `tokens`, right-padded to T: causal,
  // so position t's depend on tokens 0 … t only.
  std::vector<float> full_forward(const std::vector<int32_t>& tokens, int64_t rows) {
    ChunkActivations acts = chunk.make_activations();
    std::vector<int32_t> padded(T, 0);
    std::copy(tokens.begin(), tokens.end(), padded.begin());
    chunk.forward(acts, {{"tokens", padded.data()}}, nullptr, 0.0f);
    return std::vector<float>(chunk.logits(), chunk.logits() + rows * V);
  }
};

int32_t argmax(const float* logits, int64_t n) {
  return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
}

std::vector<int32_t> prompt_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(random_bits(9, 1, i) % vocab));
  return tokens;
}

// max |a − b| over the logits of positions [0, rows).
double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

class Decoding : public ::testing::TestWithParam<Family> {};

// The prompt in two prefills (the second continues the first's conv history and delta-rule
// state through the chunked rule), then one greedy token per step; the logits of each read's last
// position (all a decode gives) against the full forward's.
TEST_P(Decoding, EachReadsLogitsAreTheFullForwards) {
  Model m(GetParam().config());
  const int64_t P = GetParam().prompt, L = P + kGenerated;
  ASSERT_LE(L, m.T);
  std::vector<int32_t> tokens = prompt_tokens(P, m.cfg.vocab_size);
  ChunkActivations acts = m.chunk.make_activations();
  ChunkDecodeState state = m.chunk.make_decode_state();
  std::vector<float> incremental;  // (reads, V) each read's last position's
  std::vector<int64_t> positions;
  auto read = [&](std::span<const int32_t> piece) {
    m.chunk.decode(acts, state, piece.data(), static_cast<int64_t>(piece.size()));
    incremental.insert(incremental.end(), m.chunk.logits(), m.chunk.logits() + m.V);
    positions.push_back(state.length - 1);
  };
  const int64_t first = P - 4;  // 96 rows of a long prompt: two delta-rule chunks
  read(std::span<const int32_t>(tokens).first(first));
  read(std::span<const int32_t>(tokens).subspan(first));
  while (static_cast<int64_t>(tokens.size()) < L) {
    tokens.push_back(argmax(incremental.data() + incremental.size() - m.V, m.cfg.vocab_size));
    read(std::span<const int32_t>(tokens).last(1));
  }
  EXPECT_EQ(state.length, L);
  const std::vector<float> all = m.full_forward(tokens, L);
  std::vector<float> full;
  for (int64_t p : positions) full.insert(full.end(), all.begin() + p * m.V, all.begin() + (p + 1) * m.V);
  const double diff = max_abs_difference(incremental, full);
  EXPECT_LE(diff, 1e-5) << L << " positions";
  RecordProperty("max_abs_difference", std::to_string(diff));
}

// Greedy generation, incremental, against the loop it replaced: the full forward of the
// right-padded context for every token.
TEST_P(Decoding, GreedyGenerationDrawsTheFullContextGenerationsTokens) {
  Model m(GetParam().config());
  const std::vector<int32_t> prompt = prompt_tokens(GetParam().prompt, m.cfg.vocab_size);
  GenerateOptions o;
  o.temperature = 0;
  o.max_new_tokens = kGenerated;
  std::vector<int32_t> drawn;
  sample_continuation(cpu_kernels(), m.chunk, prompt, m.cfg.vocab_size, o, -1,
                      [&](int32_t token) { drawn.push_back(token); });

  std::vector<int32_t> context = prompt, expected;
  for (int64_t step = 0; step < kGenerated; ++step) {
    const int64_t len = static_cast<int64_t>(context.size());
    const std::vector<float> logits = m.full_forward(context, len);
    const int32_t token = argmax(logits.data() + (len - 1) * m.V, m.cfg.vocab_size);
    context.push_back(token);
    expected.push_back(token);
  }
  EXPECT_EQ(drawn, expected);
}

INSTANTIATE_TEST_SUITE_P(Families, Decoding, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param.name); });

// A full context slides: the tokens that do not fit make the decoder start again from the last
// half of the context, read in one prefill; its logits are then the full forward's of that half.
TEST(Decoder, AFullContextSlidesToItsLastHalf) {
  for (ModelConfig (*config)() : {llama_gqa, qwen3_next}) {
    ModelConfig c = config();
    c.seq_length = 16;
    Model m(c);
    Decoder decoder(cpu_kernels(), m.chunk);
    const std::vector<int32_t> tokens = prompt_tokens(21, c.vocab_size);
    decoder.read(std::span<const int32_t>(tokens).first(16));
    EXPECT_EQ(decoder.context().size(), 16u);
    std::vector<float> last;
    for (size_t i = 16; i < tokens.size(); ++i) last = decoder.read(std::span<const int32_t>(tokens).subspan(i, 1));
    // Token 16 slid to tokens 9 … 16; 17 … 20 followed.
    const std::vector<int32_t> expected(tokens.begin() + 9, tokens.end());
    EXPECT_EQ(decoder.context(), expected);
    const std::vector<float> full = m.full_forward(expected, expected.size());
    const std::vector<float> full_last(full.end() - m.V, full.end());
    EXPECT_LE(max_abs_difference(last, full_last), 1e-5);
    // A prompt longer than the context: its last 16 tokens.
    Decoder fresh(cpu_kernels(), m.chunk);
    fresh.read(tokens);
    EXPECT_EQ(fresh.context(), std::vector<int32_t>(tokens.end() - 16, tokens.end()));
  }
}

// A model built for decoding holds one vocabulary's logits, whatever its context: 151,936 tokens
// at a context of 4,096 held 2.5 GB of logits and as much again for their gradient. Declared
// only: nothing is allocated.
TEST(Decoder, LogitsAreOneRowWhateverTheContext) {
  ModelConfig c = base(Arch::Llama);
  c.vocab_size = 151936;
  c.seq_length = 4096;
  for (const bool decoding : {false, true}) {
    ParamRegistry params;
    const ChunkTensors t = TransformerChunk::declare(
        c, {.spec = ChunkSpec{0, c.num_layers, true, true}, .decoding = decoding}, ChunkPlace{}, params);
    int64_t largest = 0;
    for (const std::vector<DeclaredTensor>* list : {&t.slot, &t.shared, &t.scratch})
      for (const DeclaredTensor& d : *list) largest = std::max(largest, d.bytes);
    const int64_t context_logits = int64_t{4} * c.seq_length * c.padded_vocab(1);
    if (decoding) EXPECT_LT(largest, context_logits / 64) << "a tensor of " << largest << " bytes";
    else EXPECT_GE(largest, context_logits);  // a training build's, for the loss of every position
  }
}

TEST(Decoder, ReadingPastTheContextIsRefused) {
  Model m(llama_gqa());
  ChunkActivations acts = m.chunk.make_activations();
  ChunkDecodeState state = m.chunk.make_decode_state();
  const std::vector<int32_t> tokens = prompt_tokens(m.T + 1, m.cfg.vocab_size);
  m.chunk.decode(acts, state, tokens.data(), m.T);
  EXPECT_THROW(m.chunk.decode(acts, state, tokens.data() + m.T, 1), Error);
}

}  // namespace
}  // namespace tessel
