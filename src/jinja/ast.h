#pragma once
// The parsed form of a template: expressions and the statements that hold them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,      // value
    Name,         // name
    List,         // items
    Dict,         // items as key, value pairs
    Attr,         // a.name
    Index,        // a[b]
    Slice,        // a[b:c:d], missing parts null
    Call,         // a(args, kwargs)
    Filter,       // a | name(args, kwargs)
    Test,         // a is [not] name(args)
    Neg,          // -a
    Not,          // not a
    And,          // a and b
    Or,           // a or b
    Binary,       // a op b: + - * / // % ** ~
    Compare,      // a op b: == != < > <= >= in, "not in"
    Conditional,  // b if a else c
  };
  Kind kind;
  size_t line = 0;
  Value value;
  std::string name;  // Name, Attr, Filter, Test; Binary / Compare: the operator
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // Test: "is not"
  bool tuple = false;    // List: written as a tuple, (a, b) or a, b
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: (condition or null for else, body)
    For,       // targets in expr [if filter] body [else else_body]
    Set,       // targets / attr target = expr
    SetBlock,  // {% set name %}body{% endset %}
    Macro,     // name(params with defaults) body
    Break,
    Continue,
    FilterBlock,  // {% filter name(args) %}body{% endfilter %}: expr is the filter applied to a placeholder
    Scope,        // a body rendered as it is ({% generation %})
  };
  Kind kind;
  size_t line = 0;
  std::string text;
  ExprPtr expr, filter;
  std::vector<std::string> targets;  // For / Set names; Set of "ns.attr": targets = {ns}, attr = attr
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name, default (may be null)
};

}  // namespace kvserve::jinja
