#include "model/unicode.h"

#include <array>

namespace kvserve::unicode {

size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLenByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLenByHighNibble[lead >> 4];
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    append_utf8(out, 0xFFFD);
  }
}

namespace {

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// One code point at `offset` (advanced past it), or nullopt-like 0xFFFFFFFF for a malformed sequence
// (offset then advances by one byte). Mirrors llama.cpp's unicode_cpt_from_utf8 acceptance rules.
uint32_t next_cpt(std::string_view s, size_t& offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[offset];
  if (!(b0 & 0x80)) {
    offset += 1;
    return b0;
  }
  if (!(b0 & 0x40)) return 0xFFFFFFFF;
  if (!(b0 & 0x20)) {
    if (offset + 1 >= n || !is_continuation(p[offset + 1])) return 0xFFFFFFFF;
    const uint32_t c = ((b0 & 0x1Fu) << 6) | (p[offset + 1] & 0x3Fu);
    offset += 2;
    return c;
  }
  if (!(b0 & 0x10)) {
    if (offset + 2 >= n || !is_continuation(p[offset + 1]) || !is_continuation(p[offset + 2])) return 0xFFFFFFFF;
    const uint32_t c = ((b0 & 0x0Fu) << 12) | ((p[offset + 1] & 0x3Fu) << 6) | (p[offset + 2] & 0x3Fu);
    offset += 3;
    return c;
  }
  if (!(b0 & 0x08)) {
    if (offset + 3 >= n || !is_continuation(p[offset + 1]) || !is_continuation(p[offset + 2]) ||
        !is_continuation(p[offset + 3]))
      return 0xFFFFFFFF;
    const uint32_t c = ((b0 & 0x07u) << 18) | ((p[offset + 1] & 0x3Fu) << 12) | ((p[offset + 2] & 0x3Fu) << 6) |
                       (p[offset + 3] & 0x3Fu);
    offset += 4;
    return c;
  }
  return 0xFFFFFFFF;
}

}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    const uint32_t c = next_cpt(text, offset);
    if (c == 0xFFFFFFFF) {
      ++offset;
      cpts.push_back(0xFFFD);
    } else {
      cpts.push_back(c);
    }
  }
  return cpts;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    const size_t start = offset;
    const uint32_t c = next_cpt(text, offset);
    if (c == 0xFFFFFFFF) {
      ++offset;
      append_utf8(out, 0xFFFD);
    } else {
      const size_t len = offset - start;
      const bool overlong = (len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000);
      const bool unencodable = c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF);
      if (overlong || unencodable) {
        // llama.cpp accepts these and re-encodes the code point; PCRE2 would reject the raw bytes.
        append_utf8(out, unencodable ? 0xFFFD : c);
      } else {
        out.append(text.substr(start, len));
      }
    }
  }
  return out;
}

namespace {

struct ByteTables {
  std::array<std::string, 256> byte_to_symbol;
  std::array<int16_t, 512> cpt_to_byte;  // stand-in code points are all below 0x144
};

const ByteTables& byte_tables() {
  static const ByteTables tables = [] {
    ByteTables t;
    t.cpt_to_byte.fill(-1);
    std::array<bool, 256> printable{};
    for (int b = 0x21; b <= 0x7E; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    int next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable[b] ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + next_extra++);
      append_utf8(t.byte_to_symbol[b], cpt);
      t.cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

const std::string& byte_to_symbol(uint8_t byte) { return byte_tables().byte_to_symbol[byte]; }

int symbol_to_byte(uint32_t cpt) { return cpt < 512 ? byte_tables().cpt_to_byte[cpt] : -1; }

size_t incomplete_utf8_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  // A sequence is at most 4 bytes, so only the last 3 can belong to an unfinished one.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(bytes[n - back]);
    if (is_continuation(b)) continue;
    if ((b & 0xC0) != 0xC0) return 0;  // ASCII: complete
    const size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace kvserve::unicode
