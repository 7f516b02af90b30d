#pragma once
// Chat prompt formatting for the common template families, as llama.cpp's built-in (non-Jinja)
// llm_chat_apply_template renders them. The family is detected from the vocabulary's Jinja source.
#include <string>
#include <string_view>
#include <vector>

#include "model/vocab.h"

namespace kvserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatTemplateFamily {
  ChatML,         // <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen2, ...)
  Llama2,         // [INST] ... [/INST], system text folded into the first turn
  Llama2Sys,      // [INST] <<SYS>>\n...\n<</SYS>>\n\n ... [/INST]
  Llama2SysBos,   // as Llama2Sys, later turns start with <s>[INST]
  Llama2SysStrip, // as Llama2Sys, message text trimmed
  Llama3,         // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Gemma,          // <start_of_turn>user\n...<end_of_turn>\n, "assistant" is "model"
};

// Family of a Jinja chat template; ChatML when the text is empty or not recognized.
ChatTemplateFamily detect_chat_template(std::string_view jinja_source);

std::string apply_chat_template(ChatTemplateFamily family, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);
std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);

}  // namespace kvserve
