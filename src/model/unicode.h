#pragma once
// The few Unicode helpers the tokenizers need: UTF-8 decoding with llama.cpp's error handling, GPT-2's
// byte <-> printable-character table used by byte-level BPE vocabularies, and the character properties
// the WordPiece (BERT) pre-tokenizer splits and normalizes by (unicode_props.cpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::unicode {

// Length of the UTF-8 sequence a lead byte announces (1 for ASCII and for stray continuation bytes,
// as llama.cpp's unicode_len_utf8 counts them).
size_t utf8_len(uint8_t lead);

void append_utf8(std::string& out, uint32_t cpt);

// Code points of `text`; each malformed sequence becomes one U+FFFD and decoding resumes at the next
// byte (llama.cpp's unicode_cpts_from_utf8 does the same, so pre-tokenization sees the same text).
std::vector<uint32_t> decode_utf8(std::string_view text);

// `text` re-encoded from decode_utf8: valid UTF-8 stays byte-identical, malformed bytes become U+FFFD.
std::string sanitize_utf8(std::string_view text);

// GPT-2 byte-level mapping: every byte has a printable stand-in code point, and its UTF-8 form is what
// byte-level BPE vocabularies store.
const std::string& byte_to_symbol(uint8_t byte);
// Byte for a stand-in symbol's code point; -1 when the code point is not one.
int symbol_to_byte(uint32_t cpt);

// Number of bytes at the end of `bytes` that start an incomplete UTF-8 sequence (0 when the text ends
// on a character boundary, or when the tail is malformed and can never complete).
size_t incomplete_utf8_tail(std::string_view bytes);

// Character properties, as llama.cpp's unicode tables give them (generated from the Unicode database by
// scripts/gen_unicode_tables.py).
bool is_whitespace(uint32_t cpt);       // Unicode White_Space
bool is_control(uint32_t cpt);          // general category Cc, Cf, Co or Cs (not unassigned Cn)
bool is_punctuation(uint32_t cpt);      // general category P*
bool is_ascii_symbol(uint32_t cpt);     // general category S* below U+007F: $ + < = > ^ ` | ~
bool is_cjk_ideograph(uint32_t cpt);    // the CJK blocks BERT's BasicTokenizer splits one by one
bool is_nonspacing_mark(uint32_t cpt);  // general category Mn (combining accents)
// Appends the canonical decomposition (NFD) of `cpt`, or `cpt` itself when it has none.
void append_nfd(uint32_t cpt, std::vector<uint32_t>& out);
// First code point of the lowercase form of `cpt`.
uint32_t to_lower(uint32_t cpt);

}  // namespace kvserve::unicode
