#pragma once
// What a template can call on values: jinja2's filters and tests, Python's str / dict / list methods that
// chat templates use (a sandboxed environment's: no list.append), attribute and item lookup with jinja2's
// rules, and the global functions range, namespace and dict. Each throws Error where jinja2 would raise.
#include <string>

#include "jinja/value.h"

namespace kvserve::jinja {

// obj.name: a method of the value's type, else a dict's key; undefined where neither exists. Undefined
// itself has no attributes (an error, as jinja2's UndefinedError).
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: a dict's key (else its method), a list's or string's index (negative from the end); undefined
// when missing.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python's rules; absent parts are undefined values.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The elements a for loop walks: a list's items, a dict's keys, a string's characters; none for undefined.
Array iterate(const Value& v);
// Python's `a in b`.
bool contains(const Value& container, const Value& item);
// Python's binary operators (+ - * / // % **) and jinja2's ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
// range, namespace, dict; undefined for other names.
Value global_function(const std::string& name);

// str.strip() of Python: Unicode whitespace (or the given characters) off both ends.
std::string python_strip(const std::string& s, const Value* chars, bool left, bool right);

}  // namespace kvserve::jinja
