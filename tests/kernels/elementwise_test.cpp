// Kernel cases: the elementwise kernels and reductions over flat buffers (scale, the residual sum,
// the sum of squares behind the gradient norm, the token-id range check).
#include <cmath>
#include <cstring>

#include "kernels/harness.h"

namespace tessel::testing {
namespace {

void scale(const Kernels& k) {
  const int64_t n = 1037;
  const Floats x = random_floats(n, 100, 3.0f);
  FloatBuffer d_x(k, x);
  k.scale(d_x.data(), -0.37f, n);
  Vec want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = -0.37 * x[i];
  EXPECT_LT(relative_error(d_x.host(), want), kForwardTolerance);
}

// out = a + b; out may be a (the residual added onto the stream).
void residual(const Kernels& k) {
  const int64_t n = 1037;
  const Floats a = random_floats(n, 101), b = random_floats(n, 102);
  const FloatBuffer d_b(k, b);
  FloatBuffer d_a(k, a), out(k, n, 5.0f);
  Vec want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = double{a[i]} + b[i];
  k.residual_forward(out.data(), d_a.data(), d_b.data(), n);
  EXPECT_LT(relative_error(out.host(), want), kForwardTolerance);
  k.residual_forward(d_a.data(), d_a.data(), d_b.data(), n);
  EXPECT_EQ(d_a.host(), out.host());
}

// Σ x² in double over several of the kernel's 65536-element blocks; the same bits for any thread
// count, and piece by piece (at block boundaries, carrying the sum) as in one call.
void sum_squares(const Kernels& k) {
  const int64_t block = 65536, n = 3 * block + 1234;
  const Floats x = random_floats(n, 103, 2.0f);
  const FloatBuffer d_x(k, x);
  double want = 5.0;
  for (float v : x) want += double{v} * v;
  const double got = k.sum_squares(d_x.data(), n, 5.0);
  EXPECT_NEAR(got, want, 1e-12 * want);

  for (int threads : {1, 3}) {
    ThreadCount scope(threads);
    const double again = k.sum_squares(d_x.data(), n, 5.0);
    EXPECT_EQ(std::memcmp(&again, &got, sizeof got), 0) << threads << " threads";
  }
  const double head = k.sum_squares(d_x.data(), 2 * block, 5.0);
  const double pieces = k.sum_squares(d_x.data() + 2 * block, n - 2 * block, head);
  EXPECT_EQ(std::memcmp(&pieces, &got, sizeof got), 0);
  EXPECT_EQ(k.sum_squares(d_x.data(), 0, 2.5), 2.5);
}

void find_out_of_range(const Kernels& k) {
  const int64_t n = 300;
  Ints ids = random_indices(n, 50, 104);
  IntBuffer d_ids(k, ids);
  EXPECT_EQ(k.find_out_of_range(d_ids.data(), n, 0, 50), -1);
  EXPECT_EQ(k.find_out_of_range(d_ids.data(), 0, 0, 50), -1);
  ids[200] = 50;  // hi is outside
  ids[250] = -1;
  d_ids.set(ids);
  EXPECT_EQ(k.find_out_of_range(d_ids.data(), n, 0, 50), 200);
  ids[123] = -7;  // below lo
  d_ids.set(ids);
  EXPECT_EQ(k.find_out_of_range(d_ids.data(), n, 0, 50), 123);
  EXPECT_EQ(k.find_out_of_range(d_ids.data(), 100, 0, 50), -1);
}

const bool kRegistered = add_kernel_cases({
    {"scale", {"scale"}, scale},
    {"residual", {"residual_forward"}, residual},
    {"sum_squares", {"sum_squares"}, sum_squares},
    {"find_out_of_range", {"find_out_of_range"}, find_out_of_range},
});

}  // namespace
}  // namespace tessel::testing
