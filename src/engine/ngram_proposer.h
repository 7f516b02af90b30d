#pragma once
// Prompt lookup (n-gram) drafts for speculative decoding: the sequence's last n tokens are looked for
// earlier in it (n from max_n down to min_n); the tokens that followed their latest earlier occurrence are
// the draft. Text that repeats its prompt or itself (code edits, summaries, structured output, stories
// that retell) gets several tokens a step for one weight read; a draft that misses costs a few positions of
// compute. No model: drafts are always the same for the same tokens (the verification's q is 1 on them).
#include <cstdint>
#include <span>
#include <vector>

namespace kvserve {

struct NgramProposerOptions {
  int max_n = 3;  // longest suffix looked up
  int min_n = 2;  // shortest (a single repeated token proposes too much that is not taken)
};

class NgramProposer {
 public:
  explicit NgramProposer(NgramProposerOptions opts = {});
  // Up to k tokens to try after `tokens` (empty when no suffix of min_n..max_n tokens occurred before).
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int k) const;

 private:
  NgramProposerOptions opts_;
};

}  // namespace kvserve
