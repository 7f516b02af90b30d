#pragma once
// --threads=N for the microbenchmarks: sizes the global pool before anything uses it (one core alone
// against both shows how much of a loss is shared memory or synchronization). Removes the flag from argv
// so Google Benchmark does not see it; returns false (after a message) for a count that is not positive.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/thread_pool.h"

namespace kvserve::bench {

inline bool take_pool_size_flag(int& argc, char** argv, const char* program) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      const int n = std::atoi(arg.c_str() + 10);
      if (n < 1) {
        std::fprintf(stderr, "%s: --threads needs a positive count, got '%s'\n", program, arg.c_str() + 10);
        return false;
      }
      ThreadPool::set_global_threads(n);
      continue;
    }
    argv[kept++] = argv[i];
  }
  argc = kept;
  return true;
}

}  // namespace kvserve::bench
