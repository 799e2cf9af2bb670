#include "thread_flags.h"

namespace tessel {

CLI::Option* add_thread_count_flag(CLI::App& app, const std::string& flag, int& threads,
                                   const std::string& description) {
  return app.add_option(flag, threads, description)->check(CLI::Range(0, kMaxThreads));
}

}  // namespace tessel
