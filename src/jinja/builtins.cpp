#include "jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "core/error.h"

namespace kvserve::jinja {

namespace {

// Lists a template builds (range(), "x" * n, ...) stay below this many elements, and strings below this
// many bytes: a template doubling a string in a loop fails instead of taking the machine's memory.
constexpr size_t kMaxBuilt = 1u << 20;
constexpr size_t kMaxString = 64u << 20;

void check_string_size(size_t n) {
  if (n > kMaxString) fail("a string the template builds is over {} bytes", kMaxString);
}

uint32_t decode_cp(const std::string& ch) {
  const auto* b = reinterpret_cast<const unsigned char*>(ch.data());
  if (ch.size() == 1) return b[0];
  if (ch.size() == 2) return ((b[0] & 0x1fu) << 6) | (b[1] & 0x3fu);
  if (ch.size() == 3) return ((b[0] & 0x0fu) << 12) | ((b[1] & 0x3fu) << 6) | (b[2] & 0x3fu);
  return ((b[0] & 0x07u) << 18) | ((b[1] & 0x3fu) << 12) | ((b[2] & 0x3fu) << 6) | (b[3] & 0x3fu);
}

bool is_python_space(const std::string& ch) {
  const uint32_t c = decode_cp(ch);
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}
std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string title_case(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = prev_cased ? ascii_lower(std::string(1, c))[0] : ascii_upper(std::string(1, c))[0];
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = ascii_upper(out.substr(0, 1))[0];
  return out;
}

// A copy: callers pass temporaries as the fallback.
Value arg(const CallArgs& args, size_t i, std::string_view name, const Value& fallback) {
  const Value* v = args.get(i, name);
  return v != nullptr ? *v : fallback;
}

const Value& required(const CallArgs& args, size_t i, std::string_view name, std::string_view what) {
  const Value* v = args.get(i, name);
  if (v == nullptr) fail("{}() is missing its argument '{}'", what, name);
  return *v;
}

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) fail("{} expects a string, got {}", what, v.type_name());
  return v.as_string();
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (count == 0) return s;
  if (to.size() > from.size()) {
    // Every replacement grows the text: at most one per byte (and one more where `from` is empty).
    const size_t most = from.empty() ? s.size() + 1 : s.size() / from.size();
    const size_t n = count < 0 ? most : std::min(most, static_cast<size_t>(count));
    if (n > 0 && (to.size() - from.size()) > kMaxString / n) fail("replace() would build over {} bytes", kMaxString);
    check_string_size(s.size() + n * (to.size() - from.size()));
  }
  std::string out;
  if (from.empty()) {  // Python puts `to` between every character (and at both ends)
    const std::vector<std::string> cps = code_points(s);
    int64_t done = 0;
    for (const std::string& cp : cps) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  for (size_t at = s.find(from); at != std::string::npos && (count < 0 || done < count); at = s.find(from, pos)) {
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Array split(const std::string& s, const Value& sep_v, int64_t maxsplit, bool from_right) {
  Array out;
  if (sep_v.is_undefined() || sep_v.is_none()) {
    // Runs of whitespace separate, and the ends' whitespace gives no empty strings; past maxsplit words
    // the rest stays as it is (its far end's whitespace too), as Python's str.split / rsplit.
    const std::vector<std::string> cps = code_points(s);
    auto join = [&](size_t b, size_t e) {
      std::string t;
      for (size_t k = b; k < e; ++k) t += cps[k];
      return t;
    };
    std::vector<std::string> words;
    const size_t n = cps.size();
    if (!from_right) {
      size_t i = 0;
      for (;;) {
        while (i < n && is_python_space(cps[i])) ++i;
        if (i == n) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          words.push_back(join(i, n));
          break;
        }
        const size_t b = i;
        while (i < n && !is_python_space(cps[i])) ++i;
        words.push_back(join(b, i));
      }
    } else {
      size_t j = n;
      for (;;) {
        while (j > 0 && is_python_space(cps[j - 1])) --j;
        if (j == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          words.push_back(join(0, j));
          break;
        }
        const size_t e = j;
        while (j > 0 && !is_python_space(cps[j - 1])) --j;
        words.push_back(join(j, e));
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto& w : words) out.emplace_back(std::move(w));
    return out;
  }
  const std::string& sep = need_string(sep_v, "split()");
  if (sep.empty()) fail("split(): empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    int64_t done = 0;
    for (size_t at = s.find(sep); at != std::string::npos && (maxsplit < 0 || done < maxsplit); at = s.find(sep, pos)) {
      parts.push_back(s.substr(pos, at - pos));
      pos = at + sep.size();
      ++done;
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
      if (end < sep.size()) break;
      const size_t at = s.rfind(sep, end - sep.size());
      if (at == std::string::npos) break;
      parts.insert(parts.begin(), s.substr(at + sep.size(), end - at - sep.size()));
      end = at;
      ++done;
    }
    parts.insert(parts.begin(), s.substr(0, end));
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const Value& v) {
    const std::string& p = need_string(v, start ? "startswith()" : "endswith()");
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_array()) {
    for (const Value& v : what.as_array())
      if (one(v)) return true;
    return false;
  }
  return one(what);
}

// str.format with {} / {0} / {name} fields (no format specs).
std::string python_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = fmt.find('}', i);
      if (close == std::string::npos) fail("format(): '{{' not closed");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t k = std::strtoul(field.c_str(), nullptr, 10);
        v = k < args.positional.size() ? &args.positional[k] : nullptr;
      } else {
        for (const auto& [name, val] : args.named)
          if (name == field) v = &val;
      }
      if (v == nullptr) fail("format(): no argument for field '{{{}}}'", field);
      out += v->str();
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

// printf-style "%s" % value (and %d, %r, %%).
std::string percent_format(const std::string& fmt, const Value& values) {
  Array vals = values.is_array() ? values.as_array() : Array{values};
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 >= fmt.size()) fail("incomplete format");
    const char f = fmt[++i];
    if (f == '%') {
      out += '%';
      continue;
    }
    if (k >= vals.size()) fail("not enough arguments for format string");
    const Value& v = vals[k++];
    if (f == 's') {
      out += v.str();
    } else if (f == 'r') {
      out += v.repr();
    } else if (f == 'd' || f == 'i') {
      if (!v.is_number()) fail("%d format: a number is required, not {}", v.type_name());
      out += std::to_string(v.as_int());
    } else {
      fail("format character '{}' is not supported", f);
    }
  }
  if (k < vals.size()) fail("not all arguments converted during string formatting");
  return out;
}

Value bound(Function f) { return Value(std::move(f)); }

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bound([s, name](const CallArgs& a) {
      const Value* chars = a.get(0, "chars");
      return Value(python_strip(s, chars, name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bound([s, name](const CallArgs& a) {
      const Value& sep = arg(a, 0, "sep", Value());
      const Value& maxsplit = arg(a, 1, "maxsplit", Value(-1));
      return Value(split(s, sep, maxsplit.as_int(), name == "rsplit"));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bound([s, name](const CallArgs& a) {
      return Value(starts_or_ends(s, required(a, 0, "prefix", name), name == "startswith"));
    });
  }
  if (name == "replace") {
    return bound([s](const CallArgs& a) {
      const Value& count = arg(a, 2, "count", Value(-1));
      return Value(replace_all(s, need_string(required(a, 0, "old", "replace"), "replace()"),
                               need_string(required(a, 1, "new", "replace"), "replace()"), count.as_int()));
    });
  }
  if (name == "upper") return bound([s](const CallArgs&) { return Value(ascii_upper(s)); });
  if (name == "lower") return bound([s](const CallArgs&) { return Value(ascii_lower(s)); });
  if (name == "title") return bound([s](const CallArgs&) { return Value(title_case(s)); });
  if (name == "capitalize") return bound([s](const CallArgs&) { return Value(capitalize(s)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bound([s, name](const CallArgs& a) {
      const std::string& sub = need_string(required(a, 0, "sub", name), name + "()");
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(code_points(s).size() + 1));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return Value(n);
      }
      const size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name == "index" || name == "rindex") fail("substring not found");
        return Value(-1);
      }
      return Value(static_cast<int64_t>(code_points(s.substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return bound([s](const CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(required(a, 0, "iterable", "join"))) {
        if (!first) out += s;
        first = false;
        out += need_string(v, "join()");
        check_string_size(out.size());
      }
      return Value(out);
    });
  }
  if (name == "splitlines") {
    return bound([s](const CallArgs& a) {
      const bool keep = arg(a, 0, "keepends", Value(false)).truthy();
      Array out;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t at = s.find_first_of("\n\r", pos);
        if (at == std::string::npos) {
          out.emplace_back(s.substr(pos));
          break;
        }
        size_t end = at + 1;
        if (s[at] == '\r' && end < s.size() && s[end] == '\n') ++end;
        out.emplace_back(s.substr(pos, (keep ? end : at) - pos));
        pos = end;
      }
      return Value(std::move(out));
    });
  }
  if (name == "format") return bound([s](const CallArgs& a) { return Value(python_format(s, a)); });
  if (name == "removeprefix" || name == "removesuffix") {
    return bound([s, name](const CallArgs& a) {
      const std::string& fix = need_string(required(a, 0, "prefix", name), name + "()");
      if (name == "removeprefix") return Value(s.compare(0, fix.size(), fix) == 0 ? s.substr(fix.size()) : s);
      if (fix.size() <= s.size() && s.compare(s.size() - fix.size(), fix.size(), fix) == 0)
        return Value(s.substr(0, s.size() - fix.size()));
      return Value(s);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return bound([s, name](const CallArgs&) {
      if (s.empty()) return Value(false);
      bool any_cased = false;
      for (const char c : s) {
        const bool digit = c >= '0' && c <= '9', lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        any_cased = any_cased || lower || upper;
        if (name == "isdigit" && !digit) return Value(false);
        if (name == "isalpha" && !(lower || upper)) return Value(false);
        if (name == "isalnum" && !(lower || upper || digit)) return Value(false);
        if (name == "isspace" && !is_python_space(std::string(1, c))) return Value(false);
        if (name == "islower" && upper) return Value(false);
        if (name == "isupper" && lower) return Value(false);
      }
      return Value(name == "islower" || name == "isupper" ? any_cased : true);
    });
  }
  return {};
}

Value dict_method(const Value& obj, const std::string& name) {
  if (obj.as_object().is_namespace) return {};
  if (name == "items") {
    return bound([obj](const CallArgs&) {
      Array out;
      for (const auto& [k, v] : obj.as_object().items) out.push_back(Value::tuple(Array{obj.as_object().key(k), v}));
      return Value(std::move(out));
    });
  }
  if (name == "keys") {
    return bound([obj](const CallArgs&) {
      Array out;
      for (const auto& kv : obj.as_object().items) out.push_back(obj.as_object().key(kv.first));
      return Value(std::move(out));
    });
  }
  if (name == "values") {
    return bound([obj](const CallArgs&) {
      Array out;
      for (const auto& kv : obj.as_object().items) out.push_back(kv.second);
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return bound([obj](const CallArgs& a) {
      const Value& key = required(a, 0, "key", "get");
      if (key.is_string())
        if (const Value* v = obj.as_object().find(key.as_string())) return *v;
      return arg(a, 1, "default", Value::none());
    });
  }
  return {};
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    return bound([obj, name](const CallArgs& a) {
      const Value& x = required(a, 0, "value", name);
      int64_t n = 0;
      const Array& items = obj.as_array();
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") fail("{} is not in list", x.repr());
      return Value(n);
    });
  }
  if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
      name == "clear" || name == "sort" || name == "reverse" || name == "update")
    fail("access to attribute '{}' of '{}' object is unsafe", name, obj.type_name());
  return {};
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return static_cast<int64_t>(code_points(v.as_string()).size());
    case Value::Kind::Array:
      if (v.is_generator()) fail("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.as_array().size());
    case Value::Kind::Object:
      return static_cast<int64_t>(v.as_object().items.size());
    default:
      fail("object of type '{}' has no len()", v.type_name());
  }
}

// A dotted attribute path ("function.name") looked up item by item, as jinja2's make_attrgetter does.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value(static_cast<int64_t>(std::atoll(part.c_str())))) : get_item(cur, Value(part));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs out;
  for (size_t i = from; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.named = a.named;
  return out;
}

Array select_items(const Value& v, const CallArgs& a, bool by_attr, bool keep_when) {
  Array out;
  const size_t test_at = by_attr ? 1 : 0;
  const std::string attr = by_attr ? need_string(required(a, 0, "attribute", "selectattr"), "selectattr()") : "";
  const Value* test = a.positional.size() > test_at ? &a.positional[test_at] : nullptr;
  const CallArgs test_args = rest_args(a, test_at + 1);
  if (!v.truthy()) return out;  // jinja2 walks a sequence only when it is true (none gives nothing)
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? attribute_path(item, attr) : item;
    const bool pass = test != nullptr ? apply_test(need_string(*test, "a test name"), x, test_args) : x.truthy();
    if (pass == keep_when) out.push_back(item);
  }
  return out;
}

Value sort_items(const Value& v, const CallArgs& a) {
  Array items = iterate(v);
  const bool reverse = arg(a, 0, "reverse", Value(false)).truthy();
  const bool case_sensitive = arg(a, 1, "case_sensitive", Value(false)).truthy();
  const Value& attribute = arg(a, 2, "attribute", Value());
  auto key = [&](const Value& x) {
    Value k = attribute.is_string() ? attribute_path(x, attribute.as_string()) : x;
    if (!case_sensitive && k.is_string()) return Value(ascii_lower(k.as_string()));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value(std::move(items));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string indent_lines(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad = width.is_string()
                              ? width.as_string()
                              : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
  // jinja2 appends a newline and splits the lines, so a trailing newline leaves an empty last line.
  std::vector<std::string> lines;
  const std::string text = s + "\n";
  size_t pos = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', pos)) {
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  check_string_size(s.size() + (lines.size() + 1) * pad.size());
  std::string out = lines[0];
  for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (blank || !lines[i].empty() ? pad : "") + lines[i];
  return first ? pad + out : out;
}

}  // namespace

std::string python_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  const bool whitespace = chars == nullptr || chars->is_none() || chars->is_undefined();
  if (!whitespace) set = code_points(need_string(*chars, "strip()"));
  auto strip_it = [&](const std::string& cp) {
    return whitespace ? is_python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      fail("'{}' is undefined (reading its attribute '{}')", "value", name);
    case Value::Kind::String:
      return string_method(obj.as_string(), name);
    case Value::Kind::Object: {
      if (Value m = dict_method(obj, name); !m.is_undefined()) return m;
      if (const Value* v = obj.as_object().find(name)) return *v;
      return {};
    }
    case Value::Kind::Array:
      return list_method(obj, name);
    default:
      return {};
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      fail("undefined value has no item {}", key.repr());
    case Value::Kind::Object:
      if (key.is_string()) {
        if (const Value* v = obj.as_object().find(key.as_string())) return *v;
        return dict_method(obj, key.as_string());
      }
      if (key.is_number())
        if (const Value* v = obj.as_object().find(key.str())) return *v;
      return {};
    case Value::Kind::Array:
    case Value::Kind::String: {
      if (!key.is_int()) {
        if (key.is_string()) return get_attr(obj, key.as_string());
        return {};
      }
      if (obj.is_array()) {
        if (obj.is_generator()) return {};
        const Array& a = obj.as_array();
        int64_t i = key.as_int();
        if (i < 0) i += static_cast<int64_t>(a.size());
        if (i < 0 || i >= static_cast<int64_t>(a.size())) return {};
        return a[static_cast<size_t>(i)];
      }
      const std::vector<std::string> cps = code_points(obj.as_string());
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(cps.size());
      if (i < 0 || i >= static_cast<int64_t>(cps.size())) return {};
      return Value(cps[static_cast<size_t>(i)]);
    }
    default:
      return {};
  }
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) fail("slice {} must be an integer, got {}", what, v.type_name());
    return v.as_int();
  };
  const int64_t step = opt(step_v, "step").value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  Array items;
  std::vector<std::string> cps;
  int64_t n = 0;
  if (obj.is_array()) {
    n = static_cast<int64_t>(obj.as_array().size());
  } else if (obj.is_string()) {
    cps = code_points(obj.as_string());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_undefined()) {
    fail("undefined value cannot be sliced");
  } else {
    fail("'{}' object is not subscriptable", obj.type_name());
  }
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(opt(start_v, "start"), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(opt(stop_v, "stop"), step > 0 ? n : -1);
  std::string s;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (obj.is_array()) {
      items.push_back(obj.as_array()[static_cast<size_t>(i)]);
    } else {
      s += cps[static_cast<size_t>(i)];
    }
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return obj.is_array() ? Value(std::move(items)) : Value(std::move(s));
}

Array iterate(const Value& v) {
  if (v.is_array()) charge_work(v.as_array().size());
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::Array:
      return v.as_array();
    case Value::Kind::Object: {
      Array keys;
      for (const auto& kv : v.as_object().items) keys.push_back(v.as_object().key(kv.first));
      return keys;
    }
    case Value::Kind::String: {
      Array chars;
      for (auto& cp : code_points(v.as_string())) chars.emplace_back(std::move(cp));
      return chars;
    }
    default:
      fail("'{}' object is not iterable", v.type_name());
  }
}

bool contains(const Value& c, const Value& item) {
  charge_work(c.is_array() ? c.as_array().size() : c.is_string() ? c.as_string().size() : 1);
  switch (c.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not {}", item.type_name());
      return c.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::Array:
      for (const Value& v : c.as_array())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Object:
      return (item.is_string() || item.is_number()) && c.as_object().find(item.str()) != nullptr;
    default:
      fail("argument of type '{}' is not iterable", c.type_name());
  }
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string x = a.str(), y = b.str();
    check_string_size(x.size() + y.size());
    return Value(x + y);
  }
  auto unsupported = [&]() -> Value {
    if (a.is_undefined() || b.is_undefined()) fail("undefined value used in '{}'", op);
    fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
  };
  const bool floats = a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float;
  if (op == "+") {
    if (a.is_number() && b.is_number())
      return floats ? Value(a.as_double() + b.as_double()) : Value(checked_add(a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      check_string_size(a.as_string().size() + b.as_string().size());
      // Markup + str escapes the plain side (jinja2's |safe strings are markupsafe.Markup).
      if (a.is_markup() || b.is_markup())
        return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                             (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_array() && b.is_array() && !a.is_generator() && !b.is_generator()) {
      if (a.as_array().size() + b.as_array().size() > kMaxBuilt) fail("a list the template builds is too long");
      Array out = a.as_array();
      out.insert(out.end(), b.as_array().begin(), b.as_array().end());
      return Value(std::move(out));
    }
    return unsupported();
  }
  if (op == "*" &&
      (((a.is_string() || a.is_array()) && b.is_int()) || ((b.is_string() || b.is_array()) && a.is_int()))) {
    const Value& seq = a.is_int() ? b : a;
    const int64_t n = std::max<int64_t>(0, (a.is_int() ? a : b).as_int());
    const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_array().size();
    if (unit != 0 && static_cast<uint64_t>(n) > kMaxBuilt / unit) fail("repetition too large");
    if (seq.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += seq.as_string();
      return Value(std::move(out));
    }
    Array out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_array().begin(), seq.as_array().end());
    return Value(std::move(out));
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  if (!a.is_number() || !b.is_number()) return unsupported();
  if (op == "-") return floats ? Value(a.as_double() - b.as_double()) : Value(checked_sub(a.as_int(), b.as_int()));
  if (op == "*") return floats ? Value(a.as_double() * b.as_double()) : Value(checked_mul(a.as_int(), b.as_int()));
  if (op == "/") {
    if (b.as_double() == 0) fail("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0) fail("integer division or modulo by zero");
    if (floats) {
      const double x = a.as_double(), y = b.as_double();
      const double q = std::floor(x / y);
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    if (y == -1) return op == "//" ? Value(checked_sub(0, x)) : Value(static_cast<int64_t>(0));
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return op == "//" ? Value(q) : Value(r);
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) {
        r = checked_mul(r, a.as_int());
        if (r == 0 || r == 1) break;  // 0 and 1 stay; -1 alternates but never overflows
        if (r == -1 && i + 1 < b.as_int()) {
          r = (b.as_int() - i - 1) % 2 == 0 ? -1 : 1;
          break;
        }
      }
      return Value(r);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  return unsupported();
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "string") return Value(v.str());
  if (name == "trim") return Value(python_strip(v.str(), a.get(0, "chars"), true, true));
  if (name == "upper") return Value(ascii_upper(v.str()));
  if (name == "lower") return Value(ascii_lower(v.str()));
  if (name == "title") return Value(title_case(v.str()));
  if (name == "capitalize") return Value(capitalize(v.str()));
  if (name == "safe") return v.is_markup() ? v : Value::markup(v.str());
  if (name == "e" || name == "escape" || name == "forceescape")
    return v.is_markup() && name != "forceescape" ? v : Value::markup(html_escape(v.str()));
  if (name == "tojson") {
    const Value& indent = arg(a, 0, "indent", Value());
    const Value& separators = arg(a, 1, "separators", Value());
    // json.dumps takes any indent; past 1024 spaces a level is only a way to exhaust memory.
    const int ind = indent.is_int() ? static_cast<int>(std::clamp<int64_t>(indent.as_int(), -1, 1024)) : -1;
    std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
    if (separators.is_array() && separators.as_array().size() == 2) {
      item_sep = separators.as_array()[0].str();
      key_sep = separators.as_array()[1].str();
    }
    if (v.is_undefined()) fail("Object of type Undefined is not JSON serializable");
    return Value(v.to_json(ind, item_sep, key_sep, arg(a, 2, "sort_keys", Value(false)).truthy()));
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value(""));
    return v;
  }
  if (name == "join") {
    const std::string sep = arg(a, 0, "d", Value("")).str();
    const Value& attribute = arg(a, 1, "attribute", Value());
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += (attribute.is_string() ? attribute_path(x, attribute.as_string()) : x).str();
      check_string_size(out.size());
    }
    return Value(out);
  }
  if (name == "first" || name == "last") {
    if (name == "last" && v.is_generator()) fail("'generator' object is not reversible");
    const Array items = iterate(v);
    if (items.empty()) return {};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value(Array{});
    if (!v.is_object()) fail("items filter expects a dict, got {}", v.type_name());
    Array out;
    for (const auto& [k, x] : v.as_object().items) out.push_back(Value::tuple(Array{v.as_object().key(k), x}));
    return Value(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = code_points(v.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value(out);
    }
    Array items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "sort") return sort_items(v, a);
  if (name == "unique") {
    Array out;
    for (const Value& x : iterate(v)) {
      const bool seen = std::any_of(out.begin(), out.end(), [&](const Value& y) {
        return x.is_string() && y.is_string() ? ascii_lower(x.as_string()) == ascii_lower(y.as_string()) : equals(x, y);
      });
      if (!seen) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (name == "min" || name == "max") {
    const Array items = iterate(v);
    if (items.empty()) return {};
    const Value* best = &items[0];
    for (const Value& x : items)
      if (name == "min" ? less_than(x, *best) : less_than(*best, x)) best = &x;
    return *best;
  }
  if (name == "sum") {
    const Value& attribute = arg(a, 0, "attribute", Value());
    Value total = arg(a, 1, "start", Value(0));
    for (const Value& x : iterate(v))
      total = binary_op("+", total, attribute.is_string() ? attribute_path(x, attribute.as_string()) : x);
    return total;
  }
  if (name == "replace") {
    return Value(replace_all(v.str(), required(a, 0, "old", "replace").str(), required(a, 1, "new", "replace").str(),
                             arg(a, 2, "count", Value(-1)).is_int() ? arg(a, 2, "count", Value(-1)).as_int() : -1));
  }
  if (name == "selectattr" || name == "rejectattr")
    return Value::generator(select_items(v, a, true, name == "selectattr"));
  if (name == "select" || name == "reject") return Value::generator(select_items(v, a, false, name == "select"));
  if (name == "map") {
    Array out;
    if (!v.truthy()) return Value::generator(std::move(out));
    const Value* attribute = nullptr;
    for (const auto& [k, x] : a.named)
      if (k == "attribute") attribute = &x;
    if (attribute != nullptr) {
      const Value* def = nullptr;
      for (const auto& [k, x] : a.named)
        if (k == "default") def = &x;
      for (const Value& x : iterate(v)) {
        Value got = attribute_path(x, need_string(*attribute, "map(attribute=)"));
        out.push_back(got.is_undefined() && def != nullptr ? *def : got);
      }
      return Value::generator(std::move(out));
    }
    const std::string& filter = need_string(required(a, 0, "filter", "map"), "map()");
    const CallArgs filter_args = rest_args(a, 1);
    for (const Value& x : iterate(v)) out.push_back(apply_filter(filter, x, filter_args));
    return Value::generator(std::move(out));
  }
  if (name == "attr") return get_attr(v, need_string(required(a, 0, "name", "attr"), "attr()"));
  if (name == "int") {
    const Value& def = arg(a, 0, "default", Value(0));
    if (v.is_number()) return Value(v.as_int());
    if (v.is_string()) {
      const std::string t = python_strip(v.as_string(), nullptr, true, true);
      int64_t x = 0;
      const auto r = std::from_chars(t.data(), t.data() + t.size(), x);
      if (r.ec == std::errc() && r.ptr == t.data() + t.size()) return Value(x);
      char* end = nullptr;
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(d)) return Value(float_to_int(d));
    }
    return def;
  }
  if (name == "float") {
    const Value& def = arg(a, 0, "default", Value(0.0));
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      const std::string t = python_strip(v.as_string(), nullptr, true, true);
      char* end = nullptr;
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end == t.c_str() + t.size()) return Value(d);
    }
    return def;
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::Float) return Value(std::fabs(v.as_double()));
    if (v.is_int()) return Value(v.as_int() < 0 ? checked_sub(0, v.as_int()) : v.as_int());
    fail("bad operand type for abs(): '{}'", v.type_name());
  }
  if (name == "round") {
    const int64_t precision = arg(a, 0, "precision", Value(0)).as_int();
    const std::string method = arg(a, 1, "method", Value("common")).str();
    const double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_double() * scale;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value(r / scale);
  }
  if (name == "indent") {
    return Value(indent_lines(v.str(), arg(a, 0, "width", Value(4)), arg(a, 1, "first", Value(false)).truthy(),
                              arg(a, 2, "blank", Value(false)).truthy()));
  }
  if (name == "wordcount") return Value(static_cast<int64_t>(split(v.str(), Value(), -1, false).size()));
  if (name == "format") return Value(percent_format(v.str(), Value(a.positional)));
  if (name == "center") {
    const int64_t width = arg(a, 0, "width", Value(80)).as_int();
    const std::string s = v.str();
    const int64_t n = static_cast<int64_t>(code_points(s).size());
    if (width <= n) return Value(s);
    const int64_t total = std::min<int64_t>(width - n, static_cast<int64_t>(kMaxBuilt));
    const int64_t left = total / 2 + (total & width & 1);
    return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
  }
  if (name == "dictsort") {
    if (!v.is_object()) fail("dictsort expects a dict, got {}", v.type_name());
    Array pairs;
    for (const auto& [k, x] : v.as_object().items) pairs.push_back(Value::tuple(Array{v.as_object().key(k), x}));
    std::stable_sort(pairs.begin(), pairs.end(), [](const Value& x, const Value& y) {
      const Value &a = x.as_array()[0], &b = y.as_array()[0];
      if (a.is_string() && b.is_string()) return ascii_lower(a.as_string()) < ascii_lower(b.as_string());
      return less_than(a, b);
    });
    return Value(std::move(pairs));
  }
  fail("no filter named '{}'", name);
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.kind() == Value::Kind::Int;
  if (name == "float") return v.kind() == Value::Kind::Float;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
  if (name == "sequence") return v.is_string() || (v.is_array() && !v.is_generator()) || v.is_object();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && ascii_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && ascii_upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) fail("the {} test expects an integer, got {}", name, v.type_name());
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& n = required(a, 0, "num", "divisibleby");
    if (!v.is_int() || !n.is_int() || n.as_int() == 0) fail("divisibleby expects nonzero integers");
    return n.as_int() == -1 || v.as_int() % n.as_int() == 0;
  }
  const Value& other = required(a, 0, "other", name);
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(other, v);
  if (name == "le" || name == "<=") return !less_than(other, v);
  if (name == "ge" || name == ">=") return !less_than(v, other);
  if (name == "in") return contains(other, v);
  if (name == "sameas") {
    if (v.is_object() && other.is_object()) return v.object_ptr() == other.object_ptr();
    return (v.is_none() && other.is_none()) || (v.is_bool() && other.is_bool() && v.as_bool() == other.as_bool());
  }
  fail("no test named '{}'", name);
}

Value global_function(const std::string& name) {
  if (name == "range") {
    return bound([](const CallArgs& a) {
      if (a.positional.empty() || a.positional.size() > 3) fail("range() takes 1 to 3 arguments");
      for (const Value& x : a.positional)
        if (!x.is_int()) fail("range() expects integers, got {}", x.type_name());
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() == 3) step = a.positional[2].as_int();
      }
      if (step == 0) fail("range() arg 3 must not be zero");
      Array out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (out.size() >= kMaxBuilt) fail("range() too large");
        out.emplace_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return Value(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return bound([ns](const CallArgs& a) {
      auto o = std::make_shared<Object>();
      o->is_namespace = ns;
      for (const Value& p : a.positional) {
        if (!p.is_object()) fail("{}() takes a dict as its positional argument", ns ? "namespace" : "dict");
        for (const auto& [k, x] : p.as_object().items) o->set(k, x);
      }
      for (const auto& [k, x] : a.named) o->set(k, x);
      return Value(std::move(o));
    });
  }
  return {};
}

}  // namespace kvserve::jinja
