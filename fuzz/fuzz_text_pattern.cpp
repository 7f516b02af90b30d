// libFuzzer target: arbitrary bytes as a regular expression (up to the first NUL byte) and a text (the rest).
// The compiler takes the pattern or refuses it with kvserve::Error, in bounded time; a compiled automaton
// keeps only states that can still finish. Where the pattern is written in a small alphabet whose meaning
// PCRE2 and ECMAScript share, the automaton's answer on the text is PCRE2's. Anything else, a crash, a hang or
// a disagreement, is a bug.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "engine/text_pattern.h"

using namespace kvserve;

namespace {

// Patterns and texts in which the two dialects agree: no classes like \w or \s, no anchors (their
// placement rules differ), no '{' (PCRE2 reads "{,n}" as a count), no empty classes, no groups with '?'.
bool shared_dialect(std::string_view pattern, std::string_view text) {
  for (char c : pattern)
    if (std::string_view("abc-.|()*+?[]\\d").find(c) == std::string_view::npos) return false;
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] == '\\' && pattern[i + 1] != 'd' && pattern[i + 1] != '.' && pattern[i + 1] != '\\') return false;
    if (pattern[i] == '(' && pattern[i + 1] == '?') return false;
    if (pattern[i] == '[' && (pattern[i + 1] == ']' || pattern[i + 1] == '^')) return false;
  }
  for (char c : text)
    if (std::string_view("abc-1.").find(c) == std::string_view::npos) return false;
  return true;
}

bool pcre2_matches(std::string_view pattern, std::string_view text, bool* compiled) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &offset, nullptr);
  *compiled = code != nullptr;
  if (!code) return false;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return rc >= 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view pattern = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const auto mode = size % 2 ? TextPattern::Mode::Search : TextPattern::Mode::FullMatch;
  std::shared_ptr<const TextPattern> p;
  try {
    p = TextPattern::compile(std::string(pattern), mode, /*lengths=*/size % 4 >= 2);
  } catch (const Error&) {
    return 0;
  }
  for (size_t s = 0; s < p->states(); ++s)
    if (!p->can_finish(static_cast<int32_t>(s), 0, UINT32_MAX)) __builtin_trap();  // a dead end was kept
  // The text's bytes as code points (Latin-1 is enough to walk it).
  int32_t state = p->start();
  for (unsigned char c : text) {
    state = p->next(state, c);
    if (state < 0) break;
  }
  const bool matched = state >= 0 && p->accepting(state);
  if (mode == TextPattern::Mode::FullMatch && shared_dialect(pattern, text)) {
    bool compiled = false;
    const bool expected = pcre2_matches(pattern, text, &compiled);
    if (compiled && expected != matched) __builtin_trap();
  }
  return 0;
}
