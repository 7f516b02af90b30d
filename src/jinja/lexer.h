#pragma once
// Splits a Jinja template into text and the tokens of its tags, applying the whitespace rules transformers
// renders chat templates with: trim_blocks (the newline after a block or comment tag goes), lstrip_blocks
// (spaces and tabs before a block or comment tag that starts a line go), `-` on a tag strips all whitespace
// on that side, `+` keeps it, the template's line ends become "\n" and one trailing newline is dropped.
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::jinja {

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Type type;
  std::string text;  // Text: the text; String: the decoded literal; Name / Int / Float / Op: as written
  size_t line = 1;
};

// Throws Error ("template line N: ...") on an unterminated tag or string.
std::vector<Token> tokenize(std::string_view source);

}  // namespace kvserve::jinja
