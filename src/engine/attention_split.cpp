#include "engine/attention_split.h"

#include <algorithm>

namespace kvserve {

int64_t AttentionSplit::Units::cost(int64_t u) const {
  // A head's newest partition holds fewer positions than the others, and a window's first ones fewer too.
  const int64_t p = u / n_kv_heads;
  const int64_t slots = std::min((p + 1) * part_slots, n_positions) - std::max(p * part_slots, first_position);
  return slots > 0 ? slots + kUnitFixedSlots : 0;
}

int64_t AttentionSplit::Units::cost(int64_t first, int64_t last) const {
  int64_t c = 0;
  for (int64_t u = first; u < last; ++u) c += cost(u);
  return c;
}

void AttentionSplit::resize(int n_threads) {
  const auto n = static_cast<size_t>(std::max(1, n_threads));
  spent_.assign(n, Spent{});
  rate_.assign(n, 0.0);
  part_.assign(n, 1.0 / static_cast<double>(n));
}

void AttentionSplit::split(const Units& units, std::vector<int64_t>& first) const {
  const int nt = threads();
  const int64_t n_units = units.count();
  const auto total = static_cast<double>(units.cost(0, n_units));
  first.assign(static_cast<size_t>(nt) + 1, n_units);
  first[0] = 0;
  int64_t run = 0;
  int t = 1;
  double part_end = part_[0] * total;
  for (int64_t u = 0; u < n_units && t < nt; ++u) {
    // Unit u goes to the thread whose part holds the middle of its cost.
    const auto twice_middle = static_cast<double>(2 * run + units.cost(u));
    while (t < nt && twice_middle > 2 * part_end) {
      first[static_cast<size_t>(t)] = u;
      part_end += part_[static_cast<size_t>(t++)] * total;
    }
    run += units.cost(u);
  }
}

void AttentionSplit::update(const Units& units, const std::vector<int64_t>& first) {
  for (size_t t = 0; t < rate_.size(); ++t) {
    const auto cost = static_cast<double>(units.cost(first[t], first[t + 1]));
    const double ns = spent_[t].ns;
    // A thread with nothing to do this step measured nothing: its rate stays.
    if (cost <= 0 || ns <= 0) continue;
    const double rate = cost / ns;
    rate_[t] = rate_[t] > 0 ? (1 - kRateUpdate) * rate_[t] + kRateUpdate * rate : rate;
  }
  parts_from_rates();
}

void AttentionSplit::set_rates(const std::vector<double>& rates) {
  rate_ = rates;
  rate_.resize(part_.size(), 0.0);
  parts_from_rates();
}

void AttentionSplit::parts_from_rates() {
  const auto n = static_cast<double>(part_.size());
  double sum = 0;
  for (double r : rate_) {
    // Equal parts until every thread has a rate.
    if (r <= 0) {
      std::fill(part_.begin(), part_.end(), 1.0 / n);
      return;
    }
    sum += r;
  }
  double clamped_sum = 0;
  for (size_t t = 0; t < part_.size(); ++t) {
    part_[t] = std::clamp(rate_[t] / sum, (1 - kMaxSkew) / n, (1 + kMaxSkew) / n);
    clamped_sum += part_[t];
  }
  for (double& p : part_) p /= clamped_sum;
}

}  // namespace kvserve
