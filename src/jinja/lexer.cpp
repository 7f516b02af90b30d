#include "jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/unicode.h"

namespace kvserve::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool strip_next = false;  // the previous tag ended with '-'
    bool trim_next = false;   // the previous tag was a block or comment (trim_blocks)
    while (pos_ < s_.size()) {
      size_t open = find_tag(pos_);
      std::string text = s_.substr(pos_, (open == std::string::npos ? s_.size() : open) - pos_);
      // As jinja2's lstrip_blocks sees it: the text starts a line when the tag before it ended one (its
      // trim_blocks or '-' consumed a newline).
      bool text_at_line_start = pos_ == 0 || s_[pos_ - 1] == '\n';
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        if (k > 0) text_at_line_start = text[k - 1] == '\n';
        text.erase(0, k);
      } else if (trim_next && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
        text_at_line_start = true;
      }
      if (open == std::string::npos) {
        push_text(std::move(text));
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const char mod = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {
        // lstrip_blocks: only spaces and tabs between the line's start and the tag.
        const size_t nl = text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if ((nl != std::string::npos || text_at_line_start) &&
            std::all_of(text.begin() + static_cast<long>(from), text.end(),
                        [](char c) { return c == ' ' || c == '\t'; }))
          text.erase(from);
      }
      push_text(std::move(text));
      line_ = line_at(open);
      pos_ = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = s_.find("#}", pos_);
        if (close == std::string::npos) fail("template line {}: comment not closed", line_);
        strip_next = close > pos_ && s_[close - 1] == '-';
        trim_next = !(close > pos_ && s_[close - 1] == '+');
        pos_ = close + 2;
        continue;
      }
      if (kind == '%' && is_raw_tag()) {
        strip_next = false;
        trim_next = true;
        if (lex_raw(strip_next, trim_next)) continue;
      }
      tokens_.push_back({kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line_});
      const char end_char = kind == '{' ? '}' : '%';
      bool end_strip = false, end_keep = false;
      lex_tag(end_char, end_strip, end_keep);
      tokens_.push_back({kind == '{' ? Token::Type::VarEnd : Token::Type::BlockEnd, "", line_});
      strip_next = end_strip;
      trim_next = kind == '%' && !end_keep;
    }
    tokens_.push_back({Token::Type::End, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  size_t line_at(size_t p) {
    while (line_pos_ < p && line_pos_ < s_.size()) {
      if (s_[line_pos_] == '\n') ++line_count_;
      ++line_pos_;
    }
    return line_count_;
  }

  void push_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, std::move(text), line_});
  }

  bool is_raw_tag() const {
    size_t p = pos_;
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < s_.size() && is_space(s_[p])) ++p;
    return s_.compare(p, 2, "%}") == 0 || s_.compare(p, 3, "-%}") == 0;
  }

  // {% raw %}...{% endraw %}: the text between as it is.
  bool lex_raw(bool& strip_next, bool& trim_next) {
    size_t p = s_.find("%}", pos_);
    const bool open_strip = s_[p - 1] == '-';
    p += 2;
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 2)) {
      size_t r = q + 2;
      const bool close_lstrip = r < s_.size() && s_[r] == '-';
      if (close_lstrip || (r < s_.size() && s_[r] == '+')) ++r;
      while (r < s_.size() && is_space(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && is_space(s_[r])) ++r;
      const bool close_strip = r < s_.size() && s_[r] == '-';
      if (close_strip) ++r;
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string body = s_.substr(p, q - p);
      if (open_strip) {
        size_t k = 0;
        while (k < body.size() && is_space(body[k])) ++k;
        body.erase(0, k);
      } else if (!body.empty() && body[0] == '\n') {
        body.erase(0, 1);
      }
      if (close_lstrip) {
        while (!body.empty() && is_space(body.back())) body.pop_back();
      } else {
        const size_t nl = body.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos && std::all_of(body.begin() + static_cast<long>(from), body.end(),
                                                   [](char c) { return c == ' ' || c == '\t'; }))
          body.erase(from);
      }
      push_text(std::move(body));
      pos_ = r + 2;
      strip_next = close_strip;
      trim_next = true;
      return true;
    }
    fail("template line {}: raw block not closed", line_);
  }

  void lex_tag(char end_char, bool& end_strip, bool& end_keep) {
    int depth = 0;
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) fail("template line {}: tag not closed", line_);
      const char c = s_[pos_];
      if (depth == 0) {
        if (c == end_char && pos_ + 1 < s_.size() && s_[pos_ + 1] == '}') {
          pos_ += 2;
          return;
        }
        if ((c == '-' || c == '+') && s_.compare(pos_ + 1, 1, std::string(1, end_char)) == 0 && pos_ + 2 < s_.size() &&
            s_[pos_ + 2] == '}') {
          end_strip = c == '-';
          end_keep = c == '+';
          pos_ += 3;
          return;
        }
      }
      if (is_name_start(c)) {
        const size_t b = pos_;
        while (pos_ < s_.size() && (is_name_start(s_[pos_]) || is_digit(s_[pos_]))) ++pos_;
        tokens_.push_back({Token::Type::Name, s_.substr(b, pos_ - b), line_});
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static constexpr const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* o : kOps2)
          if (s_.compare(pos_, 2, o) == 0) op = o;
        if (op.size() == 1 && std::strchr("+-*/%~<>=()[]{},.:|!", c) == nullptr)
          fail("template line {}: unexpected character '{}' in a tag", line_, c);
        if (op == "!") fail("template line {}: unexpected character '!' in a tag", line_);
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        pos_ += op.size();
        tokens_.push_back({Token::Type::Op, op, line_});
      }
    }
  }

  void lex_number() {
    const size_t b = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < s_.size() && (is_digit(s_[pos_]) || s_[pos_] == '_')) ++pos_;
    };
    digits();
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && is_digit(s_[p])) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text = s_.substr(b, pos_ - b);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line_});
  }

  void lex_string(char quote) {
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("template line {}: string not closed", line_);
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("template line {}: string not closed", line_);
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'a':
          out += '\a';
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
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > s_.size()) fail("template line {}: bad \\{} escape", line_, e);
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = s_[pos_ + k];
            const int v = is_digit(h)              ? h - '0'
                          : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                          : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                   : -1;
            if (v < 0) fail("template line {}: bad \\{} escape", line_, e);
            cp = cp * 16 + static_cast<uint32_t>(v);
          }
          if (cp > 0x10ffff) fail("template line {}: bad \\{} escape", line_, e);
          pos_ += n;
          unicode::append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            // Python's octal escape (jinja2 decodes its strings with "unicode-escape"): up to 3 digits.
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++k)
              cp = cp * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
            unicode::append_utf8(out, cp);
            break;
          }
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Type::String, std::move(out), line_});
  }

  std::string s_;
  size_t pos_ = 0;
  size_t line_ = 1;
  size_t line_pos_ = 0, line_count_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace kvserve::jinja
