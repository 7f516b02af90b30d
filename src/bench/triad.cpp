#include "bench/triad.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/handoff_probe.h"

namespace kvserve::bench {

namespace {

__attribute__((target("avx2"))) void triad_range_avx2(float* a, const float* b, const float* c, int64_t begin,
                                                      int64_t end) {
  const __m256 three = _mm256_set1_ps(3.0f);
  int64_t i = begin;
  for (; i + 32 <= end; i += 32) {
    __m256 r[4];
    for (int u = 0; u < 4; ++u)
      r[u] = _mm256_add_ps(_mm256_loadu_ps(b + i + 8 * u), _mm256_mul_ps(three, _mm256_loadu_ps(c + i + 8 * u)));
    for (int u = 0; u < 4; ++u) _mm256_storeu_ps(a + i + 8 * u, r[u]);
  }
  for (; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
}

}  // namespace

void triad_range(float* a, const float* b, const float* c, int64_t begin, int64_t end) {
  static const bool avx2 = cpu_has_avx2_fma_f16c();
  if (avx2) return triad_range_avx2(a, b, c, begin, end);
  for (int64_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
}

TriadArrays::TriadArrays(ThreadPool& pool, int64_t n) : pool_(pool), n_(n) {
  if (n <= 0) fail("triad: array size must be positive");
  // Uninitialised storage, first touched by the pool's threads (so pages land near them).
  a_.reset(new float[static_cast<size_t>(n)]);
  b_.reset(new float[static_cast<size_t>(n)]);
  c_.reset(new float[static_cast<size_t>(n)]);
  pool_.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) a_[i] = 0.0f, b_[i] = 1.0f, c_[i] = 2.0f;
      },
      4096);
}

TriadResult TriadArrays::measure(int reps) {
  if (reps <= 0) fail("triad: repetitions must be positive");
  std::vector<double> gbs;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.parallel_for(
        n_, [&](int64_t begin, int64_t end) { triad_range(a_.get(), b_.get(), c_.get(), begin, end); }, 4096);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0 && s > 0) gbs.push_back(3.0 * static_cast<double>(n_) * sizeof(float) / s / 1e9);
  }
  // A read of the two input arrays (untimed) leaves the caches holding clean lines, as after reading
  // weights: the last pass's dirty lines would otherwise be written back during whatever runs next (a
  // decode segment timed right after measured up to ~1.1x slower on this host).
  std::vector<float> partial(static_cast<size_t>(pool_.size()), 0.0f);
  pool_.run([&](int ti, int nt) {
    const int64_t per = (n_ + nt - 1) / nt, first = std::min(n_, ti * per), last = std::min(n_, first + per);
    float sum = 0.0f;
    for (int64_t i = first; i < last; i += 16) sum += b_[i] + c_[i];
    partial[static_cast<size_t>(ti)] = sum;
  });
  // Keep the stores and the reads observable.
  volatile float sink = a_[static_cast<size_t>(n_ / 2)];
  for (float p : partial) sink = sink + p;
  (void)sink;
  std::sort(gbs.begin(), gbs.end());
  TriadResult res;
  if (!gbs.empty()) {
    res.best_gb_s = gbs.back();
    res.median_gb_s = gbs[gbs.size() / 2];
  }
  res.array_bytes = n_ * static_cast<int64_t>(sizeof(float));
  res.threads = pool_.size();
  return res;
}

int64_t triad_floats_beyond_caches(int64_t at_least) {
  const int64_t per_array = (beyond_caches_bytes(0) + 3 * static_cast<int64_t>(sizeof(float)) - 1) /
                            (3 * static_cast<int64_t>(sizeof(float)));
  return std::max(at_least, per_array);
}

TriadResult measure_triad(ThreadPool& pool, int64_t n, int reps) {
  if (n <= 0 || reps <= 0) fail("triad: array size and repetitions must be positive");
  TriadArrays arrays(pool, n);
  return arrays.measure(reps);
}

namespace {

constexpr int kReadStreams = 8;
constexpr int64_t kStepWords = 32;         // 256 bytes per stream per step
constexpr int64_t kAheadWords = 2048 / 8;  // prefetch distance

// Stream s's step at word `off` of a thread's share (streams of `len` words back to back), its lines
// kAheadWords on asked for first where the stream goes on that far. Inlined into both loops below.
inline const uint64_t* stream_step(const uint64_t* p, int64_t len, int s, int64_t off) {
  const uint64_t* q = p + s * len + off;
  if (off + kAheadWords < len)
    for (int64_t l = 0; l < kStepWords; l += 8) __builtin_prefetch(q + kAheadWords + l, 0, 2);
  return q;
}

// read_streams on AVX2 cores: each stream's 256-byte step as eight 32-byte loads into eight accumulators,
// for the reason triad_range_avx2 has them (the baseline ISA's 16-byte loop lets a core's issue rate into the
// figure). The same sum: word w of every step goes to lane w % 4 of accumulator w / 4.
__attribute__((target("avx2"))) uint64_t read_streams_avx2(const uint64_t* p, int64_t len) {
  __m256i acc[kStepWords / 4];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  for (int64_t off = 0; off < len; off += kStepWords) {
    for (int s = 0; s < kReadStreams; ++s) {
      const uint64_t* q = stream_step(p, len, s, off);
      for (int64_t v = 0; v < kStepWords / 4; ++v)
        acc[v] = _mm256_add_epi64(acc[v], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 4 * v)));
    }
  }
  __m256i total = acc[0];
  for (int64_t v = 1; v < kStepWords / 4; ++v) total = _mm256_add_epi64(total, acc[v]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

// One thread's share: kReadStreams streams of `len` words each, back to back, walked side by side a step
// at a time; each stream's lines asked for kAheadWords ahead (within the stream).
uint64_t read_streams(const uint64_t* p, int64_t len) {
  static const bool avx2 = cpu_has_avx2_fma_f16c();
  if (avx2) return read_streams_avx2(p, len);
  uint64_t acc[kStepWords] = {};
  for (int64_t off = 0; off < len; off += kStepWords) {
    for (int s = 0; s < kReadStreams; ++s) {
      const uint64_t* q = stream_step(p, len, s, off);
      for (int64_t w = 0; w < kStepWords; ++w) acc[w] += q[w];
    }
  }
  uint64_t sum = 0;
  for (uint64_t a : acc) sum += a;
  return sum;
}

ReadResult measure_read(ThreadPool& pool, int64_t bytes, int reps) {
  const int nt = pool.size();
  const int64_t words = bytes / 8;
  // Each thread's stream length, whole steps.
  const int64_t len = words / nt / kReadStreams / kStepWords * kStepWords;
  if (len <= 0 || reps <= 0)
    fail("read bandwidth: the buffer must hold {} streams of 256 bytes per thread, and repetitions must be positive",
         kReadStreams);
  const int64_t share = len * kReadStreams;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[static_cast<size_t>(share * nt)]);
  // Each thread touches its own share first, so its pages land near it.
  pool.run([&](int ti, int) {
    uint64_t* p = buf.get() + ti * share;
    for (int64_t i = 0; i < share; ++i) p[i] = static_cast<uint64_t>(i);
  });
  std::vector<uint64_t> sums(static_cast<size_t>(nt));
  std::vector<double> gbs;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ti, int) { sums[static_cast<size_t>(ti)] = read_streams(buf.get() + ti * share, len); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) gbs.push_back(s > 0 ? static_cast<double>(share * nt) * 8.0 / s / 1e9 : 0.0);
  }
  // Keep the reads observable.
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  (void)sink;
  std::sort(gbs.begin(), gbs.end());
  ReadResult res;
  res.best_gb_s = gbs.back();
  res.median_gb_s = gbs[gbs.size() / 2];
  res.bytes = share * nt * 8;
  res.threads = nt;
  return res;
}

HandoffResult measure_handoff(ThreadPool& pool, int64_t round_trips, int reps) {
  if (round_trips <= 0 || reps <= 0) fail("core-to-core handoff: round trips and repetitions must be positive");
  HandoffResult res;
  res.threads = pool.size();
  const auto trips = static_cast<int>(std::min<int64_t>(round_trips, INT32_MAX));
  res.round_trips = trips;
  if (pool.size() < 2) return res;
  HandoffProbe probe;
  std::vector<double> ns;
  for (int r = 0; r <= reps; ++r) {
    double mean = 0;
    pool.run([&](int ti, int) {
      const double m = probe.run(ti, 0, 1, trips);
      if (ti == 0) mean = m;
    });
    probe.finish(trips);
    if (r > 0) ns.push_back(mean);
  }
  std::sort(ns.begin(), ns.end());
  res.round_trip_ns = ns[ns.size() / 2];
  return res;
}

}  // namespace kvserve::bench
