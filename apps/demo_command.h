// `tessel demo`: the seed's worked examples run for real, on tiny numbers, by two MPI ranks that
// each show what they hold and compute. For learners; every number printed is computed by
// tessel's own kernels, parameter registry, process groups and collectives.
//
//   mpirun -n 2 tessel demo tp-column   seed example 4: a column-parallel linear, all-gathered
//   mpirun -n 2 tessel demo tp-mlp      seed example 6: MLP, column- then row-parallel, all-reduced
//   mpirun -n 2 tessel demo dp          seed example 13: data parallel gradient averaging + SGD
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
  // Adds the `demo` subcommand, its three demos and their flags to `app`; the flags parse into
  // this object, so it must outlive app.parse().
  explicit DemoCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Runs the chosen demo on this rank; rank 0 prints every rank's lines, in rank order.
  void run(const MpiRuntime& runtime) const;

 private:
  CLI::App* cmd_;
  CLI::App* tp_column_;
  CLI::App* tp_mlp_;
  CLI::App* dp_;
  // tp-column
  std::string x_ = "1,2,3,4";
  std::string weight_ = "identity";
  // tp-mlp
  int64_t hidden_ = 8;
  int64_t ffn_ = 32;
  int64_t tokens_ = 4;
  // tp-column (random weight) and tp-mlp
  uint64_t seed_ = 1234;
  // dp
  float w_ = 0.5f;
  std::string grads_ = "0.1,0.3";
  float lr_ = 1.0f;
};

}  // namespace tessel
