// `tessel demo`: the seed's worked examples run for real, on tiny numbers, by two MPI ranks that
// each show what they hold and compute. For learners; every number printed is computed by
// tessel's own kernels, parameter registry, process groups and collectives.
//
//   mpirun -n 2 tessel demo tp-column   seed example 4: a column-parallel linear, all-gathered
//   mpirun -n 2 tessel demo tp-mlp      seed example 6: MLP, column- then row-parallel, all-reduced
//   mpirun -n 2 tessel demo dp          seed example 13: data parallel gradient averaging + SGD
//   mpirun -n 2 tessel demo pp          seed example 7: an activation [4, 4, 8] between two stages
//   mpirun -n 2 tessel demo ep          seed example 10: tokens A, B, C to experts by all-to-all
//   mpirun -n 2 tessel demo cp          seed example 11: 8 positions over CP 2, the K/V ring
//
// Every demo needs exactly 2 ranks; run as one process it stops with a one-line error (exit 1).
// Two ranks simulated inside one process would show no communication at all, which is the point.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace tessel {

class MpiRuntime;

class DemoCommand {
 public:
  // Adds the `demo` subcommand, its demos and their flags to `app`; the flags parse into
  // this object, so it must outlive app.parse().
  explicit DemoCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Runs the chosen demo on this rank; rank 0 prints every rank's lines, in rank order.
  void run(const MpiRuntime& runtime) const;

 private:
  void run_ep(const MpiRuntime& runtime) const;  // checks ep's flags, then runs it

  CLI::App* cmd_;
  CLI::App* tp_column_;
  CLI::App* tp_mlp_;
  CLI::App* dp_;
  CLI::App* pp_;
  CLI::App* ep_;
  CLI::App* cp_;
  // tp-column
  std::string x_ = "1,2,3,4";
  std::string weight_ = "identity";
  // tp-mlp
  int64_t hidden_ = 8;
  int64_t ffn_ = 32;
  int64_t tokens_ = 4;
  // every demo with random values: tp-column (random weight), tp-mlp, pp, ep, cp
  uint64_t seed_ = 1234;
  // dp
  float w_ = 0.5f;
  std::string grads_ = "0.1,0.3";
  float lr_ = 1.0f;
  // ep: each token's first-choice expert (the seed's A → 1, B → 6, C → 3) and experts per token
  std::string route_ = "1,6,3";
  int top_k_ = 2;
  // cp
  int64_t seq_length_ = 8;
};

}  // namespace tessel
