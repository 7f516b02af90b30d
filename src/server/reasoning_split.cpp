#include "server/reasoning_split.h"

#include <algorithm>

namespace kvserve::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
constexpr std::string_view kGemma4Open = "<|channel>thought";
constexpr std::string_view kGemma4Close = "<channel|>";
constexpr std::string_view kGemma4Turn = "<|turn>model\n";
constexpr std::string_view kHarmonyMessage = "<|message|>";
constexpr std::string_view kHarmonyChannel = "<|channel|>";
constexpr std::string_view kHarmonyEnds[] = {"<|end|>", "<|return|>", "<|call|>"};

// The length of the longest end of `text` that is a proper start of `tag`.
size_t partial_tag_at_end(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool opened_by_prompt, ReasoningFormat format)
    : state_(format == ReasoningFormat::Harmony ? State::HarmonyHeader
             : opened_by_prompt                 ? State::Reasoning
                                                : State::Start),
      open_(format == ReasoningFormat::Gemma4Channel ? kGemma4Open : kOpen),
      close_(format == ReasoningFormat::Gemma4Channel ? kGemma4Close : kClose),
      skip_space_(format == ReasoningFormat::Gemma4Channel && opened_by_prompt) {}

ReasoningSplit ReasoningSplitter::feed_harmony() {
  ReasoningSplit out;
  for (;;) {
    if (state_ == State::HarmonyHeader) {
      if (held_.empty()) return out;
      // Text that does not open with a tag is no harmony header: the model answered plainly.
      const bool tag = held_.starts_with("<|") || (held_.size() == 1 && held_[0] == '<');
      if (!tag) {
        analysis_ = passing_ = false;
        state_ = State::HarmonyBody;
        continue;
      }
      const size_t message = held_.find(kHarmonyMessage);
      if (message == std::string::npos) return out;
      const std::string_view header = std::string_view(held_).substr(0, message);
      const size_t channel = header.find(kHarmonyChannel);
      std::string_view name;
      if (channel != std::string_view::npos) {
        name = header.substr(channel + kHarmonyChannel.size());
        name = name.substr(0, name.find_first_of(" <"));
      }
      // A message to a recipient (a tool call) passes whole into the content, for the tool-call parser.
      passing_ = header.find(" to=") != std::string_view::npos || header.find(">to=") != std::string_view::npos;
      analysis_ = !passing_ && name == "analysis";
      if (passing_) out.content += held_.substr(0, message + kHarmonyMessage.size());
      held_.erase(0, message + kHarmonyMessage.size());
      state_ = State::HarmonyBody;
      continue;
    }
    size_t end = std::string::npos, tag_size = 0, keep = 0;
    for (std::string_view t : kHarmonyEnds) {
      const size_t at = held_.find(t);
      if (at < end) {
        end = at;
        tag_size = t.size();
      }
      keep = std::max(keep, partial_tag_at_end(held_, t));
    }
    std::string& to = analysis_ ? out.reasoning : out.content;
    if (end == std::string::npos) {
      to += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    to += held_.substr(0, passing_ ? end + tag_size : end);
    held_.erase(0, end + tag_size);
    passing_ = false;
    state_ = State::HarmonyHeader;
  }
}

ReasoningSplit ReasoningSplitter::feed(std::string_view text) {
  ReasoningSplit out;
  held_ += text;
  if (state_ == State::HarmonyHeader || state_ == State::HarmonyBody) return feed_harmony();
  if (state_ == State::Start) {
    // The output opens its reasoning only with its tag as its very first text.
    if (held_.size() < open_.size() && open_.substr(0, held_.size()) == held_) return out;
    if (held_.compare(0, open_.size(), open_) == 0) {
      held_.erase(0, open_.size());
      state_ = State::Reasoning;
      skip_space_ = open_ == kGemma4Open;
    } else {
      state_ = State::Content;
    }
  }
  if (state_ == State::Reasoning && skip_space_) {
    const size_t text = held_.find_first_not_of(" \t\r\n");
    held_.erase(0, std::min(text, held_.size()));
    if (held_.empty()) return out;
    skip_space_ = false;
  }
  if (state_ == State::Reasoning) {
    const size_t close = held_.find(close_);
    if (close == std::string::npos) {
      const size_t keep = partial_tag_at_end(held_, close_);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, close);
    held_.erase(0, close + close_.size());
    state_ = State::Content;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplit ReasoningSplitter::finish() {
  ReasoningSplit out;
  if (state_ == State::HarmonyHeader) {
    held_.clear();  // a header the output stopped in says nothing
    return out;
  }
  if (state_ == State::Reasoning || (state_ == State::HarmonyBody && analysis_)) {
    out.reasoning = std::move(held_);
  } else {
    out.content = std::move(held_);
  }
  held_.clear();
  return out;
}

ReasoningSplit split_reasoning(std::string_view text, bool opened_by_prompt, ReasoningFormat format) {
  ReasoningSplitter splitter(opened_by_prompt, format);
  ReasoningSplit out = splitter.feed(text);
  ReasoningSplit rest = splitter.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

bool prompt_is_harmony(std::string_view prompt) { return prompt.ends_with("<|start|>assistant"); }

bool prompt_is_gemma4(std::string_view prompt) {
  return prompt.ends_with(kGemma4Turn) ||
         prompt.ends_with(std::string(kGemma4Turn) + std::string(kGemma4Open) + "\n" + std::string(kGemma4Close)) ||
         prompt.ends_with(std::string(kGemma4Turn) + std::string(kGemma4Open) + "\n");
}

bool prompt_opens_reasoning(std::string_view prompt, ReasoningFormat format) {
  const bool gemma4 = format == ReasoningFormat::Gemma4Channel;
  const size_t open = prompt.rfind(gemma4 ? kGemma4Open : kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(gemma4 ? kGemma4Close : kClose);
  return close == std::string_view::npos || close < open;
}

}  // namespace kvserve::server
