// Which chat template family a Jinja template is: the tests llama.cpp's llm_chat_detect_template makes,
// in its order (several families share markers, so the order decides), and the families' names.
#include <array>
#include <utility>

#include "model/chat_template.h"

namespace kvserve {

namespace {

using Family = ChatTemplateFamily;

constexpr std::array<std::pair<Family, std::string_view>, 54> kNames = {{
    {Family::ChatML, "chatml"},
    {Family::Llama2, "llama2"},
    {Family::Llama2Sys, "llama2-sys"},
    {Family::Llama2SysBos, "llama2-sys-bos"},
    {Family::Llama2SysStrip, "llama2-sys-strip"},
    {Family::MistralV1, "mistral-v1"},
    {Family::MistralV3, "mistral-v3"},
    {Family::MistralV3Tekken, "mistral-v3-tekken"},
    {Family::MistralV7, "mistral-v7"},
    {Family::MistralV7Tekken, "mistral-v7-tekken"},
    {Family::Phi3, "phi3"},
    {Family::Phi4, "phi4"},
    {Family::Falcon3, "falcon3"},
    {Family::Zephyr, "zephyr"},
    {Family::Monarch, "monarch"},
    {Family::Gemma, "gemma"},
    {Family::Orion, "orion"},
    {Family::OpenChat, "openchat"},
    {Family::Vicuna, "vicuna"},
    {Family::VicunaOrca, "vicuna-orca"},
    {Family::DeepSeek, "deepseek"},
    {Family::DeepSeek2, "deepseek2"},
    {Family::DeepSeek3, "deepseek3"},
    {Family::DeepSeekOcr, "deepseek-ocr"},
    {Family::CommandR, "command-r"},
    {Family::Llama3, "llama3"},
    {Family::ChatGlm3, "chatglm3"},
    {Family::ChatGlm4, "chatglm4"},
    {Family::GlmEdge, "glmedge"},
    {Family::MiniCpm, "minicpm"},
    {Family::Exaone3, "exaone3"},
    {Family::Exaone4, "exaone4"},
    {Family::ExaoneMoe, "exaone-moe"},
    {Family::RwkvWorld, "rwkv-world"},
    {Family::Granite, "granite"},
    {Family::Granite40, "granite-4.0"},
    {Family::Granite41, "granite-4.1"},
    {Family::GigaChat, "gigachat"},
    {Family::Megrez, "megrez"},
    {Family::Yandex, "yandex"},
    {Family::Bailing, "bailing"},
    {Family::BailingThink, "bailing-think"},
    {Family::Bailing2, "bailing2"},
    {Family::Llama4, "llama4"},
    {Family::SmolVlm, "smolvlm"},
    {Family::HunyuanMoe, "hunyuan-moe"},
    {Family::GptOss, "gpt-oss"},
    {Family::HunyuanDense, "hunyuan-dense"},
    {Family::HunyuanVl, "hunyuan-vl"},
    {Family::KimiK2, "kimi-k2"},
    {Family::SeedOss, "seed_oss"},
    {Family::Grok2, "grok-2"},
    {Family::PanguEmbedded, "pangu-embedded"},
    {Family::SolarOpen, "solar-open"},
}};

}  // namespace

std::string_view chat_template_name(ChatTemplateFamily family) {
  for (const auto& [f, name] : kNames)
    if (f == family) return name;
  return "unknown";
}

std::vector<std::string_view> chat_template_names() {
  std::vector<std::string_view> names;
  for (const auto& entry : kNames) names.push_back(entry.second);
  return names;
}

std::optional<ChatTemplateFamily> chat_template_from_name(std::string_view name) {
  for (const auto& [family, n] : kNames)
    if (n == name) return family;
  return std::nullopt;
}

std::optional<std::string> chatml_default_system_message(std::string_view jinja) {
  constexpr std::string_view kOpen = "<|im_start|>system", kClose = "<|im_end|>";
  for (size_t at = jinja.find(kOpen); at != std::string_view::npos; at = jinja.find(kOpen, at + 1)) {
    // Inside a string literal: the quote that opens it right before, and no quote up to the close.
    if (at == 0 || (jinja[at - 1] != '\'' && jinja[at - 1] != '"')) continue;
    const char quote = jinja[at - 1];
    const size_t close = jinja.find(kClose, at + kOpen.size());
    const size_t end_quote = jinja.find(quote, at);
    if (close == std::string_view::npos || end_quote < close) continue;
    // The turn's text after its newline (a real one, or the literal's \n escape).
    std::string_view body = jinja.substr(at + kOpen.size(), close - at - kOpen.size());
    if (body.starts_with('\n')) {
      body.remove_prefix(1);
    } else if (body.starts_with("\\n")) {
      body.remove_prefix(2);
    } else {
      continue;
    }
    std::string text;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n') {
        text += '\n';
        ++i;
      } else {
        text += body[i];
      }
    }
    return text;
  }
  return std::nullopt;
}

ChatTemplateFamily detect_chat_template(std::string_view jinja) {
  if (const auto named = chat_template_from_name(jinja)) return *named;
  const auto has = [&](std::string_view needle) { return jinja.find(needle) != std::string_view::npos; };
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return Family::Phi4;
    // SmolVLM starts with <|im_start|> as its BOS, but its turns are not ChatML.
    return has("<end_of_utterance>") ? Family::SmolVlm : Family::ChatML;
  }
  if (jinja.starts_with("mistral") || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return Family::MistralV7;
    // Mistral's official v1 template ("' [INST] ' + system_message"), and v3 / v3-tekken (tools).
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return Family::MistralV1;
      if (has("\"[INST]\"")) return Family::MistralV3Tekken;
      return Family::MistralV3;
    }
    if (has("content.strip()")) return Family::Llama2SysStrip;
    if (has("bos_token + '[INST]")) return Family::Llama2SysBos;
    if (has("<<SYS>>")) return Family::Llama2Sys;
    return Family::Llama2;
  }
  if (has("<|assistant|>") && has("<|end|>")) return Family::Phi3;
  if (has("[gMASK]<sop>")) return Family::ChatGlm4;
  if (has("<|assistant|>") && has("<|user|>")) {
    if (has("<|tool_declare|>")) return Family::ExaoneMoe;
    return has("</s>") ? Family::Falcon3 : Family::GlmEdge;
  }
  if (has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>")) return Family::GlmEdge;
  if (has("<|user|>") && has("<|endoftext|>")) return Family::Zephyr;
  if (has("bos_token + message['role']")) return Family::Monarch;
  if (has("<start_of_turn>")) return Family::Gemma;
  if (has("'\\n\\nAssistant: ' + eos_token")) return Family::Orion;
  if (has("GPT4 Correct ")) return Family::OpenChat;
  if (has("USER: ") && has("ASSISTANT: ")) return has("SYSTEM: ") ? Family::VicunaOrca : Family::Vicuna;
  if (has("### Instruction:") && has("<|EOT|>")) return Family::DeepSeek;
  if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return Family::CommandR;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return Family::Llama3;
  if (has("[gMASK]sop")) return Family::ChatGlm3;
  if (has("<用户>")) return Family::MiniCpm;
  if (has("'Assistant: ' + message['content'] + eos_token")) return Family::DeepSeek2;
  if (has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>")) return Family::DeepSeek3;
  if (has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]")) {
    return has("[|tool|]") ? Family::Exaone4 : Family::Exaone3;
  }
  if (has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}")) return Family::RwkvWorld;
  if (has("<|start_of_role|>")) {
    if (has("<tool_call>") || has("<tools>"))
      return has("g4_default_system_message") ? Family::Granite40 : Family::Granite41;
    return Family::Granite;
  }
  if (has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]")) {
    return Family::GigaChat;
  }
  if (has("<|role_start|>")) return Family::Megrez;
  if (has(" Ассистент:")) return Family::Yandex;
  if (has("<role>ASSISTANT</role>")) {
    if (has("'HUMAN'")) return Family::Bailing;
    if (has("\"HUMAN\"") && has("<think>")) return Family::BailingThink;
    if (has("<role>HUMAN</role>") && has("<|role_end|>")) return Family::Bailing2;
  }
  if (has("<|header_start|>") && has("<|header_end|>")) return Family::Llama4;
  if (has("<|extra_0|>") && has("<|extra_4|>")) return Family::HunyuanMoe;
  if (has("<|start|>") && has("<|channel|>")) return Family::GptOss;
  if (has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>")) return Family::HunyuanVl;
  if (has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>")) return Family::HunyuanDense;
  if (has("<|im_assistant|>assistant<|im_middle|>")) return Family::KimiK2;
  if (has("<seed:bos>")) return Family::SeedOss;
  if (has("'Assistant: '  + message['content'] + '<|separator|>")) return Family::Grok2;
  if (has("[unused9]系统：[unused10]")) return Family::PanguEmbedded;
  if (has("<|begin|>") && has("<|end|>") && has("<|content|>")) return Family::SolarOpen;
  return Family::ChatML;
}

}  // namespace kvserve
