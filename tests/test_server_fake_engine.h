#pragma once
// A scripted stand-in for the Engine, for the server's unit tests: one token per byte, a chat
// "template" of "role: content" lines, and an engine thread that emits one token per choice per step
// from a fixed alphabet until max_tokens (or abort). It records what the server asked of it.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "server/engine_backend.h"

namespace kvserve::server::testing {

class FakeEngine final : public EngineBackend {
 public:
  // Token i of every choice is kAlphabet[i % 26], so outputs are predictable.
  static constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz";

  explicit FakeEngine(std::chrono::milliseconds step = std::chrono::milliseconds(1), int64_t context = 256)
      : step_(step), context_(context), thread_([this] { loop(); }) {}

  ~FakeEngine() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void add_request(EngineRequest req) override {
    if (static_cast<int64_t>(req.prompt_ids.size() + static_cast<size_t>(req.params.max_tokens)) > context_)
      fail("prompt of {} tokens + max_tokens {} exceeds the context of {}", req.prompt_ids.size(), req.params.max_tokens,
           context_);
    std::lock_guard lock(mu_);
    Live live;
    live.req = std::move(req);
    live.produced.assign(static_cast<size_t>(live.req.n), 0);
    live.done.assign(static_cast<size_t>(live.req.n), false);
    added_.push_back(live.req);
    added_.back().on_event = nullptr;
    live_[live.req.id] = std::move(live);
    cv_.notify_all();
  }

  void abort_request(const std::string& id) override {
    std::lock_guard lock(mu_);
    aborted_.insert(id);
  }

  EngineStats stats() const override {
    std::lock_guard lock(mu_);
    EngineStats s;
    s.running = static_cast<int>(live_.size());
    s.num_blocks = 8;
    s.used_blocks = static_cast<int64_t>(live_.size());
    s.cached_blocks = 1;
    s.free_blocks = s.num_blocks - s.used_blocks - s.cached_blocks;
    s.kv_usage = static_cast<double>(s.used_blocks) / static_cast<double>(s.num_blocks);
    s.prefix_queries = 10;
    s.prefix_hits = 4;
    return s;
  }
  BlockMap block_map() const override {
    BlockMap m;
    m.owner = {0, 0, 1, -2, -1, -1, -1, -1};
    m.shared = {1, 0, 0, 0, 0, 0, 0, 0};
    return m;
  }
  int block_size() const override { return 16; }

  // One id per byte; after set_bos(true), add_special puts a 1 (a BOS) first, as a llama vocabulary does.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special && bos_) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  // Drops the BOS (1), as a detokenizer leaves out special tokens.
  std::string detokenize(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids)
      if (id != 1) text.push_back(static_cast<char>(id));
    return text;
  }
  std::string render_chat(const std::vector<ChatMessage>& messages,
                          const nlohmann::ordered_json& template_kwargs) const override {
    std::string out;
    if (template_kwargs.is_object() && !template_kwargs.empty()) out += "kwargs: " + template_kwargs.dump() + "\n";
    for (const auto& m : messages) out += m.role + ": " + m.content + "\n";
    return out + (harmony_ ? "<|start|>assistant" : gemma4_ ? "<|turn>model\n" : "assistant:");
  }
  // The chat prompt ends as gpt-oss's harmony template's does.
  void set_harmony(bool on) { harmony_ = on; }
  // ... or as Gemma 4's does.
  void set_gemma4(bool on) { gemma4_ = on; }
  std::string token_piece(int32_t id) const override { return std::string(1, static_cast<char>(id)); }
  int32_t vocab_size() const override { return 256; }
  int64_t context_length() const override { return context_; }
  int64_t default_completion_limit(int64_t n_prompt) const override {
    return completion_limit_ >= 0 ? completion_limit_ : context_ - n_prompt;
  }
  // As a context without an end (a streaming window) sets it; -1: the rest of the context.
  void set_default_completion_limit(int64_t n) { completion_limit_ = n; }

  // What the server sent (callbacks stripped), and which ids it aborted.
  std::vector<EngineRequest> added() const {
    std::lock_guard lock(mu_);
    return added_;
  }
  bool was_aborted(const std::string& id) const {
    std::lock_guard lock(mu_);
    return aborted_.count(id) > 0;
  }
  size_t live_requests() const {
    std::lock_guard lock(mu_);
    return live_.size();
  }
  void set_cached_tokens(int n) { cached_tokens_ = n; }
  void set_bos(bool bos) { bos_ = bos; }
  // Token i of every choice is script[i % size] instead of the alphabet's (set before any request).
  void set_script(std::string script) { script_ = std::move(script); }
  // The script's end is the end of the reply (finish_reason "stop"), as a model's end of turn.
  void set_stop_at_script_end(bool stop) { stop_at_script_end_ = stop; }
  void set_chat_template(std::string source) { chat_template_ = std::move(source); }
  std::string chat_template() const override { return chat_template_; }
  void set_sampling_defaults(SamplingDefaults d) { sampling_defaults_ = std::move(d); }
  SamplingDefaults sampling_defaults() const override { return sampling_defaults_; }

 private:
  bool bos_ = false;
  std::string script_;
  bool stop_at_script_end_ = false;
  std::string chat_template_;
  SamplingDefaults sampling_defaults_;
  struct Live {
    EngineRequest req;
    std::vector<int> produced;
    std::vector<bool> done;
  };

  // Prompt logprobs (when asked for), on a choice's first event: token p at -(p / 10), none before the first.
  static std::vector<TokenInfo> prompt_info(const EngineRequest& req) {
    std::vector<TokenInfo> out;
    if (req.params.prompt_logprobs < 0) return out;
    for (size_t p = 0; p < req.prompt_ids.size(); ++p) {
      TokenInfo pt;
      pt.id = req.prompt_ids[p];
      pt.logprob = p == 0 ? std::nanf("") : -0.1f * static_cast<float>(p);
      if (p > 0 && req.params.prompt_logprobs > 0) pt.top = {{'Q', -0.05f}};
      pt.rank = p == 0 ? 0 : 2;
      out.push_back(pt);
    }
    return out;
  }

  void loop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, step_, [&] { return stopping_; });
      if (stopping_) break;
      for (auto it = live_.begin(); it != live_.end();) {
        Live& l = it->second;
        const bool aborted = aborted_.count(l.req.id) > 0;
        bool all_done = true;
        for (int i = 0; i < l.req.n; ++i) {
          if (l.done[static_cast<size_t>(i)]) continue;
          RequestEvent ev;
          ev.index = i;
          if (aborted) {
            ev.finished = true;
            ev.finish_reason = "abort";
          } else if (l.req.params.max_tokens == 0) {  // the prompt alone
            ev.finished = true;
            ev.finish_reason = "length";
            ev.prompt_tokens_info = prompt_info(l.req);
          } else {
            const int k = l.produced[static_cast<size_t>(i)]++;
            const std::string_view letters = script_.empty() ? kAlphabet : std::string_view(script_);
            const char c = letters[static_cast<size_t>(k) % letters.size()];
            TokenInfo t;
            t.id = c;
            t.logprob = -0.5f;
            if (l.req.params.logprobs > 0) t.top = {{c, -0.5f}, {'Z', -1.5f}, {'Y', -2.5f}};
            ev.tokens.push_back(t);
            ev.text = std::string(1, c);
            if (k == 0) ev.prompt_tokens_info = prompt_info(l.req);
            if (stop_at_script_end_ && static_cast<size_t>(k + 1) == letters.size()) {
              ev.finished = true;
              ev.finish_reason = "stop";
            } else if (k + 1 >= l.req.params.max_tokens) {
              ev.finished = true;
              ev.finish_reason = "length";
            }
          }
          if (ev.finished) {
            l.done[static_cast<size_t>(i)] = true;
            ev.prompt_tokens = static_cast<int>(l.req.prompt_ids.size());
            ev.completion_tokens = l.produced[static_cast<size_t>(i)];
            ev.cached_tokens = cached_tokens_;
          } else {
            all_done = false;
          }
          l.req.on_event(ev);
        }
        it = all_done ? live_.erase(it) : std::next(it);
      }
    }
    // Like the real engine's destructor: whatever is unfinished ends with "abort".
    for (auto& [id, l] : live_)
      for (int i = 0; i < l.req.n; ++i)
        if (!l.done[static_cast<size_t>(i)]) {
          RequestEvent ev;
          ev.index = i;
          ev.finished = true;
          ev.finish_reason = "abort";
          l.req.on_event(ev);
        }
  }

  std::chrono::milliseconds step_;
  int64_t context_;
  int64_t completion_limit_ = -1;
  bool harmony_ = false;
  bool gemma4_ = false;
  std::atomic<int> cached_tokens_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, Live> live_;
  std::vector<EngineRequest> added_;
  std::set<std::string> aborted_;
  std::thread thread_;
};

}  // namespace kvserve::server::testing
