#include "engine/stop_checker.h"

#include <algorithm>

namespace kvserve {

std::string StopChecker::push(const std::string& piece) {
  if (stopped_) return {};
  // A stop string can only start within the last (max stop length - 1) bytes before the new text.
  size_t max_len = 0;
  for (const auto& s : stops_) max_len = std::max(max_len, s.size());
  const size_t search_from = text_.size() > max_len ? text_.size() - max_len : 0;
  text_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = text_.find(s, search_from);
    if (at != std::string::npos) cut = std::min(cut, at);
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
