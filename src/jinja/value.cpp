#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kvserve::jinja {

namespace {
thread_local size_t* t_work_left = nullptr;
}  // namespace

void charge_work(size_t units) {
  if (t_work_left == nullptr) return;
  if (units > *t_work_left) {
    *t_work_left = 0;
    fail("the template does too much work (a loop building ever longer strings or lists?)");
  }
  *t_work_left -= units;
}

WorkBudget::WorkBudget(size_t units) : left_(units), outer_(t_work_left) { t_work_left = &left_; }
WorkBudget::~WorkBudget() { t_work_left = outer_; }

Value::Value(const Value& o)
    : kind_(o.kind_),
      generator_(o.generator_),
      tuple_(o.tuple_),
      markup_(o.markup_),
      depth_(o.depth_),
      b_(o.b_),
      i_(o.i_),
      d_(o.d_),
      s_(o.s_),
      a_(o.a_),
      o_(o.o_),
      f_(o.f_) {
  charge_work(1 + s_.size());
}

Value& Value::operator=(const Value& o) {
  if (this != &o) {
    Value copy(o);
    *this = std::move(copy);
  }
  return *this;
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Object::key(const std::string& text) const {
  for (const auto& [k, v] : number_keys)
    if (k == text) return v;
  return Value(text);
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : named)
    if (k == name) return &v;
  return nullptr;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::generator(Array a) {
  Value v(std::move(a));
  v.generator_ = true;
  return v;
}
Value Value::tuple(Array a) {
  Value v(std::move(a));
  v.tuple_ = true;
  return v;
}
Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}
Value::Value(bool b) : kind_(Kind::Bool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double d) : kind_(Kind::Float), d_(d) {}
Value::Value(std::string s) : kind_(Kind::String), s_(std::move(s)) { charge_work(1 + s_.size()); }
namespace {

// Deeper than any template's data; it bounds the recursion of printing (repr, tojson) and freeing values.
constexpr uint16_t kMaxValueDepth = 200;

template <typename Items, typename Get>
uint16_t depth_of(const Items& items, Get get) {
  uint16_t d = 0;
  for (const auto& x : items) d = std::max(d, get(x));
  if (d >= kMaxValueDepth) fail("values nested deeper than {}", kMaxValueDepth);
  return static_cast<uint16_t>(d + 1);
}

}  // namespace

Value::Value(Array a) : kind_(Kind::Array), a_(std::make_shared<Array>(std::move(a))) {
  charge_work(1 + a_->size());
  depth_ = depth_of(*a_, [](const Value& v) { return v.depth_; });
}
Value::Value(std::shared_ptr<Object> o) : kind_(Kind::Object), o_(std::move(o)) {
  // A namespace prints as <Namespace> and has no JSON form: what it holds adds nothing to the depth.
  depth_ = o_->is_namespace ? 1 : depth_of(o_->items, [](const auto& kv) { return kv.second.depth_; });
}
Value::Value(Function f) : kind_(Kind::Function), f_(std::make_shared<Function>(std::move(f))) {}

namespace {

template <typename Json>
Value value_from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value(j.template get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return Value(j.template get<int64_t>());
    case Json::value_t::number_float:
      return Value(j.template get<double>());
    case Json::value_t::string:
      return Value(j.template get<std::string>());
    case Json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(value_from_json(e));
      return Value(std::move(a));
    }
    case Json::value_t::object: {
      auto o = std::make_shared<Object>();
      for (const auto& [k, e] : j.items()) o->items.emplace_back(k, value_from_json(e));
      return Value(std::move(o));
    }
    default:
      return {};
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("integer overflow in {} + {}", a, b);
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow in {} - {}", a, b);
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow in {} * {}", a, b);
  return r;
}
int64_t float_to_int(double d) {
  // 2^63 is exact as a double; anything at or past it (or nan) has no int64.
  if (!(d > -9223372036854775808.0 - 1024.0 && d < 9223372036854775808.0)) fail("cannot convert {} to an integer", d);
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}

int64_t Value::as_int() const {
  if (kind_ == Kind::Float) return float_to_int(d_);
  return i_;
}

double Value::as_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return b_;
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return d_ != 0;
    case Kind::String:
      return !s_.empty();
    case Kind::Array:
      return generator_ || !a_->empty();
    case Kind::Object:
      return o_->is_namespace || !o_->items.empty();
    case Kind::Function:
      return true;
  }
  return false;
}

namespace {

// Python's repr of a float: the shortest text that reads back, with ".0" on whole numbers and an exponent
// from 1e16 up or below 1e-4.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const double mag = std::fabs(d);
  std::to_chars_result r{};
  if (mag != 0 && (mag >= 1e16 || mag < 1e-4)) {
    r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  } else {
    r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
  }
  std::string s(buf, r.ptr);
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    // Python writes at least two exponent digits: 1e+16, 1e-05.
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp.erase(0, 1);
    std::string out = mant;
    out += 'e';
    out += sign;
    if (exp.size() < 2) out += '0';
    out += exp;
    return out;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out + quote;
}

// json.dumps's escapes (ensure_ascii=False) are nlohmann's: \" \\ \b \f \n \r \t and \u00XX below 0x20.
void json_string(std::string& out, const std::string& s) {
  out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void to_json_into(std::string& out, const Value& v, int indent, int depth, std::string_view item_sep,
                  std::string_view key_sep, bool sort_keys) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    const size_t pad = static_cast<size_t>(indent) * static_cast<size_t>(d);
    charge_work(pad);
    out.append(pad, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : v.str();
      return;
    }
    case Value::Kind::String:
      json_string(out, v.as_string());
      return;
    case Value::Kind::Array: {
      if (v.is_generator()) fail("Object of type generator is not JSON serializable");
      const Array& a = v.as_array();
      if (a.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        to_json_into(out, a[i], indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Object: {
      if (v.as_object().is_namespace) fail("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_object().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first);
        out += key_sep;
        to_json_into(out, items[i]->second, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Function:
      fail("Object of type function is not JSON serializable");
  }
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return b_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(i_);
    case Kind::Float:
      return float_repr(d_);
    case Kind::String:
      return string_repr(s_);
    case Kind::Array: {
      if (generator_) return "<generator object>";
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < a_->size(); ++i) out += (i ? ", " : "") + (*a_)[i].repr();
      if (tuple_) return out + (a_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::Object: {
      if (o_->is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < o_->items.size(); ++i)
        out += (i ? ", " : "") + o_->key(o_->items[i].first).repr() + ": " + o_->items[i].second.repr();
      return out + "}";
    }
    case Kind::Function:
      return "<function>";
  }
  return "";
}

std::string Value::to_json(int indent, std::string_view item_sep, std::string_view key_sep, bool sort_keys) const {
  std::string out;
  to_json_into(out, *this, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::Array:
      return "list";
    case Kind::Object:
      return "dict";
    case Kind::Function:
      return "function";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::Array: {
      const Array &x = a.as_array(), &y = b.as_array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Object: {
      const Object &x = a.as_object(), &y = b.as_object();
      if (x.is_namespace || y.is_namespace) return a.object_ptr() == b.object_ptr();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (w == nullptr || !equals(v, *w)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_array() && b.is_array()) {
    const Array &x = a.as_array(), &y = b.as_array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_than(x[i], y[i])) return true;
      if (less_than(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

std::vector<std::string> code_points(std::string_view s) {
  charge_work(s.size());
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace kvserve::jinja
