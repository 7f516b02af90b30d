#pragma once
// OpenAI request bodies -> what the engine runs. Parsing is strict about the fields it knows (wrong
// type or out-of-range value -> 400 naming the field) and ignores the ones it doesn't, as OpenAI does.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "model/chat_template.h"
#include "server/engine_backend.h"
#include "server/reasoning_split.h"
#include "server/tool_call_parser.h"

namespace kvserve::server {

enum class Endpoint { Completions, ChatCompletions };

// One prompt of a completions request's list of prompts.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;  // empty: the served model

  // Completions: either text or token ids. Chat: messages.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // Completions with a list of two or more prompts ("prompt": ["a", "b"], or lists of ids): each in order, n
  // choices apiece, choice prompt * n + j as OpenAI and vLLM number them. prompt_text / prompt_ids hold none.
  std::vector<PromptInput> prompt_batch;
  std::vector<ChatMessage> messages;
  nlohmann::ordered_json chat_template_kwargs;  // null, or the object of extra chat template variables

  SamplingParams params;  // params.max_tokens is meaningful only when max_tokens_given
  bool max_tokens_given = false;
  SamplingGiven sampling_given;  // the others take the model's defaults (build_prompt)
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: each choice's text (and logprobs) starts with its prompt
  bool logprobs = false;       // report logprobs at all
  int top_logprobs = 0;        // alternatives per token
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:ID"
  // vLLM's prompt_logprobs: each prompt token's log-probability and rank, with this many alternatives, in the
  // reply's prompt_logprobs (-1: not asked for).
  int prompt_logprobs = -1;
  std::string user;
  std::string cache_salt;
  // Chat: "reasoning_format" ("deepseek": <think> text goes to reasoning_content; "none"); unset, the
  // server's --reasoning-format decides. reasoning_opened_by_prompt: the rendered prompt ends inside a
  // <think> (build_prompt sets it).
  // reasoning_format: Harmony when the prompt asks for a harmony reply (gpt-oss; build_prompt sets it).
  std::optional<bool> split_reasoning;
  bool reasoning_opened_by_prompt = false;
  ReasoningFormat reasoning_format = ReasoningFormat::ThinkTags;

  // Chat: the request's tools (an array, or null; the template sees them), and whether the reply's tool
  // calls are read out of it: tools given and tool_choice not "none". The server sets tool_format (its
  // --tool-call-parser) and the marker tokens the reply must show (tool_call_markers).
  nlohmann::ordered_json tools;
  bool tool_choice_none = false;
  bool parallel_tool_calls = true;
  ToolCallFormat tool_format = ToolCallFormat::None;
  std::vector<int32_t> shown_special_tokens;
  // tool_choice "required", or the function it names: the reply is one such call (the server builds its
  // grammar once it knows the format).
  bool tool_required = false;
  std::string forced_tool;

  // Structured output: response_format json_object / json_schema, or a forced tool call. Null: free text.
  std::shared_ptr<const Grammar> grammar;
  bool calls_tools() const { return tools.is_array() && !tools.empty() && !tool_choice_none; }
};

// Throws ApiError (400) for malformed JSON, known fields of the wrong type and out-of-range values.
ApiRequest parse_api_request(Endpoint endpoint, std::string_view body);

// POST /tokenize, in vLLM's shape ("prompt", or chat "messages" through the template; "add_special_tokens",
// default true); llama.cpp's "content" is taken for "prompt". Throws ApiError (400).
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string text;
  std::vector<ChatMessage> messages;
  nlohmann::ordered_json chat_template_kwargs;
  nlohmann::ordered_json tools;  // chat: as ApiRequest::tools
  bool add_special = true;
};
TokenizeRequest parse_tokenize_request(std::string_view body);

// The variables a chat request gives its template besides the messages: its chat_template_kwargs, and its
// tools as `tools` (unless the kwargs name their own). Null when there are none.
nlohmann::ordered_json chat_template_variables(const nlohmann::ordered_json& kwargs, const nlohmann::ordered_json& tools);

// POST /detokenize: {"tokens": [ids]}, each in [0, vocab_size). Throws ApiError (400).
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(std::string_view body, int32_t vocab_size);

// A request without temperature samples at the model's default where its file has one (as llama.cpp and vLLM
// do), else at OpenAI's default, 1 (as vLLM and SGLang do); 0 is greedy.
constexpr float kDefaultTemperature = 1.0f;

// Completions without max_tokens get OpenAI's 16; chat gets the rest of the context.
constexpr int kDefaultCompletionMaxTokens = 16;

// A completions request's prompts times its n: at most this many choices in one request.
constexpr int kMaxBatchChoices = 64;

// One prompt ready for the engine: its tokens and the new tokens it may take (max_tokens, or its default).
struct BuiltPrompt {
  std::vector<int32_t> ids;
  int max_tokens = 0;
  std::string echo_text;  // with echo: the prompt as sent, or its token ids' text
};
// build_prompt for the request's prompt, or for each of its prompt_batch (an error then names the prompt).
std::vector<BuiltPrompt> build_prompts(ApiRequest& req, const EngineBackend& backend);

// Tokenizes the prompt (chat: through the model's template), checks ids against the vocabulary and
// fills in the default max_tokens and the model's sampling defaults for what the request left out. Throws
// ApiError (400).
std::vector<int32_t> build_prompt(ApiRequest& req, const EngineBackend& backend);

// The prefix-cache salt of a request: tenant part (a hash of the server's API key, unless the operator
// shares the cache across keys) joined with the request's own cache_salt. Empty = the shared namespace.
std::string derive_cache_salt(const std::string& api_key, bool share_prefix_cache, const std::string& request_salt);

}  // namespace kvserve::server
