#pragma once
// The fuzzers' vocabulary: every byte a token of its own (ids 3 + byte), then `longer` ones, so the grammar
// fuzzers test masks over tokens that span several bytes too.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

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
