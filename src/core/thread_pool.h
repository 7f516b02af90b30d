#pragma once
// One persistent pool of worker threads for the whole process. Kernels split their work with
// parallel_for; nothing creates threads per operation. Workers spin briefly between jobs (a decode step
// issues hundreds of small jobs back to back) and then sleep on a futex so an idle server costs nothing.
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvserve {

// A non-owning reference to a callable, valid while the callable lives: two pointers. The pool's
// entry points take these instead of std::function, which heap-allocates a lambda capturing more than
// 16 bytes (every matmul's did, once per call) and makes the worker chase one more pointer to reach it.
template <typename Sig>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): a callable converts implicitly, as to std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread (the caller is thread 0) and returns when all
  // are done. Not reentrant: call it from one thread at a time.
  void run(FunctionRef<void(int, int)> fn);

  // Splits [0, n) into at most size() contiguous ranges, each a multiple of `grain` (except the last).
  void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain = 1);

  // Like parallel_for, but [0, n) is cut into about kPiecesPerThread pieces per thread (multiples of
  // `grain`) that threads take in order as they finish the previous one, so a thread slowed down by
  // the host or by its share of the work does not hold the others up. fn may run several times on one
  // thread; which thread runs a piece must not matter to its result.
  void parallel_for_dynamic(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain = 1);
  static constexpr int64_t kPiecesPerThread = 4;

  // Like parallel_for (thread i starts on the i-th contiguous share and walks it front to back, so a
  // streaming kernel keeps one sequential stream per thread), but each share is taken in pieces of
  // whole `chunk`s, half of what is left at a time, and a thread that finishes its own share takes
  // pieces from the back of the others'. The host slowing one core down then costs about a chunk of
  // tail, not the whole difference. Range edges are multiples of `chunk` (a single thread gets the whole
  // range at once); fn's result must not depend on which thread runs it or how the range was cut.
  void parallel_for_balanced(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t chunk);

  // For work cut into several steps inside one run() (a decode step's layer: each thread's share of a
  // matmul, then attention, then the next matmul...): one region instead of a fork/join per step, so the
  // caller's serial work between steps runs on every thread at once and a step ends in a barrier.
  //
  // Waits until every thread of the running job has called barrier() as many times as this one; its
  // writes before are seen by every thread after. Only inside run(), and every thread must call it the
  // same number of times.
  void barrier(int thread_index);
  // parallel_for_balanced's split, called by every thread of the running job with the same n, fn and
  // chunk: together they run fn over [0, n) once. Each thread first claims its own share's front (set
  // up by that thread here), then takes pieces from the back of the others'. Two calls must be
  // separated by a barrier() (a thread still stealing from the earlier one would find the shares empty,
  // never a later call's).
  void balanced_share(int thread_index, int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t chunk);

  // How many times a thread of this pool has slept (on a futex) in barrier() or at the end of run(),
  // waiting for a thread that had no core.
  uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

  // The process-wide pool. Its size is set once by set_global_threads (default: default_compute_threads(),
  // the physical cores the process may use).
  static ThreadPool& global();
  static void set_global_threads(int n);

 private:
  void worker(int index);
  // Counts this thread in sleepers_ and blocks on word until done(word's value). A thread that changes a
  // word others may sleep on notifies it when sleepers_ is not 0.
  template <typename T, typename Done>
  void sleep_until(const std::atomic<T>& word, Done&& done);
  void split(int64_t n, FunctionRef<void(int64_t, int64_t)> fn, int64_t grain, bool dynamic);

  int n_threads_;
  std::vector<std::thread> threads_;
  // The running job, by value in the line the workers wait on (generation_ beside it), so a worker
  // reaches the caller's callable in one step.
  static constexpr auto kNoJob = [](int, int) {};
  FunctionRef<void(int, int)> job_{kNoJob};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // parallel_for_balanced's per-share claim counters, [front chunk, back chunk) packed in one word so a
  // claim from either end is one compare-and-swap; one cache line each so owners do not contend.
  struct alignas(64) ShareClaims {
    std::atomic<uint64_t> range{0};
  };
  std::unique_ptr<ShareClaims[]> claims_;
  // barrier(): how many barriers each thread has passed, one cache line per thread, written only by it.
  struct alignas(64) BarrierCount {
    std::atomic<uint64_t> passed{0};
  };
  std::unique_ptr<BarrierCount[]> barrier_counts_;
  // How many threads sleep in sleep_until (on pending_ or a barrier count). Read on every barrier and job
  // end, written only around a sleep: its line stays in every core's cache.
  alignas(64) std::atomic<int> sleepers_{0};
  // What a thread sleeping in barrier() waits on: bumped by the last thread to arrive when sleepers_ is
  // not 0 (the counts themselves are spun on, one line per thread, but a sleeper would wake for each).
  alignas(64) std::atomic<uint32_t> barrier_wake_{0};
  std::atomic<uint64_t> sleeps_{0};
};

}  // namespace kvserve
