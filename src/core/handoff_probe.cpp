#include "core/handoff_probe.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace kvserve {

namespace {

// Spins on `line` until it holds `want`, yielding after a while (a pool sharing one core must let the
// other thread run to make progress).
void wait_for(const std::atomic<int64_t>& line, int64_t want) {
  for (int spin = 0; line.load(std::memory_order_acquire) != want; ++spin)
    if (spin > 4096) std::this_thread::yield();
}

}  // namespace

double HandoffProbe::run(int thread_index, int a, int b, int round_trips, int batches) {
  const int64_t n = static_cast<int64_t>(round_trips) * batches;
  if ((thread_index != a && thread_index != b) || n <= 0) return 0;
  const int64_t base = base_;
  if (thread_index == b) {
    for (int64_t i = 0; i < n; ++i) {
      wait_for(line_.value, base + 2 * i + 1);
      line_.value.store(base + 2 * i + 2, std::memory_order_release);
    }
    return 0;
  }
  double least = 0;
  for (int64_t i = 0; i < n; i += round_trips) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t j = i; j < i + round_trips; ++j) {
      line_.value.store(base + 2 * j + 1, std::memory_order_release);
      wait_for(line_.value, base + 2 * j + 2);
    }
    const double mean =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / round_trips;
    least = i == 0 ? mean : std::min(least, mean);
  }
  return least;
}

}  // namespace kvserve
