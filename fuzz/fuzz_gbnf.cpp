// libFuzzer target: arbitrary bytes as a GBNF grammar (up to the first NUL byte) and a reply to feed it (the
// rest), through a small vocabulary (every byte a token, plus a few longer ones). The compiler takes the
// grammar or refuses it with kvserve::Error, in bounded time; then at every byte the mask allows exactly the
// tokens the matcher accepts, and a reply the matcher calls whole is taken again, whole, when fed as the
// vocabulary's longest tokens instead of bytes. Anything else, a crash, a hang or a disagreement, is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/gbnf_grammar.h"
#include "engine/grammar_matcher.h"
#include "fuzz_vocab.h"

using namespace kvserve;

namespace {

const std::vector<std::string> kLonger = {"ab", "abc", "\"}", "{\"", "12", "  ", "\n", "é", "xx", "[1", "],", "aa"};

const GrammarTokenTable& table() {
  static const std::unique_ptr<Tokenizer> tok = byte_vocab(kLonger);
  static const GrammarTokenTable t(*tok);
  return t;
}

// The reply as the longest tokens that start each remaining piece of it.
std::vector<int32_t> longest_tokens(const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    int32_t best = 3 + static_cast<unsigned char>(text[i]);
    size_t len = 1;
    for (size_t k = 0; k < kLonger.size(); ++k)
      if (kLonger[k].size() > len && text.compare(i, kLonger[k].size(), kLonger[k]) == 0) {
        best = static_cast<int32_t>(3 + 256 + k);
        len = kLonger[k].size();
      }
    ids.push_back(best);
    i += len;
  }
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return 0;
  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = gbnf_grammar(std::string(input.substr(0, nul)));
  } catch (const Error&) {
    return 0;
  }
  const GrammarTokenTable& t = table();
  GrammarMatcher m(grammar, t);
  const std::string text = walk_checking_masks(m, t, input.substr(nul + 1));
  if (!m.can_end()) return 0;
  GrammarMatcher again(grammar, t);
  for (int32_t id : longest_tokens(text))
    if (!again.accept(id)) __builtin_trap();
  if (!again.can_end()) __builtin_trap();
  return 0;
}
