#pragma once
// Splits a reasoning model's output into its reasoning and its answer, as vLLM's deepseek_r1 reasoning
// parser and llama-server's --reasoning-format deepseek do: the text between <think> and </think> is
// reasoning_content, the rest content. The model either opens <think> itself (Qwen3, SmolLM3) or the
// prompt already did (the DeepSeek-R1 distills' templates end with "<think>\n"); text that never reaches
// </think> is all reasoning. Fed piece by piece for a stream: a piece that may be the start of a tag is
// held back until the next piece decides it.
#include <string>
#include <string_view>

namespace kvserve::server {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // `opened_by_prompt`: the prompt ends inside a <think> (prompt_opens_reasoning).
  explicit ReasoningSplitter(bool opened_by_prompt);

  // The parts of everything fed so far that are now decided.
  ReasoningSplit feed(std::string_view text);
  // The rest, at the end of the output.
  ReasoningSplit finish();

 private:
  enum class State { Start, Reasoning, Content };
  State state_;
  std::string held_;  // text that may still be (the start of) a tag
};

// The whole output at once.
ReasoningSplit split_reasoning(std::string_view text, bool opened_by_prompt);

// Whether a chat prompt ends inside a <think> block: its last <think> comes after its last </think>.
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace kvserve::server
