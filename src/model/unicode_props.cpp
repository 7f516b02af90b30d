// Lookups into the generated tables (unicode_tables.cpp) plus the short fixed lists kept by hand, as
// llama.cpp keeps them: White_Space, and the CJK ranges of BERT's BasicTokenizer.
#include <algorithm>
#include <span>
#include <vector>

#include "model/unicode.h"
#include "model/unicode_tables.h"

namespace kvserve::unicode {

namespace {

template <typename Range>
const Range* find_range(std::span<const Range> table, uint32_t cpt) {
  // First range whose last >= cpt; it holds cpt when its first <= cpt.
  const auto it =
      std::lower_bound(table.begin(), table.end(), cpt, [](const Range& r, uint32_t c) { return r.last < c; });
  return (it != table.end() && it->first <= cpt) ? &*it : nullptr;
}

uint32_t mapped(std::span<const tables::CodepointMapping> table, uint32_t cpt) {
  const tables::CodepointMapping* m = find_range(table, cpt);
  return m ? m->value : cpt;
}

}  // namespace

bool is_whitespace(uint32_t cpt) {
  return (cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20 || cpt == 0x85 || cpt == 0xA0 || cpt == 0x1680 ||
         (cpt >= 0x2000 && cpt <= 0x200A) || cpt == 0x2028 || cpt == 0x2029 || cpt == 0x202F || cpt == 0x205F ||
         cpt == 0x3000;
}

bool is_control(uint32_t cpt) { return find_range(tables::kControl, cpt) != nullptr; }

bool is_punctuation(uint32_t cpt) { return find_range(tables::kPunctuation, cpt) != nullptr; }

bool is_ascii_symbol(uint32_t cpt) {
  switch (cpt) {
    case '$':
    case '+':
    case '<':
    case '=':
    case '>':
    case '^':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool is_cjk_ideograph(uint32_t cpt) {
  // 0x2B920 rather than the block start 0x2B820: Hugging Face's tokenizers use that bound, and llama.cpp
  // follows them.
  return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) || (cpt >= 0x20000 && cpt <= 0x2A6DF) ||
         (cpt >= 0x2A700 && cpt <= 0x2B73F) || (cpt >= 0x2B740 && cpt <= 0x2B81F) ||
         (cpt >= 0x2B920 && cpt <= 0x2CEAF) || (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

bool is_nonspacing_mark(uint32_t cpt) { return find_range(tables::kNonspacingMark, cpt) != nullptr; }

void append_nfd(uint32_t cpt, std::vector<uint32_t>& out) {
  // Hangul syllables: leading consonant, vowel and optional trailing consonant jamo (Unicode 3.12).
  constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr uint32_t kVCount = 21, kTCount = 28, kSCount = 19 * kVCount * kTCount;
  if (cpt >= kSBase && cpt < kSBase + kSCount) {
    const uint32_t s = cpt - kSBase;
    out.push_back(kLBase + s / (kVCount * kTCount));
    out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto& table = tables::kDecompositions;
  const auto it = std::lower_bound(table.begin(), table.end(), cpt,
                                   [](const tables::Decomposition& d, uint32_t c) { return d.codepoint < c; });
  if (it == table.end() || it->codepoint != cpt) {
    out.push_back(cpt);
    return;
  }
  const auto pool = tables::kDecompositionPool.subspan(it->offset, it->length);
  out.insert(out.end(), pool.begin(), pool.end());
}

uint32_t to_lower(uint32_t cpt) { return mapped(tables::kLowercase, cpt); }

}  // namespace kvserve::unicode
