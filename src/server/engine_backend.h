#pragma once
// What the HTTP layer needs from the engine, as an interface: production adapts the real Engine and its
// Model to it (engine_adapter.h); the server's unit tests satisfy it with a scripted fake, so request
// parsing, response shapes, streaming and cancellation are testable without a model.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "model/chat_template.h"

namespace kvserve::server {

class EngineBackend {
 public:
  virtual ~EngineBackend() = default;

  // Queues a request; throws kvserve::Error when it can never run (the server answers 400).
  virtual void add_request(EngineRequest req) = 0;
  // Cancels a request whose client went away.
  virtual void abort_request(const std::string& id) = 0;
  virtual EngineStats stats() const = 0;
  virtual BlockMap block_map() const = 0;
  virtual int block_size() const = 0;

  // Prompt text -> ids, special-token text parsed as tokens; with add_special, BOS/EOS as the vocabulary asks.
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special) const = 0;
  // Ids -> text, special tokens left out (ids are in [0, vocab_size())).
  virtual std::string detokenize(const std::vector<int32_t>& ids) const = 0;
  // The model's chat template applied to a conversation, ending with the assistant's turn header (or, after
  // a final assistant message, with that message's text: render_chat_prompt); template_kwargs (an object
  // or null) are the request's chat_template_kwargs.
  virtual std::string render_chat(const std::vector<ChatMessage>& messages,
                                  const nlohmann::ordered_json& template_kwargs) const = 0;
  // The chat template's source (Jinja, or a family's name): the server reads from it which tool-call format
  // the model writes (detect_tool_call_format).
  virtual std::string chat_template() const { return {}; }
  // Raw bytes of one token, for logprobs (may be an incomplete UTF-8 sequence).
  virtual std::string token_piece(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  // Longest prompt + completion a request may have, in tokens.
  virtual int64_t context_length() const = 0;
  // Most tokens a completion without max_tokens may produce after a prompt of n_prompt tokens: the rest of
  // the context, or where the context has no end (a streaming window), the model's training context.
  virtual int64_t default_completion_limit(int64_t n_prompt) const { return context_length() - n_prompt; }
  // The sampling the model file recommends, for what a request leaves out (none: the API's defaults).
  virtual SamplingDefaults sampling_defaults() const { return {}; }
};

}  // namespace kvserve::server
