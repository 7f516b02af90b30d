#pragma once
// OpenAI response shapes: whole completions, streaming chunks, usage, logprobs, and SSE framing.
// Pure functions of their inputs, so the exact JSON is unit-testable.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/request_parser.h"

namespace kvserve::server {

using nlohmann::json;

// Serializes compactly; invalid UTF-8 (a token that is half of a character) becomes U+FFFD instead of
// throwing, since token pieces are raw bytes.
std::string dump_json(const json& j);

// One SSE event carrying `j`, and the stream's terminator and keep-alive comment (clients ignore it;
// writing it is how a silent stream notices that its client has gone).
std::string sse_data(const json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};
json usage_json(const Usage& u);

// Token id -> its text (raw bytes of the piece).
using TokenText = std::function<std::string(int32_t)>;

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets start at text_offset.
json completion_logprobs_json(const std::vector<TokenInfo>& tokens, int top_n, const TokenText& text,
                              size_t text_offset);
// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}.
json chat_logprobs_json(const std::vector<TokenInfo>& tokens, int top_n, const TokenText& text);

struct ResponseHeader {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A tool call of a chat reply, as OpenAI returns it: {"id", "type": "function", "function": {"name",
// "arguments"}}, the arguments a JSON object as text.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChoiceResult {
  std::string text;
  std::vector<TokenInfo> tokens;
  std::string finish_reason;
  json stop_reason;                      // vLLM's: the stop string or stop token id that ended it, else null
  std::optional<std::string> reasoning;  // chat with the reasoning split on: its reasoning_content
  std::vector<ToolCall> tool_calls;      // chat with tools: the calls read out of the reply (text is the rest)
  std::optional<std::vector<TokenInfo>> prompt_logprobs;  // vLLM's prompt_logprobs, when asked for
};

// vLLM's prompt_logprobs: null for the first token, then per token {"ID": {"logprob", "rank", "decoded_token"}}
// for it and its top_n alternatives.
json prompt_logprobs_json(const std::vector<TokenInfo>& tokens, int top_n, const TokenText& text);

// The non-streaming body of either endpoint; prompt_top_n: the alternatives prompt_logprobs shows. Completions
// carry each choice's prompt_logprobs, chat the first choice's at the top level, as vLLM answers.
json full_response(Endpoint endpoint, const ResponseHeader& header, const std::vector<ChoiceResult>& choices,
                   const Usage& usage, bool logprobs, int top_n, const TokenText& text, int prompt_top_n = 0);

// One choice's piece of a stream. `first` (chat): the delta carries the assistant role. `text_offset`:
// completions logprobs offset of this piece. `usage_null`: include_usage was asked, so every chunk but
// the last carries "usage": null, as OpenAI's do.
struct ChunkPiece {
  int index = 0;
  bool first = false;
  std::string text;
  std::string reasoning;                           // chat: the delta's reasoning_content, when not empty
  std::vector<ToolCall> tool_calls;                // chat: whole calls this piece completes
  int first_tool_call_index = 0;                   // the choice's number for the first of them
  const std::vector<TokenInfo>* tokens = nullptr;  // non-null when logprobs were asked for
  int top_n = 0;
  const std::vector<TokenInfo>* prompt_tokens = nullptr;  // the choice's first piece, with prompt_logprobs
  int prompt_top_n = 0;
  size_t text_offset = 0;
  std::string finish_reason;  // empty while the choice runs
  json stop_reason;           // with finish_reason: vLLM's stop_reason (null but for a stop string or token id)
};
json stream_chunk(Endpoint endpoint, const ResponseHeader& header, const ChunkPiece& piece, bool usage_null,
                  const TokenText& text);
// The final chunk of include_usage streams: no choices, only usage.
json usage_chunk(Endpoint endpoint, const ResponseHeader& header, const Usage& usage);

// GET /v1/models; max_model_len as vLLM reports it, so clients can size prompts.
json models_json(const std::string& model_name, int64_t created, int64_t max_model_len);

// GET /v1/kv/blocks: the block map plus the numbers the web page shows.
json kv_blocks_json(const BlockMap& map, const EngineStats& stats, int block_size);

}  // namespace kvserve::server
