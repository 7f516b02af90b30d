#pragma once
// Applies stop strings to streamed text. Text that could still be the start of a stop string is held
// back, so a client never receives part of a stop string; once a stop string appears, the text is cut
// just before it.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "model/tokenizer.h"

namespace kvserve {

// True when the token `id` ends generation under `params`: one of its stop_token_ids, or one of the
// vocabulary's ends unless ignore_eos. Its text is not part of the output.
bool ends_generation(const SamplingParams& params, const Tokenizer& tokenizer, int32_t id);

class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds newly decoded text; returns the text that is now safe to emit. Only a stop string that ends in the
  // new text counts; look false (vLLM's min_tokens not yet reached) finds none, but still holds back.
  std::string push(const std::string& text, bool look = true);
  // Releases whatever is held back (call when generation ends without a stop string).
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found (the first in text order)
  const std::string& text() const { return text_; }  // everything emitted so far plus held-back text

 private:
  std::vector<std::string> stops_;
  std::string text_;     // all text accepted (cut at the stop string once stopped)
  size_t emitted_ = 0;   // bytes of text_ already returned
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace kvserve
