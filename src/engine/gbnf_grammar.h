#pragma once
// GBNF grammars (llama.cpp's format: llama-server's `grammar` field; vLLM's guided_grammar takes the same
// EBNF) compiled to a Grammar the GrammarMatcher walks:
//
//   root   ::= answer ws
//   answer ::= "yes" | "no" | [0-9]+ ("." [0-9]{1,3})?
//   ws     ::= [ \t\n]*        # a comment
//
// Rules `name ::= ...` (names of letters, digits, '-' and '_'; the reply is the `root` rule), alternatives
// `|`, groups `( ... )`, literals "..." and classes [...] / [^...] with ranges (escapes \n \r \t \\ \" \[ \]
// \xHH \uHHHH \UHHHHHHHH, and any other ASCII punctuation escaped as itself), `.` for any character, and the
// repetitions * + ? {m} {m,} {m,n}. A rule may end at a newline or go on over several lines (a new rule starts
// where `name ::=` does). Refused with an Error naming the problem and its line: left recursion (a rule that
// can begin with itself, which llama.cpp refuses too), rules used but not defined or defined twice, token
// references <...>, and grammars that match no text.
//
// Parts that are regular (no recursion through them) become one automaton each (TextPattern), so a string
// or a number is stepped character by character without forks; the rest becomes unions and sequences with
// their empty alternatives worked out at compile time.
#include <memory>
#include <string>

#include "engine/json_grammar.h"

namespace kvserve {

std::shared_ptr<const Grammar> gbnf_grammar(const std::string& text);

}  // namespace kvserve
