#pragma once
// Splits a reasoning model's output into its reasoning and its answer, as vLLM's deepseek_r1 reasoning
// parser and llama-server's --reasoning-format deepseek do: the text between <think> and </think> is
// reasoning_content, the rest content. The model either opens <think> itself (Qwen3, SmolLM3) or the
// prompt already did (the DeepSeek-R1 distills' templates end with "<think>\n"); text that never reaches
// </think> is all reasoning. Fed piece by piece for a stream: a piece that may be the start of a tag is
// held back until the next piece decides it.
//
// gpt-oss writes the harmony format instead (ReasoningFormat::Harmony): messages
// "<|channel|>NAME ...<|message|>TEXT<|end|>", the later ones opened by "<|start|>assistant", the last one ended
// by <|return|> or <|call|> (end-of-generation tokens, so not in the text). The analysis channel's text is
// reasoning_content; final's and commentary's (the preambles) are content, as vLLM's and llama-server's gpt-oss
// parsers give them; headers are dropped, but a message to a recipient (a tool call) goes to the content whole,
// header and end tag included, for the tool-call parser (ToolCallFormat::Harmony) to read.
//
// Gemma 4 (ReasoningFormat::Gemma4Channel) thinks in "<|channel>thought\n...<channel|>" before its answer, as
// llama.cpp's gemma4 parser reads it: the same as think tags with those two, the whitespace after "thought" dropped.
#include <string>
#include <string_view>

namespace kvserve::server {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

enum class ReasoningFormat { ThinkTags, Harmony, Gemma4Channel };

class ReasoningSplitter {
 public:
  // `opened_by_prompt`: the prompt ends inside a <think> (prompt_opens_reasoning; ThinkTags only).
  explicit ReasoningSplitter(bool opened_by_prompt, ReasoningFormat format = ReasoningFormat::ThinkTags);

  // The parts of everything fed so far that are now decided.
  ReasoningSplit feed(std::string_view text);
  // The rest, at the end of the output.
  ReasoningSplit finish();

 private:
  enum class State { Start, Reasoning, Content, HarmonyHeader, HarmonyBody };
  ReasoningSplit feed_harmony();

  State state_;
  std::string_view open_, close_;  // the reasoning's tags (ThinkTags, Gemma4Channel)
  bool skip_space_ = false;        // Gemma4Channel: at the reasoning's start, whitespace is dropped
  bool analysis_ = false;  // harmony: the message being read is on the analysis channel
  bool passing_ = false;   // harmony: the message being read names a recipient (a tool call): kept whole
  std::string held_;       // text that may still be (the start of) a tag
};

// The whole output at once.
ReasoningSplit split_reasoning(std::string_view text, bool opened_by_prompt,
                               ReasoningFormat format = ReasoningFormat::ThinkTags);

// Whether a rendered chat prompt asks for a harmony reply: it ends with "<|start|>assistant" (gpt-oss's template).
bool prompt_is_harmony(std::string_view prompt);

// Whether a rendered chat prompt asks for a Gemma 4 reply: it ends with "<|turn>model\n", after which its template may
// have closed an empty thought ("<|channel>thought\n<channel|>", thinking off).
bool prompt_is_gemma4(std::string_view prompt);

// Whether a chat prompt ends inside a <think> block (Gemma4Channel: a thought channel): its last opening tag comes
// after its last closing one.
bool prompt_opens_reasoning(std::string_view prompt, ReasoningFormat format = ReasoningFormat::ThinkTags);

}  // namespace kvserve::server
