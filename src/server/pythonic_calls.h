#pragma once
// Tool calls written as a Python list of calls, the "pythonic" format (Llama 3.2 and Llama 4 with their pythonic
// templates, ToolACE; vLLM's pythonic and llama4_pythonic parsers):
//   [get_weather(city="Paris", days=3), get_time(zone='UTC')]
// The whole text must be that list, with at least one call: each a plain name called with keyword arguments only,
// each argument a Python literal: a string ('...', "...", triple-quoted, r-prefixed), a number (a leading sign
// allowed), True / False / None, a list or tuple, or a dict with string or number keys, nested as deep as
// kMaxPythonicDepth (the argument itself is level 1). Anything else (an expression, a positional argument, text around
// the list) is not calls.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::server {

inline constexpr int kMaxPythonicDepth = 64;

struct PythonicCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object
};

// The calls `text` (surrounding whitespace ignored) lists, or nullopt when it is not such a list.
std::optional<std::vector<PythonicCall>> parse_pythonic_calls(std::string_view text);

}  // namespace kvserve::server
