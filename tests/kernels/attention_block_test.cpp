// Kernel cases: the attention kernels of context parallelism over one block of keys, each key
// visible to a query by their global positions (attention_block_forward / _backward), against
// the double reference with positions (attention.h), and partial results over key blocks merged
// by log-sum-exp (attention_merge) against one call over all keys.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "kernels/harness.h"
#include "tessel/core/error.h"

namespace tessel::testing {
namespace {

// A block case's inputs in a backend's memory.
struct BlockBuffers {
  FloatBuffer q, k, v, dout;
  IntBuffer q_pos, k_pos, key_start;
  BlockBuffers(const Kernels& kernels, const BlockCase& c, const BlockInputs& x)
      : q(kernels, x.q), k(kernels, x.k), v(kernels, x.v), dout(kernels, x.dout),
        q_pos(kernels, c.q_pos), k_pos(kernels, c.k_pos),
        key_start(kernels, c.key_start.empty() ? std::vector<int32_t>{0} : c.key_start),
        documents(!c.key_start.empty()) {}
  const int32_t* starts() const { return documents ? key_start.data() : nullptr; }
  bool documents;
};

// The block kernels, forward then backward with their own out and lse; gradients start from
// `init` (random, padding included), to be added to.
BlockResult<float> run_block_kernels(const Kernels& k, const BlockCase& c, const BlockInputs& x,
                                     const BlockResult<float>& init) {
  const BlockBuffers in(k, c, x);
  FloatBuffer out(k, c.out_size()), lse(k, c.B * c.H * c.Tq);
  FloatBuffer dq(k, init.dq), dk(k, init.dk), dv(k, init.dv);
  k.attention_block_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), c.B,
                            c.Tq, c.Tk, c.H, c.G, c.D, c.q_ld(), c.kv_ld(), c.kv_ld(),
                            in.q_pos.data(), in.k_pos.data(), in.starts(), tessel::DropoutSite{});
  k.attention_block_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                             in.k.data(), in.v.data(), out.data(), lse.data(), c.B, c.Tq, c.Tk,
                             c.H, c.G, c.D, c.q_ld(), c.kv_ld(), c.kv_ld(), in.q_pos.data(),
                             in.k_pos.data(), in.starts(), tessel::DropoutSite{});
  return {out.host(), lse.host(), dq.host(), dk.host(), dv.host()};
}

BlockResult<float> random_gradients(const BlockCase& c, uint64_t stream) {
  return {{},
          {},
          random_vector(c.q_size(), stream, 1.0f),
          random_vector(c.kv_size(), stream + 1, 1.0f),
          random_vector(c.kv_size(), stream + 2, 1.0f)};
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<float>& b) {
  std::vector<double> sum(a);
  for (size_t i = 0; i < b.size(); ++i) sum[i] += b[i];
  return sum;
}

// max relative error of lse over the rows that see keys; infinite where a row sees keys on one
// side only (lse = -inf on the other).
double lse_error(const std::vector<float>& lse, const std::vector<double>& ref) {
  std::vector<float> seen;
  std::vector<double> ref_seen;
  for (size_t i = 0; i < ref.size(); ++i) {
    if ((ref[i] == -INFINITY) != (lse[i] == -INFINITY)) return INFINITY;
    if (ref[i] == -INFINITY) continue;
    seen.push_back(lse[i]);
    ref_seen.push_back(ref[i]);
  }
  return max_relative_error(seen, ref_seen);
}

// The query rows that see no key: exactly out = 0 and lse = -inf there, the reference elsewhere.
void check_block_forward(const BlockCase& c, const BlockResult<float>& run,
                         const BlockResult<double>& ref) {
  EXPECT_LT(lse_error(run.lse, ref.lse), 1e-5);
  EXPECT_LT(max_relative_error(run.out, ref.out), 1e-5);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t t = 0; t < c.Tq; ++t) {
        if (ref.lse[(b * c.H + h) * c.Tq + t] != -INFINITY) continue;
        for (int64_t d = 0; d < c.D; ++d)
          ASSERT_EQ(run.out[(b * c.Tq + t) * c.H * c.D + h * c.D + d], 0.0f) << "row " << t;
      }
}

void check_block_against_reference(const Kernels& k, const BlockCase& c, uint64_t stream) {
  const BlockInputs x = random_block_inputs(c, stream);
  const BlockResult<float> init = random_gradients(c, stream + 10);
  const BlockResult<float> run = run_block_kernels(k, c, x, init);
  const BlockResult<double> ref = block_reference(c, x);
  check_block_forward(c, run, ref);
  EXPECT_LT(max_relative_error(run.dq, plus(ref.dq, init.dq)), 1e-5);
  EXPECT_LT(max_relative_error(run.dk, plus(ref.dk, init.dk)), 1e-5);
  EXPECT_LT(max_relative_error(run.dv, plus(ref.dv, init.dv)), 1e-5);
}

std::vector<int32_t> random_positions(int64_t n, int32_t low, int32_t high, uint64_t stream) {
  std::vector<int32_t> positions(n);
  for (int64_t i = 0; i < n; ++i)
    positions[i] = low + static_cast<int32_t>(random_bits(21, stream, i) % (high - low));
  return positions;
}

// Positions [begin, end) of chunks c0 and c1, as one context-parallel rank holds them.
std::vector<int32_t> chunk_positions(int32_t chunk, int32_t c0, int32_t c1) {
  std::vector<int32_t> positions(2 * chunk);
  std::iota(positions.begin(), positions.begin() + chunk, c0 * chunk);
  std::iota(positions.begin() + chunk, positions.end(), c1 * chunk);
  return positions;
}

// The reference's gradients against central differences of Σ out·dout, on a small case with
// unsorted positions and rows that see no key.
TEST(BlockAttention, ReferenceBackwardMatchesFiniteDifferences) {
  BlockCase c{.B = 1,
              .Tq = 6,
              .Tk = 5,
              .H = 2,
              .G = 1,
              .D = 3,
              .pad = 1,
              .q_pos = {4, 0, 9, 2, 7, 3},
              .k_pos = {3, 8, 1, 6, 2}};
  BlockInputs x = random_block_inputs(c, 30);
  const BlockResult<double> ref = block_reference(c, x);
  auto objective = [&](const BlockInputs& at) {
    const BlockResult<double> r = block_reference(c, at);
    double sum = 0;
    for (size_t i = 0; i < r.out.size(); ++i) sum += r.out[i] * at.dout[i];
    return sum;
  };
  // float inputs: the step is a power of two, so x ± eps is exact
  const float eps = 1.0f / 512;
  for (auto [tensor, grad] : {std::pair{&x.q, &ref.dq}, {&x.k, &ref.dk}, {&x.v, &ref.dv}}) {
    for (size_t i = 0; i < tensor->size(); ++i) {
      const float saved = (*tensor)[i];
      (*tensor)[i] = saved + eps;
      const double up = objective(x);
      (*tensor)[i] = saved - eps;
      const double down = objective(x);
      (*tensor)[i] = saved;
      EXPECT_NEAR((*grad)[i], (up - down) / (2 * eps), 2e-4) << "element " << i;
    }
  }
}

// Unsorted query and key positions; query rows below every key position see nothing.
void arbitrary_positions(const Kernels& k) {
  BlockCase c{.B = 2,
              .Tq = 70,
              .Tk = 45,
              .H = 4,
              .G = 2,
              .D = 8,
              .pad = 3,
              .q_pos = random_positions(70, 0, 40, 20),
              .k_pos = random_positions(45, 5, 60, 21)};
  const int32_t first_key = *std::min_element(c.k_pos.begin(), c.k_pos.end());
  ASSERT_GT(std::count_if(c.q_pos.begin(), c.q_pos.end(), [&](int32_t p) { return p < first_key; }),
            2);
  check_block_against_reference(k, c, 22);
}

// The blocks a context-parallel rank computes: its rows (chunks i and 2·CP−1−i) against each
// rank's keys. Sorted keys; some query blocks see no key, some every key, some a diagonal.
void context_parallel_chunk_pairs(const Kernels& k) {
  const int32_t chunk = 80;  // query blocks of 64 + 16 rows on each side of the position jump
  const int cp = 2;
  for (int q_rank = 0; q_rank < cp; ++q_rank)
    for (int k_rank = 0; k_rank < cp; ++k_rank) {
      BlockCase c{.B = 2,
                  .Tq = 2 * chunk,
                  .Tk = 2 * chunk,
                  .H = 2,
                  .G = 1,
                  .D = 16,
                  .pad = 0,
                  .q_pos = chunk_positions(chunk, q_rank, 2 * cp - 1 - q_rank),
                  .k_pos = chunk_positions(chunk, k_rank, 2 * cp - 1 - k_rank)};
      check_block_against_reference(k, c, 40 + 10 * q_rank + k_rank);
    }
}

void no_visible_key_anywhere(const Kernels& k) {
  BlockCase c{.B = 1,
              .Tq = 20,
              .Tk = 30,
              .H = 2,
              .G = 2,
              .D = 8,
              .pad = 0,
              .q_pos = random_positions(20, 0, 50, 50),
              .k_pos = random_positions(30, 50, 90, 51)};
  check_block_against_reference(k, c, 52);
}

// Positions 0..T-1 (or shifted alike) are attention_forward/backward's causal case, bit for bit.
void causal_positions_equal_causal_kernel(const Kernels& k) {
  AttentionCase a{.B = 2, .T = 150, .H = 4, .G = 2, .D = 16, .causal = true, .fused = true};
  std::vector<float> qkv = random_vector(a.size(), 60, 1.5f);
  std::vector<float> dout = random_vector(a.B * a.T * a.H * a.D, 61, 1.0f);
  KernelRun causal = run_kernels(k, a, qkv, dout, std::vector<float>(a.size(), 0.0f));
  const FloatBuffer d_qkv(k, qkv), d_dout(k, dout);
  for (int32_t shift : {0, 1000}) {
    std::vector<int32_t> positions(a.T);
    std::iota(positions.begin(), positions.end(), shift);
    const IntBuffer d_positions(k, positions);
    FloatBuffer d_out(k, causal.out.size()), d_lse(k, causal.lse.size()), d_grad(k, a.size());
    const float* base = d_qkv.data();
    k.attention_block_forward(d_out.data(), d_lse.data(), base + a.q_off(), base + a.k_off(),
                              base + a.v_off(), a.B, a.T, a.T, a.H, a.G, a.D, a.q_ld(), a.k_ld(),
                              a.v_ld(), d_positions.data(), d_positions.data(), nullptr, tessel::DropoutSite{});
    float* g = d_grad.data();
    k.attention_block_backward(g + a.q_off(), g + a.k_off(), g + a.v_off(), d_dout.data(),
                               base + a.q_off(), base + a.k_off(), base + a.v_off(), d_out.data(),
                               d_lse.data(), a.B, a.T, a.T, a.H, a.G, a.D, a.q_ld(), a.k_ld(),
                               a.v_ld(), d_positions.data(), d_positions.data(), nullptr, tessel::DropoutSite{});
    const std::vector<float> out = d_out.host(), lse = d_lse.host(), grad = d_grad.host();
    EXPECT_EQ(std::memcmp(out.data(), causal.out.data(), out.size() * 4), 0) << "shift " << shift;
    EXPECT_EQ(std::memcmp(lse.data(), causal.lse.data(), lse.size() * 4), 0) << "shift " << shift;
    EXPECT_EQ(std::memcmp(grad.data(), causal.grad.data(), grad.size() * 4), 0)
        << "shift " << shift;
  }
}

// The keys of `c` from row `begin` on, `count` of them, as a case of their own.
BlockCase key_slice(const BlockCase& c, const BlockInputs& x, int64_t begin, int64_t count,
                    BlockInputs* slice) {
  BlockCase part = c;
  part.Tk = count;
  part.k_pos.assign(c.k_pos.begin() + begin, c.k_pos.begin() + begin + count);
  *slice = x;
  slice->k.assign(part.kv_size(), 0.0f);
  slice->v.assign(part.kv_size(), 0.0f);
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t from = (b * c.Tk + begin) * c.kv_ld(), to = b * count * c.kv_ld();
    std::copy_n(x.k.begin() + from, count * c.kv_ld(), slice->k.begin() + to);
    std::copy_n(x.v.begin() + from, count * c.kv_ld(), slice->v.begin() + to);
  }
  return part;
}

// Ring attention's algebra on one process: the keys cut into two blocks, the partial results
// merged by log-sum-exp (in either order) equal one call over all keys and the reference; each
// block's backward with the final out and lse gives its share, and the shares sum to the whole.
void merged_key_blocks_equal_one_call(const Kernels& k) {
  BlockCase c{.B = 2,
              .Tq = 90,
              .Tk = 100,
              .H = 4,
              .G = 2,
              .D = 8,
              .pad = 2,
              .q_pos = random_positions(90, 0, 100, 70),
              .k_pos = random_positions(100, 10, 100, 71)};
  const BlockInputs x = random_block_inputs(c, 72);
  const BlockResult<double> ref = block_reference(c, x);
  const BlockResult<float> zeros{{},
                                 {},
                                 std::vector<float>(c.q_size(), 0.0f),
                                 std::vector<float>(c.kv_size(), 0.0f),
                                 std::vector<float>(c.kv_size(), 0.0f)};
  const BlockResult<float> whole = run_block_kernels(k, c, x, zeros);
  const int64_t split = 37;
  BlockInputs first_x, second_x;
  const BlockCase first = key_slice(c, x, 0, split, &first_x);
  const BlockCase second = key_slice(c, x, split, c.Tk - split, &second_x);
  const BlockBuffers first_in(k, first, first_x), second_in(k, second, second_x);

  FloatBuffer out_first(k, c.out_size()), lse_first(k, c.B * c.H * c.Tq);
  FloatBuffer out_second(k, c.out_size()), lse_second(k, c.B * c.H * c.Tq);
  for (auto [part, in, out, lse] : {std::tuple{&first, &first_in, &out_first, &lse_first},
                                    {&second, &second_in, &out_second, &lse_second}}) {
    k.attention_block_forward(out->data(), lse->data(), in->q.data(), in->k.data(), in->v.data(),
                              c.B, c.Tq, part->Tk, c.H, c.G, c.D, c.q_ld(), c.kv_ld(), c.kv_ld(),
                              in->q_pos.data(), in->k_pos.data(), nullptr, tessel::DropoutSite{});
  }
  const std::vector<float> second_lse = lse_second.host();
  ASSERT_GT(std::count(second_lse.begin(), second_lse.end(), -INFINITY), 0);  // rows to skip
  for (bool first_then_second : {true, false}) {
    FloatBuffer out(k, (first_then_second ? out_first : out_second).host());
    FloatBuffer lse(k, (first_then_second ? lse_first : lse_second).host());
    k.attention_merge(out.data(), lse.data(), (first_then_second ? out_second : out_first).data(),
                      (first_then_second ? lse_second : lse_first).data(), c.B, c.Tq, c.H, c.D);
    BlockResult<float> merged;
    merged.out = out.host();
    merged.lse = lse.host();
    check_block_forward(c, merged, ref);
    EXPECT_LT(max_relative_error(merged.out, {whole.out.begin(), whole.out.end()}), 1e-6);
    EXPECT_LT(lse_error(merged.lse, {whole.lse.begin(), whole.lse.end()}), 1e-6);
  }

  // Backward per block with the whole call's out and lse: dq summed, dk and dv side by side.
  const FloatBuffer whole_out(k, whole.out), whole_lse(k, whole.lse), dout(k, x.dout);
  FloatBuffer d_dq(k, c.q_size());
  std::vector<float> dk(c.kv_size(), 0.0f), dv(c.kv_size(), 0.0f);
  int64_t key_row = 0;
  for (auto [part, in] : {std::pair{&first, &first_in}, {&second, &second_in}}) {
    FloatBuffer d_dk_part(k, part->kv_size()), d_dv_part(k, part->kv_size());
    k.attention_block_backward(d_dq.data(), d_dk_part.data(), d_dv_part.data(), dout.data(),
                               in->q.data(), in->k.data(), in->v.data(), whole_out.data(),
                               whole_lse.data(), c.B, c.Tq, part->Tk, c.H, c.G, c.D, c.q_ld(),
                               c.kv_ld(), c.kv_ld(), in->q_pos.data(), in->k_pos.data(), nullptr, tessel::DropoutSite{});
    const std::vector<float> dk_part = d_dk_part.host(), dv_part = d_dv_part.host();
    for (int64_t b = 0; b < c.B; ++b) {
      const int64_t to = (b * c.Tk + key_row) * c.kv_ld(), from = b * part->Tk * c.kv_ld();
      std::copy_n(dk_part.begin() + from, part->Tk * c.kv_ld(), dk.begin() + to);
      std::copy_n(dv_part.begin() + from, part->Tk * c.kv_ld(), dv.begin() + to);
    }
    key_row += part->Tk;
  }
  const std::vector<float> dq = d_dq.host();
  EXPECT_LT(max_relative_error(dq, {whole.dq.begin(), whole.dq.end()}), 1e-6);
  EXPECT_LT(max_relative_error(dk, {whole.dk.begin(), whole.dk.end()}), 1e-6);
  EXPECT_LT(max_relative_error(dv, {whole.dv.begin(), whole.dv.end()}), 1e-6);
  EXPECT_LT(max_relative_error(dq, ref.dq), 1e-5);
  EXPECT_LT(max_relative_error(dk, ref.dk), 1e-5);
  EXPECT_LT(max_relative_error(dv, ref.dv), 1e-5);
}

// Each row's document's first position (B, T) for documents of the given lengths, batch item b's
// shifted by b so that the items differ.
std::vector<int32_t> document_starts(int64_t B, const std::vector<int32_t>& positions,
                                     const std::vector<int32_t>& lengths) {
  std::vector<int32_t> starts;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t p : positions) {
      int32_t start = 0, end = lengths[b % lengths.size()];
      while (p >= end) start = end, end += lengths[(b + start) % lengths.size()] + 1;
      starts.push_back(start);
    }
  return starts;
}

// Packed documents, causal positions 0..T-1: each row sees its own document's keys only, across
// the 64-row query blocks (documents of 1 token, shorter and longer than a block).
void packed_documents_causal(const Kernels& k) {
  std::vector<int32_t> positions(150);
  std::iota(positions.begin(), positions.end(), 0);
  BlockCase c{.B = 3, .Tq = 150, .Tk = 150, .H = 4, .G = 2, .D = 8, .pad = 1,
              .q_pos = positions, .k_pos = positions,
              .key_start = document_starts(3, positions, {1, 40, 70, 5, 90})};
  check_block_against_reference(k, c, 80);
}

// Packed documents on a context-parallel rank's blocks (its chunks i and 2·CP−1−i against each
// rank's keys) and on unsorted key positions.
void packed_documents_context_parallel(const Kernels& k) {
  const int32_t chunk = 40;
  const int cp = 2;
  for (int q_rank = 0; q_rank < cp; ++q_rank)
    for (int k_rank = 0; k_rank < cp; ++k_rank) {
      const std::vector<int32_t> q_pos = chunk_positions(chunk, q_rank, 2 * cp - 1 - q_rank);
      BlockCase c{.B = 2, .Tq = 2 * chunk, .Tk = 2 * chunk, .H = 2, .G = 1, .D = 8, .pad = 0,
                  .q_pos = q_pos, .k_pos = chunk_positions(chunk, k_rank, 2 * cp - 1 - k_rank),
                  .key_start = document_starts(2, q_pos, {30, 55, 12})};
      check_block_against_reference(k, c, 90 + 10 * q_rank + k_rank);
    }
  BlockCase unsorted{.B = 2, .Tq = 50, .Tk = 60, .H = 2, .G = 2, .D = 8, .pad = 0,
                     .q_pos = random_positions(50, 0, 80, 110),
                     .k_pos = random_positions(60, 0, 80, 111)};
  unsorted.key_start = document_starts(2, unsorted.q_pos, {17, 25});
  check_block_against_reference(k, unsorted, 112);
}

void missing_positions_throw(const Kernels& k) {
  FloatBuffer buf(k, 64);
  IntBuffer positions(k, 2);
  float* p = buf.data();
  EXPECT_THROW(k.attention_block_forward(p, p, p, p, p, 1, 2, 2, 2, 2, 4, 8, 8, 8, nullptr,
                                         positions.data(), nullptr, tessel::DropoutSite{}),
               Error);
  EXPECT_THROW(k.attention_block_backward(p, p, p, p, p, p, p, p, p, 1, 2, 2, 2, 2, 4, 8, 8, 8,
                                          positions.data(), nullptr, nullptr, tessel::DropoutSite{}),
               Error);
}

const std::vector<std::string> kBlock = {"attention_block_forward", "attention_block_backward"};

const bool kRegistered = add_kernel_cases({
    {"attention_block_arbitrary_positions", kBlock, arbitrary_positions},
    {"attention_block_context_parallel_chunk_pairs", kBlock, context_parallel_chunk_pairs},
    {"attention_block_no_visible_key_anywhere", kBlock, no_visible_key_anywhere},
    {"attention_block_packed_documents_causal", kBlock, packed_documents_causal},
    {"attention_block_packed_documents_context_parallel", kBlock,
     packed_documents_context_parallel},
    {"attention_block_causal_positions_equal_causal_kernel",
     {"attention_forward", "attention_backward", "attention_block_forward",
      "attention_block_backward"},
     causal_positions_equal_causal_kernel},
    {"attention_merge_key_blocks_equal_one_call",
     {"attention_block_forward", "attention_block_backward", "attention_merge"},
     merged_key_blocks_equal_one_call},
    {"attention_block_missing_positions_throw", kBlock, missing_positions_throw},
});

}  // namespace
}  // namespace tessel::testing
