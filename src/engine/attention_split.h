#pragma once
// How a batch-1 decode step splits its attention units over the threads (single_token_step.cpp). Units are
// (partition, KV head), partition-major (unit p * n_kv_heads + h): the cache's address order, since a block
// holds its KV heads side by side. Each thread takes one run of units, cut where the running cost in
// attended positions passes the thread's part; the parts follow the rates (positions a nanosecond) at which
// the threads attended in the steps before (RateSplit). Where each cut falls never changes a result: a
// unit's arithmetic is the same on any thread.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rate_split.h"

namespace kvserve {

class AttentionSplit {
 public:
  // A unit's cost in attended positions: its slots plus a fixed part (its softmax, its partials, the setup)
  // worth about this many.
  static constexpr int64_t kUnitFixedSlots = 16;

  // The shape of one step's units: n_positions positions of context in partitions of part_slots, of which
  // a sliding-window layer attends to those from first_position on (units wholly before it cost nothing).
  struct Units {
    int64_t n_parts = 0, n_kv_heads = 0, n_positions = 0, part_slots = 0, first_position = 0;
    int64_t count() const { return n_parts * n_kv_heads; }
    int64_t cost(int64_t u) const;                    // of unit u
    int64_t cost(int64_t first, int64_t last) const;  // of units [first, last)
  };

  // The threads' parts; each thread records its share's cost and its time attending it.
  RateSplit rates;

  // first[t], t <= rates.threads(): the first unit of thread t's share (first[threads()] = units.count()).
  void split(const Units& units, std::vector<int64_t>& first) const;
};

}  // namespace kvserve
