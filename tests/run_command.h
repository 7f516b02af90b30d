#pragma once
// Test helper: runs a shell command (usually the built kvserve binary) and captures what it printed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kvserve::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command could not start or did not exit normally
  std::string out;     // stdout
  std::string err;     // stderr (empty unless captured)
};

// stderr goes to a temporary file and into `err` when capture_stderr, else to /dev/null.
inline CommandResult run_command(const std::string& cmd, bool capture_stderr = false) {
  static int calls = 0;
  const std::string err_path =
      capture_stderr ? (std::filesystem::temp_directory_path() /
                        ("kvserve_test_" + std::to_string(::getpid()) + "_" + std::to_string(calls++) + ".err"))
                           .string()
                     : "/dev/null";
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>" + err_path).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (capture_stderr) {
    std::ifstream e(err_path);
    std::stringstream ss;
    ss << e.rdbuf();
    r.err = ss.str();
    std::filesystem::remove(err_path);
  }
  return r;
}

}  // namespace kvserve::test
