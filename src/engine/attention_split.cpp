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

void AttentionSplit::split(const Units& units, std::vector<int64_t>& first) const {
  const int nt = rates.threads();
  const std::vector<double>& part = rates.parts();
  const int64_t n_units = units.count();
  if (nt < 1) {
    first = {0, n_units};
    return;
  }
  const auto total = static_cast<double>(units.cost(0, n_units));
  first.assign(static_cast<size_t>(nt) + 1, n_units);
  first[0] = 0;
  int64_t run = 0;
  int t = 1;
  double part_end = part[0] * total;
  for (int64_t u = 0; u < n_units && t < nt; ++u) {
    // Unit u goes to the thread whose part holds the middle of its cost.
    const auto twice_middle = static_cast<double>(2 * run + units.cost(u));
    while (t < nt && twice_middle > 2 * part_end) {
      first[static_cast<size_t>(t)] = u;
      part_end += part[static_cast<size_t>(t++)] * total;
    }
    run += units.cost(u);
  }
}

}  // namespace kvserve
