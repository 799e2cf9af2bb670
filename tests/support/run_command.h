// Runs a shell command for the tests that drive the tessel binary as a user would.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tessel::testing {

struct CommandResult {
  int exit_code;       // the command's, or 128 + the signal that ended it
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// `tessel ARGS`, the binary this build made.
inline CommandResult run_tessel(const std::string& args) {
  return run_command(std::string(TESSEL_BINARY) + " " + args);
}

}  // namespace tessel::testing
