#pragma once
// Chat prompt formatting: a model's Jinja template as transformers renders it (render_jinja_chat_template),
// and, for a family's name or a template kvserve's Jinja does not render, as llama.cpp's built-in (non-Jinja)
// llm_chat_apply_template renders it, for every template family llama.cpp 0.3.36 knows. The family is detected from the
// vocabulary's Jinja source by the same tests llama.cpp makes, or named directly ("chatml", "llama3", "mistral-v7",
// ...). One thing the Jinja template does that llama.cpp's built-in path drops is kept: a ChatML template's default
// system message (chatml_default_system_message).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/vocab.h"

namespace kvserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (some families also know "tool")
  std::string content;
  // The message's other fields a Jinja template reads, as an object (or null): an assistant's tool_calls
  // (each call's arguments an object, as transformers' templates expect), a tool result's tool_call_id and
  // name, an assistant's reasoning_content. The family renderers ignore them.
  nlohmann::ordered_json extra;
};

enum class ChatTemplateFamily {
  ChatML,          // <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen2, ...)
  Llama2,          // [INST] ... [/INST], system text folded into the first turn
  Llama2Sys,       // [INST] <<SYS>>\n...\n<</SYS>>\n\n ... [/INST]
  Llama2SysBos,    // as Llama2Sys, later turns start with <s>[INST]
  Llama2SysStrip,  // as Llama2Sys, message text trimmed
  MistralV1,
  MistralV3,
  MistralV3Tekken,
  MistralV7,
  MistralV7Tekken,
  Phi3,
  Phi4,
  Falcon3,
  Zephyr,
  Monarch,
  Gemma,  // <start_of_turn>user\n...<end_of_turn>\n, "assistant" is "model"
  Orion,
  OpenChat,
  Vicuna,
  VicunaOrca,
  DeepSeek,
  DeepSeek2,
  DeepSeek3,  // DeepSeek-V3 / R1 and the R1 distills
  DeepSeekOcr,
  CommandR,
  Llama3,  // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  ChatGlm3,
  ChatGlm4,
  GlmEdge,
  MiniCpm,
  Exaone3,
  Exaone4,
  ExaoneMoe,
  RwkvWorld,
  Granite,
  Granite40,
  Granite41,
  GigaChat,
  Megrez,
  Yandex,
  Bailing,
  BailingThink,
  Bailing2,
  Llama4,
  SmolVlm,
  HunyuanMoe,
  GptOss,
  HunyuanDense,
  HunyuanVl,
  KimiK2,
  SeedOss,
  Grok2,
  PanguEmbedded,
  SolarOpen,
};

// llama.cpp's name of a family ("chatml", "llama2-sys-bos", ...).
std::string_view chat_template_name(ChatTemplateFamily family);
// The family llama.cpp calls `name`; nullopt for a name it does not know.
std::optional<ChatTemplateFamily> chat_template_from_name(std::string_view name);
// Every family's name, in llama.cpp's order.
std::vector<std::string_view> chat_template_names();

// Family of a chat template (its Jinja source, or a family's name); ChatML when the text is empty or not
// recognized.
ChatTemplateFamily detect_chat_template(std::string_view jinja_source);

// The system message a ChatML template writes when the conversation brings none: the text of a Jinja string
// literal that holds a whole system turn ('<|im_start|>system\n...<|im_end|>'), as SmolLM2's ("You are a
// helpful AI assistant named SmolLM, trained by Hugging Face"), Qwen2's and Qwen2.5's templates have it.
// nullopt where the template has none.
std::optional<std::string> chatml_default_system_message(std::string_view jinja_source);

std::string apply_chat_template(ChatTemplateFamily family, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);
// The date a Llama 3.1-3.3 template writes in the system header it opens every conversation with
// ("Cutting Knowledge Date: December 2023\nToday Date: <date>\n\n", then the conversation's own system
// message): its default `date_string` literal ("26 Jul 2024" in 3.1 and 3.3), or `today` where the template
// takes the day's date from strftime_now (3.2). nullopt for a template without that header.
std::optional<std::string> llama3_header_date(std::string_view jinja_source, std::string_view today);

// The system message a Granite template writes when the conversation brings none (nor tools or documents):
// Granite 4.0's `g4_default_system_message` literal, or Granite 3.3's "Knowledge Cutoff Date: April 2024.
// Today's Date: <today as "%B %d, %Y">. You are Granite, developed by IBM. You are a helpful AI assistant."
// (`today` as "%d %b %Y"). nullopt for other templates (Granite 4.1 writes none).
std::optional<std::string> granite_default_system_message(std::string_view jinja_source, std::string_view today);

// The vocabulary's Jinja template rendered as transformers' apply_chat_template renders it (jinja2's semantics,
// src/jinja): messages, add_generation_prompt, the vocabulary's BOS / EOS text as bos_token / eos_token,
// tools and documents none, strftime_now on `today` ("%d %b %Y"). A BOS (EOS) text the template writes at
// the start (end) is dropped where the tokenizer adds that token itself, as llama.cpp does, so the prompt
// does not hold it twice. nullopt where the template is empty, a family's name, or uses what kvserve's Jinja
// does not render (a message on stderr says so once); throws Error naming the template's message when the
// template itself rejects the conversation (raise_exception: roles that do not alternate, ...).
// `template_kwargs` (an object, or null) adds variables, as vLLM's and llama-server's chat_template_kwargs
// do (Qwen3's enable_thinking, ...).
std::optional<std::string> render_jinja_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs,
                                                      bool add_generation_prompt, std::string_view today,
                                                      const nlohmann::ordered_json& template_kwargs);

// The fallback of apply_chat_template where the Jinja renderer gives nothing: the template's family, rendered
// as llama.cpp's built-in renderer does, except that a ChatML template's default system message
// (chatml_default_system_message) opens a conversation that has none, as the Jinja template itself does
// (the model was tuned with it), and so do a Llama 3.1-3.3 template's system header (llama3_header_date)
// and a Granite 3.3 / 4.0 template's default system message (granite_default_system_message).
std::string apply_family_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs,
                                       bool add_generation_prompt, std::string_view today);

// As below, with `today` ("05 Dec 2026", strftime's "%d %b %Y") for a template that writes the day's date.
std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                std::string_view today);
// As above, with a Jinja template's extra variables (render_jinja_chat_template's template_kwargs).
std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                std::string_view today, const nlohmann::ordered_json& template_kwargs);
// The prompt of a chat request: the conversation, then the assistant's turn header. A conversation that
// ends with an assistant message asks the model to go on with that message (llama-server's assistant
// prefill): the turns before it with the header, then its text, with no end of turn after it.
std::string render_chat_prompt(const Vocab& vocab, const std::vector<ChatMessage>& msgs, std::string_view today,
                               const nlohmann::ordered_json& template_kwargs);
// Today's local date as a template's `today` ("05 Dec 2026").
std::string local_date_for_chat_template();
// The vocabulary's template as render_jinja_chat_template renders it (with today's local date), as
// transformers' apply_chat_template, llama-server with Jinja and vLLM do; where that gives nullopt,
// apply_family_chat_template. SmolLM2, one user message: 37 prompt tokens (its default system message), as
// llama-server's, where llama.cpp's built-in renderer gives 16.
std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt);

}  // namespace kvserve
