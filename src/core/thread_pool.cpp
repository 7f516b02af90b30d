#include "core/thread_pool.h"

#include <algorithm>
#include <memory>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVSERVE_PAUSE() _mm_pause()
#else
#define KVSERVE_PAUSE() std::this_thread::yield()
#endif

namespace kvserve {

namespace {
// Long enough to cover the gap between back-to-back kernels of one step, short enough not to steal a
// shared core from other processes for long.
constexpr int kSpinIterations = 1 << 12;
std::unique_ptr<ThreadPool> g_pool;
std::once_flag g_once;
int g_requested = 0;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  threads_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
      KVSERVE_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  // A worker may have been descheduled (more runnable threads than cores): spin briefly, then yield the
  // core to it instead of burning our time slice.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      KVSERVE_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  split(n, fn, grain, /*dynamic=*/false);
}

void ThreadPool::parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  split(n, fn, grain, /*dynamic=*/true);
}

void ThreadPool::split(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain, bool dynamic) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  if (n_threads_ == 1 || n_chunks == 1) {
    fn(0, n);
    return;
  }
  const int64_t target = int64_t{n_threads_} * (dynamic ? kPiecesPerThread : 1);
  const int64_t piece = ((n_chunks + target - 1) / target) * grain;
  const int64_t n_pieces = (n + piece - 1) / piece;
  std::atomic<int64_t> next{0};
  run([&](int ti, int) {
    // Static: piece ti belongs to thread ti. Dynamic: the next piece goes to whichever thread asks first.
    for (int64_t p = dynamic ? next.fetch_add(1, std::memory_order_relaxed) : ti; p < n_pieces;
         p = dynamic ? next.fetch_add(1, std::memory_order_relaxed) : n_pieces)
      fn(p * piece, std::min(n, (p + 1) * piece));
  });
}

ThreadPool& ThreadPool::global() {
  std::call_once(g_once, [] {
    int n = g_requested > 0 ? g_requested : static_cast<int>(std::thread::hardware_concurrency());
    g_pool = std::make_unique<ThreadPool>(std::max(1, n));
  });
  return *g_pool;
}

void ThreadPool::set_global_threads(int n) {
  if (g_pool && g_pool->size() == n) return;
  g_requested = n;
  if (g_pool) g_pool = std::make_unique<ThreadPool>(std::max(1, n));
}

}  // namespace kvserve
