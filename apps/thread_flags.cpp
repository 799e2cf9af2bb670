#include "thread_flags.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <string_view>

#include "tessel/core/error.h"

namespace tessel {

CLI::Option* add_thread_count_flag(CLI::App& app, const std::string& flag, int& threads,
                                   const std::string& description) {
  return app.add_option(flag, threads, description)->check(CLI::Range(0, kMaxThreads));
}

void check_environment_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr) return;
  // Refused, not capped, as --threads past the bound is refused: a count past 1024 is a mistake in
  // the job's environment, and running on another count than the one asked for would hide it. It
  // is refused with --threads given too, one rule for every command: those without the flag run
  // OpenMP at the environment's count.
  // The text is read here, not through omp_get_max_threads(): libgomp keeps the count in an
  // unsigned long that an int would wrap. It is a list, one count per nesting level; a text
  // that is no list of whole numbers is libgomp's to warn about and ignore.
  const std::string_view text = env;
  size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && !std::isdigit(static_cast<unsigned char>(text[at]))) ++at;
    size_t end = at;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    const std::string_view digits = text.substr(at, end - at);
    const size_t first = digits.find_first_not_of('0');  // leading zeros: no bigger count
    if (first != std::string_view::npos &&
        (digits.size() - first > 4 || std::stoi(std::string(digits.substr(first))) > kMaxThreads))
      throw ConfigError(fmt::format("OMP_NUM_THREADS={} is past tessel's bound of {} threads (--threads's): "
                                    "OpenMP would start a thread, each with its own stack, per count",
                                    text, kMaxThreads));
    at = end;
  }
}

}  // namespace tessel
