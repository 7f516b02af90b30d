#pragma once
// Parses a template's tokens into statements, with jinja2's operator precedence. Throws Error naming the
// line for a syntax error or a tag kvserve does not render (extends, include, import, call).
#include <string_view>

#include "jinja/ast.h"

namespace kvserve::jinja {

Body parse_template(std::string_view source);

}  // namespace kvserve::jinja
