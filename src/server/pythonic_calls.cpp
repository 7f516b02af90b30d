#include "server/pythonic_calls.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "model/unicode.h"

namespace kvserve::server {

namespace {

using json = nlohmann::ordered_json;

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A recursive-descent reader of the Python literals a call's arguments may be (ast.literal_eval's, less sets,
// bytes and complex numbers, which JSON cannot hold).
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  // Whitespace, newlines included: inside brackets Python ignores them.
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool at_end() {
    skip();
    return i_ >= s_.size();
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  char peek() {
    skip();
    return i_ < s_.size() ? s_[i_] : '\0';
  }

  std::optional<std::string> identifier() {
    skip();
    if (i_ >= s_.size() || !is_ident_start(s_[i_])) return std::nullopt;
    const size_t start = i_;
    while (i_ < s_.size() && is_ident_char(s_[i_])) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  std::optional<json> value(int depth) {
    if (depth > kMaxPythonicDepth) return std::nullopt;
    const char c = peek();
    if (c == '[') return sequence(']', depth);
    if (c == '(') return sequence(')', depth);
    if (c == '{') return dict(depth);
    if (c == '"' || c == '\'') return strings();
    if (c == '-' || c == '+' || c == '.' || is_digit(c)) return number();
    if (is_ident_start(c)) {
      // True / False / None, or a string's prefix.
      const size_t start = i_;
      const std::optional<std::string> word = identifier();
      if (*word == "True") return json(true);
      if (*word == "False") return json(false);
      if (*word == "None") return json(nullptr);
      i_ = start;
      if (string_prefix_length() > 0) return strings();
    }
    return std::nullopt;
  }

 private:
  // [a, b] or (a, b): a JSON array (a trailing comma allowed); (a) is a itself.
  std::optional<json> sequence(char close, int depth) {
    ++i_;
    json items = json::array();
    bool comma = false;
    for (;;) {
      if (eat(close)) break;
      std::optional<json> v = value(depth + 1);
      if (!v) return std::nullopt;
      items.push_back(std::move(*v));
      if (eat(',')) {
        comma = true;
        continue;
      }
      if (eat(close)) break;
      return std::nullopt;
    }
    if (close == ')' && items.size() == 1 && !comma) return items[0];
    return items;
  }

  // {key: value, ...}: keys strings, or numbers, booleans and None written as JSON does (json.dumps's keys).
  std::optional<json> dict(int depth) {
    ++i_;
    json object = json::object();
    for (;;) {
      if (eat('}')) return object;
      std::optional<json> key = value(depth + 1);
      if (!key || key->is_structured()) return std::nullopt;
      if (!eat(':')) return std::nullopt;  // {a, b} is a set
      std::optional<json> v = value(depth + 1);
      if (!v) return std::nullopt;
      object[key->is_string() ? key->get<std::string>() : key->dump()] = std::move(*v);
      if (eat(',')) continue;
      if (eat('}')) return object;
      return std::nullopt;
    }
  }

  // The length of a string prefix (r, u, R, U) right before a quote; 0 for none (b'' and f'' are not literals
  // JSON can hold).
  size_t string_prefix_length() const {
    if (i_ + 1 < s_.size() && (s_[i_] == 'r' || s_[i_] == 'R' || s_[i_] == 'u' || s_[i_] == 'U') &&
        (s_[i_ + 1] == '"' || s_[i_ + 1] == '\''))
      return 1;
    return 0;
  }

  // One string literal, and those right after it ("a" "b" is "ab", as Python joins them).
  std::optional<json> strings() {
    std::string out;
    do {
      if (!string_literal(out)) return std::nullopt;
      skip();
    } while (i_ < s_.size() && (s_[i_] == '"' || s_[i_] == '\'' || string_prefix_length() > 0));
    return json(std::move(out));
  }

  bool string_literal(std::string& out) {
    bool raw = false;
    if (const size_t p = string_prefix_length(); p > 0) {
      raw = s_[i_] == 'r' || s_[i_] == 'R';
      i_ += p;
    }
    const char q = s_[i_];
    const bool triple = i_ + 2 < s_.size() && s_[i_ + 1] == q && s_[i_ + 2] == q;
    i_ += triple ? 3 : 1;
    uint32_t pending_high = 0;  // a \uD8xx waiting for its low half
    const auto flush_high = [&] {
      if (pending_high != 0) unicode::append_utf8(out, 0xFFFD);
      pending_high = 0;
    };
    for (;;) {
      if (i_ >= s_.size()) return false;
      const char c = s_[i_];
      if (c == q && (!triple || (i_ + 2 < s_.size() && s_[i_ + 1] == q && s_[i_ + 2] == q))) {
        i_ += triple ? 3 : 1;
        flush_high();
        return true;
      }
      if ((c == '\n' || c == '\r') && !triple) return false;
      if (c != '\\') {
        flush_high();
        out += c;
        ++i_;
        continue;
      }
      if (i_ + 1 >= s_.size()) return false;
      const char e = s_[i_ + 1];
      if (raw) {  // the backslash stays, and keeps a quote from ending the string
        flush_high();
        out += c;
        out += e;
        i_ += 2;
        continue;
      }
      i_ += 2;
      uint32_t cp = 0;
      int digits = 0;
      switch (e) {
        case '\n':
          continue;  // a line continuation
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case 'x':
          digits = 2;
          break;
        case 'u':
          digits = 4;
          break;
        case 'U':
          digits = 8;
          break;
        case 'N':
          return false;  // \N{NAME}: no name table here
        default:
          if (e >= '0' && e <= '7') {
            cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k, ++i_)
              cp = cp * 8 + static_cast<uint32_t>(s_[i_] - '0');
            flush_high();
            unicode::append_utf8(out, cp);
            continue;
          }
          out += '\\';  // Python keeps an unknown escape as written
          out += e;
      }
      if (digits == 0) {
        flush_high();
        continue;
      }
      for (int k = 0; k < digits; ++k, ++i_) {
        if (i_ >= s_.size() || hex_value(s_[i_]) < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(hex_value(s_[i_]));
      }
      if (cp > 0x10FFFF) return false;
      if (cp >= 0xDC00 && cp <= 0xDFFF && pending_high != 0) {
        unicode::append_utf8(out, 0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00));
        pending_high = 0;
        continue;
      }
      flush_high();
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        pending_high = cp;
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        unicode::append_utf8(out, 0xFFFD);  // a lone low half
      } else {
        unicode::append_utf8(out, cp);
      }
    }
  }

  // An int (decimal, 0x, 0o, 0b; '_' between digits) or a float, with leading signs.
  std::optional<json> number() {
    bool negative = false;
    while (peek() == '-' || peek() == '+') negative ^= s_[i_++] == '-';
    skip();
    const size_t start = i_;
    while (i_ < s_.size() &&
           (is_ident_char(s_[i_]) || s_[i_] == '.' ||
            ((s_[i_] == '-' || s_[i_] == '+') && i_ > start && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E'))))
      ++i_;
    std::string text;
    for (char c : s_.substr(start, i_ - start))
      if (c != '_') text += c;
    if (text.empty()) return std::nullopt;
    json value;
    if (text.size() > 2 && text[0] == '0' && std::string_view("xXoObB").find(text[1]) != std::string_view::npos) {
      const int base = text[1] == 'x' || text[1] == 'X' ? 16 : text[1] == 'o' || text[1] == 'O' ? 8 : 2;
      errno = 0;
      char* end = nullptr;
      const unsigned long long v = std::strtoull(text.c_str() + 2, &end, base);
      if (errno != 0 || end != text.c_str() + text.size() || v > static_cast<unsigned long long>(INT64_MAX))
        return std::nullopt;
      value = static_cast<int64_t>(v);
    } else {
      // Python's 5. and .5 are JSON's 5.0 and 0.5; the rest of its decimal literals JSON reads as they are
      // (leading zeros, which Python refuses, JSON refuses too).
      std::string decimal;
      if (text.front() == '.') decimal += '0';
      for (size_t k = 0; k < text.size(); ++k) {
        decimal += text[k];
        if (text[k] == '.' && (k + 1 == text.size() || !is_digit(text[k + 1]))) decimal += '0';
      }
      text = std::move(decimal);
      value = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (value.is_discarded() || !value.is_number()) return std::nullopt;
    }
    if (!negative) return value;
    if (value.is_number_float()) return json(-value.get<double>());
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      if (value.get<uint64_t>() == static_cast<uint64_t>(INT64_MAX) + 1) return json(INT64_MIN);
      return json(-value.get<double>());
    }
    return json(-value.get<int64_t>());
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<std::vector<PythonicCall>> parse_pythonic_calls(std::string_view text) {
  Reader r(text);
  if (!r.eat('[')) return std::nullopt;
  std::vector<PythonicCall> calls;
  for (;;) {
    if (r.eat(']')) break;
    std::optional<std::string> name = r.identifier();
    if (!name || !r.eat('(')) return std::nullopt;
    json arguments = json::object();
    for (;;) {
      if (r.eat(')')) break;
      std::optional<std::string> key = r.identifier();
      if (!key || !r.eat('=') || arguments.contains(*key)) return std::nullopt;  // positional, or given twice
      std::optional<json> v = r.value(1);
      if (!v) return std::nullopt;
      arguments[*key] = std::move(*v);
      if (r.eat(',')) continue;
      if (r.eat(')')) break;
      return std::nullopt;
    }
    calls.push_back({std::move(*name), std::move(arguments)});
    if (r.eat(',')) continue;
    if (r.eat(']')) break;
    return std::nullopt;
  }
  if (!r.at_end() || calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace kvserve::server
