#include "engine/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace kvserve {

NgramProposer::NgramProposer(NgramProposerOptions opts) : opts_(opts) {
  if (opts_.min_n < 1 || opts_.max_n < opts_.min_n)
    fail("n-gram proposer: need 1 <= min_n <= max_n, got min_n {} and max_n {}", opts_.min_n, opts_.max_n);
}

std::vector<int32_t> NgramProposer::propose(std::span<const int32_t> tokens, int k) const {
  const auto len = static_cast<int64_t>(tokens.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(opts_.max_n, len - 1); n >= opts_.min_n; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(len - n));
    // The latest earlier occurrence: starts from len - n - 1 down, so the match ends before the suffix starts
    // overlapping it (a run of one token still matches itself one position back).
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(k, len - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

}  // namespace kvserve
