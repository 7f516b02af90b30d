#pragma once
// Parts of a batch-1 decode step's parallel work for each thread, following the rates at which the threads
// did theirs in the steps before: a thread that runs slower (its core shared with another tenant, its memory
// farther away) gets less, and the others do not wait for it at the barrier that ends the work. The step's
// attention (AttentionSplit's units) and its matmuls (rows) each keep their own rates. Where a cut falls never
// changes a result: an item's arithmetic is the same on any thread.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvserve {

class RateSplit {
 public:
  // Each thread's part stays within [1 - kMaxSkew, 1 + kMaxSkew] times an equal one: one slow step (a thread
  // descheduled) must not hand a thread nearly everything or nothing.
  static constexpr double kMaxSkew = 0.5;
  // Weight of the newest step in the running rates.
  static constexpr double kRateUpdate = 0.25;

  // n_threads equal parts until rates are measured.
  void resize(int n_threads);
  int threads() const { return static_cast<int>(part_.size()); }
  // Thread t did `work` (in the caller's unit: positions, bytes) in `ns` nanoseconds this step. Each thread
  // writes only its own slot.
  void record(int t, double work, double ns) { spent_[static_cast<std::size_t>(t)] = {work, ns}; }
  // After the step (every thread's record done): each thread's rate, its work over its time, into its running
  // rate, and the parts from those; the records are then cleared. A thread that recorded no work or no time
  // keeps its rate.
  void update();
  // Each thread's part of the work (summing to 1).
  const std::vector<double>& parts() const { return part_; }
  // Sets the running rates (work a nanosecond, one per thread) and the parts from them, as update does.
  void set_rates(const std::vector<double>& rates);

  // Thread t's items of n, [first, last): contiguous, in thread order (the last thread first when
  // `reversed`), together exactly [0, n), each about its part of n (the cuts rounded to the nearest item).
  struct Range {
    int64_t first = 0, last = 0;
  };
  Range range(int64_t n, int t, bool reversed = false) const;

 private:
  // part_ (and cut_) from rate_ (equal until every thread has a rate), clamped by kMaxSkew.
  void parts_from_rates();

  struct alignas(64) Spent {
    double work = 0, ns = 0;
  };
  std::vector<Spent> spent_;
  std::vector<double> rate_;  // 0 until measured
  std::vector<double> part_;
  std::vector<double> cut_;  // cut_[t]: the parts of threads before t (cut_[threads()] is 1)
};

}  // namespace kvserve
