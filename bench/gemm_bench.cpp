// gemm_bench: single-precision GEMM speed of oneDNN (the CPU kernel table's gemm, what tessel uses) against
// OpenBLAS's cblas_sgemm, on the matmul shapes of the benchmark models (bench/README.md).
//
// Every linear layer of a training step is three products. With the weight W stored (out, in) as
// Megatron and nn.Linear store it, and N = batch · seq tokens:
//   forward          Y (N, out) = X (N, in) · Wᵀ      NT
//   backward input  dX (N, in)  = dY (N, out) · W     NN
//   backward weight dW (out, in) = dYᵀ · X             TN
// Attention adds, per (sample, head), scores (T, T) = Q · Kᵀ and out (T, D) = P · V.
//
// --b-strides instead times products whose B rows lie a multiple of 2 KiB apart, as they do in a
// training step (a weight gradient's B with 512 features; attention's per-head blocks of a fused
// QKV with 4096 features): oneDNN's sgemm on B as it lies and on the same B at a stride 16 floats
// longer, and tessel's gemm, which copies such a B to another stride on AVX2 (kernels/cpu/gemm.cpp).
//
// OpenBLAS picks its kernels when it loads, from OPENBLAS_CORETYPE if set: run the program once
// with the environment as it is and once with the variable unset to see both (README).
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/kernels.h"

namespace {

// Row-major C (M, N) = op(A) (M, K) · op(B) (K, N).
struct GemmShape {
  std::string model;
  std::string name;
  bool trans_a;
  bool trans_b;
  int64_t M, N, K;
};

struct BenchModel {
  std::string name;
  int64_t vocab, seq, hidden, batch, heads;
};

void add_linear(std::vector<GemmShape>& shapes, const std::string& model, const std::string& name,
                int64_t tokens, int64_t in, int64_t out) {
  shapes.push_back({model, name + " fwd", false, true, tokens, out, in});
  shapes.push_back({model, name + " bwd-in", false, false, tokens, in, out});
  shapes.push_back({model, name + " bwd-w", true, false, out, in, tokens});
}

std::vector<GemmShape> model_shapes(const BenchModel& m) {
  const int64_t tokens = m.batch * m.seq;
  const int64_t C = m.hidden;
  std::vector<GemmShape> shapes;
  add_linear(shapes, m.name, "qkv", tokens, C, 3 * C);
  add_linear(shapes, m.name, "attn-proj", tokens, C, C);
  add_linear(shapes, m.name, "mlp-up", tokens, C, 4 * C);
  add_linear(shapes, m.name, "mlp-down", tokens, 4 * C, C);
  add_linear(shapes, m.name, "lm-head", tokens, C, m.vocab);
  const int64_t D = C / m.heads;
  shapes.push_back({m.name, "attn q·kᵀ (per head)", false, true, m.seq, m.seq, D});
  shapes.push_back({m.name, "attn p·v (per head)", false, false, m.seq, D, m.seq});
  return shapes;
}

using Clock = std::chrono::steady_clock;

// Median seconds of one call, over at least min_reps calls and about min_seconds, after one
// untimed call that warms caches and lets the library set itself up.
template <typename Call>
double median_seconds(Call call, int min_reps, double min_seconds) {
  call();
  std::vector<double> times;
  double total = 0.0;
  while (static_cast<int>(times.size()) < min_reps || (total < min_seconds && times.size() < 200)) {
    const auto start = Clock::now();
    call();
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    times.push_back(t);
    total += t;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct ShapeResult {
  double onednn_gflops;
  double openblas_gflops;
  double max_rel_diff;  // between the two libraries' outputs: a transposition slip shows here
};

ShapeResult run_shape(const GemmShape& s, int min_reps, double min_seconds, std::mt19937& rng) {
  // Stored (rows, cols) of A and B given the transposes; leading dimensions are the cols.
  const int64_t a_rows = s.trans_a ? s.K : s.M, a_cols = s.trans_a ? s.M : s.K;
  const int64_t b_rows = s.trans_b ? s.N : s.K, b_cols = s.trans_b ? s.K : s.N;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> A(a_rows * a_cols), B(b_rows * b_cols);
  std::vector<float> C_dnnl(s.M * s.N), C_blas(s.M * s.N);
  for (float& x : A) x = uniform(rng);
  for (float& x : B) x = uniform(rng);

  const double flops = 2.0 * s.M * s.N * s.K;
  const double t_dnnl = median_seconds(
      [&] {
        tessel::cpu_kernels().gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, A.data(), a_cols, B.data(),
                          b_cols, 0.0f, C_dnnl.data(), s.N);
      },
      min_reps, min_seconds);
  const double t_blas = median_seconds(
      [&] {
        cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                    s.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(s.M),
                    static_cast<int>(s.N), static_cast<int>(s.K), 1.0f, A.data(),
                    static_cast<int>(a_cols), B.data(), static_cast<int>(b_cols), 0.0f,
                    C_blas.data(), static_cast<int>(s.N));
      },
      min_reps, min_seconds);

  double max_rel_diff = 0.0;
  for (size_t i = 0; i < C_dnnl.size(); ++i) {
    const double scale = std::max(1.0, std::abs(static_cast<double>(C_blas[i])));
    max_rel_diff = std::max(max_rel_diff, std::abs(C_dnnl[i] - C_blas[i]) / scale);
  }
  return {flops / t_dnnl * 1e-9, flops / t_blas * 1e-9, max_rel_diff};
}

// A product whose B (K, N) lies with row stride ldb.
struct StridedShape {
  std::string name;
  bool trans_a;
  int64_t M, N, K, ldb;
};

void run_b_strides(int min_reps, double min_seconds) {
  const std::vector<StridedShape> shapes = {
      {"tiny weight grad 128 × 512", true, 128, 512, 1024, 512},
      {"4096-wide attn p·v", false, 64, 128, 64, 3 * 4096},
      {"4096-wide attn dk = dsᵀ·q", true, 64, 128, 64, 3 * 4096},
      {"4096-wide attn dv = pᵀ·dout", true, 128, 128, 64, 4096},
  };
  fmt::print("{:<28} {:>2} {:>5} {:>5} {:>5} {:>6}  {:>10} {:>10} {:>10}\n", "product", "op", "M", "N", "K",
             "ldb", "oneDNN", "ldb + 16", "tessel");
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const StridedShape& s : shapes) {
    const int64_t lda = s.trans_a ? s.M : s.K;
    // 64-byte aligned, as tessel's tensors are: oneDNN's AVX2 kernels are slow only on aligned rows.
    std::vector<float> A(s.M * s.K), B_storage(s.K * (s.ldb + 16) + 16), C(s.M * s.N);
    float* B = B_storage.data() + (64 - reinterpret_cast<uintptr_t>(B_storage.data()) % 64) % 64 / 4;
    for (float& x : A) x = uniform(rng);
    for (int64_t i = 0; i < s.K * (s.ldb + 16); ++i) B[i] = uniform(rng);
    const auto onednn = [&](int64_t ldb) {
      return median_seconds([&] {
        dnnl_sgemm(s.trans_a ? 'T' : 'N', 'N', s.M, s.N, s.K, 1.0f, A.data(), lda, B, ldb, 0.0f,
                   C.data(), s.N);
      }, min_reps, min_seconds);
    };
    const double t_tessel = median_seconds([&] {
      tessel::cpu_kernels().gemm(s.trans_a, false, s.M, s.N, s.K, 1.0f, A.data(), lda, B, s.ldb,
                                 0.0f, C.data(), s.N);
    }, min_reps, min_seconds);
    const double flops = 2.0 * s.M * s.N * s.K * 1e-9;
    fmt::print("{:<28} {:>2} {:>5} {:>5} {:>5} {:>6}  {:>10.1f} {:>10.1f} {:>10.1f}\n", s.name,
               s.trans_a ? "TN" : "NN", s.M, s.N, s.K, s.ldb, flops / onednn(s.ldb), flops / onednn(s.ldb + 16),
               flops / t_tessel);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sgemm speed: oneDNN (tessel's gemm) vs OpenBLAS on the benchmark models' shapes"};
  int threads = 1;
  std::string which = "all";
  int min_reps = 5;
  double min_seconds = 0.3;
  app.add_option("--threads", threads, "threads for both libraries")->check(CLI::PositiveNumber);
  app.add_option("--model", which, "tiny, small or all")
      ->check(CLI::IsMember({"tiny", "small", "all"}));
  app.add_option("--min-reps", min_reps, "timed calls per shape and library, at least")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-seconds", min_seconds, "keep timing a shape until this much time passed");
  bool b_strides = false;
  app.add_flag("--b-strides", b_strides,
               "instead: products whose B rows lie a multiple of 2 KiB apart, oneDNN against tessel's gemm");
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(threads);  // oneDNN's OpenMP pool
  openblas_set_num_threads(threads);
  if (b_strides) {
    fmt::print("threads {}, GFLOP/s, median of >= {} calls\n", threads, min_reps);
    run_b_strides(min_reps, min_seconds);
    return 0;
  }

  // The models of bench/pytorch_train.py's two standard configurations.
  const std::vector<BenchModel> models = {
      {"tiny", 256, 128, 128, 8, 4},    // V256 T128 d128 H4 B8: 1024 tokens
      {"small", 50304, 256, 384, 4, 6}, // V50304 T256 d384 H6 B4: 1024 tokens
  };
  std::vector<GemmShape> shapes;
  for (const BenchModel& m : models) {
    if (which == "all" || which == m.name) {
      std::vector<GemmShape> more = model_shapes(m);
      shapes.insert(shapes.end(), more.begin(), more.end());
    }
  }
  shapes.push_back({"peak", "square 2048", false, false, 2048, 2048, 2048});

  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("threads {}, OpenBLAS core {} (OPENBLAS_CORETYPE={}), median of >= {} calls\n",
             threads, openblas_get_corename(), coretype ? coretype : "unset", min_reps);
  fmt::print("{:<6} {:<22} {:>2} {:>6} {:>6} {:>6}  {:>8} {:>8} {:>6}  {:>8}\n", "model", "product",
             "op", "M", "N", "K", "oneDNN", "OpenBLAS", "ratio", "max diff");
  std::mt19937 rng(1);
  double sum_flops = 0.0, sum_t_dnnl = 0.0, sum_t_blas = 0.0;
  try {
    for (const GemmShape& s : shapes) {
      const ShapeResult r = run_shape(s, min_reps, min_seconds, rng);
      TESSEL_CHECK(r.max_rel_diff < 1e-3, "{} {}: oneDNN and OpenBLAS disagree by {}", s.model,
                   s.name, r.max_rel_diff);
      const std::string op = fmt::format("{}{}", s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N');
      fmt::print("{:<6} {:<22} {:>2} {:>6} {:>6} {:>6}  {:>8.1f} {:>8.1f} {:>6.2f}  {:>8.1e}\n",
                 s.model, s.name, op, s.M, s.N, s.K, r.onednn_gflops, r.openblas_gflops,
                 r.onednn_gflops / r.openblas_gflops, r.max_rel_diff);
      if (s.model != "peak") {
        const double flops = 2.0 * s.M * s.N * s.K;
        sum_flops += flops;
        sum_t_dnnl += flops / (r.onednn_gflops * 1e9);
        sum_t_blas += flops / (r.openblas_gflops * 1e9);
      }
    }
  } catch (const tessel::Error& e) {
    fmt::print(stderr, "gemm_bench: {}\n", e.what());
    return 1;
  }
  // Time-weighted: the GFLOP/s of running every model product once, as a training step does
  // (attention products counted once, not per head).
  fmt::print("all model products, time-weighted GFLOP/s: oneDNN {:.1f}, OpenBLAS {:.1f}\n",
             sum_flops / sum_t_dnnl * 1e-9, sum_flops / sum_t_blas * 1e-9);
  return 0;
}
