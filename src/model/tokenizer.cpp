#include "model/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "model/tokenizer_impl.h"

namespace kvserve {

bool is_end_of_generation_text(std::string_view text) {
  // llama-vocab.cpp's special_eog_ids by text, and the FIM pad / repo / file-separator tokens it adds.
  static constexpr std::string_view kTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
      "<｜end▁of▁sentence｜>", "[e~[",
      "<|fim_pad|>", "<|fim_repo|>", "<|repo_name|>", "<|file_sep|>",
  };
  return std::find(std::begin(kTexts), std::end(kTexts), text) != std::end(kTexts);
}

std::string unescape_spaces(std::string_view token_text) {
  static constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";
  std::string piece;
  piece.reserve(token_text.size());
  for (size_t i = 0; i < token_text.size();) {
    if (token_text.substr(i, kEscapedSpace.size()) == kEscapedSpace) {
      piece += ' ';
      i += kEscapedSpace.size();
    } else {
      piece += token_text[i++];
    }
  }
  return piece;
}

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  if (vocab.tokens.empty()) fail("vocabulary has no tokens");
  if (!vocab.token_types.empty() && vocab.token_types.size() != vocab.tokens.size()) {
    fail("vocabulary has {} tokens but {} token types", vocab.tokens.size(), vocab.token_types.size());
  }
  switch (vocab.kind) {
    case Vocab::Kind::SPM:
      return make_spm_tokenizer(std::move(vocab));
    case Vocab::Kind::BPE:
      return make_bpe_tokenizer(std::move(vocab));
    case Vocab::Kind::WPM:
      return make_wpm_tokenizer(std::move(vocab));
  }
  fail("unknown vocabulary kind {}", static_cast<int>(vocab.kind));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string text;
  // SPM text starts with the dummy-prefix space the encoder added, and WordPiece text with the "▁" of
  // the first word; the reference decoders drop it from the first piece after BOS (or from the very
  // first piece when there is no BOS).
  const bool strip_dummy_space =
      (vocab_.kind == Vocab::Kind::SPM && vocab_.add_space_prefix) || vocab_.kind == Vocab::Kind::WPM;
  const size_t first_text_index = (!ids.empty() && bos() >= 0 && ids[0] == bos()) ? 1 : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], special);
    if (strip_dummy_space && i == first_text_index && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    text += piece;
  }
  return text;
}

bool harmony_end_is_message_end(const std::vector<std::string>& tokens) {
  bool end = false, ret = false, call = false, calls = false, flush = false;
  for (const std::string& t : tokens) {
    end = end || t == "<|end|>";
    ret = ret || t == "<|return|>";
    call = call || t == "<|call|>";
    calls = calls || t == "<|calls|>";
    flush = flush || t == "<|flush|>";
  }
  return end && ((ret && (call || calls)) || ((call || calls) && flush));
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && (id == vocab_.eos_id || id == vocab_.eot_id);
}

std::vector<int32_t> Tokenizer::eog_ids() const {
  std::vector<int32_t> ids;
  for (int32_t id : {vocab_.eos_id, vocab_.eot_id})
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

VocabTokenizer::VocabTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {
  const auto n = static_cast<int32_t>(vocab_.tokens.size());
  token_to_id_.reserve(vocab_.tokens.size());
  for (int32_t id = 0; id < n; ++id) {
    // On duplicate texts the first id wins (llama.cpp rejects such files; converters never write them).
    token_to_id_.emplace(vocab_.tokens[id], id);
    const TokenType type = type_of(id);
    if (type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown) {
      if (!vocab_.tokens[id].empty()) special_tokens_longest_first_.push_back(id);
    }
    if (is_end_of_generation_text(vocab_.tokens[id])) eog_ids_.insert(id);
  }
  std::stable_sort(special_tokens_longest_first_.begin(), special_tokens_longest_first_.end(),
                   [&](int32_t a, int32_t b) { return vocab_.tokens[a].size() > vocab_.tokens[b].size(); });
  if (vocab_.eos_id >= 0) eog_ids_.insert(vocab_.eos_id);
  if (vocab_.eot_id >= 0) eog_ids_.insert(vocab_.eot_id);
  if (harmony_end_is_message_end(vocab_.tokens))
    if (const auto it = token_to_id_.find("<|end|>"); it != token_to_id_.end()) eog_ids_.erase(it->second);
  for (int32_t id : vocab_.extra_eog_ids) eog_ids_.insert(id);
}

bool VocabTokenizer::is_eog(int32_t id) const { return eog_ids_.count(id) > 0; }

std::vector<int32_t> VocabTokenizer::eog_ids() const {
  std::vector<int32_t> ids(eog_ids_.begin(), eog_ids_.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<TextFragment> VocabTokenizer::partition_special(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<TextFragment> next;
  for (const int32_t special_id : special_tokens_longest_first_) {
    const TokenType type = type_of(special_id);
    // User-defined tokens are split out even without parse_special, as Hugging Face tokenizers do
    // (neox-style vocabularies keep runs of spaces as user-defined tokens).
    if (!parse_special && (type == TokenType::Control || type == TokenType::Unknown)) continue;
    const std::string& special_text = vocab_.tokens[special_id];
    next.clear();
    bool changed = false;
    for (const TextFragment& fragment : fragments) {
      if (fragment.is_token()) {
        next.push_back(fragment);
        continue;
      }
      const std::string_view raw = text.substr(fragment.offset, fragment.length);
      const uint8_t strip = vocab_.strip.empty() ? 0 : vocab_.strip[static_cast<size_t>(special_id)];
      // isspace in the C locale, as llama.cpp strips.
      const auto space = [](char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); };
      size_t from = 0;
      while (true) {
        const size_t at = raw.find(special_text, from);
        if (at == std::string_view::npos) break;
        changed = true;
        size_t left_end = at;
        if (strip & Vocab::kStripLeft)
          while (left_end > from && space(raw[left_end - 1])) --left_end;
        if (left_end > from) next.push_back({-1, fragment.offset + from, left_end - from});
        next.push_back({special_id, 0, 0});
        from = at + special_text.size();
        if (strip & Vocab::kStripRight)
          while (from < raw.size() && space(raw[from])) ++from;
      }
      if (from < raw.size()) next.push_back({-1, fragment.offset + from, raw.size() - from});
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

std::string VocabTokenizer::token_to_piece(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) return {};
  const std::string& text = vocab_.tokens[id];
  switch (type_of(id)) {
    case TokenType::Control:
    case TokenType::Unknown:
      return special ? text : std::string();
    case TokenType::UserDefined:
      return text;
    case TokenType::Byte: {
      // "<0xXX>"; anything else typed as a byte is shown as its text.
      if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
        return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
      }
      return normal_piece(text);
    }
    case TokenType::Unused:
      return {};
    case TokenType::Normal:
    case TokenType::Undefined:
      break;
  }
  return normal_piece(text);
}

}  // namespace kvserve
