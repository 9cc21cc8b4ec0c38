// Test helper: runs the built flashroll binary and captures its exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace flashroll::testing {

struct CommandResult {
  int exit_code;       // -1 when the process did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs `FLASHROLL_BIN args` through the shell (args are shell words).
inline CommandResult RunFlashroll(const std::string& args) {
  const std::string command = std::string(FLASHROLL_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// RunFlashroll under the short name the CLI tests use.
inline CommandResult Flashroll(const std::string& args) { return RunFlashroll(args); }

}  // namespace flashroll::testing
