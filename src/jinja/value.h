#pragma once
// The values a chat template computes with, typed as Python's (jinja2 runs on Python): what a value prints
// as, how it compares and whether it is true follow Python, since a template's output is what transformers'
// jinja2 rendering writes. Lists and dicts are shared (a namespace() is a dict whose attributes `set` may
// assign), strings are UTF-8.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::jinja {

class Value;
using Array = std::vector<Value>;

// A dict keeps its keys in insertion order, as Python's does (tojson and items() show that order).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  // Keys written as numbers ({0: 0, 512: 128}) are kept by their text in `items`, and their values here,
  // so iterating the dict gives numbers back.
  std::vector<std::pair<std::string, Value>> number_keys;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  // The key as the template wrote it (a number or the string).
  Value key(const std::string& text) const;
};

// Positional then keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // The argument at `index` or called `name`; nullptr when neither was given.
  const Value* get(size_t index, std::string_view name) const;
};

using Function = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Function };

  Value() = default;  // undefined
  // A copy of a string costs its length from the render's work budget (charge_work): a template that copies
  // a long string in every step of a loop fails instead of running for hours.
  Value(const Value& o);
  Value& operator=(const Value& o);
  Value(Value&&) noexcept = default;
  Value& operator=(Value&&) noexcept = default;
  ~Value() = default;
  static Value none();
  Value(bool b);     // NOLINT(google-explicit-constructor): literals convert as Python's do
  Value(int64_t i);  // NOLINT(google-explicit-constructor)
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT(google-explicit-constructor)
  Value(double d);                                  // NOLINT(google-explicit-constructor)
  Value(std::string s);                             // NOLINT(google-explicit-constructor)
  Value(const char* s) : Value(std::string(s)) {}   // NOLINT(google-explicit-constructor)
  Value(Array a);                                   // NOLINT(google-explicit-constructor)
  Value(std::shared_ptr<Object> o);                 // NOLINT(google-explicit-constructor)
  Value(Function f);                                // NOLINT(google-explicit-constructor)
  // A lazy sequence as jinja2's select / reject / map return (a Python generator): iterable once, always
  // true, without a length or a JSON form until |list makes it a list.
  static Value generator(Array a);
  // A Python tuple (a (1, 2) literal, a dict's items): a list that prints as (1, 2).
  static Value tuple(Array a);
  // A string marked safe (jinja2's Markup, from |safe or |escape): `+` with a plain string escapes that.
  static Value markup(std::string s);
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);  // keeps the keys' order

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // Python's bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_function() const { return kind_ == Kind::Function; }
  bool is_generator() const { return generator_; }
  bool is_tuple() const { return tuple_; }
  bool is_markup() const { return markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const;  // ints and bools (and floats, truncated)
  double as_double() const;
  const std::string& as_string() const { return s_; }
  const Array& as_array() const { return *a_; }
  Array& as_array() { return *a_; }
  const Object& as_object() const { return *o_; }
  Object& as_object() { return *o_; }
  const std::shared_ptr<Object>& object_ptr() const { return o_; }
  const Function& as_function() const { return *f_; }

  bool truthy() const;
  // Python's str(): what {{ value }} writes.
  std::string str() const;
  // Python's repr(): how a value prints inside a list or dict.
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as transformers'
  // tojson filter writes it; indent < 0 for none.
  std::string to_json(int indent, std::string_view item_sep, std::string_view key_sep, bool sort_keys) const;
  // Python's name of the value's type, for error messages.
  std::string_view type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool generator_ = false;
  bool tuple_ = false;
  bool markup_ = false;
  uint16_t depth_ = 0;  // lists and dicts within: printing and freeing a value recurse this deep
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::shared_ptr<Array> a_;
  std::shared_ptr<Object> o_;
  std::shared_ptr<Function> f_;
};

// Python's ints have no bounds; kvserve's are 64-bit, and a result past them is an Error, not a wrap.
int64_t checked_add(int64_t a, int64_t b);
int64_t checked_sub(int64_t a, int64_t b);
int64_t checked_mul(int64_t a, int64_t b);
// A float as an int (truncated), an Error past int64's range or for nan.
int64_t float_to_int(double d);

// Python's ==, and the order of <, for numbers, strings and lists (false / an error for other mixes).
bool equals(const Value& a, const Value& b);
// Throws an Error naming both types where Python would raise TypeError.
bool less_than(const Value& a, const Value& b);

// Work a render may still do, in units of about one byte or element touched; while a WorkBudget is alive on
// this thread, charge_work takes from it and throws Error when it runs out (elsewhere it does nothing).
void charge_work(size_t units);
class WorkBudget {
 public:
  explicit WorkBudget(size_t units);
  ~WorkBudget();
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;

 private:
  size_t left_;
  size_t* outer_;
};

// The text split into Unicode code points and joined back: Python indexes and slices strings by code point.
std::vector<std::string> code_points(std::string_view utf8);

}  // namespace kvserve::jinja
