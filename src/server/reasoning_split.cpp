#include "server/reasoning_split.h"

#include <algorithm>

namespace kvserve::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest end of `text` that is a proper start of `tag`.
size_t partial_tag_at_end(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool opened_by_prompt)
    : state_(opened_by_prompt ? State::Reasoning : State::Start) {}

ReasoningSplit ReasoningSplitter::feed(std::string_view text) {
  ReasoningSplit out;
  held_ += text;
  if (state_ == State::Start) {
    // The output opens its reasoning only with <think> as its very first text.
    if (held_.size() < kOpen.size() && kOpen.substr(0, held_.size()) == held_) return out;
    if (held_.compare(0, kOpen.size(), kOpen) == 0) {
      held_.erase(0, kOpen.size());
      state_ = State::Reasoning;
    } else {
      state_ = State::Content;
    }
  }
  if (state_ == State::Reasoning) {
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = partial_tag_at_end(held_, kClose);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    state_ = State::Content;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplit ReasoningSplitter::finish() {
  ReasoningSplit out;
  if (state_ == State::Reasoning) {
    out.reasoning = std::move(held_);
  } else {
    out.content = std::move(held_);
  }
  held_.clear();
  return out;
}

ReasoningSplit split_reasoning(std::string_view text, bool opened_by_prompt) {
  ReasoningSplitter splitter(opened_by_prompt);
  ReasoningSplit out = splitter.feed(text);
  ReasoningSplit rest = splitter.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string_view::npos || close < open;
}

}  // namespace kvserve::server
