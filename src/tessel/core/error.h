// Errors: one exception type whose message is a single line naming the problem.
// Bad input (flags, files, configs) throws tessel::Error; the CLI prints it and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An error every rank of the job throws at the same point, with the same message (comm.h,
// check_together): rank 0 reports it and every rank exits non-zero, without aborting the job.
class JobError : public Error {
 public:
  using Error::Error;
};

// A configuration that breaks rules (flags, sizes, layout). Every rank of a job finds the same
// ones before any communication, so one rank reports and all exit without aborting the job.
class ConfigError : public JobError {
 public:
  using JobError::JobError;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessel

// TESSEL_CHECK(cond, "format {}", args...): throw tessel::Error with the formatted message.
#define TESSEL_CHECK(cond, ...)        \
  do {                                 \
    if (!(cond)) ::tessel::fail(__VA_ARGS__); \
  } while (0)
