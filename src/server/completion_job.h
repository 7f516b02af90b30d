#pragma once
// One API request in flight: hands the request to the engine, collects the events the engine thread
// delivers, and turns them into either an SSE stream or one JSON body on the HTTP worker's thread. The
// writer callback returning false means the client has gone: the job aborts its engine request at once
// so its KV blocks are freed.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/engine_backend.h"
#include "server/metrics.h"
#include "server/reasoning_split.h"
#include "server/request_parser.h"
#include "server/response_format.h"
#include "server/tool_call_parser.h"

namespace kvserve::server {

class CompletionJob {
 public:
  // Writes bytes to the client; false when the connection is gone.
  using Writer = std::function<bool(std::string_view)>;

  // One engine request per prompt (a completions request may list several), each with req.n choices.
  CompletionJob(EngineBackend& backend, ServerMetrics& metrics, ApiRequest req, std::vector<BuiltPrompt> prompts,
                std::string model_name, std::string cache_salt,
                std::chrono::milliseconds keep_alive = std::chrono::milliseconds(250));
  // Aborts the engine request if it has not finished (the response was abandoned).
  ~CompletionJob();
  CompletionJob(const CompletionJob&) = delete;
  CompletionJob& operator=(const CompletionJob&) = delete;

  const std::string& id() const { return header_.id; }
  bool streaming() const { return req_.stream; }

  // Queues the request; throws ApiError (400) when the engine says it can never run.
  void start();

  // SSE: chunks as events arrive, keep-alive comments while silent, then [DONE]. Returns false when
  // the client went away (the request is aborted).
  bool stream(const Writer& write);

  // Waits up to `timeout` for every choice to finish; true when they have.
  bool wait_finished(std::chrono::milliseconds timeout);
  // Non-streaming: waits for the end, writing a space (legal leading JSON whitespace) while waiting so
  // a vanished client is noticed; then the body. False when the client went away.
  bool write_body(const Writer& write);
  // The finished non-streaming result: HTTP status and JSON body (an engine failure becomes 500).
  std::pair<int, std::string> result();

 private:
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<RequestEvent> events;
  };
  struct Choice {
    ChoiceResult result;
    bool started = false;      // chat: the role delta was sent
    size_t text_offset = 0;    // completions logprobs offset of the next piece
    bool finished = false;
    std::optional<ReasoningSplitter> reasoning;  // chat with the reasoning split on (streams)
    std::optional<ToolCallParser> tools;         // chat with tools (streams)
    int tool_calls_sent = 0;
    bool echoed = false;  // echo: the prompt leads the text
  };

  // Moves pending events into the choices; returns the ones taken (for streaming) in order.
  std::vector<RequestEvent> take_events(std::chrono::milliseconds timeout);
  void apply(const RequestEvent& ev);
  bool all_finished() const { return finished_choices_ == static_cast<int>(choices_.size()); }
  bool parses_tool_calls() const {
    return req_.endpoint == Endpoint::ChatCompletions && req_.calls_tools() && req_.tool_format != ToolCallFormat::None;
  }
  // Ids for the parsed calls (each call's id is new); with parallel_tool_calls false, only a reply's first
  // call is kept.
  std::vector<ToolCall> number_tool_calls(std::vector<ParsedToolCall> calls, int already) const;
  // "tool_calls" for a reply that called and then stopped by itself.
  static std::string finish_with_calls(const std::string& reason, int calls) {
    return calls > 0 && reason == "stop" ? "tool_calls" : reason;
  }
  bool splits_reasoning() const {
    return req_.endpoint == Endpoint::ChatCompletions && req_.split_reasoning.value_or(false);
  }
  // Once per job, only for requests that completed normally.
  void record_metrics();
  void abort();
  Usage usage() const;
  // A token as logprobs show it: its text, or vLLM's "token_id:ID" with return_tokens_as_token_ids.
  std::string token_text(int32_t id) const {
    return req_.tokens_as_ids ? "token_id:" + std::to_string(id) : backend_.token_piece(id);
  }

  EngineBackend& backend_;
  ServerMetrics& metrics_;
  ApiRequest req_;
  std::vector<BuiltPrompt> prompts_;
  std::vector<std::string> engine_ids_;  // the engine request of each prompt
  std::string cache_salt_;
  std::chrono::milliseconds keep_alive_;
  ResponseHeader header_;
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();

  std::vector<Choice> choices_;
  int finished_choices_ = 0;
  bool started_ = false;
  bool aborted_ = false;
  std::string engine_error_;
  std::vector<int> prompt_tokens_, cached_tokens_;  // each prompt's, as its engine request reports them
  int completion_tokens_ = 0;
  bool metrics_recorded_ = false;

  std::chrono::steady_clock::time_point arrival_;
  std::optional<std::chrono::steady_clock::time_point> first_token_;
};

}  // namespace kvserve::server
