#include "server/response_format.h"

#include <cmath>

namespace kvserve::server {

namespace {

const char* object_name(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::Completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json header_json(Endpoint endpoint, const ResponseHeader& h, bool chunk) {
  return {{"id", h.id}, {"object", object_name(endpoint, chunk)}, {"created", h.created}, {"model", h.model}};
}

json bytes_json(const std::string& s) {
  json bytes = json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// A token a grammar masked has logprob -inf, which JSON cannot carry: -9999, as vLLM reports it.
double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

json tool_call_json(const ToolCall& call) {
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json completion_logprobs_json(const std::vector<TokenInfo>& tokens, int top_n, const TokenText& text,
                              size_t text_offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenInfo& t : tokens) {
    const std::string piece = text(t.id);
    toks.push_back(piece);
    offsets.push_back(text_offset);
    text_offset += piece.size();
    if (std::isnan(t.logprob)) {  // an echoed prompt's first token: nothing came before it
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(finite_logprob(t.logprob));
    json top = json::object();
    for (int i = 0; i < top_n && i < static_cast<int>(t.top.size()); ++i)
      top[text(t.top[i].first)] = finite_logprob(t.top[i].second);
    tops.push_back(top_n > 0 ? top : json(nullptr));
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json prompt_logprobs_json(const std::vector<TokenInfo>& tokens, int top_n, const TokenText& text) {
  json out = json::array();
  for (const TokenInfo& t : tokens) {
    if (std::isnan(t.logprob)) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    entry[std::to_string(t.id)] = {
        {"logprob", finite_logprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", text(t.id)}};
    for (int i = 0; i < top_n && i < static_cast<int>(t.top.size()); ++i)
      entry[std::to_string(t.top[i].first)] = {
          {"logprob", finite_logprob(t.top[i].second)}, {"rank", i + 1}, {"decoded_token", text(t.top[i].first)}};
    out.push_back(std::move(entry));
  }
  return out;
}

json chat_logprobs_json(const std::vector<TokenInfo>& tokens, int top_n, const TokenText& text) {
  json content = json::array();
  for (const TokenInfo& t : tokens) {
    const std::string piece = text(t.id);
    json top = json::array();
    for (int i = 0; i < top_n && i < static_cast<int>(t.top.size()); ++i) {
      const std::string alt = text(t.top[i].first);
      top.push_back({{"token", alt}, {"logprob", finite_logprob(t.top[i].second)}, {"bytes", bytes_json(alt)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", finite_logprob(t.logprob)},
                       {"bytes", bytes_json(piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json full_response(Endpoint endpoint, const ResponseHeader& header, const std::vector<ChoiceResult>& choices,
                   const Usage& usage, bool logprobs, int top_n, const TokenText& text, int prompt_top_n) {
  json out = header_json(endpoint, header, false);
  json arr = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}};
    json lp = nullptr;
    if (endpoint == Endpoint::Completions) {
      choice["text"] = c.text;
      if (logprobs) lp = completion_logprobs_json(c.tokens, top_n, text, 0);
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        // OpenAI's content beside tool calls is null unless the model also said something.
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        json calls = json::array();
        for (const ToolCall& call : c.tool_calls) calls.push_back(tool_call_json(call));
        choice["message"]["tool_calls"] = std::move(calls);
      }
      if (c.reasoning) choice["message"]["reasoning_content"] = c.reasoning->empty() ? json() : json(*c.reasoning);
      if (logprobs) lp = chat_logprobs_json(c.tokens, top_n, text);
    }
    choice["logprobs"] = lp;
    choice["finish_reason"] = finish_json(c.finish_reason);
    choice["stop_reason"] = c.stop_reason;
    if (c.prompt_logprobs) {
      json p = prompt_logprobs_json(*c.prompt_logprobs, prompt_top_n, text);
      if (endpoint == Endpoint::Completions) {
        choice["prompt_logprobs"] = std::move(p);
      } else if (i == 0) {
        out["prompt_logprobs"] = std::move(p);
      }
    }
    arr.push_back(std::move(choice));
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage_json(usage);
  return out;
}

json stream_chunk(Endpoint endpoint, const ResponseHeader& header, const ChunkPiece& piece, bool usage_null,
                  const TokenText& text) {
  json out = header_json(endpoint, header, true);
  json choice = {{"index", piece.index}};
  json lp = nullptr;
  if (endpoint == Endpoint::Completions) {
    choice["text"] = piece.text;
    if (piece.tokens) lp = completion_logprobs_json(*piece.tokens, piece.top_n, text, piece.text_offset);
  } else {
    json delta = json::object();
    if (piece.first) delta["role"] = "assistant";
    if (!piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
    if (piece.first || !piece.text.empty()) delta["content"] = piece.text;
    if (!piece.tool_calls.empty()) {
      // Each call whole in one delta (id, name and all its arguments): clients that join the deltas of an
      // index get the same call as from OpenAI's finer pieces.
      json calls = json::array();
      for (size_t i = 0; i < piece.tool_calls.size(); ++i) {
        json call = tool_call_json(piece.tool_calls[i]);
        call["index"] = piece.first_tool_call_index + static_cast<int>(i);
        calls.push_back(std::move(call));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
    if (piece.tokens) lp = chat_logprobs_json(*piece.tokens, piece.top_n, text);
  }
  choice["logprobs"] = lp;
  choice["finish_reason"] = finish_json(piece.finish_reason);
  choice["stop_reason"] = piece.stop_reason;
  if (piece.prompt_tokens)
    choice["prompt_logprobs"] = prompt_logprobs_json(*piece.prompt_tokens, piece.prompt_top_n, text);
  out["choices"] = json::array({std::move(choice)});
  if (usage_null) out["usage"] = nullptr;
  return out;
}

json usage_chunk(Endpoint endpoint, const ResponseHeader& header, const Usage& usage) {
  json out = header_json(endpoint, header, true);
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

json models_json(const std::string& model_name, int64_t created, int64_t max_model_len) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_name},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "kvserve"},
                                 {"max_model_len", max_model_len}}})}};
}

json kv_blocks_json(const BlockMap& map, const EngineStats& stats, int block_size) {
  const double hit_rate =
      stats.prefix_queries > 0 ? static_cast<double>(stats.prefix_hits) / static_cast<double>(stats.prefix_queries) : 0.0;
  return {{"block_size", block_size},
          {"num_blocks", stats.num_blocks},
          {"free_blocks", stats.free_blocks},
          {"used_blocks", stats.used_blocks},
          {"cached_blocks", stats.cached_blocks},
          {"kv_usage", stats.kv_usage},
          {"prefix_queries", stats.prefix_queries},
          {"prefix_hits", stats.prefix_hits},
          {"prefix_hit_rate", hit_rate},
          {"preemptions", stats.preemptions},
          {"rope_restarts", stats.rope_restarts},
          {"running", stats.running},
          {"waiting", stats.waiting},
          {"owner", map.owner},
          {"shared", map.shared}};
}

}  // namespace kvserve::server
