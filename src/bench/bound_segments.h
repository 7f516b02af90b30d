#pragma once
// Batch-1 decode against the memory-bandwidth bound measured inside the same run. On a host whose
// bandwidth moves within seconds (this project's 2-vCPU VM: its two vCPUs switch between sharing an L3
// and sitting on two CCDs, with triads of 22-58 GB/s, sometimes several times a minute), a triad taken
// before and after a whole decode run may belong to another placement than the run. Here the decode is
// cut into segments of a few steps; before each segment, on the engine thread between two steps, a short
// triad and the core-to-core round trip are measured, so each segment has a bound of its own moment.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "bench/triad.h"
#include "core/thread_pool.h"

namespace kvserve::bench {

struct BoundSegment {
  int steps = 0;                  // decode steps timed
  double seconds = 0;             // their time, without the measurements around them
  int64_t context_first = 0;      // tokens in context when the segment's first step ran
  double triad_before_gb_s = 0;   // best of a short triad right before the segment
  double triad_after_gb_s = 0;    // and right after it
  double round_trip_ns = 0;       // core-to-core round trip right before it (0 with one thread)
  double bytes_per_token = 0;     // weights + K/V at the segment's mean context
  double tokens_per_s() const { return seconds > 0 ? steps / seconds : 0; }
  // Decode tokens/s over the bound: the better of its two triads / bytes read per token.
  double of_bound() const;
};

class BoundProbe {
 public:
  // kv_bytes_per_position: K/V bytes one decode step reads per token in context (all layers).
  // triad_floats: elements per triad array (3 arrays; beyond the caches, short enough to run often).
  BoundProbe(ThreadPool& pool, int segment_steps, uint64_t weight_bytes, uint64_t kv_bytes_per_position,
             int64_t triad_floats = triad_floats_beyond_caches(int64_t{16} << 20));

  // On the engine thread, for the request being measured (one at a time): its prompt length, then each
  // event's new tokens (the first is the prefill's; decode steps follow), then its end.
  void begin_request(int64_t prompt_tokens);
  void on_tokens(int n);
  void on_finished();

  const std::vector<BoundSegment>& segments() const { return segments_; }

 private:
  // Triad (and round trip) now, into last_triad_ / last_round_trip_.
  void measure_between();
  // The open segment's steps ended at `end`: its time and bytes, a measurement as its `after`, stored.
  void close_segment(std::chrono::steady_clock::time_point end);

  ThreadPool& pool_;
  int segment_steps_;
  double weight_bytes_;
  double kv_bytes_per_position_;
  std::unique_ptr<TriadArrays> triad_;
  std::vector<BoundSegment> segments_;
  int64_t context_ = 0;         // tokens in context (prompt + generated)
  bool started_ = false;        // the request's first token (from prefill) has come
  bool open_ = false;           // a segment is being timed
  BoundSegment current_;
  double last_triad_ = 0, last_round_trip_ = 0;
  std::chrono::steady_clock::time_point segment_start_;
};

// Median of the segments' of_bound(); 0 when there are none.
double median_of_bound(const std::vector<BoundSegment>& segments);

}  // namespace kvserve::bench
