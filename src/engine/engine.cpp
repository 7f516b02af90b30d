#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "engine/batch_draft_proposer.h"
#include "engine/draft_pacing.h"
#include "engine/grammar_matcher.h"
#include "engine/model_runner.h"
#include "engine/paged_kv_cache.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/stop_checker.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/stream_decoder.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

// Above this many blocks the per-block scans behind stats() and block_map() run at most every
// kScanInterval instead of after every step: a decode step of a small model is well under a millisecond.
constexpr int64_t kCheapScanBlocks = 16384;
constexpr auto kScanInterval = std::chrono::milliseconds(50);
// block_map() is a polled view (the web page); keep building it this long after the last call.
constexpr auto kBlockMapInterest = std::chrono::seconds(5);

// One choice (0..n-1) of a request: its sequence, sampler and detokenizer.
struct Choice {
  Choice(const SamplingParams& params, const Tokenizer& tokenizer)
      : sampler(params), decoder(tokenizer), stops(params.stop) {}
  SeqId seq = -1;  // -1 while choice 0 still computes the prompt this one will be forked from
  Sampler sampler;
  StreamDecoder decoder;
  StopChecker stops;
  int completion_tokens = 0;
  bool finished = false;
  std::optional<GrammarMatcher> matcher;  // structured output: where the text stands in its grammar
  DraftPacing pacing;  // speculative decoding
  std::vector<float> draft_q;  // a draft model's distributions of the drafts in flight (k x n_vocab)
  // A draft model's draws come from their own stream (as the Generator's), so the target's sampler sees the
  // same draws whether or not drafts are made.
  std::unique_ptr<Sampler> draft_sampler;
};

struct ActiveRequest {
  EngineRequest req;
  int32_t owner = 0;  // block-map colour
  std::vector<std::unique_ptr<Choice>> choices;
  bool prompt_done = false;  // the prompt's logits have been seen (and n > 1 forked)
  // params.prompt_logprobs >= 0: each prompt token's log-probability, filled as the prompt's chunks run.
  std::vector<TokenInfo> prompt_info;
  int cached_tokens = 0;
  int num_unfinished = 0;
};

// Throws Error naming why `req` can never run on this engine.
void validate_request(const EngineRequest& req, int32_t n_vocab, int64_t max_model_len, int64_t capacity_tokens) {
  req.params.validate();
  if (req.id.empty()) fail("request id is empty");
  if (req.n < 1) fail("n must be at least 1, got {}", req.n);
  if (req.prompt_ids.empty()) fail("prompt is empty: at least one token is needed");
  for (int32_t id : req.prompt_ids)
    if (id < 0 || id >= n_vocab) fail("prompt token id {} is outside the vocabulary of {}", id, n_vocab);
  for (const auto& [id, bias] : req.params.logit_bias)
    if (id >= n_vocab) fail("logit_bias token id {} is outside the vocabulary of {}", id, n_vocab);
  for (int32_t id : req.params.stop_token_ids)
    if (id >= n_vocab) fail("stop token id {} is outside the vocabulary of {}", id, n_vocab);
  const int64_t n_prompt = static_cast<int64_t>(req.prompt_ids.size());
  const int64_t total = n_prompt + req.params.max_tokens;
  if (n_prompt >= max_model_len) fail("prompt has {} tokens, the context holds {}", n_prompt, max_model_len);
  if (total > max_model_len)
    fail("prompt ({} tokens) + max_tokens ({}) = {} exceeds the context of {} tokens", n_prompt, req.params.max_tokens,
         total, max_model_len);
  if (total > capacity_tokens)
    fail("prompt + max_tokens = {} tokens exceeds the whole KV cache ({} tokens)", total, capacity_tokens);
}

}  // namespace

struct Engine::Impl {
  Impl(const Model& m, EngineOptions o);
  ~Impl();

  void run();
  void admit(EngineRequest r);
  void abort(const std::string& id, const std::string& reason, const std::string& error = {});
  void step();
  void on_prompt_or_decode_done(SeqId seq, float* logits);
  // The logit rows a scheduled chunk yields: each position's where it verifies drafts or runs a prompt whose
  // log-probabilities were asked for, else the last position's where it completes the sequence.
  bool yields_prompt_rows(const ScheduledChunk& c) const;
  int64_t rows_of(const ScheduledChunk& c) const;
  void record_prompt_logprobs(const ScheduledChunk& c, const float* rows);
  void fork_children(ActiveRequest& a);
  void sample_choice(ActiveRequest& a, int index, float* logits);
  void emit_token(ActiveRequest& a, int index, int32_t id);
  void sample_decode_rows(const SchedulerOutput& out);
  void verify_drafts(const ScheduledChunk& c, float* rows);
  void propose_drafts(const SchedulerOutput& out);
  void finish_choice(ActiveRequest& a, int index, const std::string& reason, RequestEvent ev,
                     const std::string& error = {});
  void reap_finished();
  void publish(bool idle);
  bool commit_next_kv_pages();

  const Model& model;
  EngineOptions opts;
  int64_t max_model_len = 0;
  int32_t n_vocab = 0;
  std::unique_ptr<KVStorage> storage;
  KVCacheView view;
  std::unique_ptr<KVCacheManager> kv;
  std::unique_ptr<Scheduler> scheduler;
  ModelRunner runner;

  // Shared with caller threads, under inbox_mu.
  std::mutex inbox_mu;
  std::condition_variable wake;     // the loop waits here when idle
  std::condition_variable idle_cv;  // drain() / wait_until_idle() wait here
  std::deque<EngineRequest> inbox;
  std::vector<std::string> abort_inbox;
  std::unordered_set<std::string> live_ids;  // accepted and not yet finished
  bool stopping = false;
  bool draining = false;
  bool idle_published = true;  // the snapshot shows the engine with nothing to do

  // Snapshot for stats() / block_map(), under snap_mu.
  mutable std::mutex snap_mu;
  EngineStats snap;
  BlockMap snap_map;
  std::string invariant_problem;
  std::atomic<int64_t> block_map_wanted_until{0};  // Clock ticks
  Clock::time_point last_scan{};

  // Engine thread only.
  std::unordered_map<std::string, std::unique_ptr<ActiveRequest>> active;
  std::unordered_map<SeqId, std::pair<ActiveRequest*, int>> by_seq;
  SeqId next_seq = 1;
  int32_t next_owner = 0;
  uint64_t prompt_tokens = 0, generation_tokens = 0, requests_finished = 0;
  uint64_t draft_tokens = 0, accepted_draft_tokens = 0;
  NgramProposer proposer;
  std::unique_ptr<BatchDraftProposer> draft;  // a draft model's proposals instead of the n-gram ones
  std::vector<DraftAsk> draft_asks;
  std::vector<float> logits, scratch;
  // A step's decode rows, sampled together on the pool before their tokens are handed out in order.
  struct DecodeRow {
    SeqId seq;
    float* row;
    Sampler* sampler;
    int32_t id;
    const GrammarMatcher* matcher;
  };
  // Every vocabulary token's text, for grammar masks: built at the first constrained request.
  std::unique_ptr<GrammarTokenTable> grammar_table;
  std::vector<int32_t> eog_ids;  // the vocabulary's ends of generation (held back before min_tokens)
  // Only the tokens the grammar allows next keep their logits; where none can (a grammar the vocabulary
  // cannot spell), the end of the text.
  void constrain(const GrammarMatcher& m, float* row) const { m.mask_or_end(row, n_vocab, model.tokenizer->eos()); }
  std::vector<DecodeRow> decode_rows;
  std::thread thread;
};

Engine::Impl::Impl(const Model& m, EngineOptions o) : model(m), opts(std::move(o)), runner(m), proposer(opts.ngram) {
  const ModelConfig& c = model.config;
  if (!model.tokenizer) fail("engine: the model has no tokenizer");
  if (opts.speculative_tokens < 0) fail("engine: speculative tokens must be >= 0, got {}", opts.speculative_tokens);
  if (opts.speculative_max_batch < 0)
    fail("engine: speculative max batch must be >= 0, got {}", opts.speculative_max_batch);
  n_vocab = c.n_vocab;
  eog_ids = model.tokenizer->eog_ids();
  max_model_len = opts.max_model_len > 0   ? opts.max_model_len
                  : opts.streaming.on() ? kStreamingContextLimit
                  : c.n_ctx_train > 0   ? c.n_ctx_train
                                        : 2048;
  PagedKVCacheOptions ko;
  ko.kv_cache_memory = opts.kv_cache_memory;
  ko.block_size = opts.block_size;
  ko.kv_dtype = opts.kv_cache_dtype;
  if (!opts.kv_layer_dtypes.empty())
    ko.layer_dtypes = resolve_kv_layer_dtypes(opts.kv_layer_dtypes, c.n_layers, opts.kv_cache_dtype);
  ko.max_model_len = max_model_len;
  ko.max_num_seqs = opts.max_num_seqs;
  ko.enable_prefix_caching = opts.enable_prefix_caching;
  ko.prefix_cache_ttl_seconds = opts.prefix_cache_ttl_seconds;
  ko.model_id = opts.model_id;
  ko.prefault = opts.prefault_kv;
  ko.max_chunk_tokens = opts.max_num_batched_tokens;
  ko.hybrid = opts.hybrid_kv_cache;
  ko.streaming = opts.streaming;
  ko.h2o = opts.h2o;
  ko.who = "engine";
  if (opts.h2o.on() && opts.speculative_tokens > 0)
    fail("engine: H2O eviction cannot take back a rejected draft's evictions; it does not run with speculative "
         "decoding");
  // What an H2O block holds depends on its sequence's history: nothing to share.
  if (opts.h2o.on()) opts.enable_prefix_caching = false;
  PagedKVCache cache(c, ko);
  fmt::print(stderr, "{}\n", cache.summary());
  storage = std::move(cache.storage);
  view = std::move(cache.view);
  kv = std::move(cache.manager);
  scheduler = std::make_unique<Scheduler>(
      *kv, SchedulerConfig{opts.max_num_batched_tokens, opts.max_num_seqs, opts.enable_prefix_caching});
  if (opts.draft_model != nullptr && opts.speculative_tokens > 0) {
    if (opts.streaming.on())
      fail("engine: a draft model keeps every position in its own cache; it does not run with a streaming window");
    DraftModelOptions d;
    d.block_size = opts.block_size;
    d.kv_cache_dtype = opts.kv_cache_dtype;
    d.max_context = max_model_len;
    d.prefill_chunk = opts.max_num_batched_tokens;
    d.kv_cache_memory = opts.draft_kv_cache_memory > 0 ? opts.draft_kv_cache_memory : opts.kv_cache_memory;
    draft = std::make_unique<BatchDraftProposer>(*opts.draft_model, model, d, opts.max_num_seqs);
    fmt::print(stderr, "{}\n", draft->kv_cache().summary());
  }

  publish(true);
  thread = std::thread([this] { run(); });
}

Engine::Impl::~Impl() {
  {
    std::lock_guard lk(inbox_mu);
    stopping = true;
  }
  wake.notify_all();
  if (thread.joinable()) thread.join();
}

void Engine::Impl::run() {
  for (;;) {
    std::deque<EngineRequest> incoming;
    std::vector<std::string> to_abort;
    bool stop = false;
    {
      std::unique_lock lk(inbox_mu);
      if (inbox.empty() && abort_inbox.empty() && !stopping && !scheduler->has_work()) {
        lk.unlock();
        publish(true);
        lk.lock();
        if (inbox.empty() && abort_inbox.empty() && !stopping) {
          idle_published = true;
          idle_cv.notify_all();
          const auto woken = [&] { return stopping || !inbox.empty() || !abort_inbox.empty(); };
          while (!woken() && opts.commit_kv_ahead) {
            lk.unlock();
            const bool more = commit_next_kv_pages();
            lk.lock();
            if (!more) break;
          }
          wake.wait(lk, woken);
        }
      }
      incoming.swap(inbox);
      to_abort.swap(abort_inbox);
      stop = stopping;
    }
    for (EngineRequest& r : incoming) admit(std::move(r));
    for (const std::string& id : to_abort) abort(id, "abort");
    if (stop) {
      std::vector<std::string> ids;
      for (const auto& [id, a] : active) ids.push_back(id);
      for (const std::string& id : ids) abort(id, "abort");
      reap_finished();
      publish(true);
      std::lock_guard lk(inbox_mu);
      idle_published = true;
      idle_cv.notify_all();
      return;
    }
    if (scheduler->has_work()) {
      try {
        step();
      } catch (const std::exception& e) {
        // A failed forward must not take the server down: fail what was in flight, keep serving.
        fmt::print(stderr, "engine: step failed: {}\n", e.what());
        std::vector<std::string> ids;
        for (const auto& [id, a] : active) ids.push_back(id);
        for (const std::string& id : ids) abort(id, "error", e.what());
      }
    }
    reap_finished();
    publish(false);
  }
}

void Engine::Impl::admit(EngineRequest r) {
  auto a = std::make_unique<ActiveRequest>();
  a->owner = next_owner++;
  a->num_unfinished = r.n;
  for (int i = 0; i < r.n; ++i) {
    SamplingParams p = r.params;
    if (p.has_seed) p.seed += static_cast<uint64_t>(i);  // independent but reproducible choices
    auto c = std::make_unique<Choice>(p, *model.tokenizer);
    c->decoder.start_after(r.prompt_ids);
    if (!r.shown_special_tokens.empty()) c->decoder.show_tokens(r.shown_special_tokens);
    if (r.grammar) {
      if (!grammar_table) grammar_table = std::make_unique<GrammarTokenTable>(*model.tokenizer);
      std::vector<std::pair<int32_t, std::string>> shown;
      for (int32_t id : r.shown_special_tokens) shown.emplace_back(id, model.tokenizer->token_to_piece(id, true));
      c->matcher.emplace(r.grammar, *grammar_table, shown);
    }
    c->sampler.set_prompt(r.prompt_ids);
    c->sampler.set_eog_tokens(eog_ids);
    if (draft) {
      SamplingParams dp = p;
      dp.seed = p.seed ^ 0x9E3779B97F4A7C15ull;
      dp.logprobs = 0;
      c->draft_sampler = std::make_unique<Sampler>(dp);
      c->draft_sampler->set_prompt(r.prompt_ids);
      c->draft_sampler->set_eog_tokens(eog_ids);
    }
    a->choices.push_back(std::move(c));
  }
  SequenceState s;
  s.id = next_seq++;
  s.tokens = r.prompt_ids;
  s.num_prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
  s.cache_salt = r.cache_salt;
  s.long_rope_after = long_rope_after(model.config, opts.rope_factors, opts.streaming);
  if (r.params.prompt_logprobs >= 0) {
    s.computes_whole_prompt = true;
    a->prompt_info.resize(r.prompt_ids.size());
    for (size_t i = 0; i < r.prompt_ids.size(); ++i) a->prompt_info[i].id = r.prompt_ids[i];
    a->prompt_info[0].logprob = std::numeric_limits<float>::quiet_NaN();
  }
  a->choices[0]->seq = s.id;
  by_seq[s.id] = {a.get(), 0};
  scheduler->add_waiting(std::move(s));
  prompt_tokens += r.prompt_ids.size();
  a->req = std::move(r);
  const std::string id = a->req.id;
  active[id] = std::move(a);
}

void Engine::Impl::abort(const std::string& id, const std::string& reason, const std::string& error) {
  auto it = active.find(id);
  if (it == active.end()) return;  // already finished, or never known
  ActiveRequest& a = *it->second;
  for (int i = 0; i < static_cast<int>(a.choices.size()); ++i)
    if (!a.choices[i]->finished) finish_choice(a, i, reason, RequestEvent{}, error);
}

// One piece (a huge page) of the pages the next blocks will be written into; false when they are all
// committed. A piece takes ~6-8 ms where the host backs the VM's memory lazily, so a request that arrives
// meanwhile waits at most that long.
bool Engine::Impl::commit_next_kv_pages() {
  const auto end = static_cast<int32_t>(
      std::min<int64_t>(storage->num_blocks(), int64_t{kv->pool().high_water()} + storage->blocks_per_huge_page()));
  return storage->commit_ahead(end, kHugePageBytes);
}

void Engine::Impl::step() {
  const SchedulerOutput out = scheduler->schedule();
  if (out.empty()) return;
  std::vector<BatchSequence> batch;
  batch.reserve(out.chunks.size());
  for (const ScheduledChunk& c : out.chunks) {
    const SequenceState& s = *scheduler->find(c.seq);
    BatchSequence b;
    b.tokens = std::span<const int32_t>(s.tokens.data() + c.start, static_cast<size_t>(c.num_tokens));
    b.pos0 = c.start;
    set_block_tables(*kv, c.seq, b);
    b.want_logits = c.completes_sequence && c.num_draft_tokens == 0;
    // A row per position: each verifies the draft after it, or gives the next prompt token's log-probability.
    b.all_logits = c.num_draft_tokens > 0 || yields_prompt_rows(c);
    b.long_rope = s.long_rope;
    batch.push_back(b);
  }
  runner.forward(batch, view, logits);
  scheduler->update_after_step(out);
  sample_decode_rows(out);
  int64_t row = 0;
  size_t decoded = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (c.num_draft_tokens > 0) {
      verify_drafts(c, logits.data() + row * n_vocab);
      row += c.num_tokens;
      continue;
    }
    if (yields_prompt_rows(c)) {
      record_prompt_logprobs(c, logits.data() + row * n_vocab);
      row += c.num_tokens;
      if (c.completes_sequence) on_prompt_or_decode_done(c.seq, logits.data() + (row - 1) * n_vocab);
      continue;
    }
    if (!c.completes_sequence) continue;
    if (decoded < decode_rows.size() && decode_rows[decoded].seq == c.seq) {
      if (auto it = by_seq.find(c.seq); it != by_seq.end())
        emit_token(*it->second.first, it->second.second, decode_rows[decoded].id);
      ++decoded;
    } else {
      on_prompt_or_decode_done(c.seq, logits.data() + row * n_vocab);
    }
    ++row;
  }
  if (opts.speculative_tokens > 0) propose_drafts(out);
}

// A chunk of a token and the drafts after it: its rows verify the drafts in order (Sampler::
// sample_with_draft), each taken one emitted; the first not taken is replaced by the sampler's correction,
// or, every draft taken, the last row gives a bonus token. The K/V of the drafts not taken are cut away.
void Engine::Impl::verify_drafts(const ScheduledChunk& c, float* rows) {
  auto it = by_seq.find(c.seq);
  if (it == by_seq.end()) return;
  ActiveRequest& a = *it->second.first;
  const int index = it->second.second;
  Choice& choice = *a.choices[index];
  SequenceState* s = scheduler->find(c.seq);
  const int64_t k = c.num_draft_tokens;
  const std::vector<int32_t> drafts(s->tokens.end() - k, s->tokens.end());
  const int64_t base = s->num_verified_tokens();  // tokens before the drafts, all computed now
  s->drop_drafts();
  s->num_computed_tokens = base;
  draft_tokens += static_cast<uint64_t>(k);
  const SeqId seq = c.seq;
  int64_t taken = 0;
  bool rejected = false;
  for (; taken < k && !rejected; ++taken) {
    bool accepted = false;
    // A draft model's q; prompt lookup proposes with certainty (q null).
    const float* q = static_cast<int64_t>(choice.draft_q.size()) >= k * n_vocab
                         ? choice.draft_q.data() + taken * static_cast<int64_t>(n_vocab)
                         : nullptr;
    const int32_t t = choice.sampler.sample_with_draft(rows + taken * static_cast<int64_t>(n_vocab), n_vocab,
                                                       drafts[taken], &accepted, q);
    if (accepted) ++accepted_draft_tokens;
    rejected = !accepted;
    emit_token(a, index, t);
    if (choice.finished) return;  // its blocks are freed already
  }
  if (rejected) --taken;  // the last token emitted was the correction
  if (!rejected) emit_token(a, index, choice.sampler.sample(rows + k * static_cast<int64_t>(n_vocab), n_vocab));
  choice.pacing.record(taken, k);
  if (choice.finished) return;
  s = scheduler->find(seq);
  kv->truncate(seq, base + taken);
  s->num_computed_tokens = base + taken;
}

// Each sequence that decoded this step and waits for its next token gets up to speculative_tokens drafts
// (prompt lookup) after it, as many as could still be emitted within max_tokens and the context (and, on
// LongRoPE's short factors, within the original context: the switch recomputes the sequence).
void Engine::Impl::propose_drafts(const SchedulerOutput& out) {
  if (draft) {
    // The draft's caches of sequences that ended go back to its pool first.
    draft->drop_unless([&](SeqId seq) { return by_seq.count(seq) != 0 && scheduler->find(seq) != nullptr; });
    draft_asks.clear();
  }
  if (opts.speculative_max_batch > 0) {
    int64_t decoding = 0;
    for (const ScheduledChunk& c : out.chunks) decoding += c.completes_sequence ? 1 : 0;
    if (decoding > opts.speculative_max_batch) return;
  }
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.completes_sequence) continue;
    auto it = by_seq.find(c.seq);
    if (it == by_seq.end() || !it->second.first->prompt_done) continue;
    ActiveRequest& a = *it->second.first;
    Choice& choice = *a.choices[it->second.second];
    SequenceState* s = scheduler->find(c.seq);
    if (choice.finished || s == nullptr || s->num_draft_tokens > 0 || s->num_tokens() - s->num_computed_tokens != 1)
      continue;
    if (!choice.pacing.may_draft() || choice.matcher) continue;  // drafts are not checked against a grammar
    int64_t room = std::min<int64_t>(
        {opts.speculative_tokens, a.req.params.max_tokens - choice.completion_tokens, max_model_len - s->num_tokens()});
    if (s->long_rope_after >= 0 && !s->long_rope) room = std::min(room, s->long_rope_after - s->num_tokens());
    if (room <= 0) continue;
    if (draft) {
      DraftAsk& ask = draft_asks.emplace_back();
      ask.seq = c.seq;
      ask.tokens = s->tokens;
      ask.k = static_cast<int>(room);
      ask.sampler = choice.draft_sampler.get();
      continue;
    }
    const std::vector<int32_t> drafts = proposer.propose(s->tokens, static_cast<int>(room));
    s->tokens.insert(s->tokens.end(), drafts.begin(), drafts.end());
    s->num_draft_tokens = static_cast<int64_t>(drafts.size());
  }
  if (!draft || draft_asks.empty()) return;
  draft->propose(draft_asks);
  for (DraftAsk& ask : draft_asks) {
    if (ask.drafts.empty()) continue;
    SequenceState* s = scheduler->find(ask.seq);
    const auto& [a, index] = by_seq.at(ask.seq);
    s->tokens.insert(s->tokens.end(), ask.drafts.begin(), ask.drafts.end());
    s->num_draft_tokens = static_cast<int64_t>(ask.drafts.size());
    a->choices[index]->draft_q = std::move(ask.q);
  }
}

// Every row of a sequence past its prompt is drawn from now, all of them at once on the pool: each row
// and each choice's sampler belong to one sequence, and a temperature draw reads the whole vocabulary
// (128k weights), which one thread did for 16 sequences while the others waited.
void Engine::Impl::sample_decode_rows(const SchedulerOutput& out) {
  decode_rows.clear();
  int64_t row = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (c.num_draft_tokens > 0 || yields_prompt_rows(c)) {  // read on their own (verify_drafts, prompts)
      row += rows_of(c);
      continue;
    }
    if (!c.completes_sequence) continue;
    float* r = logits.data() + row * n_vocab;
    ++row;
    auto it = by_seq.find(c.seq);
    if (it == by_seq.end() || !it->second.first->prompt_done) continue;
    Choice& choice = *it->second.first->choices[it->second.second];
    decode_rows.push_back({c.seq, r, &choice.sampler, -1, choice.matcher ? &*choice.matcher : nullptr});
  }
  std::exception_ptr error;
  std::mutex error_mu;
  const auto draw = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      DecodeRow& d = decode_rows[static_cast<size_t>(i)];
      try {
        if (d.matcher) constrain(*d.matcher, d.row);
        d.id = d.sampler->sample(d.row, n_vocab);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  const auto n = static_cast<int64_t>(decode_rows.size());
  if (n > 1) {
    ThreadPool::global().parallel_for_dynamic(n, draw);
  } else {
    draw(0, n);
  }
  if (error) std::rethrow_exception(error);
}

bool Engine::Impl::yields_prompt_rows(const ScheduledChunk& c) const {
  if (c.num_draft_tokens > 0) return false;
  const auto it = by_seq.find(c.seq);
  return it != by_seq.end() && !it->second.first->prompt_done && !it->second.first->prompt_info.empty();
}

int64_t Engine::Impl::rows_of(const ScheduledChunk& c) const {
  if (c.num_draft_tokens > 0 || yields_prompt_rows(c)) return c.num_tokens;
  return c.completes_sequence ? 1 : 0;
}

// Row i gives the distribution of the token at position start + i + 1. A prompt computed again (preempted
// before its end) writes the same values again.
void Engine::Impl::record_prompt_logprobs(const ScheduledChunk& c, const float* rows) {
  ActiveRequest& a = *by_seq.at(c.seq).first;
  const int k = a.req.params.prompt_logprobs;
  const auto n_prompt = static_cast<int64_t>(a.prompt_info.size());
  std::vector<TokenLogprob> top;
  for (int64_t i = 0; i < c.num_tokens && c.start + i + 1 < n_prompt; ++i) {
    TokenInfo& t = a.prompt_info[static_cast<size_t>(c.start + i + 1)];
    t.logprob = token_logprobs(rows + i * n_vocab, n_vocab, t.id, k, top, &t.rank);
    t.top.clear();
    for (const TokenLogprob& alt : top) t.top.emplace_back(alt.id, alt.logprob);
  }
}

void Engine::Impl::on_prompt_or_decode_done(SeqId seq, float* row) {
  auto it = by_seq.find(seq);
  if (it == by_seq.end()) return;
  ActiveRequest& a = *it->second.first;
  const int index = it->second.second;
  if (!a.prompt_done) {
    a.prompt_done = true;
    SequenceState& s = *scheduler->find(seq);
    a.cached_tokens = static_cast<int>(std::max<int64_t>(0, s.num_cached_tokens));
    s.computes_whole_prompt = false;     // its rows are recorded: recomputed after a preemption, it may hit the cache
    if (a.req.params.max_tokens == 0) {  // a prompt scored (prompt_logprobs) and nothing drawn, as vLLM allows
      for (int i = 0; i < static_cast<int>(a.choices.size()); ++i) {
        if (a.choices[i]->finished) continue;
        RequestEvent ev;
        ev.prompt_tokens_info = a.prompt_info;
        finish_choice(a, i, "length", std::move(ev));
      }
      return;
    }
    fork_children(a);
    // Every choice forked now samples its first token from the prompt's logits, each on its own copy
    // (sampling edits logits in place).
    for (int i = 0; i < static_cast<int>(a.choices.size()); ++i) {
      Choice& c = *a.choices[i];
      if (c.finished || c.seq < 0) continue;
      const SequenceState* s = scheduler->find(c.seq);
      if (!s || s->needs_tokens()) continue;  // a child that could not fork recomputes the prompt itself
      scratch.assign(row, row + n_vocab);
      sample_choice(a, i, scratch.data());
    }
    return;
  }
  // A decode row belongs to this sequence alone and is not read again: sample on it in place.
  sample_choice(a, index, row);
}

void Engine::Impl::fork_children(ActiveRequest& a) {
  const SeqId parent = a.choices[0]->seq;
  const SequenceState parent_state = *scheduler->find(parent);
  for (int i = 1; i < static_cast<int>(a.choices.size()); ++i) {
    Choice& c = *a.choices[i];
    if (c.finished) continue;
    SequenceState child = parent_state;
    child.id = next_seq++;
    c.seq = child.id;
    by_seq[child.id] = {&a, i};
    const ForkResult f = kv->fork(parent, child.id);
    if (f) {
      // The child's private copy of the partial last block must hold the prompt's K/V before the next
      // forward writes into it.
      for (const BlockCopy& copy : f.copies) storage->copy_block(copy.src, copy.dst);
      scheduler->add_running(std::move(child));
    } else {
      // No block for the copy right now: the child waits and computes the prompt on its own (mostly
      // from the prefix cache) instead of holding up the parent.
      child.num_cached_tokens = -1;
      scheduler->add_waiting(std::move(child));
    }
  }
}

void Engine::Impl::sample_choice(ActiveRequest& a, int index, float* row) {
  Choice& c = *a.choices[index];
  if (c.matcher) constrain(*c.matcher, row);
  emit_token(a, index, c.sampler.sample(row, n_vocab));
}

// Appends a drawn token to its choice's sequence and reports it (and the end of the choice, if it is).
void Engine::Impl::emit_token(ActiveRequest& a, int index, int32_t id) {
  Choice& c = *a.choices[index];
  SequenceState& s = *scheduler->find(c.seq);
  const SamplingParams& params = a.req.params;
  c.sampler.accept(id);
  if (c.draft_sampler) c.draft_sampler->accept(id);
  s.tokens.push_back(id);
  ++c.completion_tokens;
  ++generation_tokens;

  RequestEvent ev;
  ev.index = index;
  if (c.completion_tokens == 1) ev.prompt_tokens_info = a.prompt_info;
  TokenInfo info;
  info.id = id;
  if (params.logprobs > 0) {
    info.logprob = c.sampler.last_logprob();
    for (const TokenLogprob& t : c.sampler.last_top_logprobs()) info.top.emplace_back(t.id, t.logprob);
  }
  ev.tokens.push_back(std::move(info));

  std::string reason;
  if (ends_generation(params, *model.tokenizer, id)) {
    reason = "stop";
    if (params.ignore_eos || !model.tokenizer->is_eog(id)) ev.stop_token_id = id;
  } else {
    ev.text = c.stops.push(c.decoder.feed(id), c.completion_tokens > params.min_tokens);
    if (c.stops.stopped()) {
      reason = "stop";
      ev.stop_string = c.stops.matched();
    }
    // A constrained text ends where its grammar does (the mask let through only a token it takes).
    if (c.matcher && (!c.matcher->accept(id) || c.matcher->done())) reason = "stop";
  }
  if (reason.empty() && (c.completion_tokens >= params.max_tokens || s.num_tokens() >= max_model_len))
    reason = "length";
  if (reason.empty()) {
    if (a.req.on_event) a.req.on_event(ev);
    return;
  }
  if (!c.stops.stopped()) {
    ev.text += c.stops.push(c.decoder.flush());
    ev.text += c.stops.flush();
  }
  finish_choice(a, index, reason, std::move(ev));
}

void Engine::Impl::finish_choice(ActiveRequest& a, int index, const std::string& reason, RequestEvent ev,
                                 const std::string& error) {
  Choice& c = *a.choices[index];
  if (!a.prompt_done && a.choices[0]->seq >= 0)
    if (const SequenceState* s = scheduler->find(a.choices[0]->seq))
      a.cached_tokens = static_cast<int>(std::max<int64_t>(0, s->num_cached_tokens));
  c.finished = true;
  if (c.seq >= 0) {
    // Freed now, not at the next step: a waiting request may need exactly these blocks.
    scheduler->finish(c.seq);
    by_seq.erase(c.seq);
    if (draft) draft->drop(c.seq);
  }
  ev.index = index;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.prompt_tokens = static_cast<int>(a.req.prompt_ids.size());
  ev.completion_tokens = c.completion_tokens;
  ev.cached_tokens = a.cached_tokens;
  --a.num_unfinished;
  if (a.req.on_event) a.req.on_event(ev);
}

void Engine::Impl::reap_finished() {
  std::vector<std::string> done;
  for (const auto& [id, a] : active)
    if (a->num_unfinished == 0) done.push_back(id);
  if (done.empty()) return;
  for (const std::string& id : done) active.erase(id);
  requests_finished += done.size();
  std::lock_guard lk(inbox_mu);
  for (const std::string& id : done) live_ids.erase(id);
  idle_cv.notify_all();
}

void Engine::Impl::publish(bool idle) {
  const auto now = Clock::now();
  const BlockPool& pool = kv->pool();
  const int32_t nb = pool.num_blocks();
  const bool scan = idle || nb <= kCheapScanBlocks || now - last_scan >= kScanInterval;
  const bool want_map =
      scan && (idle || now.time_since_epoch().count() < block_map_wanted_until.load(std::memory_order_relaxed));

  EngineStats st;
  st.running = static_cast<int>(scheduler->running().size());
  st.waiting = static_cast<int>(scheduler->waiting().size());
  st.num_blocks = nb;
  st.preemptions = scheduler->num_preemptions();
  st.rope_restarts = scheduler->num_rope_restarts();
  st.draft_tokens = draft_tokens;
  st.accepted_draft_tokens = accepted_draft_tokens;
  st.prefix_queries = scheduler->prefix_query_tokens();
  st.prefix_hits = scheduler->prefix_hit_tokens();
  st.prefix_evictions = kv->stats().evictions;
  st.prompt_tokens = prompt_tokens;
  st.generation_tokens = generation_tokens;
  st.requests_finished = requests_finished;
  if (scan) {
    last_scan = now;
    for (int32_t b = 0; b < nb; ++b) {
      const KVBlock& blk = pool.block(b);
      if (blk.ref_count > 0)
        ++st.used_blocks;
      else if (blk.hash)
        ++st.cached_blocks;
      else
        ++st.free_blocks;
    }
  } else {
    std::lock_guard lk(snap_mu);
    st.used_blocks = nb - pool.num_free_blocks();
    st.cached_blocks = snap.cached_blocks;
    st.free_blocks = nb - st.used_blocks - st.cached_blocks;
  }
  st.kv_usage = nb > 0 ? static_cast<double>(st.used_blocks) / nb : 0.0;

  BlockMap map;
  if (want_map) {
    map.owner.assign(nb, -1);
    map.shared.assign(nb, 0);
    for (int32_t b = 0; b < nb; ++b) {
      const KVBlock& blk = pool.block(b);
      if (blk.ref_count == 0 && blk.hash) map.owner[b] = -2;
      map.shared[b] = blk.ref_count > 1 ? 1 : 0;
    }
    for (const auto& [seq, where] : by_seq) {
      if (!kv->has_sequence(seq)) continue;
      for (int g = 0; g < kv->num_groups(); ++g)
        for (int32_t b : kv->block_table(seq, g).ids())
          if (b != kv->null_block()) map.owner[b] = where.first->owner % 1000000;
    }
  }

  std::string problem;
  if (idle) {
    // With nothing running, every block must be free or cached: anything else is a leak.
    if (!kv->sequences().empty())
      problem = fmt::format("{} sequences still hold blocks", kv->sequences().size());
    else if (st.used_blocks != 0)
      problem = fmt::format("{} blocks in use with no sequence", st.used_blocks);
    else if (!by_seq.empty() || !active.empty())
      problem = "requests left behind";
    else if (draft && draft->num_sequences() > 0)
      problem = fmt::format("the draft model's cache still holds {} sequences", draft->num_sequences());
    else if (draft && draft->kv_cache().manager->num_free_blocks() != draft->kv_cache().num_blocks)
      problem = "the draft model's cache has blocks in use with no sequence";
  }

  std::lock_guard lk(snap_mu);
  snap = st;
  if (want_map) snap_map = std::move(map);
  if (idle) invariant_problem = problem;
}

Engine::Engine(const Model& model, EngineOptions opts) : impl_(std::make_unique<Impl>(model, std::move(opts))) {}

Engine::~Engine() = default;

void Engine::add_request(EngineRequest req) {
  std::vector<EngineRequest> one;
  one.push_back(std::move(req));
  add_requests(std::move(one));
}

void Engine::add_requests(std::vector<EngineRequest> reqs) {
  Impl& m = *impl_;
  for (const EngineRequest& req : reqs) validate_request(req, m.n_vocab, m.max_model_len, m.kv->capacity_tokens());
  {
    std::lock_guard lk(m.inbox_mu);
    if (m.draining || m.stopping) fail("the engine is shutting down and accepts no new requests");
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (m.live_ids.insert(reqs[i].id).second) continue;
      for (size_t j = 0; j < i; ++j) m.live_ids.erase(reqs[j].id);  // all or none
      fail("request id '{}' is already in use", reqs[i].id);
    }
    for (EngineRequest& req : reqs) m.inbox.push_back(std::move(req));
    m.idle_published = false;
  }
  m.wake.notify_one();
}

void Engine::abort_request(const std::string& id) {
  {
    std::lock_guard lk(impl_->inbox_mu);
    impl_->abort_inbox.push_back(id);
    impl_->idle_published = false;
  }
  impl_->wake.notify_one();
}

void Engine::drain() {
  {
    std::lock_guard lk(impl_->inbox_mu);
    impl_->draining = true;
  }
  wait_until_idle();
}

void Engine::wait_until_idle() {
  Impl& m = *impl_;
  std::unique_lock lk(m.inbox_mu);
  m.idle_cv.wait(lk, [&] { return m.live_ids.empty() && m.idle_published; });
}

std::string Engine::check_invariants() const {
  std::lock_guard lk(impl_->snap_mu);
  return impl_->invariant_problem;
}

void Engine::set_phase_profile(bool on) { impl_->runner.set_phase_profile(on); }

const StepPhaseProfile* Engine::phase_profile() const { return impl_->runner.phase_profile(); }

EngineStats Engine::stats() const {
  std::lock_guard lk(impl_->snap_mu);
  return impl_->snap;
}

BlockMap Engine::block_map() const {
  const auto until = Clock::now() + kBlockMapInterest;
  impl_->block_map_wanted_until.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  std::lock_guard lk(impl_->snap_mu);
  return impl_->snap_map;
}

const Model& Engine::model() const { return impl_->model; }
const EngineOptions& Engine::options() const { return impl_->opts; }

}  // namespace kvserve
