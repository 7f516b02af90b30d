// Renders a conversation in one chat template family, as llama.cpp's llm_chat_apply_template does
// (tests/test_chat_template.cpp checks every family against llama.cpp's own output).
#include "model/chat_template.h"

#include <cctype>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

namespace kvserve {

namespace {

using Family = ChatTemplateFamily;

// llama.cpp's trim: ASCII whitespace off both ends.
std::string trim(std::string_view s) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && is_space(s[begin])) ++begin;
  while (end > begin && is_space(s[end - 1])) --end;
  return std::string(s.substr(begin, end - begin));
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Families whose every message is `open(role) + content + close(role)`, after a fixed preamble, with a
// fixed generation prompt. Open and close may name the role with "{role}".
struct FramedFamily {
  Family family;
  std::string_view preamble;
  std::string_view open;
  std::string_view close;
  bool trim_content;
  std::string_view generation_prompt;
};

constexpr FramedFamily kFramed[] = {
    {Family::ChatML, "", "<|im_start|>{role}\n", "<|im_end|>\n", false, "<|im_start|>assistant\n"},
    {Family::Phi3, "", "<|{role}|>\n", "<|end|>\n", false, "<|assistant|>\n"},
    {Family::Phi4, "", "<|im_start|>{role}<|im_sep|>", "<|im_end|>", false, "<|im_start|>assistant<|im_sep|>"},
    {Family::Falcon3, "", "<|{role}|>\n", "\n", false, "<|assistant|>\n"},
    {Family::Zephyr, "", "<|{role}|>\n", "<|endoftext|>\n", false, "<|assistant|>\n"},
    {Family::Llama3, "", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>", true,
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {Family::Llama4, "", "<|header_start|>{role}<|header_end|>\n\n", "<|eot|>", true,
     "<|header_start|>assistant<|header_end|>\n\n"},
    {Family::ChatGlm3, "[gMASK]sop", "<|{role}|>\n ", "", false, "<|assistant|>"},
    {Family::ChatGlm4, "[gMASK]<sop>", "<|{role}|>\n", "", false, "<|assistant|>\n"},
    {Family::GlmEdge, "", "<|{role}|>\n", "", false, "<|assistant|>"},
    {Family::Megrez, "", "<|role_start|>{role}<|role_end|>", "<|turn_end|>", false,
     "<|role_start|>assistant<|role_end|>"},
    {Family::SolarOpen, "", "<|begin|>{role}<|content|>", "<|end|>", false, "<|begin|>assistant"},
    {Family::DeepSeekOcr, "", "", "", false, ""},
};

std::string with_role(std::string_view pattern, std::string_view role) {
  std::string out(pattern);
  const size_t at = out.find("{role}");
  if (at != std::string::npos) out.replace(at, 6, role);
  return out;
}

// Families that give each role its own frame and drop messages of any other role.
struct RoleFrame {
  bool kept = false;  // false: messages of this role are left out
  std::string_view open;
  std::string_view close;
  bool trim_content = false;
};
constexpr RoleFrame frame(std::string_view open, std::string_view close, bool trim_content = false) {
  return {true, open, close, trim_content};
}
constexpr RoleFrame kDropped{};
struct RoleFramedFamily {
  Family family;
  RoleFrame system, user, assistant, tool;  // an empty open and close drops the role
  std::string_view generation_prompt;
};

const RoleFramedFamily kRoleFramed[] = {
    {Family::DeepSeek, frame("", ""), frame("### Instruction:\n", "\n"), frame("### Response:\n", "\n<|EOT|>\n"),
     kDropped, "### Response:\n"},
    {Family::DeepSeek2, frame("", "\n\n"), frame("User: ", "\n\n"), frame("Assistant: ", "<｜end▁of▁sentence｜>"),
     kDropped, "Assistant:"},
    {Family::DeepSeek3, frame("", "\n\n"), frame("<｜User｜>", ""), frame("<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
     kDropped, "<｜Assistant｜>"},
    {Family::CommandR, frame("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true),
     frame("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true),
     frame("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true), kDropped,
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {Family::Exaone3, frame("[|system|]", "[|endofturn|]\n", true), frame("[|user|]", "\n", true),
     frame("[|assistant|]", "[|endofturn|]\n", true), kDropped, "[|assistant|]"},
    {Family::Exaone4, frame("[|system|]", "[|endofturn|]\n", true), frame("[|user|]", "\n", true),
     frame("[|assistant|]", "[|endofturn|]\n", true), frame("[|tool|]", "[|endofturn|]\n", true), "[|assistant|]"},
    {Family::ExaoneMoe, frame("<|system|>\n", "<|endofturn|>\n", true), frame("<|user|>\n", "<|endofturn|>\n", true),
     frame("<|assistant|>\n", "<|endofturn|>\n", true), frame("<|tool|>\n", "<|endofturn|>\n", true),
     "<|assistant|>\n"},
    {Family::Vicuna, frame("", "\n\n"), frame("USER: ", "\n"), frame("ASSISTANT: ", "</s>\n"), kDropped, "ASSISTANT:"},
    {Family::VicunaOrca, frame("SYSTEM: ", "\n"), frame("USER: ", "\n"), frame("ASSISTANT: ", "</s>\n"), kDropped,
     "ASSISTANT:"},
    {Family::KimiK2, frame("<|im_system|>system<|im_middle|>", "<|im_end|>"),
     frame("<|im_user|>user<|im_middle|>", "<|im_end|>"), frame("<|im_assistant|>assistant<|im_middle|>", "<|im_end|>"),
     frame("<|im_system|>tool<|im_middle|>", "<|im_end|>"), "<|im_assistant|>assistant<|im_middle|>"},
    {Family::Grok2, frame("System: ", "<|separator|>\n\n", true), frame("Human: ", "<|separator|>\n\n", true),
     frame("Assistant: ", "<|separator|>\n\n"), kDropped, "Assistant:"},
};

bool render_framed(Family family, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                   std::ostringstream& ss) {
  for (const FramedFamily& f : kFramed) {
    if (f.family != family) continue;
    ss << f.preamble;
    for (const ChatMessage& m : msgs) {
      ss << with_role(f.open, m.role) << (f.trim_content ? trim(m.content) : m.content) << with_role(f.close, m.role);
    }
    if (add_generation_prompt) ss << f.generation_prompt;
    return true;
  }
  for (const RoleFramedFamily& f : kRoleFramed) {
    if (f.family != family) continue;
    for (const ChatMessage& m : msgs) {
      const RoleFrame* fr = m.role == "system"      ? &f.system
                            : m.role == "user"      ? &f.user
                            : m.role == "assistant" ? &f.assistant
                            : m.role == "tool"      ? &f.tool
                                                    : &kDropped;
      if (!fr->kept) continue;
      ss << fr->open << (fr->trim_content ? trim(m.content) : m.content) << fr->close;
    }
    if (add_generation_prompt) ss << f.generation_prompt;
    return true;
  }
  return false;
}

// [INST] families: Llama 2 and its variants, Mistral v1 / v3 / v3-tekken. The tokenizer adds the first
// BOS; a user turn ends in [/INST], which is already the prompt for the answer.
void render_inst(Family family, const std::vector<ChatMessage>& msgs, std::ostringstream& ss) {
  const bool mistral = family == Family::MistralV1 || family == Family::MistralV3 || family == Family::MistralV3Tekken;
  if (mistral) {
    const std::string_view before = family == Family::MistralV1 ? " " : "";
    const std::string_view after = family == Family::MistralV3Tekken ? "" : " ";
    bool inside_turn = false;
    for (const ChatMessage& m : msgs) {
      if (!inside_turn) {
        ss << before << "[INST]" << after;
        inside_turn = true;
      }
      if (m.role == "system") {
        ss << m.content << "\n\n";
      } else if (m.role == "user") {
        ss << m.content << before << "[/INST]";
      } else {
        ss << after << (family == Family::MistralV3 ? trim(m.content) : m.content) << "</s>";
        inside_turn = false;
      }
    }
    return;
  }
  const bool system_block = family != Family::Llama2;
  const bool bos_inside_history = family == Family::Llama2SysBos;
  const bool strip = family == Family::Llama2SysStrip;
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
}

}  // namespace

std::string apply_chat_template(ChatTemplateFamily family, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt) {
  std::ostringstream ss;
  if (render_framed(family, msgs, add_generation_prompt, ss)) return ss.str();
  switch (family) {
    case Family::Llama2:
    case Family::Llama2Sys:
    case Family::Llama2SysBos:
    case Family::Llama2SysStrip:
    case Family::MistralV1:
    case Family::MistralV3:
    case Family::MistralV3Tekken:
      render_inst(family, msgs, ss);
      break;

    case Family::MistralV7:
    case Family::MistralV7Tekken: {
      const std::string_view space = family == Family::MistralV7 ? " " : "";
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss << "[SYSTEM_PROMPT]" << space << m.content << "[/SYSTEM_PROMPT]";
        } else if (m.role == "user") {
          ss << "[INST]" << space << m.content << "[/INST]";
        } else {
          ss << space << m.content << "</s>";
        }
      }
      break;
    }

    case Family::Monarch:
      // The BOS of every message but the first is written out; the tokenizer adds the first.
      for (size_t i = 0; i < msgs.size(); ++i)
        ss << (i == 0 ? "" : "<s>") << msgs[i].role << "\n" << msgs[i].content << "</s>\n";
      if (add_generation_prompt) ss << "<s>assistant\n";
      break;

    case Family::Gemma:
    case Family::Orion: {
      // No system role: the system text goes in front of the next user turn.
      std::string system_prompt;
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          system_prompt += family == Family::Gemma ? trim(m.content) : m.content;
          continue;
        }
        if (family == Family::Orion) {
          if (m.role == "user") {
            ss << "Human: ";
            if (!system_prompt.empty()) ss << std::exchange(system_prompt, {}) << "\n\n";
            ss << m.content << "\n\nAssistant: </s>";
          } else {
            ss << m.content << "</s>";
          }
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        ss << "<start_of_turn>" << role << "\n";
        if (!system_prompt.empty() && role != "model") ss << std::exchange(system_prompt, {}) << "\n\n";
        ss << trim(m.content) << "<end_of_turn>\n";
      }
      if (add_generation_prompt && family == Family::Gemma) ss << "<start_of_turn>model\n";
      break;
    }

    case Family::OpenChat:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss << m.content << "<|end_of_turn|>";
        } else {
          std::string role = m.role;
          if (!role.empty()) role[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(role[0])));
          ss << "GPT4 Correct " << role << ": " << m.content << "<|end_of_turn|>";
        }
      }
      if (add_generation_prompt) ss << "GPT4 Correct Assistant:";
      break;

    case Family::MiniCpm:
      for (const ChatMessage& m : msgs) {
        if (m.role == "user") {
          ss << "<用户>" << trim(m.content) << "<AI>";
        } else {
          ss << trim(m.content);
        }
      }
      break;

    case Family::RwkvWorld:
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "system") {
          ss << "System: " << trim(m.content) << "\n\n";
        } else if (m.role == "user") {
          ss << "User: " << trim(m.content) << "\n\n";
          if (i + 1 == msgs.size()) ss << "Assistant:";
        } else if (m.role == "assistant") {
          ss << "Assistant: " << trim(m.content) << "\n\n";
        }
      }
      break;

    case Family::Granite:
    case Family::Granite40:
    case Family::Granite41:
      for (const ChatMessage& m : msgs) {
        if (m.role == "assistant_tool_call") {
          ss << (family == Family::Granite ? "<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>"
                                           : "<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
        } else {
          ss << "<|start_of_role|>" << m.role << "<|end_of_role|>";
        }
        ss << m.content << "<|end_of_text|>\n";
      }
      if (add_generation_prompt) ss << "<|start_of_role|>assistant<|end_of_role|>";
      break;

    case Family::GigaChat: {
      const bool has_system = !msgs.empty() && msgs[0].role == "system";
      ss << "<s>";
      if (has_system) ss << msgs[0].content << "<|message_sep|>";
      for (size_t i = has_system ? 1 : 0; i < msgs.size(); ++i) {
        if (msgs[i].role == "user") {
          ss << "user<|role_sep|>" << msgs[i].content
             << "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>";
        } else if (msgs[i].role == "assistant") {
          ss << "assistant<|role_sep|>" << msgs[i].content << "<|message_sep|>";
        }
      }
      if (add_generation_prompt) ss << "assistant<|role_sep|>";
      break;
    }

    case Family::Yandex:
      for (const ChatMessage& m : msgs) {
        if (m.role == "user") {
          ss << " Пользователь: " << m.content << "\n\n";
        } else if (m.role == "assistant") {
          ss << " Ассистент: " << m.content << "\n\n";
        }
      }
      if (add_generation_prompt) ss << " Ассистент:[SEP]";
      break;

    case Family::Bailing:
    case Family::BailingThink:
    case Family::Bailing2: {
      const bool two = family == Family::Bailing2;
      if (two && (msgs.empty() || msgs[0].role != "system"))
        ss << "<role>SYSTEM</role>detailed thinking off<|role_end|>";
      for (const ChatMessage& m : msgs) {
        ss << "<role>" << (m.role == "user" ? std::string("HUMAN") : upper(m.role)) << "</role>" << m.content
           << (two ? "<|role_end|>" : "");
      }
      if (add_generation_prompt) ss << "<role>ASSISTANT</role>" << (family == Family::BailingThink ? "<think>" : "");
      break;
    }

    case Family::SmolVlm:
      ss << "<|im_start|>";
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss << m.content << "\n\n";
        } else if (m.role == "user") {
          ss << "User: " << m.content << "<end_of_utterance>\n";
        } else {
          ss << "Assistant: " << m.content << "<end_of_utterance>\n";
        }
      }
      if (add_generation_prompt) ss << "Assistant:";
      break;

    case Family::HunyuanMoe:
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          ss << "<|startoftext|>" << m.content << "<|extra_4|>";
        } else if (m.role == "assistant") {
          ss << m.content << "<|eos|>";
        } else {
          ss << "<|startoftext|>" << m.content << "<|extra_0|>";
        }
      }
      break;

    case Family::GptOss:
      for (const ChatMessage& m : msgs)
        ss << "<|start|>" << m.role << "<|message|>" << m.content << (m.role == "assistant" ? "<|return|>" : "<|end|>");
      if (add_generation_prompt) ss << "<|start|>assistant";
      break;

    case Family::HunyuanDense:
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (i == 0 && m.role == "system") ss << m.content << "<｜hy_place▁holder▁no▁3｜>";
        if (m.role == "assistant") {
          ss << "<｜hy_Assistant｜>" << m.content << "<｜hy_place▁holder▁no▁2｜>";
        } else if (m.role == "user") {
          ss << "<｜hy_User｜>" << m.content << "<｜hy_Assistant｜>";
        }
      }
      break;

    case Family::HunyuanVl:
      ss << "<｜hy_begin▁of▁sentence｜>";
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (i == 0 && m.role == "system") {
          ss << m.content << "<｜hy_place▁holder▁no▁3｜>";
        } else if (m.role == "user") {
          ss << m.content << "<｜hy_User｜>";
        } else if (m.role == "assistant") {
          ss << m.content << "<｜hy_Assistant｜>";
        }
      }
      break;

    case Family::SeedOss:
      for (const ChatMessage& m : msgs)
        ss << "<seed:bos>" << m.role << "\n" << (m.role == "assistant" ? trim(m.content) : m.content) << "<seed:eos>";
      if (add_generation_prompt) ss << "<seed:bos>assistant\n";
      break;

    case Family::PanguEmbedded:
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (i == 0 && m.role != "system") ss << "[unused9]系统：[unused10]";
        const char* name = m.role == "system"      ? "系统"
                           : m.role == "user"      ? "用户"
                           : m.role == "assistant" ? "助手"
                           : m.role == "tool"      ? "工具"
                           : m.role == "function"  ? "方法"
                                                   : nullptr;
        if (name) ss << "[unused9]" << name << "：" << m.content << "[unused10]";
      }
      if (add_generation_prompt) ss << "[unused9]助手：";
      break;

    default:
      break;
  }
  return ss.str();
}

std::optional<std::string> llama3_header_date(std::string_view jinja, std::string_view today) {
  if (jinja.find("Cutting Knowledge Date: December 2023") == std::string_view::npos) return std::nullopt;
  if (jinja.find("strftime_now") != std::string_view::npos) return std::string(today);
  constexpr std::string_view kDefault = "set date_string = \"";
  const size_t at = jinja.find(kDefault);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t begin = at + kDefault.size(), end = jinja.find('"', begin);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(jinja.substr(begin, end - begin));
}

std::optional<std::string> granite_default_system_message(std::string_view jinja, std::string_view today) {
  // Granite 4.0: a literal the template keeps for conversations without a system message, tools or documents.
  constexpr std::string_view kG40 = "set g4_default_system_message = '";
  if (const size_t at = jinja.find(kG40); at != std::string_view::npos) {
    const size_t begin = at + kG40.size(), end = jinja.find('\'', begin);
    if (end == std::string_view::npos) return std::nullopt;
    return std::string(jinja.substr(begin, end - begin));
  }
  // Granite 3.3: the knowledge cutoff and the day's date ("%B %d, %Y"), then its plain-chat sentence.
  constexpr std::string_view kG33 =
      "\"Knowledge Cutoff Date: April 2024. Today's Date: \" + strftime_now('%B %d, %Y') + \". You are Granite, "
      "developed by IBM.\"";
  constexpr std::string_view kG33Chat = "system_message + \" You are a helpful AI assistant.\"";
  if (jinja.find(kG33) == std::string_view::npos || jinja.find(kG33Chat) == std::string_view::npos) return std::nullopt;
  std::tm day{};
  const std::string today_text(today);
  if (strptime(today_text.c_str(), "%d %b %Y", &day) == nullptr) return std::nullopt;
  char date[64] = {};
  std::strftime(date, sizeof date, "%B %d, %Y", &day);
  return "Knowledge Cutoff Date: April 2024. Today's Date: " + std::string(date) +
         ". You are Granite, developed by IBM. You are a helpful AI assistant.";
}

namespace {

std::string apply_with_kwargs(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                              std::string_view today, const nlohmann::ordered_json& template_kwargs) {
  if (std::optional<std::string> text =
          render_jinja_chat_template(vocab, msgs, add_generation_prompt, today, template_kwargs))
    return std::move(*text);
  return apply_family_chat_template(vocab, msgs, add_generation_prompt, today);
}

}  // namespace

std::string apply_family_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs,
                                       bool add_generation_prompt, std::string_view today) {
  const ChatTemplateFamily family = detect_chat_template(vocab.chat_template);
  if (family == Family::Llama3) {
    if (std::optional<std::string> date = llama3_header_date(vocab.chat_template, today)) {
      // The header, then the conversation's own system message (trimmed, as the template trims it), then
      // the rest as the llama3 family renders it.
      const bool has_system = !msgs.empty() && msgs.front().role == "system";
      std::string out =
          "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: " + *date +
          "\n\n" + (has_system ? trim(msgs.front().content) : std::string()) + "<|eot_id|>";
      const std::vector<ChatMessage> rest(msgs.begin() + (has_system ? 1 : 0), msgs.end());
      return out + apply_chat_template(family, rest, add_generation_prompt);
    }
  }
  if ((family == Family::ChatML || family == Family::Granite || family == Family::Granite40) && !msgs.empty() &&
      msgs.front().role != "system") {
    if (std::optional<std::string> system = family == Family::ChatML
                                                ? chatml_default_system_message(vocab.chat_template)
                                                : granite_default_system_message(vocab.chat_template, today)) {
      std::vector<ChatMessage> with_system;
      with_system.reserve(msgs.size() + 1);
      with_system.push_back({"system", std::move(*system)});
      with_system.insert(with_system.end(), msgs.begin(), msgs.end());
      return apply_chat_template(family, with_system, add_generation_prompt);
    }
  }
  return apply_chat_template(family, msgs, add_generation_prompt);
}

namespace {

// Today's local date as "%d %b %Y".
std::string local_today() {
  char today[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(today, sizeof today, "%d %b %Y", &local);
  return today;
}

}  // namespace

std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                std::string_view today) {
  return apply_with_kwargs(vocab, msgs, add_generation_prompt, today, nlohmann::ordered_json());
}

std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                std::string_view today, const nlohmann::ordered_json& template_kwargs) {
  return apply_with_kwargs(vocab, msgs, add_generation_prompt, today, template_kwargs);
}

std::string local_date_for_chat_template() { return local_today(); }

std::string render_chat_prompt(const Vocab& vocab, const std::vector<ChatMessage>& msgs, std::string_view today,
                               const nlohmann::ordered_json& template_kwargs) {
  // An assistant turn that ends in tool calls is history, not text to continue.
  if (msgs.size() < 2 || msgs.back().role != "assistant" ||
      (msgs.back().extra.is_object() && msgs.back().extra.contains("tool_calls")))
    return apply_with_kwargs(vocab, msgs, /*add_generation_prompt=*/true, today, template_kwargs);
  const std::vector<ChatMessage> before(msgs.begin(), msgs.end() - 1);
  return apply_with_kwargs(vocab, before, /*add_generation_prompt=*/true, today, template_kwargs) + msgs.back().content;
}

std::string apply_chat_template(const Vocab& vocab, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
  return apply_with_kwargs(vocab, msgs, add_generation_prompt, local_today(), nlohmann::ordered_json());
}

}  // namespace kvserve
