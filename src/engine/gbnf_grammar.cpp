#include "engine/gbnf_grammar.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/unicode.h"

namespace kvserve {

namespace {

constexpr size_t kMaxText = size_t{1} << 20;
constexpr int kMaxNesting = 64;
constexpr uint32_t kMaxCount = 10000;         // m and n in x{m,n}
constexpr uint32_t kUnbounded = UINT32_MAX;   // x* and x{m,}
constexpr uint32_t kMaxPatternRepeat = 1000;  // TextPattern's own bound
constexpr size_t kMaxSymbols = 200000;        // in all productions, repetitions written out
constexpr size_t kMaxRegexText = 16384;       // a regular part written as one pattern
constexpr size_t kMaxPatterns = 256;          // distinct patterns compiled for one grammar
constexpr size_t kMaxNodes = 50000;
constexpr int kMaxInline = 64;  // rules inlined into one another's patterns
constexpr int kMaxPostfix = 4;  // repetitions of a repetition (x*? ...)

// A rule's body as written: a tree of alternatives, sequences and terminals, each with its repetition.
struct Expr {
  enum class Kind : uint8_t { Text, Class, Ref, Seq, Alt };
  Kind kind = Kind::Seq;
  std::u32string text;                                // Text: code points
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // Class: code point ranges
  bool negated = false;                               // Class: all but the ranges (`.`: none, negated)
  int rule = -1;                                      // Ref
  std::vector<Expr> items;                            // Seq: in order; Alt: the alternatives
  uint32_t min = 1, max = 1;                          // how many times (max kUnbounded: no bound)
};

struct RuleDef {
  std::string name;
  Expr body;
  size_t line = 0;  // where defined, or first used
  bool defined = false;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  explicit GbnfParser(const std::string& text) : s_(text) {}

  std::vector<RuleDef> parse() {
    if (s_.size() > kMaxText) fail("the grammar is longer than {} bytes", kMaxText);
    for (;;) {
      skip();
      if (i_ >= s_.size()) break;
      const size_t line = line_at(i_);
      if (!is_name_char(s_[i_])) error("a rule name");
      const std::string name = parse_name();
      skip();
      if (s_.compare(i_, 3, "::=") != 0) error("'::=' after the rule name '" + name + "'");
      i_ += 3;
      const int id = rule_id(name, line);
      if (rules_[static_cast<size_t>(id)].defined)
        fail("the grammar defines the rule '{}' twice (line {})", name, line);
      rules_[static_cast<size_t>(id)].defined = true;
      rules_[static_cast<size_t>(id)].line = line;
      rules_[static_cast<size_t>(id)].body = parse_alternatives(0);
    }
    for (const RuleDef& r : rules_)
      if (!r.defined) fail("the grammar uses the rule '{}' (line {}) but does not define it", r.name, r.line);
    if (!ids_.contains("root")) fail("the grammar has no 'root' rule (the reply is the root rule)");
    return std::move(rules_);
  }

  int root() const { return ids_.at("root"); }

 private:
  size_t line_at(size_t pos) const {
    return 1 + static_cast<size_t>(std::count(s_.begin(), s_.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
  }

  [[noreturn]] void error(const std::string& expected) const {
    const size_t line = line_at(i_);
    const size_t line_start = s_.rfind('\n', i_ == 0 ? 0 : i_ - 1);
    const size_t column = i_ - (line_start == std::string::npos || i_ == 0 ? 0 : line_start + 1) + 1;
    if (i_ >= s_.size()) fail("the grammar ends where it expects {} (line {})", expected, line);
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (c >= 0x20 && c < 0x7F)
      fail("the grammar has '{}' where it expects {} (line {}, column {})", s_[i_], expected, line, column);
    fail("the grammar has byte 0x{:02X} where it expects {} (line {}, column {})", c, expected, line, column);
  }

  // Spaces, newlines and comments.
  void skip() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t from = i_;
    while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
    return s_.substr(from, i_ - from);
  }

  // Whether the text here starts a new rule (`name ::=`), which ends the one before it.
  bool at_rule_start() {
    const size_t saved = i_;
    parse_name();
    skip();
    const bool yes = i_ > saved && s_.compare(i_, 3, "::=") == 0;
    i_ = saved;
    return yes;
  }

  int rule_id(const std::string& name, size_t line) {
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    RuleDef r;
    r.name = name;
    r.line = line;
    rules_.push_back(std::move(r));
    const int id = static_cast<int>(rules_.size()) - 1;
    ids_.emplace(name, id);
    return id;
  }

  Expr parse_alternatives(int depth) {
    Expr alt;
    alt.kind = Expr::Kind::Alt;
    alt.items.push_back(parse_sequence(depth));
    for (;;) {
      skip();
      if (i_ >= s_.size() || s_[i_] != '|') break;
      ++i_;
      alt.items.push_back(parse_sequence(depth));
    }
    return alt;
  }

  Expr parse_sequence(int depth) {
    Expr seq;
    seq.kind = Expr::Kind::Seq;
    for (;;) {
      skip();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')') break;
      if (depth == 0 && is_name_char(s_[i_]) && at_rule_start()) break;
      Expr item = parse_item(depth);
      for (int postfix = 0;; ++postfix) {
        skip();
        uint32_t min = 0, max = 0;
        if (i_ >= s_.size()) break;
        if (s_[i_] == '*') {
          min = 0, max = kUnbounded, ++i_;
        } else if (s_[i_] == '+') {
          min = 1, max = kUnbounded, ++i_;
        } else if (s_[i_] == '?') {
          min = 0, max = 1, ++i_;
        } else if (s_[i_] == '{') {
          ++i_;
          parse_counts(&min, &max);
        } else {
          break;
        }
        if (postfix >= kMaxPostfix)
          fail("the grammar repeats a repetition more than {} times (line {})", kMaxPostfix, line_at(i_));
        if (item.min != 1 || item.max != 1) {
          Expr wrapped;
          wrapped.kind = Expr::Kind::Seq;
          wrapped.items.push_back(std::move(item));
          item = std::move(wrapped);
        }
        item.min = min;
        item.max = max;
      }
      seq.items.push_back(std::move(item));
    }
    return seq;
  }

  uint32_t parse_count() {
    skip();
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') error("a repetition count");
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(s_[i_] - '0'), uint64_t{kMaxCount} + 1);
      ++i_;
    }
    if (v > kMaxCount) fail("the grammar repeats something more than {} times (line {})", kMaxCount, line_at(i_));
    return static_cast<uint32_t>(v);
  }

  // After '{': m}, m,} or m,n}.
  void parse_counts(uint32_t* min, uint32_t* max) {
    *min = parse_count();
    *max = *min;
    skip();
    if (i_ < s_.size() && s_[i_] == ',') {
      ++i_;
      skip();
      *max = i_ < s_.size() && s_[i_] == '}' ? kUnbounded : parse_count();
      skip();
    }
    if (i_ >= s_.size() || s_[i_] != '}') error("'}' to close a repetition");
    ++i_;
    if (*max < *min) fail("the grammar has a repetition {{{},{}}} out of order (line {})", *min, *max, line_at(i_));
  }

  Expr parse_item(int depth) {
    const char c = s_[i_];
    Expr e;
    if (c == '"') {
      ++i_;
      e.kind = Expr::Kind::Text;
      for (;;) {
        if (i_ >= s_.size()) error("'\"' to close a literal");
        if (s_[i_] == '"') break;
        e.text.push_back(parse_char());
      }
      ++i_;
      return e;
    }
    if (c == '[') {
      ++i_;
      e.kind = Expr::Kind::Class;
      if (i_ < s_.size() && s_[i_] == '^') {
        e.negated = true;
        ++i_;
      }
      for (;;) {
        if (i_ >= s_.size()) error("']' to close a character class");
        if (s_[i_] == ']') break;
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
          ++i_;
          hi = parse_char();
          if (hi < lo) fail("the grammar has a character range out of order (line {})", line_at(i_));
        }
        e.ranges.emplace_back(lo, hi);
      }
      ++i_;
      if (e.ranges.empty() && !e.negated) fail("the grammar has an empty character class [] (line {})", line_at(i_));
      return e;
    }
    if (c == '.') {
      ++i_;
      e.kind = Expr::Kind::Class;
      e.negated = true;
      return e;
    }
    if (c == '(') {
      if (depth + 1 > kMaxNesting) fail("the grammar nests groups more than {} deep", kMaxNesting);
      ++i_;
      Expr alt = parse_alternatives(depth + 1);
      skip();
      if (i_ >= s_.size() || s_[i_] != ')') error("')' to close a group");
      ++i_;
      return alt;
    }
    if (is_name_char(c)) {
      const size_t line = line_at(i_);
      e.kind = Expr::Kind::Ref;
      e.rule = rule_id(parse_name(), line);
      return e;
    }
    if (c == '<' || c == '!')
      fail("the grammar uses a token reference (line {}), which is not supported: write the token's text instead",
           line_at(i_));
    error("a literal, a character class, a group or a rule name");
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (i_ >= s_.size()) error("a hex digit");
      const char d = s_[i_];
      const int x = d >= '0' && d <= '9'   ? d - '0'
                    : d >= 'a' && d <= 'f' ? d - 'a' + 10
                    : d >= 'A' && d <= 'F' ? d - 'A' + 10
                                           : -1;
      if (x < 0) error("a hex digit");
      v = v << 4 | static_cast<uint32_t>(x);
      ++i_;
    }
    return v;
  }

  // One character of a literal or a class: an escape, or one UTF-8 character.
  uint32_t parse_char() {
    const auto c = static_cast<unsigned char>(s_[i_]);
    uint32_t cp = 0;
    if (c == '\\') {
      ++i_;
      if (i_ >= s_.size()) error("an escaped character");
      const char e = s_[i_++];
      switch (e) {
        case 'x':
          cp = hex(2);
          break;
        case 'u':
          cp = hex(4);
          break;
        case 'U':
          cp = hex(8);
          break;
        case 'n':
          cp = '\n';
          break;
        case 'r':
          cp = '\r';
          break;
        case 't':
          cp = '\t';
          break;
        default:
          if (e > 0x20 && e < 0x7F && !std::isalnum(static_cast<unsigned char>(e))) {
            cp = static_cast<unsigned char>(e);
            break;
          }
          --i_;
          error("an escape (\\n \\r \\t \\xHH \\uHHHH \\UHHHHHHHH, or punctuation)");
      }
    } else if (c < 0x80) {
      cp = c;
      ++i_;
    } else {
      const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
      if (n < 0 || i_ + static_cast<size_t>(n) >= s_.size()) error("UTF-8 text");
      cp = c & (0x3F >> n);
      for (int k = 1; k <= n; ++k) {
        const auto b = static_cast<unsigned char>(s_[i_ + static_cast<size_t>(k)]);
        if ((b & 0xC0) != 0x80) error("UTF-8 text");
        cp = cp << 6 | (b & 0x3F);
      }
      const uint32_t least = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
      if (cp < least) error("UTF-8 text");
      i_ += static_cast<size_t>(n) + 1;
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      fail("the grammar has the code point U+{:04X}, which is not a character (line {})", cp, line_at(i_));
    return cp;
  }

  const std::string& s_;
  size_t i_ = 0;
  std::vector<RuleDef> rules_;
  std::map<std::string, int> ids_;
};

// A symbol of a production after lowering: fixed text, a pattern's text (one automaton), or a rule.
struct Sym {
  enum class Kind : uint8_t { Text, Pattern, Rule };
  Kind kind = Kind::Text;
  std::string text;       // Text: UTF-8, never empty
  int index = -1;         // Pattern: into patterns_; Rule: into the rule table
  bool optional = false;  // may be left out (it derives empty text; its part takes the rest)
};
using Production = std::vector<Sym>;

struct BnfRule {
  std::vector<Production> alts;
  int origin = -1;  // the named rule it was written for (for errors)
};

class GbnfCompiler {
 public:
  GbnfCompiler(std::vector<RuleDef> rules, int root) : rules_(std::move(rules)), root_(root) {}

  std::shared_ptr<const Grammar> compile() {
    bnf_.resize(rules_.size());
    regular_.assign(rules_.size(), 0);
    regex_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      bnf_[r].origin = static_cast<int>(r);
      lower_rule(static_cast<int>(r));
    }
    without_empty();
    keep_productive();
    const bool root_empty = nullable_[static_cast<size_t>(root_)] != 0;
    if (!productive_[static_cast<size_t>(root_)])
      fail("the grammar's root matches {}", root_empty ? "only empty text" : "no text");
    std::vector<int> reach = reachable();
    refuse_left_recursion(reach);
    std::vector<GrammarNode> nodes = emit(reach);
    Grammar g = finish_grammar(std::move(nodes), node_of_[static_cast<size_t>(root_)]);
    g.may_be_empty = root_empty;
    return std::make_shared<const Grammar>(std::move(g));
  }

 private:
  // ---- Regular parts as pattern text (TextPattern's ECMAScript subset) ----

  static void append_cp(std::string& out, uint32_t cp) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')) {
      out.push_back(static_cast<char>(cp));
    } else {
      out += fmt::format("\\u{{{:X}}}", cp);
    }
  }

  static std::string class_text(const Expr& e) {
    std::string out = e.negated ? "[^" : "[";
    if (e.negated && e.ranges.empty()) return "[\\u{0}-\\u{10FFFF}]";
    for (const auto& [lo, hi] : e.ranges) {
      append_cp(out, lo);
      if (hi != lo) {
        out.push_back('-');
        append_cp(out, hi);
      }
    }
    out.push_back(']');
    return out;
  }

  // A rule's pattern text where it is regular (no recursion through it, counts within a pattern's bounds,
  // not too long).
  const std::optional<std::string>& rule_regex(int r) {
    const auto i = static_cast<size_t>(r);
    if (regular_[i] == 1) {  // on the path: recursion
      static const std::optional<std::string> none;
      return none;
    }
    if (regular_[i] == 0) {
      // A long chain of rules is lowered as rules rather than followed this deep.
      if (depth_ >= kMaxInline) {
        static const std::optional<std::string> none;
        return none;
      }
      regular_[i] = 1;
      ++depth_;
      regex_[i] = regex_of(rules_[i].body);
      --depth_;
      regular_[i] = 2;
    }
    return regex_[i];
  }

  std::optional<std::string> regex_of(const Expr& e) {
    std::string base;
    switch (e.kind) {
      case Expr::Kind::Text:
        for (uint32_t cp : e.text) append_cp(base, cp);
        break;
      case Expr::Kind::Class:
        base = class_text(e);
        break;
      case Expr::Kind::Ref: {
        const std::optional<std::string>& r = rule_regex(e.rule);
        if (!r) return std::nullopt;
        base = "(?:" + *r + ")";
        break;
      }
      case Expr::Kind::Seq:
        for (const Expr& item : e.items) {
          std::optional<std::string> t = regex_of(item);
          if (!t) return std::nullopt;
          base += "(?:" + *t + ")";
          if (base.size() > kMaxRegexText) return std::nullopt;
        }
        break;
      case Expr::Kind::Alt:
        for (size_t k = 0; k < e.items.size(); ++k) {
          std::optional<std::string> t = regex_of(e.items[k]);
          if (!t) return std::nullopt;
          if (k > 0) base.push_back('|');
          base += *t;
          if (base.size() > kMaxRegexText) return std::nullopt;
        }
        break;
    }
    if (e.min == 1 && e.max == 1) return base;
    if (e.min > kMaxPatternRepeat || (e.max != kUnbounded && e.max > kMaxPatternRepeat)) return std::nullopt;
    std::string out = "(?:" + base + ")";
    if (e.max == kUnbounded) {
      out += e.min == 0 ? "*" : e.min == 1 ? "+" : fmt::format("{{{},}}", e.min);
    } else {
      out += e.min == 0 && e.max == 1 ? std::string("?") : fmt::format("{{{},{}}}", e.min, e.max);
    }
    if (out.size() > kMaxRegexText) return std::nullopt;
    return out;
  }

  // The pattern's index, or -1 where it does not compile within its bounds (the part is then lowered as
  // rules instead). Past kMaxPatterns only a character class (`one_character`) is compiled: its pattern is
  // small, and nothing else can stand for it.
  int pattern(const std::string& text, bool one_character = false) {
    if (auto it = pattern_ids_.find(text); it != pattern_ids_.end()) return it->second;
    int id = -1;
    if (patterns_.size() < kMaxPatterns || one_character) {
      try {
        patterns_.push_back(TextPattern::compile(text, TextPattern::Mode::FullMatch));
        id = static_cast<int>(patterns_.size()) - 1;
      } catch (const Error&) {
        id = -1;
      }
    }
    pattern_ids_.emplace(text, id);
    return id;
  }

  // ---- Lowering to productions ----

  void count(size_t n) {
    symbols_ += n;
    if (symbols_ > kMaxSymbols)
      fail("the grammar is too large (more than {} symbols with repetitions written out)", kMaxSymbols);
  }

  int new_rule(int origin) {
    bnf_.push_back({});
    bnf_.back().origin = origin;
    return static_cast<int>(bnf_.size()) - 1;
  }

  void lower_rule(int r) {
    const Expr& body = rules_[static_cast<size_t>(r)].body;
    if (const std::optional<std::string>& re = rule_regex(r)) {
      const int p = pattern(*re);
      if (p >= 0) {
        bnf_[static_cast<size_t>(r)].alts = {pattern_production(p)};
        return;
      }
    }
    std::vector<Production> alts;
    for (const Expr& seq : body.items) alts.push_back(lower_sequence(seq, r));
    bnf_[static_cast<size_t>(r)].alts = std::move(alts);
  }

  Production pattern_production(int p) {
    count(1);
    Sym s;
    s.kind = Sym::Kind::Pattern;
    s.index = p;
    return {s};
  }

  static bool plain_text(const Expr& e) { return e.kind == Expr::Kind::Text && e.min == 1 && e.max == 1; }

  // A sequence's items: each run of regular items as one pattern (plain literals as text), the others in turn.
  Production lower_sequence(const Expr& seq, int origin) {
    Production out;
    const std::vector<Expr>& items = seq.items;  // the parser makes every alternative a Seq
    size_t k = 0;
    while (k < items.size()) {
      std::string run;
      size_t end = k;
      bool all_text = true;
      for (; end < items.size(); ++end) {
        std::optional<std::string> t = regex_of(items[end]);
        if (!t || run.size() + t->size() > kMaxRegexText) break;
        run += "(?:" + *t + ")";
        all_text = all_text && plain_text(items[end]);
      }
      if (end > k && all_text) {
        std::string bytes;
        for (size_t j = k; j < end; ++j)
          for (uint32_t cp : items[j].text) unicode::append_utf8(bytes, cp);
        if (!bytes.empty()) push_text(out, bytes);
        k = end;
        continue;
      }
      if (end > k) {
        const int p = pattern(run);
        if (p >= 0) {
          const Production one = pattern_production(p);
          out.push_back(one[0]);
          k = end;
          continue;
        }
      }
      lower_item(items[k], origin, out);
      ++k;
    }
    return out;
  }

  void push_text(Production& out, const std::string& bytes) {
    count(1);
    if (!out.empty() && out.back().kind == Sym::Kind::Text) {
      out.back().text += bytes;
      return;
    }
    Sym s;
    s.kind = Sym::Kind::Text;
    s.text = bytes;
    out.push_back(std::move(s));
  }

  static Sym rule_sym(int r) {
    Sym s;
    s.kind = Sym::Kind::Rule;
    s.index = r;
    return s;
  }

  // An item once, its repetition aside.
  void lower_once(const Expr& e, int origin, Production& out) {
    switch (e.kind) {
      case Expr::Kind::Text: {
        std::string bytes;
        for (uint32_t cp : e.text) unicode::append_utf8(bytes, cp);
        if (!bytes.empty()) push_text(out, bytes);
        return;
      }
      case Expr::Kind::Class: {
        Expr one = e;
        one.min = one.max = 1;
        const int p = pattern(class_text(one), /*one_character=*/true);
        if (p < 0) fail("the grammar has a character class that matches no character");
        out.push_back(pattern_production(p)[0]);
        return;
      }
      case Expr::Kind::Ref:
        count(1);
        out.push_back(rule_sym(e.rule));
        return;
      case Expr::Kind::Seq: {
        Expr once = e;
        once.min = once.max = 1;
        Production p = lower_sequence(once, origin);
        for (Sym& s : p) {
          if (s.kind == Sym::Kind::Text) {
            push_text(out, s.text);
          } else {
            out.push_back(std::move(s));
          }
        }
        return;
      }
      case Expr::Kind::Alt: {
        if (e.items.size() == 1) {
          Production p = lower_sequence(e.items[0], origin);
          for (Sym& s : p) out.push_back(std::move(s));
          return;
        }
        const int r = new_rule(origin);
        std::vector<Production> alts;
        for (const Expr& seq : e.items) alts.push_back(lower_sequence(seq, origin));
        bnf_[static_cast<size_t>(r)].alts = std::move(alts);
        count(1);
        out.push_back(rule_sym(r));
        return;
      }
    }
  }

  void lower_item(const Expr& e, int origin, Production& out) {
    if (e.min == 1 && e.max == 1) return lower_once(e, origin, out);
    // The item once, as one symbol.
    Production once;
    lower_once(e, origin, once);
    Sym x;
    if (once.size() == 1) {
      x = once[0];
    } else {
      const int r = new_rule(origin);
      bnf_[static_cast<size_t>(r)].alts = {once};
      x = rule_sym(r);
    }
    // x{m,n}: x m times, then a tail of the rest (x* as S ::= x S | empty; up to k more as O_k ::= x O_k-1 |
    // empty).
    const uint32_t extra = e.max == kUnbounded ? 2 : e.max - e.min;
    count(static_cast<size_t>(e.min) + 2 * static_cast<size_t>(extra));
    const int r = new_rule(origin);
    Production p(e.min, x);
    if (e.max == kUnbounded) {
      const int star = new_rule(origin);
      bnf_[static_cast<size_t>(star)].alts = {{x, rule_sym(star)}, {}};
      p.push_back(rule_sym(star));
    } else if (extra > 0) {
      int chain = new_rule(origin);
      bnf_[static_cast<size_t>(chain)].alts = {{x}, {}};
      for (uint32_t k = 1; k < extra; ++k) {
        const int up = new_rule(origin);
        bnf_[static_cast<size_t>(up)].alts = {{x, rule_sym(chain)}, {}};
        chain = up;
      }
      p.push_back(rule_sym(chain));
    }
    bnf_[static_cast<size_t>(r)].alts = {std::move(p)};
    out.push_back(rule_sym(r));
  }

  // ---- Empty alternatives, worked out ----

  bool nullable(const Sym& s) const {
    switch (s.kind) {
      case Sym::Kind::Text:
        return false;
      case Sym::Kind::Pattern: {
        const TextPattern& p = *patterns_[static_cast<size_t>(s.index)];
        return p.accepting(p.start());
      }
      case Sym::Kind::Rule:
        return nullable_[static_cast<size_t>(s.index)] != 0;
    }
    return false;
  }

  // Each rule becomes its non-empty texts (same index): a production's nullable symbols become optional parts
  // (the matcher takes a part's non-empty texts, or passes over it), and empty productions go. A production of
  // only optional parts still needs one of them, as the matcher's sequences do.
  void without_empty() {
    const size_t n = bnf_.size();
    nullable_.assign(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable_[r]) continue;
        for (const Production& p : bnf_[r].alts)
          if (std::all_of(p.begin(), p.end(), [&](const Sym& s) { return nullable(s); })) {
            nullable_[r] = 1;
            changed = true;
            break;
          }
      }
    }
    eps_ = bnf_;
    for (BnfRule& r : eps_) {
      std::erase_if(r.alts, [](const Production& p) { return p.empty(); });
      for (Production& p : r.alts)
        for (Sym& sym : p) sym.optional = nullable(sym);
    }
  }

  // Rules with some text; optional parts without any are dropped, and productions through required ones.
  void keep_productive() {
    const size_t n = eps_.size();
    productive_.assign(n, 0);
    auto ok = [&](const Sym& s) {
      if (s.kind == Sym::Kind::Rule) return productive_[static_cast<size_t>(s.index)] != 0;
      if (s.kind == Sym::Kind::Pattern) {
        const TextPattern& p = *patterns_[static_cast<size_t>(s.index)];
        return p.has_edges(p.start());
      }
      return true;
    };
    auto production_ok = [&](const Production& p) {
      bool some = false;
      for (const Sym& s : p) {
        if (ok(s)) {
          some = true;
        } else if (!s.optional) {
          return false;
        }
      }
      return some;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (productive_[r]) continue;
        if (std::any_of(eps_[r].alts.begin(), eps_[r].alts.end(), production_ok)) {
          productive_[r] = 1;
          changed = true;
        }
      }
    }
    for (BnfRule& r : eps_) {
      std::erase_if(r.alts, [&](const Production& p) { return !production_ok(p); });
      for (Production& p : r.alts) std::erase_if(p, [&](const Sym& s) { return !ok(s); });
    }
  }

  std::vector<int> reachable() const {
    std::vector<uint8_t> seen(eps_.size(), 0);
    std::vector<int> order{root_}, todo{root_};
    seen[static_cast<size_t>(root_)] = 1;
    while (!todo.empty()) {
      const int r = todo.back();
      todo.pop_back();
      for (const Production& p : eps_[static_cast<size_t>(r)].alts)
        for (const Sym& s : p)
          if (s.kind == Sym::Kind::Rule && !seen[static_cast<size_t>(s.index)]) {
            seen[static_cast<size_t>(s.index)] = 1;
            order.push_back(s.index);
            todo.push_back(s.index);
          }
    }
    return order;
  }

  // A rule that can begin with itself has no first byte to start on: refused, as llama.cpp does.
  void refuse_left_recursion(const std::vector<int>& reach) const {
    std::vector<uint8_t> color(eps_.size(), 0);  // 0: unseen, 1: on the path, 2: done
    std::vector<std::pair<int, size_t>> stack;
    auto firsts = [&](int r) {
      std::vector<int> out;
      for (const Production& p : eps_[static_cast<size_t>(r)].alts)
        for (const Sym& sym : p) {
          if (sym.kind == Sym::Kind::Rule) out.push_back(sym.index);
          if (!sym.optional) break;
        }
      return out;
    };
    for (int start : reach) {
      if (color[static_cast<size_t>(start)]) continue;
      color[static_cast<size_t>(start)] = 1;
      stack.emplace_back(start, 0);
      while (!stack.empty()) {
        const int r = stack.back().first;
        const std::vector<int> kids = firsts(r);
        if (stack.back().second >= kids.size()) {
          color[static_cast<size_t>(r)] = 2;
          stack.pop_back();
          continue;
        }
        const int kid = kids[stack.back().second++];
        if (color[static_cast<size_t>(kid)] == 1)
          fail(
              "the grammar's rule '{}' can begin with itself (left recursion), which is not supported: write it "
              "with a repetition instead (a ::= b (\"+\" b)*)",
              rules_[static_cast<size_t>(eps_[static_cast<size_t>(kid)].origin)].name);
        if (color[static_cast<size_t>(kid)] == 0) {
          color[static_cast<size_t>(kid)] = 1;
          stack.emplace_back(kid, 0);
        }
      }
    }
  }

  // ---- Nodes ----

  int add(std::vector<GrammarNode>& nodes, GrammarNode n) {
    if (nodes.size() >= kMaxNodes) fail("the grammar is too large (more than {} nodes)", kMaxNodes);
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }

  int pattern_node(std::vector<GrammarNode>& nodes, int p) {
    if (pattern_node_.empty()) pattern_node_.assign(patterns_.size(), -1);
    int& id = pattern_node_[static_cast<size_t>(p)];
    if (id < 0) {
      GrammarNode n;
      n.kind = GrammarNode::Kind::Regex;
      n.pattern = patterns_[static_cast<size_t>(p)];
      id = add(nodes, std::move(n));
    }
    return id;
  }

  GrammarNode sequence(std::vector<GrammarNode>& nodes, const Production& p) {
    GrammarNode seq;
    seq.kind = GrammarNode::Kind::Sequence;
    for (const Sym& s : p) {
      if (s.kind == Sym::Kind::Text) {
        if (!seq.parts.empty() && seq.parts.back().node < 0) {
          seq.parts.back().text += s.text;
        } else {
          seq.parts.push_back({s.text, -1});
        }
      } else {
        const int node =
            s.kind == Sym::Kind::Pattern ? pattern_node(nodes, s.index) : node_of_[static_cast<size_t>(s.index)];
        seq.parts.push_back({"", node, s.optional});
      }
    }
    return seq;
  }

  std::vector<GrammarNode> emit(const std::vector<int>& reach) {
    std::vector<GrammarNode> nodes;
    node_of_.assign(eps_.size(), -1);
    for (int r : reach) node_of_[static_cast<size_t>(r)] = add(nodes, GrammarNode{});
    for (int r : reach) {
      const std::vector<Production>& alts = eps_[static_cast<size_t>(r)].alts;
      const int id = node_of_[static_cast<size_t>(r)];
      if (alts.size() == 1) {
        GrammarNode seq = sequence(nodes, alts[0]);
        nodes[static_cast<size_t>(id)] = std::move(seq);
        continue;
      }
      std::vector<int> branches;
      for (const Production& p : alts) {
        if (p.size() == 1 && p[0].kind == Sym::Kind::Rule) {
          branches.push_back(node_of_[static_cast<size_t>(p[0].index)]);
        } else if (p.size() == 1 && p[0].kind == Sym::Kind::Pattern) {
          branches.push_back(pattern_node(nodes, p[0].index));
        } else {
          GrammarNode seq = sequence(nodes, p);
          branches.push_back(add(nodes, std::move(seq)));
        }
      }
      GrammarNode u;
      u.kind = GrammarNode::Kind::Union;
      u.alternatives = std::move(branches);
      nodes[static_cast<size_t>(id)] = std::move(u);
    }
    return nodes;
  }

  std::vector<RuleDef> rules_;
  int root_;
  std::vector<uint8_t> regular_;  // per named rule: 0 unseen, 1 being written, 2 done
  std::vector<std::optional<std::string>> regex_;
  std::vector<std::shared_ptr<const TextPattern>> patterns_;
  std::map<std::string, int> pattern_ids_;
  std::vector<BnfRule> bnf_;  // the named rules first, then the ones lowering adds
  std::vector<BnfRule> eps_;  // bnf_'s rules without empty text
  std::vector<uint8_t> nullable_, productive_;
  std::vector<int> node_of_, pattern_node_;
  size_t symbols_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Grammar> gbnf_grammar(const std::string& text) {
  GbnfParser parser(text);
  std::vector<RuleDef> rules = parser.parse();
  const int root = parser.root();
  GbnfCompiler compiler(std::move(rules), root);
  return compiler.compile();
}

}  // namespace kvserve
