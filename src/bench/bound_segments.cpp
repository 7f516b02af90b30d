#include "bench/bound_segments.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace kvserve::bench {

namespace {
// Timed triad repetitions per measurement (after one untimed pass): ~4 x 200 MB, ~20-40 ms here, against
// segments of ~50 ms and more.
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

void BoundProbe::on_tokens(int n) {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    // The prefill's token: the decode steps start after it.
    started_ = true;
    context_ += n;
  } else {
    current_.steps += n;
    context_ += n;
    if (current_.steps < segment_steps_) return;
    current_.seconds = std::chrono::duration<double>(now - segment_start_).count();
  }
  if (open_) {
    const double mean_context = static_cast<double>(current_.context_first) + 0.5 * (current_.steps - 1);
    current_.bytes_per_token = weight_bytes_ + kv_bytes_per_position_ * mean_context;
    measure_between();
    current_.triad_after_gb_s = last_triad_;
    segments_.push_back(current_);
  } else {
    measure_between();
  }
  current_ = BoundSegment{};
  current_.context_first = context_;
  current_.triad_before_gb_s = last_triad_;
  current_.round_trip_ns = last_round_trip_;
  open_ = true;
  segment_start_ = std::chrono::steady_clock::now();
}

void BoundProbe::on_finished() {
  if (open_ && current_.steps > 0) {
    current_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - segment_start_).count();
    const double mean_context = static_cast<double>(current_.context_first) + 0.5 * (current_.steps - 1);
    current_.bytes_per_token = weight_bytes_ + kv_bytes_per_position_ * mean_context;
    measure_between();
    current_.triad_after_gb_s = last_triad_;
    segments_.push_back(current_);
  }
  open_ = false;
}

double median_of_bound(const std::vector<BoundSegment>& segments) {
  if (segments.empty()) return 0;
  std::vector<double> r;
  for (const BoundSegment& s : segments) r.push_back(s.of_bound());
  std::sort(r.begin(), r.end());
  return r.size() % 2 ? r[r.size() / 2] : 0.5 * (r[r.size() / 2 - 1] + r[r.size() / 2]);
}

}  // namespace kvserve::bench
