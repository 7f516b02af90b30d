#pragma once
// Generated Unicode character data (scripts/gen_unicode_tables.py writes unicode_tables.cpp). Every
// table is sorted by code point with disjoint ranges, for binary search; unicode.h has the lookups.
#include <cstdint>
#include <span>

namespace kvserve::unicode::tables {

struct CodepointRange {
  uint32_t first;
  uint32_t last;
};

// Every code point in [first, last] maps to value.
struct CodepointMapping {
  uint32_t first;
  uint32_t last;
  uint32_t value;
};

// One character's canonical decomposition: pool[offset, offset + length).
struct Decomposition {
  uint32_t codepoint;
  uint32_t offset;
  uint32_t length;
};

extern const std::span<const CodepointRange> kControl;         // categories Cc, Cf, Co, Cs
extern const std::span<const CodepointRange> kPunctuation;     // categories P*
extern const std::span<const CodepointRange> kNonspacingMark;  // category Mn
// Full canonical decompositions (NFD) of every character that has one, Hangul syllables excepted (they
// decompose by formula), sorted by code point.
extern const std::span<const Decomposition> kDecompositions;
extern const std::span<const uint32_t> kDecompositionPool;
extern const std::span<const CodepointMapping> kLowercase;  // first code point of the lowercase mapping

}  // namespace kvserve::unicode::tables
