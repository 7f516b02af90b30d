#pragma once
// STREAM triad (a[i] = b[i] + s * c[i]) on the compute thread pool, the same kernel as bench_matmul's
// BM_Triad: the memory bandwidth that batch-1 decode, which reads every weight once per token, is bound by.
#include <cstdint>

#include "core/thread_pool.h"

namespace kvserve::bench {

struct TriadResult {
  double best_gb_s = 0;    // fastest repetition, 1e9 bytes/s, counting 3 arrays (2 reads + 1 write)
  double median_gb_s = 0;
  int64_t array_bytes = 0;
  int threads = 0;
};

// n floats per array (default 32M = 128 MiB each, far beyond any cache); one untimed pass first.
TriadResult measure_triad(ThreadPool& pool = ThreadPool::global(), int64_t n = int64_t{32} << 20, int reps = 5);

}  // namespace kvserve::bench
