#include "core/thread_pool.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/available_cpus.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVSERVE_PAUSE() _mm_pause()
#else
#define KVSERVE_PAUSE() std::this_thread::yield()
#endif

namespace kvserve {

namespace {
// A waiting thread spins (a pause is ~25 ns on Zen 4) before it sleeps on a futex. Spinning costs
// nothing while every thread has a core: the wait is short and a sleep and wake-up would cost more.
// With more runnable threads than cores it is ruinous: the thread being waited for is the one
// without a core, and each wait burns a whole spin before it gets one. (SmolLM2 decode with 3
// threads on 2 cores: 49 tok/s against 238 with 2, when every wait spun 4096 times and then yielded.)
// So each thread keeps its own spin budget: a wait that had to sleep halves it, one that ended while
// spinning doubles it, within [kMinSpin, kMaxSpin]. (Two threads on two cores: ~1 % of waits sleep in
// a SmolLM2 bench run, at start-up and between prefill's jobs.)
constexpr int kMaxSpin = 1 << 12;  // ~100 us: the gap between back-to-back kernels of one step
constexpr int kMinSpin = 1 << 5;
thread_local int t_spin_budget = kMaxSpin;

// Returns once done() holds: spins up to this thread's budget, then calls sleep(), which must block
// until done() holds.
template <typename Done, typename Sleep>
void spin_then_sleep(Done&& done, Sleep&& sleep) {
  const int budget = t_spin_budget;
  for (int spin = 0; spin < budget; ++spin) {
    if (done()) {
      t_spin_budget = std::min(kMaxSpin, budget * 2);
      return;
    }
    KVSERVE_PAUSE();
  }
  sleep();
  t_spin_budget = std::max(kMinSpin, budget / 2);
}

std::unique_ptr<ThreadPool> g_pool;
std::once_flag g_once;
int g_requested = 0;
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)),
      claims_(std::make_unique<ShareClaims[]>(n_threads_)),
      barrier_counts_(std::make_unique<BarrierCount[]>(n_threads_)) {
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
    spin_then_sleep([&] { return generation_.load(std::memory_order_acquire) != seen; },
                    [&] { generation_.wait(seen, std::memory_order_acquire); });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    job_(index, n_threads_);
    // seq_cst, with the load of sleepers_ after it: either the caller sees pending_ reach 0 before it
    // sleeps, or this thread sees the caller counted in sleepers_ (sleep_until).
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && sleepers_.load(std::memory_order_seq_cst) != 0)
      pending_.notify_all();
  }
}

template <typename T, typename Done>
void ThreadPool::sleep_until(const std::atomic<T>& word, Done&& done) {
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  for (T seen = word.load(std::memory_order_seq_cst); !done(seen); seen = word.load(std::memory_order_seq_cst))
    word.wait(seen, std::memory_order_acquire);
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void ThreadPool::run(FunctionRef<void(int, int)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  spin_then_sleep([&] { return pending_.load(std::memory_order_acquire) == 0; },
                  [&] { sleep_until(pending_, [](int left) { return left == 0; }); });
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain) {
  split(n, fn, grain, /*dynamic=*/false);
}

void ThreadPool::parallel_for_dynamic(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain) {
  split(n, fn, grain, /*dynamic=*/true);
}

void ThreadPool::split(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain, bool dynamic) {
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

namespace {

constexpr uint64_t pack_claims(uint32_t front, uint32_t back) { return (uint64_t{back} << 32) | front; }

// Chunks [first, last) of a share, taken by one claim.
struct ChunkSpan {
  int64_t first = 0, last = 0;
  bool empty() const { return first >= last; }
};

// Takes half of what is left of a share (at least one chunk) from its front (the owner) or its back (a
// thread done with its own share): big pieces while much is left keep the claims (and the calls of fn)
// few, one-chunk pieces at the end keep the threads' finishing times within about a chunk. Halves rather
// than quarters: SmolLM2 decode (matmuls of 5-10 chunks, a claim and a call of fn for nearly every
// chunk at a quarter) 1.04x over 6 alternating pairs, 1B Q4_0 batched decode ~1.015x.
ChunkSpan claim_chunks(std::atomic<uint64_t>& range, bool from_front) {
  uint64_t cur = range.load(std::memory_order_relaxed);
  for (;;) {
    const auto front = static_cast<uint32_t>(cur), back = static_cast<uint32_t>(cur >> 32);
    if (front >= back) return {};
    const uint32_t take = std::max<uint32_t>(1, (back - front) / 2);
    const uint64_t next = from_front ? pack_claims(front + take, back) : pack_claims(front, back - take);
    if (range.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      return from_front ? ChunkSpan{front, int64_t{front} + take} : ChunkSpan{int64_t{back} - take, back};
    }
  }
}

template <typename Claims>
void claim_and_run(Claims* claims, int ti, int nt, int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t chunk) {
  auto run_span = [&](ChunkSpan piece) { fn(piece.first * chunk, std::min(n, piece.last * chunk)); };
  for (ChunkSpan p; !(p = claim_chunks(claims[ti].range, /*from_front=*/true)).empty();) run_span(p);
  for (int k = 1; k < nt; ++k) {
    auto& other = claims[(ti + k) % nt].range;
    for (ChunkSpan p; !(p = claim_chunks(other, /*from_front=*/false)).empty();) run_span(p);
  }
}

[[noreturn]] void fail_too_many_chunks(int64_t n_chunks) {
  fail("ThreadPool::balanced_share: {} chunks do not fit the 32-bit claim counters", n_chunks);
}

}  // namespace

void ThreadPool::parallel_for_balanced(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t chunk) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  if (n_threads_ == 1 || n_chunks == 1 || n_chunks > int64_t{UINT32_MAX}) {
    split(n, fn, chunk, /*dynamic=*/false);
    return;
  }
  const int64_t per_thread = (n_chunks + n_threads_ - 1) / n_threads_;
  for (int i = 0; i < n_threads_; ++i) {
    const auto first = static_cast<uint32_t>(std::min(n_chunks, i * per_thread));
    const auto last = static_cast<uint32_t>(std::min(n_chunks, (i + 1) * per_thread));
    claims_[i].range.store(pack_claims(first, last), std::memory_order_relaxed);
  }
  run([&](int ti, int nt) { claim_and_run(claims_.get(), ti, nt, n, fn, chunk); });
}

void ThreadPool::balanced_share(int thread_index, int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t chunk) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  if (n_threads_ == 1) {
    fn(0, n);
    return;
  }
  if (n_chunks > int64_t{UINT32_MAX}) fail_too_many_chunks(n_chunks);
  // The owner sets up its own share: the line stays in its cache, and nothing waits on the caller of
  // run(). A thread that looks before this sees the earlier call's share, which every thread emptied.
  const int64_t per_thread = (n_chunks + n_threads_ - 1) / n_threads_;
  const auto first = static_cast<uint32_t>(std::min(n_chunks, thread_index * per_thread));
  const auto last = static_cast<uint32_t>(std::min(n_chunks, (thread_index + 1) * per_thread));
  claims_[thread_index].range.store(pack_claims(first, last), std::memory_order_relaxed);
  claim_and_run(claims_.get(), thread_index, n_threads_, n, fn, chunk);
}

void ThreadPool::barrier(int thread_index) {
  if (n_threads_ == 1) return;
  const uint64_t target = barrier_counts_[thread_index].passed.load(std::memory_order_relaxed) + 1;
  // seq_cst, with the loads after it: of two threads arriving last at once, at least one sees the other's
  // count, so a sleeper is always woken (sleep_until counts it in sleepers_ before it looks).
  barrier_counts_[thread_index].passed.store(target, std::memory_order_seq_cst);
  const auto all_passed = [&] {
    for (int k = 1; k < n_threads_; ++k) {
      const auto& other = barrier_counts_[(thread_index + k) % n_threads_].passed;
      if (other.load(std::memory_order_seq_cst) < target) return false;
    }
    return true;
  };
  // The last to arrive wakes the sleepers, all at once: one wake-up a barrier, however many threads.
  if (sleepers_.load(std::memory_order_seq_cst) != 0 && all_passed()) {
    barrier_wake_.fetch_add(1, std::memory_order_seq_cst);
    barrier_wake_.notify_all();
  }
  spin_then_sleep(all_passed, [&] { sleep_until(barrier_wake_, [&](uint32_t) { return all_passed(); }); });
}

ThreadPool& ThreadPool::global() {
  std::call_once(g_once, [] {
    const int n = g_requested > 0 ? g_requested : default_compute_threads();
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
