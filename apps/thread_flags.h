// The thread counts: --threads (train, generate, plan, tokenizer train) and preprocess's
// --workers. OpenMP (and SentencePiece's
// trainer) start a thread per count, each with its own stack: libgomp given 100,000 runs out of
// address space and crashes inside its runtime. The count is bounded up front instead, far above
// any one machine's cores.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tessel {

inline constexpr int kMaxThreads = 1024;

// Declares `flag` (--threads, --workers) on `app` into `threads`, a whole number in
// [0, kMaxThreads]; CLI11 refuses another with the flag and the range named.
CLI::Option* add_thread_count_flag(CLI::App& app, const std::string& flag, int& threads,
                                   const std::string& description);

// Refuses an OMP_NUM_THREADS past kMaxThreads (a ConfigError naming it and the bound), for every
// command, before any OpenMP region starts: libgomp starts its thread pool at the environment's
// count wherever a command does not set its own, and crashes the same way as with --threads.
void check_environment_threads();

}  // namespace tessel
