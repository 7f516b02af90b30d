#include "bench/triad.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/error.h"

namespace kvserve::bench {

TriadResult measure_triad(ThreadPool& pool, int64_t n, int reps) {
  if (n <= 0 || reps <= 0) fail("triad: array size and repetitions must be positive");
  // Uninitialised storage, first touched by the pool's threads (so pages land near them).
  std::unique_ptr<float[]> a(new float[static_cast<size_t>(n)]);
  std::unique_ptr<float[]> b(new float[static_cast<size_t>(n)]);
  std::unique_ptr<float[]> c(new float[static_cast<size_t>(n)]);
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
      },
      4096);
  std::vector<double> gbs;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          float* __restrict pa = a.get();
          const float* __restrict pb = b.get();
          const float* __restrict pc = c.get();
          for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + 3.0f * pc[i];
        },
        4096);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0) gbs.push_back(3.0 * static_cast<double>(n) * sizeof(float) / s / 1e9);
  }
  // Keep the stores observable.
  volatile float sink = a[static_cast<size_t>(n / 2)];
  (void)sink;
  std::sort(gbs.begin(), gbs.end());
  TriadResult res;
  res.best_gb_s = gbs.back();
  res.median_gb_s = gbs[gbs.size() / 2];
  res.array_bytes = n * static_cast<int64_t>(sizeof(float));
  res.threads = pool.size();
  return res;
}

}  // namespace kvserve::bench
