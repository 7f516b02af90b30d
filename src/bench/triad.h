#pragma once
// STREAM triad (a[i] = b[i] + s * c[i]) on the compute thread pool, the same kernel as bench_matmul's
// BM_Triad: the memory bandwidth that batch-1 decode, which reads every weight once per token, is bound by.
#include <cstdint>
#include <memory>

#include "core/cpu_caches.h"
#include "core/thread_pool.h"

namespace kvserve::bench {

struct TriadResult {
  double best_gb_s = 0;  // fastest repetition, 1e9 bytes/s, counting 3 arrays (2 reads + 1 write)
  double median_gb_s = 0;
  int64_t array_bytes = 0;
  int threads = 0;
};

// a[i] = b[i] + 3 * c[i] for i in [begin, end): the triad's kernel (a mul and an add, as the scalar loop).
// On AVX2 cores 32-byte vectors, four a step, so the loop's own issue rate stays out of the figure: the
// plain loop, compiled for the baseline ISA, is GCC's 16-byte SSE loop of 7 instructions, and on the Zen 5
// host with the two vCPUs on different CCDs (a core's own issue rate then bounds its bandwidth) two
// builds of the same code measured ~52 and ~76 GB/s (12 alternating runs each), by where the linker put
// the loop (across a 64-byte line or not). A bound that moved with that would pass decodes it should not.
void triad_range(float* a, const float* b, const float* c, int64_t begin, int64_t end);

// Floats per triad array such that the three arrays together lie beyond the host's last-level caches
// (beyond_caches_bytes), and at least `at_least`.
int64_t triad_floats_beyond_caches(int64_t at_least);

// n floats per array (default: at least 32M = 128 MiB each, and the three beyond the caches); one untimed
// pass first.
TriadResult measure_triad(ThreadPool& pool = ThreadPool::global(),
                          int64_t n = triad_floats_beyond_caches(int64_t{32} << 20), int reps = 5);

// The triad's three arrays, allocated and first touched by the pool's threads once, so that the
// bandwidth can be measured again and again (between decode steps) without page faults each time.
class TriadArrays {
 public:
  TriadArrays(ThreadPool& pool, int64_t n);
  // One untimed pass, then `reps` timed ones.
  TriadResult measure(int reps);

 private:
  ThreadPool& pool_;
  int64_t n_;
  std::unique_ptr<float[]> a_, b_, c_;
};

// Read-only bandwidth: each pool thread reads its share of one buffer as 8 interleaved streams, asking
// for each stream's lines 2 KiB ahead into L2 (on this project's Zen 4 host the fastest of 1-8 streams
// with and without prefetch, ~1.2x a single stream). Batch-1 decode only reads, and a host's read rate
// can sit well below its triad (which also writes): this says how close to the host's reads it gets.
struct ReadResult {
  double best_gb_s = 0;  // fastest repetition, 1e9 bytes/s of bytes read
  double median_gb_s = 0;
  int64_t bytes = 0;  // bytes read per repetition
  int threads = 0;
};

// One thread's share of it: 8 streams of `len` 8-byte words (a multiple of 32) back to back, summed (on AVX2
// cores 32-byte loads, as triad_range).
uint64_t read_streams(const uint64_t* p, int64_t len);

// A buffer of `bytes` (default: at least 512 MiB, and beyond the caches; at least 8 streams of 256 bytes
// per thread); one untimed pass first.
ReadResult measure_read(ThreadPool& pool = ThreadPool::global(),
                        int64_t bytes = beyond_caches_bytes(int64_t{512} << 20), int reps = 5);

// How long the pool's threads 0 and 1 take to pass one cache line back and forth: on this project's Zen 4
// host ~60-80 ns while its two vCPUs share an L3 and ~350 ns while they sit on different CCDs, the
// placement in which it also reads ~1.5x faster (so a decode figure is only comparable within one). Each
// thread's wait yields after a while, so a pool time-shared on one core still finishes (slowly).
struct HandoffResult {
  double round_trip_ns = 0;  // median of the repetitions' means; 0 with one thread
  int64_t round_trips = 0;   // per repetition
  int threads = 0;
};

HandoffResult measure_handoff(ThreadPool& pool = ThreadPool::global(), int64_t round_trips = 20000, int reps = 5);

}  // namespace kvserve::bench
