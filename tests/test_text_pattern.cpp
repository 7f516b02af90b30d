// Regular expressions as automata (src/engine/text_pattern.h), against an independent reference: PCRE2 (the
// library the pre-tokenizers use) decides, for random texts over each pattern's own characters, whether the
// pattern matches the whole text (guided_regex) or somewhere in it (JSON Schema's `pattern`); the automaton
// must agree on every one.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/text_pattern.h"

namespace kvserve {
namespace {

// Code points as UTF-8.
std::string utf8(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

class Pcre2 {
 public:
  Pcre2(const std::string& pattern, bool whole) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options =
        PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX | (whole ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0);
    code_ =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &offset, nullptr);
    if (code_) data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre2() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Pcre2(const Pcre2&) = delete;
  Pcre2& operator=(const Pcre2&) = delete;
  bool ok() const { return code_ != nullptr; }
  bool matches(const std::string& text) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data_, nullptr) >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

bool runs_to_match(const TextPattern& p, const std::vector<uint32_t>& cps) {
  int32_t s = p.start();
  for (uint32_t cp : cps) {
    s = p.next(s, cp);
    if (s < 0) return false;
  }
  return p.accepting(s);
}

// Patterns whose meaning PCRE2 and ECMAScript share on the texts drawn (no \r, no U+2028, ASCII \s).
const std::vector<std::string> kPatterns = {
    "abc",         "^a+b?$",   "^(ab|a)*c$",        "[a-c]{2,4}",   "^\\d{3}-\\d{2}$",  "^[^a]b$",     "x|^y|z$",
    "^(?:a|bc)+$", "^.{0,3}$", "^\\w+@\\w+\\.com$", "^[\\-a]\\.?$", "^(?<word>ab){2}$", "^é[ü-ÿ]*€$",  "^a{2,}?b$",
    "^[\\d\\s]+$", "a{",       "^\\x41\\u0042C$",   "^[^\\W_]$",    "^(a|)b$",          "^((a*)*b)?$", "^😀?x$",
};

// The characters a random text is drawn from: the pattern's own, and a few others.
std::vector<uint32_t> alphabet_of(const std::string& pattern) {
  std::vector<uint32_t> out = {'a', 'b', 'c', '-',  '.',  '1',  ' ',    'x',    'y',
                               'z', '@', '_', '\n', 0xE9, 0xFC, 0x20AC, 0x1F600};
  for (char c : std::string("ABCcom{}\t")) out.push_back(static_cast<unsigned char>(c));
  return out;
}

TEST(TextPattern, AgreesWithPcre2OnRandomTexts) {
  std::mt19937 rng(11);
  int matched = 0, refused = 0;
  for (const std::string& pattern : kPatterns) {
    for (const bool whole : {true, false}) {
      const auto mode = whole ? TextPattern::Mode::FullMatch : TextPattern::Mode::Search;
      const auto p = TextPattern::compile(pattern, mode);
      const Pcre2 reference(pattern, whole);
      ASSERT_TRUE(reference.ok()) << pattern;
      const std::vector<uint32_t> alphabet = alphabet_of(pattern);
      for (int t = 0; t < 3000; ++t) {
        std::vector<uint32_t> cps(std::uniform_int_distribution<size_t>(0, 7)(rng));
        for (uint32_t& cp : cps) cp = alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
        const bool expected = reference.matches(utf8(cps));
        EXPECT_EQ(runs_to_match(*p, cps), expected)
            << pattern << (whole ? " (whole)" : " (search)") << " on " << utf8(cps);
        (expected ? matched : refused) += 1;
      }
    }
  }
  EXPECT_GT(matched, 5000);
  EXPECT_GT(refused, 5000);
}

// Texts spelled out from each state's edges: PCRE2 matches every text that ends in an accepting state, so the
// automaton's matches are not only the short random ones.
TEST(TextPattern, EveryWalkToAnAcceptingStateMatches) {
  std::mt19937 rng(3);
  for (const std::string& pattern : kPatterns) {
    const auto p = TextPattern::compile(pattern, TextPattern::Mode::FullMatch);
    const Pcre2 reference(pattern, true);
    for (int walk = 0; walk < 200; ++walk) {
      std::vector<uint32_t> cps;
      int32_t s = p->start();
      for (int step = 0; step < 40; ++step) {
        if (p->accepting(s)) {
          EXPECT_TRUE(reference.matches(utf8(cps))) << pattern << " on " << utf8(cps);
        }
        // Where the two dialects differ (ECMAScript's \s and line terminators beyond ASCII, '.' and \r),
        // the walk does not go.
        auto differs = [](uint32_t cp) {
          return cp == '\r' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
                 cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
        };
        std::vector<std::pair<uint32_t, int32_t>> steps;
        for (const TextPattern::Edge& e : p->edges(s)) {
          const uint32_t pick = e.lo + static_cast<uint32_t>(rng() % (uint64_t{e.hi} - e.lo + 1));
          if (!differs(pick))
            steps.emplace_back(pick, e.to);
          else if (!differs(e.lo))
            steps.emplace_back(e.lo, e.to);
        }
        if (steps.empty() || (p->accepting(s) && rng() % 4 == 0)) break;
        const uint32_t cp = steps[rng() % steps.size()].first;
        cps.push_back(cp);
        s = p->next(s, cp);
        ASSERT_GE(s, 0);
      }
    }
  }
}

TEST(TextPattern, LengthsLeftToFinish) {
  const auto p = TextPattern::compile("^(ab)+$", TextPattern::Mode::FullMatch, /*lengths=*/true);
  const int32_t s = p->start();
  EXPECT_TRUE(p->can_finish(s, 2, 2));
  EXPECT_FALSE(p->can_finish(s, 3, 3));  // only even lengths
  EXPECT_TRUE(p->can_finish(s, 3, 4));
  EXPECT_FALSE(p->can_finish(s, 0, 1));
  EXPECT_TRUE(p->can_finish(s, 5000, UINT32_MAX));  // a cycle: any length past the cap
  const auto q = TextPattern::compile("^a{3}$", TextPattern::Mode::FullMatch, true);
  EXPECT_TRUE(q->can_finish(q->start(), 0, 3));
  EXPECT_FALSE(q->can_finish(q->start(), 4, UINT32_MAX));
  EXPECT_FALSE(q->can_take(q->start(), 'a', 'a', 0, 1));  // after one more, two are due
  EXPECT_TRUE(q->can_take(q->start(), 'a', 'a', 0, 2));
  EXPECT_FALSE(q->can_take(q->start(), 'b', 'z', 0, 2));
}

// Text up to a closing tag that holds none of the tags a parser would also stop at, against the definition
// checked by brute force on random texts.
TEST(TextPattern, TextUntilAWordAvoidingOthers) {
  const std::string end = "</p>";
  const std::vector<std::string> forbidden = {"<p=", "</f>"};
  const auto p = TextPattern::text_until(end, forbidden);
  const std::vector<uint32_t> alphabet = {'<', '/', 'p', '>', '=', 'f', 'x', 0xE9};
  std::mt19937 rng(7);
  int matched = 0;
  for (int t = 0; t < 20000; ++t) {
    std::vector<uint32_t> cps(std::uniform_int_distribution<size_t>(0, 12)(rng));
    for (uint32_t& cp : cps) cp = alphabet[rng() % alphabet.size()];
    if (rng() % 2)
      for (char c : end) cps.push_back(static_cast<unsigned char>(c));
    const std::string text = utf8(cps);
    bool expected = text.size() >= end.size() && text.find(end) == text.size() - end.size();
    for (const std::string& w : forbidden) expected = expected && text.find(w) == std::string::npos;
    EXPECT_EQ(runs_to_match(*p, cps), expected) << text;
    matched += expected;
  }
  EXPECT_GT(matched, 1000);
  // Nothing follows the closing word, and every state can still reach it.
  int32_t s = p->start();
  for (char c : end) s = p->next(s, static_cast<unsigned char>(c));
  ASSERT_GE(s, 0);
  EXPECT_TRUE(p->accepting(s));
  EXPECT_FALSE(p->has_edges(s));
  for (size_t k = 0; k < p->states(); ++k) EXPECT_TRUE(p->can_finish(static_cast<int32_t>(k), 0, UINT32_MAX));
}

TEST(TextPattern, RefusesWhatItCannotCompileByName) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"a(?=b)", "lookaround"},
      {"(a)\\1", "backreferences"},
      {"\\bword", "word boundaries"},
      {"(?i)a", "inline flags"},
      {"a^b", "'^'"},
      {"a$b", "'$'"},
      {"(ab", "')'"},
      {"ab)", "'('"},
      {"[ab", "']'"},
      {"*a", "nothing to repeat"},
      {"a{3,2}", "out of order"},
      {"a{5000}", "more than"},
      {"[z-a]", "out of order"},
      {"\\q", "unknown escape"},
      {"a**", "repeats a repeat"},
      {"[^\\s\\S]", "matches no text"},
      {"\\p{L}", "Unicode property"},
      {"(a{1000}){1000}", "too large"},
  };
  for (const auto& [pattern, word] : refused) {
    try {
      TextPattern::compile(pattern, TextPattern::Mode::Search);
      ADD_FAILURE() << "compiled " << pattern;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << pattern << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace kvserve
