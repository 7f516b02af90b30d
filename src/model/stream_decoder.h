#pragma once
// Incremental detokenization for streaming output: feed token ids one at a time and get back only text
// that is complete UTF-8, holding back the first bytes of a character whose remaining bytes arrive in
// later tokens (byte-fallback and byte-level BPE tokens split characters).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace kvserve {

class StreamDecoder {
 public:
  // `special`: include control-token text (as Tokenizer::token_to_piece). The tokenizer must outlive
  // the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool special = false);

  // Text completed by this token (possibly empty). The concatenation of every feed() and a final
  // flush() equals Tokenizer::decode of the same ids.
  std::string feed(int32_t id);
  // Whatever is still held back (an unfinished sequence at the end of the stream), then resets.
  std::string flush();
  // Starts a new stream (the next token is again the first).
  void reset();
  // Control tokens whose text is shown all the same (a chat reply's tool-call markers, as llama-server's
  // preserved tokens): the parser after the decoder must see them.
  void show_tokens(std::vector<int32_t> ids);
  // Starts a new stream that continues `context` (a prompt, not decoded here): the concatenation of every
  // feed() and flush() is then the text Tokenizer::decode(context + ids) adds to decode(context). An SPM
  // vocabulary's dummy-prefix space comes off only the piece right after an opening BOS, so a completion
  // keeps the space between the prompt's last word and its first one (as llama2.c's run.c prints it, and
  // as llama-server and vLLM return it) unless the prompt is a lone BOS.
  void start_after(std::span<const int32_t> context);

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  std::vector<int32_t> shown_;  // sorted
  size_t tokens_seen_ = 0;
  bool first_was_bos_ = false;
  std::string pending_;
};

}  // namespace kvserve
