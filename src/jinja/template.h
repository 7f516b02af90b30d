#pragma once
// A Jinja template as transformers renders chat templates: jinja2's syntax and semantics for what chat
// templates use (statements if / for / set / macro / filter / break / continue, jinja2's filters and tests,
// Python's str and dict methods), in a sandbox: no file access, no list mutation, and bounded work
// (loop steps, output size, nesting) so a hostile template fails with an error instead of hanging.
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "jinja/ast.h"
#include "jinja/value.h"

namespace kvserve::jinja {

// What a template's own raise_exception(message) throws: the template rejected its input.
class TemplateRaised : public Error {
 public:
  explicit TemplateRaised(const std::string& msg) : Error(msg) {}
};

class Template {
 public:
  // Throws Error naming the line for a syntax error or a statement kvserve does not render.
  explicit Template(std::string_view source);

  // The output for the variables in `globals` (range, namespace and dict are always there). Throws what a
  // function in `globals` throws (TemplateRaised for raise_exception), Error for anything jinja2 would
  // raise on (an undefined value's attribute, a type error, ...) or a render past the limits.
  std::string render(const Object& globals) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace kvserve::jinja
