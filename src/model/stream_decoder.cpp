#include "model/stream_decoder.h"

#include <algorithm>

#include "model/unicode.h"

namespace kvserve {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool special) : tokenizer_(tokenizer), special_(special) {}

std::string StreamDecoder::feed(int32_t id) {
  const size_t index = tokens_seen_++;
  if (index == 0) first_was_bos_ = tokenizer_.bos() >= 0 && id == tokenizer_.bos();
  const bool shown = !shown_.empty() && std::binary_search(shown_.begin(), shown_.end(), id);
  std::string piece = tokenizer_.token_to_piece(id, special_ || shown);
  // Same dummy-prefix rule as Tokenizer::decode: the first text piece (after an opening BOS) loses its
  // leading space in SPM vocabularies.
  const Vocab& vocab = tokenizer_.vocab();
  const size_t first_text_index = first_was_bos_ ? 1 : 0;
  if (vocab.kind == Vocab::Kind::SPM && vocab.add_space_prefix && index == first_text_index && !piece.empty() &&
      piece[0] == ' ') {
    piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t held = unicode::incomplete_utf8_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - held);
  pending_.erase(0, pending_.size() - held);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest = std::move(pending_);
  reset();
  return rest;
}

void StreamDecoder::show_tokens(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  shown_ = std::move(ids);
}

void StreamDecoder::reset() {
  pending_.clear();
  tokens_seen_ = 0;
  first_was_bos_ = false;
}

void StreamDecoder::start_after(std::span<const int32_t> context) {
  reset();
  if (context.empty()) return;
  tokens_seen_ = context.size();
  first_was_bos_ = tokenizer_.bos() >= 0 && context.front() == tokenizer_.bos();
}

}  // namespace kvserve
