#include "bench/bound_segments.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "bench/bench_metrics.h"
#include "core/error.h"

namespace kvserve::bench {

namespace {
// Timed triad repetitions per measurement (after one untimed pass): 4 passes over at least 192 MB, or four
// times the last-level caches (1.2 GB on the 300 MiB-L3 Xeon VM, ~40 ms a pass there), against segments of
// ~50 ms and more.
constexpr int kTriadReps = 3;
constexpr int64_t kRoundTrips = 2000;
}  // namespace

double BoundSegment::of_bound() const {
  const double triad = std::max(triad_before_gb_s, triad_after_gb_s);
  return triad > 0 ? tokens_per_s() * bytes_per_token / (triad * 1e9) : 0;
}

BoundProbe::BoundProbe(ThreadPool& pool, int segment_steps, uint64_t weight_bytes, uint64_t kv_bytes_per_position,
                       int64_t triad_floats)
    : pool_(pool),
      segment_steps_(segment_steps),
      weight_bytes_(static_cast<double>(weight_bytes)),
      kv_bytes_per_position_(static_cast<double>(kv_bytes_per_position)) {
  if (segment_steps < 1) fail("bench: decode steps per bound segment must be at least 1, got {}", segment_steps);
  triad_ = std::make_unique<TriadArrays>(pool, triad_floats);
}

void BoundProbe::begin_request(int64_t prompt_tokens) {
  context_ = prompt_tokens;
  started_ = false;
  open_ = false;
}

void BoundProbe::measure_between() {
  last_triad_ = triad_->measure(kTriadReps).best_gb_s;
  last_round_trip_ = measure_handoff(pool_, kRoundTrips, 3).round_trip_ns;
}

void BoundProbe::close_segment(std::chrono::steady_clock::time_point end) {
  current_.seconds = std::chrono::duration<double>(end - segment_start_).count();
  const double mean_context = static_cast<double>(current_.context_first) + 0.5 * (current_.steps - 1);
  current_.bytes_per_token = weight_bytes_ + kv_bytes_per_position_ * mean_context;
  measure_between();
  current_.triad_after_gb_s = last_triad_;
  segments_.push_back(current_);
  open_ = false;
}

void BoundProbe::on_tokens(int n) {
  const auto now = std::chrono::steady_clock::now();
  context_ += n;
  if (!started_) {
    // The prefill's token: the decode steps start after it.
    started_ = true;
    measure_between();
  } else {
    current_.steps += n;
    if (current_.steps < segment_steps_) return;
    close_segment(now);
  }
  current_ = BoundSegment{};
  current_.context_first = context_;
  current_.triad_before_gb_s = last_triad_;
  current_.round_trip_ns = last_round_trip_;
  open_ = true;
  segment_start_ = std::chrono::steady_clock::now();
}

void BoundProbe::on_finished() {
  if (open_ && current_.steps > 0) close_segment(std::chrono::steady_clock::now());
  open_ = false;
}

double median_of_bound(const std::vector<BoundSegment>& segments) {
  std::vector<double> r;
  for (const BoundSegment& s : segments) r.push_back(s.of_bound());
  return percentile(std::move(r), 50);
}

}  // namespace kvserve::bench
