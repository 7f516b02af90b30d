#include "core/rate_split.h"

#include <algorithm>
#include <cmath>

namespace kvserve {

void RateSplit::resize(int n_threads) {
  const auto n = static_cast<size_t>(std::max(1, n_threads));
  spent_.assign(n, Spent{});
  rate_.assign(n, 0.0);
  part_.assign(n, 0.0);
  parts_from_rates();
}

void RateSplit::update() {
  // Each record counts once; with none (a step that took another path) the parts stand as they are, and
  // the decode region updates its splits every step.
  bool moved = false;
  for (size_t t = 0; t < rate_.size(); ++t) {
    const Spent s = spent_[t];
    spent_[t] = Spent{};
    if (s.work <= 0 || s.ns <= 0) continue;
    const double rate = s.work / s.ns;
    rate_[t] = rate_[t] > 0 ? (1 - kRateUpdate) * rate_[t] + kRateUpdate * rate : rate;
    moved = true;
  }
  if (moved) parts_from_rates();
}

void RateSplit::set_rates(const std::vector<double>& rates) {
  rate_ = rates;
  rate_.resize(part_.size(), 0.0);
  parts_from_rates();
}

RateSplit::Range RateSplit::range(int64_t n, int t, bool reversed) const {
  const auto at = [&](int i) {
    if (i >= threads()) return n;
    return std::clamp(static_cast<int64_t>(std::llround(static_cast<double>(n) * cut_[static_cast<size_t>(i)])),
                      int64_t{0}, n);
  };
  // Reversed: the same cuts measured from the end.
  if (reversed) return {n - at(t + 1), n - at(t)};
  return {at(t), at(t + 1)};
}

void RateSplit::parts_from_rates() {
  const auto n = static_cast<double>(part_.size());
  const double lo = (1 - kMaxSkew) / n, hi = (1 + kMaxSkew) / n;
  double min_rate = 0;
  bool measured = true;
  for (double r : rate_) {
    measured = measured && r > 0;
    min_rate = min_rate > 0 ? std::min(min_rate, r) : r;
  }
  if (!measured) {
    // Equal parts until every thread has a rate.
    std::fill(part_.begin(), part_.end(), 1.0 / n);
  } else {
    // Parts clamp(rate * s, lo, hi) summing to 1: the sum grows with s from n lo < 1 (s = 0) to n hi > 1
    // (s = hi / min_rate), so bisect for s. Clamping proportional parts and then normalizing them could
    // push a part past its bound again.
    const auto sum_at = [&](double s) {
      double sum = 0;
      for (double r : rate_) sum += std::clamp(r * s, lo, hi);
      return sum;
    };
    double s_lo = 0, s_hi = hi / min_rate;
    for (int i = 0; i < 100 && s_lo < s_hi; ++i) {
      const double mid = 0.5 * (s_lo + s_hi);
      if (mid <= s_lo || mid >= s_hi) break;
      (sum_at(mid) < 1 ? s_lo : s_hi) = mid;
    }
    double sum = 0;
    for (size_t t = 0; t < part_.size(); ++t) sum += part_[t] = std::clamp(rate_[t] * s_hi, lo, hi);
    for (double& p : part_) p /= sum;
  }
  cut_.assign(part_.size() + 1, 0.0);
  for (size_t t = 0; t < part_.size(); ++t) cut_[t + 1] = cut_[t] + part_[t];
  cut_.back() = 1.0;
}

}  // namespace kvserve
