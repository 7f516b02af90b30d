#include "engine/stop_checker.h"

#include <algorithm>

namespace kvserve {

bool ends_generation(const SamplingParams& params, const Tokenizer& tokenizer, int32_t id) {
  if (!params.ignore_eos && tokenizer.is_eog(id)) return true;
  return std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), id) != params.stop_token_ids.end();
}

std::string StopChecker::push(const std::string& piece, bool look) {
  if (stopped_) return {};
  const size_t old_size = text_.size();
  text_ += piece;
  size_t cut = std::string::npos;
  // A stop string that ends in the new text starts at most (its length - 1) bytes before it.
  if (look && !piece.empty()) {
    for (const auto& s : stops_) {
      const size_t at = text_.find(s, old_size >= s.size() ? old_size - (s.size() - 1) : 0);
      if (at != std::string::npos && (cut == std::string::npos || at < cut)) {
        cut = at;
        matched_ = s;
      }
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    text_.resize(std::max(cut, emitted_));
    std::string out = text_.substr(emitted_);
    emitted_ = text_.size();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, text_.size()); n > hold; --n) {
      if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  const size_t safe = std::max(emitted_, text_.size() - hold);
  std::string out = text_.substr(emitted_, safe - emitted_);
  emitted_ = safe;
  return out;
}

std::string StopChecker::flush() {
  std::string out = text_.substr(emitted_);
  emitted_ = text_.size();
  return out;
}

}  // namespace kvserve
