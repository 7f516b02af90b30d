#include "model/chat_template.h"

#include <sstream>

namespace kvserve {

namespace {

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// llama.cpp's trim: ASCII whitespace off both ends.
std::string trim(std::string_view s) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && is_space(s[begin])) ++begin;
  while (end > begin && is_space(s[end - 1])) --end;
  return std::string(s.substr(begin, end - begin));
}

}  // namespace

ChatTemplateFamily detect_chat_template(std::string_view jinja) {
  // Same order of checks as llama.cpp's llm_chat_detect_template for these families.
  if (contains(jinja, "<|im_start|>")) return ChatTemplateFamily::ChatML;
  if (contains(jinja, "[INST]")) {
    if (contains(jinja, "content.strip()")) return ChatTemplateFamily::Llama2SysStrip;
    if (contains(jinja, "bos_token + '[INST]")) return ChatTemplateFamily::Llama2SysBos;
    if (contains(jinja, "<<SYS>>")) return ChatTemplateFamily::Llama2Sys;
    return ChatTemplateFamily::Llama2;
  }
  if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>")) {
    return ChatTemplateFamily::Llama3;
  }
  if (contains(jinja, "<start_of_turn>")) return ChatTemplateFamily::Gemma;
  return ChatTemplateFamily::ChatML;
}

std::string apply_chat_template(ChatTemplateFamily family, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt) {
  std::ostringstream ss;
  switch (family) {
    case ChatTemplateFamily::ChatML:
      for (const ChatMessage& m : msgs) ss << "<|im_start|>" << m.role << "\n" << m.content << "<|im_end|>\n";
      if (add_generation_prompt) ss << "<|im_start|>assistant\n";
      break;

    case ChatTemplateFamily::Llama2:
    case ChatTemplateFamily::Llama2Sys:
    case ChatTemplateFamily::Llama2SysBos:
    case ChatTemplateFamily::Llama2SysStrip: {
      const bool system_block = family != ChatTemplateFamily::Llama2;
      const bool bos_inside_history = family == ChatTemplateFamily::Llama2SysBos;
      const bool strip = family == ChatTemplateFamily::Llama2SysStrip;
      // The tokenizer adds the first BOS; a user turn already ends in [/INST], which is the prompt for
      // the answer, so add_generation_prompt adds nothing.
      bool inside_turn = true;
      ss << "[INST] ";
      for (const ChatMessage& m : msgs) {
        const std::string content = strip ? trim(m.content) : m.content;
        if (!inside_turn) {
          inside_turn = true;
          ss << (bos_inside_history ? "<s>[INST] " : "[INST] ");
        }
        if (m.role == "system") {
          if (system_block) {
            ss << "<<SYS>>\n" << content << "\n<</SYS>>\n\n";
          } else {
            ss << content << "\n";
          }
        } else if (m.role == "user") {
          ss << content << " [/INST]";
        } else {
          ss << content << "</s>";
          inside_turn = false;
        }
      }
      break;
    }

    case ChatTemplateFamily::Llama3:
      for (const ChatMessage& m : msgs) {
        ss << "<|start_header_id|>" << m.role << "<|end_header_id|>\n\n" << trim(m.content) << "<|eot_id|>";
      }
      if (add_generation_prompt) ss << "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;

    case ChatTemplateFamily::Gemma: {
      // Gemma has no system role: the system text is prepended to the next user turn.
      std::string system_prompt;
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          system_prompt += trim(m.content);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        ss << "<start_of_turn>" << role << "\n";
        if (!system_prompt.empty() && role != "model") {
          ss << system_prompt << "\n\n";
          system_prompt.clear();
        }
        ss << trim(m.content) << "<end_of_turn>\n";
      }
      if (add_generation_prompt) ss << "<start_of_turn>model\n";
      break;
    }
  }
  return ss.str();
}

std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
  return apply_chat_template(detect_chat_template(vocab.chat_template), msgs, add_generation_prompt);
}

}  // namespace kvserve
