#pragma once
// Checks for numeric options whose messages name the rule ("--request-rate: must be >= 0, got -1"):
// CLI11's PositiveNumber and NonNegativeNumber print their range up to the largest double instead.
#include <CLI/CLI.hpp>
#include <string>

namespace kvserve::cli {

inline CLI::Validator number_check(bool allow_zero) {
  const std::string rule = allow_zero ? ">= 0" : "> 0";
  return CLI::Validator(
      [allow_zero, rule](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "must be a number, got '" + text + "'";
        if (allow_zero ? v >= 0 : v > 0) return {};
        return "must be " + rule + ", got " + text;
      },
      "NUMBER " + rule);
}

inline const CLI::Validator kPositive = number_check(false);
inline const CLI::Validator kNonNegative = number_check(true);

}  // namespace kvserve::cli
