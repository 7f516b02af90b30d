#pragma once
// What the grammar tests share: GPT-2's vocabulary as a GrammarTokenTable, a grammar's answer for a text fed
// byte by byte, and the check that a mask allows exactly the tokens a full check of each token takes.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar_matcher.h"
#include "engine/json_grammar.h"
#include "model/loaders.h"
#include "model/tokenizer.h"

namespace kvserve {

inline const std::string kShared = KVSERVE_SHARED_DIR;

// GPT-2's byte-level vocabulary: every byte is a token of its own, and 50k longer ones.
inline const Tokenizer& gpt2() {
  static const std::unique_ptr<Tokenizer> tok =
      Tokenizer::create(load_gguf_vocab(kShared + "/models/vocab/ggml-vocab-gpt-2.gguf"));
  return *tok;
}
inline const GrammarTokenTable& gpt2_table() {
  static const GrammarTokenTable table(gpt2());
  return table;
}

// The one-byte token of each byte.
inline const std::vector<int32_t>& byte_tokens() {
  static const std::vector<int32_t> ids = [] {
    std::vector<int32_t> out(256, -1);
    const GrammarTokenTable& t = gpt2_table();
    for (int32_t id = 0; id < t.size(); ++id)
      if (t.bytes(id).size() == 1 && out[static_cast<unsigned char>(t.bytes(id)[0])] < 0)
        out[static_cast<unsigned char>(t.bytes(id)[0])] = id;
    return out;
  }();
  return ids;
}

// Whether the grammar takes `text` whole, byte by byte.
inline bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g, gpt2_table());
  for (unsigned char c : text) {
    const int32_t id = byte_tokens()[c];
    if (id < 0 || !m.accept(id)) return false;
  }
  return m.can_end();
}

// Every token the mask allowed in `logits` is accepted by a full check of that token, and every one it
// refused is refused.
inline void expect_mask_is_exact(const GrammarMatcher& m, const std::vector<float>& logits, const std::string& where) {
  const GrammarTokenTable& table = gpt2_table();
  for (int32_t id = 0; id < table.size(); ++id) {
    GrammarMatcher copy = m;
    EXPECT_EQ(copy.accept(id), !std::isinf(logits[static_cast<size_t>(id)])) << where << " + " << table.bytes(id);
  }
}

// The mask where `m` stands, checked so; its logits.
inline std::vector<float> checked_mask(const GrammarMatcher& m, const std::string& where) {
  const GrammarTokenTable& table = gpt2_table();
  std::vector<float> logits(static_cast<size_t>(table.size()), 0.0f);
  m.mask(logits.data(), table.size());
  expect_mask_is_exact(m, logits, where);
  return logits;
}

}  // namespace kvserve
