// Kernel cases: LayerNorm and RMSNorm against torch's / Hugging Face's definitions in double.
#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void layernorm(const Kernels& k) {
  const int64_t N = 7, C = 37;  // C not a multiple of the vector width
  const float eps = 1e-5f;
  const Floats inp = random_floats(N * C, 10, 2.0f, 0.5f);
  const Floats weight = random_floats(C, 11, 0.2f, 1.0f), bias = random_floats(C, 12, 0.2f);
  const Floats w = random_floats(N * C, 13);
  const FloatBuffer d_inp(k, inp), d_weight(k, weight), d_bias(k, bias), d_w(k, w);

  FloatBuffer out(k, N * C), mean(k, N), rstd(k, N);
  k.layernorm_forward(out.data(), mean.data(), rstd.data(), d_inp.data(), d_weight.data(),
                      d_bias.data(), N, C, eps);
  const ref::NormResult want =
      ref::layernorm(to_double(inp), to_double(weight), to_double(bias), N, C, eps);
  EXPECT_LT(relative_error(out.host(), want.out), kForwardTolerance);
  EXPECT_LT(relative_error(mean.host(), want.mean), kForwardTolerance);
  EXPECT_LT(relative_error(rstd.host(), want.rstd), kForwardTolerance);

  check_backward(
      k,
      [&](const std::vector<Vec>& in) {
        return ref::layernorm(in[0], in[1], in[2], N, C, eps).out;
      },
      {inp, weight, bias}, to_double(w),
      [&](const std::vector<float*>& g) {
        k.layernorm_backward(g[0], g[1], g[2], d_w.data(), d_inp.data(), d_weight.data(),
                             mean.data(), rstd.data(), N, C);
      });
}

// gain_offset 0: Llama's RMSNorm; 1: the zero-centred (1 + w) norm of Qwen3-Next, whose
// reference is the plain one with the gain 1 + w (and the same gradient in w).
void rmsnorm_with_offset(const Kernels& k, float gain_offset) {
  const int64_t N = 7, C = 37;
  const float eps = 1e-6f;
  const Floats inp = random_floats(N * C, 20, 2.0f, 0.5f);
  const Floats weight = random_floats(C, 21, 0.2f, 1.0f - gain_offset);
  const Floats w = random_floats(N * C, 22);
  const FloatBuffer d_inp(k, inp), d_weight(k, weight), d_w(k, w);
  const auto gain = [&](Vec weight) {
    for (double& x : weight) x += gain_offset;
    return weight;
  };

  FloatBuffer out(k, N * C), rstd(k, N);
  k.rmsnorm_forward(out.data(), rstd.data(), d_inp.data(), d_weight.data(), N, C, eps,
                    gain_offset);
  const ref::NormResult want = ref::rmsnorm(to_double(inp), gain(to_double(weight)), N, C, eps);
  EXPECT_LT(relative_error(out.host(), want.out), kForwardTolerance);
  EXPECT_LT(relative_error(rstd.host(), want.rstd), kForwardTolerance);

  check_backward(
      k,
      [&](const std::vector<Vec>& in) { return ref::rmsnorm(in[0], gain(in[1]), N, C, eps).out; },
      {inp, weight}, to_double(w),
      [&](const std::vector<float*>& g) {
        k.rmsnorm_backward(g[0], g[1], d_w.data(), d_inp.data(), d_weight.data(), rstd.data(), N,
                           C, gain_offset);
      });
}

void rmsnorm(const Kernels& k) { rmsnorm_with_offset(k, 0.0f); }
void zero_centred_rmsnorm(const Kernels& k) { rmsnorm_with_offset(k, 1.0f); }

// dweight/dbias sum over rows split among threads: the result must not change between runs.
void norm_backward_is_deterministic(const Kernels& k) {
  const int64_t N = 301, C = 96;
  const FloatBuffer inp(k, random_floats(N * C, 30)), w(k, random_floats(N * C, 31));
  const FloatBuffer weight(k, random_floats(C, 32, 0.2f, 1.0f)), bias(k, random_floats(C, 33));
  FloatBuffer out(k, N * C), mean(k, N), rstd(k, N);
  k.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                      N, C, 1e-5f);
  FloatBuffer first_dweight(k, C), first_dbias(k, C);
  k.layernorm_backward(nullptr, first_dweight.data(), first_dbias.data(), w.data(), inp.data(),
                       weight.data(), mean.data(), rstd.data(), N, C);
  for (int run = 0; run < 5; ++run) {
    FloatBuffer dweight(k, C), dbias(k, C);
    k.layernorm_backward(nullptr, dweight.data(), dbias.data(), w.data(), inp.data(),
                         weight.data(), mean.data(), rstd.data(), N, C);
    EXPECT_EQ(dweight.host(), first_dweight.host());
    EXPECT_EQ(dbias.host(), first_dbias.host());
  }
}

const bool kRegistered = add_kernel_cases({
    {"layernorm", {"layernorm_forward", "layernorm_backward"}, layernorm},
    {"rmsnorm", {"rmsnorm_forward", "rmsnorm_backward"}, rmsnorm},
    {"zero_centred_rmsnorm", {"rmsnorm_forward", "rmsnorm_backward"}, zero_centred_rmsnorm},
    {"norm_backward_is_deterministic", {"layernorm_backward"}, norm_backward_is_deterministic},
});

}  // namespace
}  // namespace tessel::testing
