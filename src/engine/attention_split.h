#pragma once
// How a batch-1 decode step splits its attention units over the threads (single_token_step.cpp). Units are
// (partition, KV head), partition-major (unit p * n_kv_heads + h): the cache's address order, since a block
// holds its KV heads side by side. Each thread takes one run of units, cut where the running cost in
// attended positions passes the thread's part; the parts follow the rates at which the threads attended
// in the steps before, so a thread that runs slower (its core shared with another tenant, its memory
// farther away) gets less and the others do not wait for it at the barrier. Where each cut falls never
// changes a result: a unit's arithmetic is the same on any thread.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvserve {

class AttentionSplit {
 public:
  // A unit's cost in attended positions: its slots plus a fixed part (its softmax, its partials, the setup)
  // worth about this many.
  static constexpr int64_t kUnitFixedSlots = 16;
  // Each thread's part stays within [1 - kMaxSkew, 1 + kMaxSkew] times an equal one: one slow step (a thread
  // descheduled) must not hand a thread nearly everything or nothing.
  static constexpr double kMaxSkew = 0.5;
  // Weight of the newest step in the running rates.
  static constexpr double kRateUpdate = 0.25;

  // The shape of one step's units: n_positions positions of context in partitions of part_slots, of which
  // a sliding-window layer attends to those from first_position on (units wholly before it cost nothing).
  struct Units {
    int64_t n_parts = 0, n_kv_heads = 0, n_positions = 0, part_slots = 0, first_position = 0;
    int64_t count() const { return n_parts * n_kv_heads; }
    int64_t cost(int64_t u) const;                    // of unit u
    int64_t cost(int64_t first, int64_t last) const;  // of units [first, last)
  };

  // n_threads equal parts until rates are measured.
  void resize(int n_threads);
  int threads() const { return static_cast<int>(part_.size()); }
  // first[t], t <= threads(): the first unit of thread t's share (first[threads()] = units.count()).
  void split(const Units& units, std::vector<int64_t>& first) const;
  // Thread t attended its share of this step in `ns` nanoseconds. Each thread writes only its own slot.
  void record(int t, double ns) { spent_[static_cast<std::size_t>(t)].ns = ns; }
  // After the step (every thread's record done): each thread's rate, its share's cost over its time, into
  // its running rate, and the parts from those.
  void update(const Units& units, const std::vector<int64_t>& first);
  // Each thread's part of the cost (summing to 1).
  const std::vector<double>& parts() const { return part_; }
  // Sets the running rates (positions a nanosecond, one per thread) and the parts from them, as update does.
  void set_rates(const std::vector<double>& rates);

 private:
  // part_ from rate_ (equal until every thread has a rate), clamped by kMaxSkew.
  void parts_from_rates();

  struct alignas(64) Spent {
    double ns = 0;
  };
  std::vector<Spent> spent_;
  std::vector<double> rate_;  // 0 until measured
  std::vector<double> part_;
};

}  // namespace kvserve
