#pragma once
// The grammar fuzzers' vocabulary: every byte a token of its own (ids 3 + byte), then `longer` ones, so masks
// are tested over tokens that span several bytes too; and their walk of a reply through a matcher.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar_matcher.h"
#include "model/tokenizer.h"

inline std::unique_ptr<kvserve::Tokenizer> byte_vocab(const std::vector<std::string>& longer) {
  using kvserve::TokenType;
  kvserve::Vocab v;
  v.kind = kvserve::Vocab::Kind::SPM;
  v.add_space_prefix = false;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {TokenType::Unknown, TokenType::Control, TokenType::Control};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.tokens.emplace_back(name);
    v.token_types.push_back(TokenType::Byte);
  }
  for (const std::string& t : longer) {
    v.tokens.push_back(t);
    v.token_types.push_back(TokenType::Normal);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;
  return kvserve::Tokenizer::create(v);
}

// Feeds `reply` to `m` byte by byte (each byte's own token), first checking that the mask allows exactly the
// tokens the matcher accepts (a trap where it does not); stops at a byte the matcher refuses, or where nothing
// more can follow. Returns the text taken.
inline std::string walk_checking_masks(kvserve::GrammarMatcher& m, const kvserve::GrammarTokenTable& t,
                                       std::string_view reply) {
  std::vector<float> logits(static_cast<size_t>(t.size()));
  std::string text;
  for (unsigned char c : reply) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    m.mask(logits.data(), t.size());
    for (int32_t id = 0; id < t.size(); ++id) {
      kvserve::GrammarMatcher copy = m;
      if (copy.accept(id) == std::isinf(logits[static_cast<size_t>(id)])) __builtin_trap();
    }
    if (!m.accept(3 + c)) break;
    text.push_back(static_cast<char>(c));
    if (m.done()) break;
  }
  return text;
}
