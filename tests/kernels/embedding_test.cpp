// Kernel cases: the token (and position) embedding lookup and the vocabulary-parallel shard ids.
#include <algorithm>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void embedding(const Kernels& k) {
  const int64_t N = 9, C = 21, vocab = 5, max_pos = 7;  // few tokens: rows repeat
  const Ints tokens = random_indices(N, vocab, 1);
  const Ints positions = random_indices(N, max_pos, 2);
  const Floats wte = random_floats(vocab * C, 3), wpe = random_floats(max_pos * C, 4);
  const Floats w = random_floats(N * C, 5);
  const IntBuffer d_tokens(k, tokens), d_positions(k, positions);
  const FloatBuffer d_wte(k, wte), d_wpe(k, wpe), d_w(k, w);

  FloatBuffer out(k, N * C);
  k.embedding_forward(out.data(), d_tokens.data(), d_positions.data(), d_wte.data(), d_wpe.data(),
                      N, C);
  EXPECT_LT(relative_error(out.host(),
                           ref::embedding(to_double(wte), to_double(wpe), tokens, positions, C)),
            kForwardTolerance);
  check_backward(
      k,
      [&](const std::vector<Vec>& in) {
        return ref::embedding(in[0], in[1], tokens, positions, C);
      },
      {wte, wpe}, to_double(w),
      [&](const std::vector<float*>& g) {
        k.embedding_backward(g[0], g[1], d_w.data(), d_tokens.data(), d_positions.data(), N, C);
      });

  // Without learned positions (Llama): positions may be null.
  k.embedding_forward(out.data(), d_tokens.data(), nullptr, d_wte.data(), nullptr, N, C);
  EXPECT_LT(relative_error(out.host(), ref::embedding(to_double(wte), {}, tokens, positions, C)),
            kForwardTolerance);
  check_backward(
      k, [&](const std::vector<Vec>& in) { return ref::embedding(in[0], {}, tokens, {}, C); },
      {wte}, to_double(w),
      [&](const std::vector<float*>& g) {
        k.embedding_backward(g[0], nullptr, d_w.data(), d_tokens.data(), nullptr, N, C);
      });
}

// A token id of -1 belongs to another tensor-parallel rank: a zero row, no gradient.
void embedding_skips_other_ranks_tokens(const Kernels& k) {
  const int64_t C = 3;
  const FloatBuffer wte(k, {1, 2, 3, 4, 5, 6});
  const IntBuffer tokens(k, {1, -1, 0});
  FloatBuffer out(k, 3 * C, 9.0f), dwte(k, 2 * C);
  k.embedding_forward(out.data(), tokens.data(), nullptr, wte.data(), nullptr, 3, C);
  EXPECT_EQ(out.host(), (Floats{4, 5, 6, 0, 0, 0, 1, 2, 3}));
  const FloatBuffer dout(k, {1, 1, 1, 7, 7, 7, 2, 2, 2});
  k.embedding_backward(dwte.data(), nullptr, dout.data(), tokens.data(), nullptr, 3, C);
  EXPECT_EQ(dwte.host(), (Floats{2, 2, 2, 1, 1, 1}));
}

// Shard [vocab_start, vocab_start + V_valid) of the vocabulary: local ids inside it, -1 outside
// (below, above, and in the padding past V_valid).
void embedding_shard_ids(const Kernels& k) {
  const int64_t N = 200, vocab = 50, vocab_start = 20, V_valid = 13;
  const Ints tokens = random_indices(N, vocab, 6);
  const IntBuffer d_tokens(k, tokens);
  IntBuffer local(k, N, 77);
  k.embedding_shard_ids(local.data(), d_tokens.data(), N, vocab_start, V_valid);
  Ints want(N);
  for (int64_t n = 0; n < N; ++n) {
    const bool mine = tokens[n] >= vocab_start && tokens[n] < vocab_start + V_valid;
    want[n] = mine ? tokens[n] - static_cast<int32_t>(vocab_start) : -1;
  }
  EXPECT_EQ(local.host(), want);
  EXPECT_GT(std::count(want.begin(), want.end(), -1), 0);
  EXPECT_LT(std::count(want.begin(), want.end(), -1), N);
}

const bool kRegistered = add_kernel_cases({
    {"embedding", {"embedding_forward", "embedding_backward"}, embedding},
    {"embedding_skips_other_ranks_tokens", {"embedding_forward", "embedding_backward"},
     embedding_skips_other_ranks_tokens},
    {"embedding_shard_ids", {"embedding_shard_ids"}, embedding_shard_ids},
});

}  // namespace
}  // namespace tessel::testing
