#pragma once
// The core-to-core round trip between two threads of a running ThreadPool job: one cache line, which one
// thread writes and the other answers, as many times as asked. Where the two cores sit (one CCD, two CCDs,
// two sockets) sets it: ~80 ns apart on one Zen 5 CCD, ~400 ns across two, and a VM's vCPUs can move from
// one to the other while a process runs.
#include <atomic>
#include <cstdint>

namespace kvserve {

class HandoffProbe {
 public:
  // Called inside one job by threads a and b (a != b; any other thread returns 0 at once): they hand the line
  // back and forth `round_trips` times in each of `batches` batches. Returns, on thread a, the least batch's
  // mean round trip in nanoseconds (a batch the host interrupted does not count), 0 on the others. After the
  // job, and before the next run, the caller calls finish() with the same counts.
  double run(int thread_index, int a, int b, int round_trips, int batches = 1);
  void finish(int round_trips, int batches = 1) { base_ += 2 * static_cast<int64_t>(round_trips) * batches; }

 private:
  // Values only grow: a run's exchanges go from base_ + 1 to base_ + 2 * round_trips * batches, so a thread
  // that looks early sees the last run's value, never one it waits for.
  struct alignas(64) Line {
    std::atomic<int64_t> value{0};
  };
  Line line_;
  int64_t base_ = 0;
};

}  // namespace kvserve
