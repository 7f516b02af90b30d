#include "server/completion_job.h"

#include <fmt/format.h>

#include <atomic>
#include <random>

#include "core/error.h"
#include "server/api_error.h"

namespace kvserve::server {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

json stop_reason_json(const RequestEvent& ev) {
  if (!ev.stop_string.empty()) return ev.stop_string;
  if (ev.stop_token_id >= 0) return ev.stop_token_id;
  return nullptr;
}

// Unique per process and unpredictable across restarts: a random prefix plus a counter.
std::string new_response_id(Endpoint endpoint) {
  static const uint64_t process_nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::Completions ? "cmpl" : "chatcmpl", process_nonce,
                     counter.fetch_add(1));
}

// OpenAI's shape ("call_" and 24 letters or digits); Mistral's templates accept only ids of 9 letters or
// digits when the calls come back in the conversation, so its calls get those.
std::string new_tool_call_id(ToolCallFormat format) {
  static constexpr std::string_view kAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
  const bool mistral = format == ToolCallFormat::Mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % kAlnum.size()];
  return id;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

CompletionJob::CompletionJob(EngineBackend& backend, ServerMetrics& metrics, ApiRequest req,
                             std::vector<BuiltPrompt> prompts, std::string model_name, std::string cache_salt,
                             std::chrono::milliseconds keep_alive)
    : backend_(backend),
      metrics_(metrics),
      req_(std::move(req)),
      prompts_(std::move(prompts)),
      cache_salt_(std::move(cache_salt)),
      keep_alive_(keep_alive),
      choices_(prompts_.size() * static_cast<size_t>(req_.n)),
      prompt_tokens_(prompts_.size(), 0),
      cached_tokens_(prompts_.size(), 0),
      arrival_(Clock::now()) {
  header_.id = new_response_id(req_.endpoint);
  for (size_t k = 0; k < prompts_.size(); ++k)
    engine_ids_.push_back(prompts_.size() == 1 ? header_.id : fmt::format("{}-{}", header_.id, k));
  header_.created = unix_seconds();
  header_.model = std::move(model_name);
  if (splits_reasoning())
    for (Choice& c : choices_) c.reasoning.emplace(req_.reasoning_opened_by_prompt, req_.reasoning_format);
  if (parses_tool_calls())
    for (Choice& c : choices_) c.tools.emplace(req_.tool_format, req_.tools);
}

std::vector<ToolCall> CompletionJob::number_tool_calls(std::vector<ParsedToolCall> calls, int already) const {
  std::vector<ToolCall> out;
  for (ParsedToolCall& call : calls) {
    if (!req_.parallel_tool_calls && already + static_cast<int>(out.size()) >= 1) break;
    out.push_back({new_tool_call_id(req_.tool_format), std::move(call.name), std::move(call.arguments)});
  }
  return out;
}

CompletionJob::~CompletionJob() {
  if (started_ && !all_finished()) abort();
}

void CompletionJob::start() {
  for (size_t k = 0; k < prompts_.size(); ++k) {
    EngineRequest er;
    er.id = engine_ids_[k];
    er.prompt_ids = prompts_[k].ids;
    er.params = req_.params;
    er.params.max_tokens = prompts_[k].max_tokens;
    er.n = req_.n;
    er.cache_salt = cache_salt_;
    er.shown_special_tokens = req_.shown_special_tokens;
    er.grammar = req_.grammar;
    // The engine thread only queues the event, its choice renumbered among all prompts' choices; all
    // formatting happens on the HTTP worker.
    er.on_event = [inbox = inbox_, first = static_cast<int>(k) * req_.n](const RequestEvent& ev) {
      {
        std::lock_guard lock(inbox->mu);
        inbox->events.push_back(ev);
        inbox->events.back().index += first;
      }
      inbox->cv.notify_one();
    };
    try {
      backend_.add_request(std::move(er));
    } catch (const Error& e) {
      // The prompts queued before this one must not run on.
      for (size_t j = 0; j < k; ++j) backend_.abort_request(engine_ids_[j]);
      started_ = false;
      const std::string which = prompts_.size() > 1 ? fmt::format("prompt {}: ", k) : "";
      throw ApiError(400, which + e.what(), req_.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt");
    }
    started_ = true;
  }
}

std::vector<RequestEvent> CompletionJob::take_events(std::chrono::milliseconds timeout) {
  std::unique_lock lock(inbox_->mu);
  inbox_->cv.wait_for(lock, timeout, [&] { return !inbox_->events.empty(); });
  std::vector<RequestEvent> out(std::make_move_iterator(inbox_->events.begin()),
                                std::make_move_iterator(inbox_->events.end()));
  inbox_->events.clear();
  return out;
}

void CompletionJob::apply(const RequestEvent& ev) {
  if (ev.index < 0 || ev.index >= static_cast<int>(choices_.size())) return;
  Choice& c = choices_[static_cast<size_t>(ev.index)];
  if (c.finished) return;
  if (!ev.tokens.empty() && !first_token_) first_token_ = Clock::now();
  if (req_.prompt_logprobs >= 0 && !ev.prompt_tokens_info.empty()) c.result.prompt_logprobs = ev.prompt_tokens_info;
  if (req_.echo && !c.echoed) {
    c.echoed = true;
    c.result.text = prompts_[static_cast<size_t>(ev.index / req_.n)].echo_text;
    c.text_offset = c.result.text.size();
    if (req_.logprobs) c.result.tokens = ev.prompt_tokens_info;
  }
  c.result.text += ev.text;
  c.text_offset += ev.text.size();
  if (req_.logprobs) c.result.tokens.insert(c.result.tokens.end(), ev.tokens.begin(), ev.tokens.end());
  if (ev.finished) {
    c.finished = true;
    c.result.finish_reason = ev.finish_reason;
    c.result.stop_reason = stop_reason_json(ev);
    finished_choices_++;
    if (ev.finish_reason == "error" && engine_error_.empty())
      engine_error_ = ev.error.empty() ? "the engine failed while running this request" : ev.error;
    const size_t k = static_cast<size_t>(ev.index / req_.n);  // the prompt: its n choices share it
    prompt_tokens_[k] = std::max(prompt_tokens_[k], ev.prompt_tokens);
    cached_tokens_[k] = std::max(cached_tokens_[k], ev.cached_tokens);
    completion_tokens_ += ev.completion_tokens;
  }
}

Usage CompletionJob::usage() const {
  Usage u;
  for (size_t k = 0; k < prompts_.size(); ++k) {
    u.prompt_tokens += prompt_tokens_[k] > 0 ? prompt_tokens_[k] : static_cast<int>(prompts_[k].ids.size());
    u.cached_tokens += cached_tokens_[k];
  }
  u.completion_tokens = completion_tokens_;
  return u;
}

void CompletionJob::abort() {
  if (aborted_) return;
  aborted_ = true;
  for (const std::string& id : engine_ids_) backend_.abort_request(id);
}

void CompletionJob::record_metrics() {
  if (metrics_recorded_ || aborted_ || !engine_error_.empty()) return;
  metrics_recorded_ = true;
  const auto now = Clock::now();
  const double e2e = seconds_between(arrival_, now);
  const double ttft = first_token_ ? seconds_between(arrival_, *first_token_) : e2e;
  const int per_choice = completion_tokens_ / std::max<int>(1, static_cast<int>(choices_.size()));
  const double tpot = per_choice > 1 ? (e2e - ttft) / (per_choice - 1) : 0.0;
  metrics_.observe_request(ttft, tpot, per_choice, e2e);
}

bool CompletionJob::stream(const Writer& write) {
  const TokenText text = [this](int32_t id) { return token_text(id); };
  auto last_write = Clock::now();
  auto send = [&](std::string_view bytes) {
    last_write = Clock::now();
    if (write(bytes)) return true;
    abort();
    return false;
  };

  // Chat streams open with the assistant role for every choice, before the first token.
  if (req_.endpoint == Endpoint::ChatCompletions) {
    std::string opening;
    for (int i = 0; i < static_cast<int>(choices_.size()); ++i) {
      ChunkPiece piece;
      piece.index = i;
      piece.first = true;
      opening += sse_data(stream_chunk(req_.endpoint, header_, piece, req_.include_usage, text));
    }
    if (!send(opening)) return false;
  }

  while (!all_finished()) {
    std::vector<RequestEvent> events = take_events(keep_alive_);
    std::string out;
    for (const RequestEvent& ev : events) {
      if (ev.index < 0 || ev.index >= static_cast<int>(choices_.size()) ||
          choices_[static_cast<size_t>(ev.index)].finished)
        continue;
      Choice& c = choices_[static_cast<size_t>(ev.index)];
      ReasoningSplit split{{}, ev.text};
      if (c.reasoning) {
        split = c.reasoning->feed(ev.text);
        if (ev.finished) {
          ReasoningSplit rest = c.reasoning->finish();
          split.reasoning += rest.reasoning;
          split.content += rest.content;
        }
      }
      std::vector<ToolCall> calls;
      const int first_call = c.tool_calls_sent;
      if (c.tools) {
        ToolCallPiece tp = c.tools->feed(split.content);
        if (ev.finished) {
          ToolCallPiece rest = c.tools->finish();
          tp.content += rest.content;
          for (ParsedToolCall& call : rest.calls) tp.calls.push_back(std::move(call));
        }
        split.content = std::move(tp.content);
        calls = number_tool_calls(std::move(tp.calls), c.tool_calls_sent);
        c.tool_calls_sent += static_cast<int>(calls.size());
      }
      // Echo: the choice's first piece leads with its prompt (and the prompt's logprobs).
      std::vector<TokenInfo> echoed_tokens;
      const bool echoes = req_.echo && !c.echoed;
      if (echoes) {
        split.content = prompts_[static_cast<size_t>(ev.index / req_.n)].echo_text + split.content;
        if (req_.logprobs) {
          echoed_tokens = ev.prompt_tokens_info;
          echoed_tokens.insert(echoed_tokens.end(), ev.tokens.begin(), ev.tokens.end());
        }
      }
      const bool has_content = !split.content.empty() || !split.reasoning.empty() || !calls.empty() ||
                               (req_.logprobs && !ev.tokens.empty()) || echoes;
      if (has_content || ev.finished) {
        if (ev.finished && ev.finish_reason == "error") {
          out += sse_data(ApiError(500, ev.error.empty() ? "the engine failed while running this request" : ev.error,
                                   {}, {}, "server_error")
                              .to_json());
        } else {
          ChunkPiece piece;
          piece.index = ev.index;
          piece.text = std::move(split.content);
          piece.reasoning = std::move(split.reasoning);
          piece.tool_calls = std::move(calls);
          piece.first_tool_call_index = first_call;
          piece.tokens = !req_.logprobs ? nullptr : echoes ? &echoed_tokens : &ev.tokens;
          if (req_.prompt_logprobs >= 0 && !ev.prompt_tokens_info.empty()) {
            piece.prompt_tokens = &ev.prompt_tokens_info;
            piece.prompt_top_n = req_.prompt_logprobs;
          }
          piece.top_n = req_.top_logprobs;
          piece.text_offset = c.text_offset;
          if (ev.finished) {
            piece.finish_reason = finish_with_calls(ev.finish_reason, c.tool_calls_sent);
            piece.stop_reason = stop_reason_json(ev);
          }
          out += sse_data(stream_chunk(req_.endpoint, header_, piece, req_.include_usage, text));
        }
      }
      apply(ev);
    }
    if (!out.empty()) {
      if (!send(out)) return false;
    } else if (Clock::now() - last_write >= keep_alive_) {
      if (!send(kSseKeepAlive)) return false;
    }
  }

  std::string tail;
  if (req_.include_usage) tail += sse_data(usage_chunk(req_.endpoint, header_, usage()));
  tail += kSseDone;
  record_metrics();
  return send(tail);
}

bool CompletionJob::wait_finished(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!all_finished()) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    for (const RequestEvent& ev : take_events(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)))
      apply(ev);
  }
  return true;
}

bool CompletionJob::write_body(const Writer& write) {
  while (!wait_finished(keep_alive_)) {
    if (!write(" ")) {
      abort();
      return false;
    }
  }
  if (!write(result().second)) return false;
  return true;
}

std::pair<int, std::string> CompletionJob::result() {
  if (!engine_error_.empty()) return {500, dump_json(ApiError(500, engine_error_, {}, {}, "server_error").to_json())};
  std::vector<ChoiceResult> results;
  results.reserve(choices_.size());
  for (const Choice& c : choices_) {
    results.push_back(c.result);
    if (splits_reasoning()) {
      ReasoningSplit split = split_reasoning(c.result.text, req_.reasoning_opened_by_prompt, req_.reasoning_format);
      results.back().text = std::move(split.content);
      results.back().reasoning = std::move(split.reasoning);
    }
    if (parses_tool_calls()) {
      ToolCallPiece tp = parse_tool_calls(req_.tool_format, req_.tools, results.back().text);
      results.back().text = std::move(tp.content);
      results.back().tool_calls = number_tool_calls(std::move(tp.calls), 0);
      results.back().finish_reason =
          finish_with_calls(results.back().finish_reason, static_cast<int>(results.back().tool_calls.size()));
    }
  }
  const TokenText text = [this](int32_t id) { return token_text(id); };
  record_metrics();
  return {200, dump_json(full_response(req_.endpoint, header_, results, usage(), req_.logprobs, req_.top_logprobs, text,
                                       req_.prompt_logprobs))};
}

}  // namespace kvserve::server
