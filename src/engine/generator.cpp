#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "engine/draft_pacing.h"
#include "engine/ngram_proposer.h"
#include "engine/stop_checker.h"
#include "model/stream_decoder.h"

namespace kvserve {

namespace {

// Frees the sequence's blocks however generate() ends (done, cancelled, or an exception), so that
// between calls every block is free or cached.
struct SequenceGuard {
  SequenceGuard(KVCacheManager& m, SeqId s) : kv(m), seq(s) {}
  SequenceGuard(const SequenceGuard&) = delete;
  SequenceGuard& operator=(const SequenceGuard&) = delete;
  ~SequenceGuard() {
    if (kv.has_sequence(seq)) kv.free(seq);
  }
  KVCacheManager& kv;
  const SeqId seq;
};

}  // namespace

int64_t generator_context(const ModelConfig& c, const GeneratorOptions& o) {
  if (o.max_context > 0) return o.max_context;
  return o.streaming.on() ? kStreamingContextLimit : c.n_ctx_train > 0 ? c.n_ctx_train : 2048;
}

Generator::Generator(const Model& model, GeneratorOptions opts, ThreadPool& pool)
    : model_(model), opts_(opts), runner_(model, pool) {
  const ModelConfig& c = model.config;
  opts_.max_context = generator_context(c, opts_);
  if (opts_.streaming.on() && opts_.draft_model != nullptr)
    fail("generate: a draft model keeps every position in its own cache; it does not run with a streaming window");
  if (opts_.prefill_chunk <= 0) fail("generate: prefill chunk must be positive, got {}", opts_.prefill_chunk);
  if (opts_.speculative_tokens < 0) fail("generate: speculative tokens must be >= 0, got {}", opts_.speculative_tokens);
  (void)NgramProposer(opts_.ngram);  // its options are checked now, not at the first request
  PagedKVCacheOptions ko;
  ko.kv_cache_memory = opts_.kv_cache_memory;
  ko.block_size = opts_.block_size;
  ko.kv_dtype = opts_.kv_cache_dtype;
  if (!opts_.kv_layer_dtypes.empty())
    ko.layer_dtypes = resolve_kv_layer_dtypes(opts_.kv_layer_dtypes, c.n_layers, opts_.kv_cache_dtype);
  if (opts_.max_request_tokens < 0) fail("generate: max request tokens must be >= 0, got {}", opts_.max_request_tokens);
  // The positions a request reaches: what both caches (the target's, a draft model's) are sized for.
  const int64_t reach =
      opts_.max_request_tokens > 0 ? std::min(opts_.max_context, opts_.max_request_tokens) : opts_.max_context;
  ko.max_model_len = reach;
  ko.max_num_seqs = 1;
  ko.enable_prefix_caching = opts_.enable_prefix_caching;
  ko.max_chunk_tokens = opts_.prefill_chunk;
  ko.hybrid = opts_.hybrid_kv_cache;
  ko.streaming = opts_.streaming;
  ko.h2o = opts_.h2o;
  ko.who = "generate";
  if (opts_.h2o.on() && opts_.speculative_tokens > 0)
    fail("generate: H2O eviction cannot take back a rejected draft's evictions; it does not run with speculative "
         "decoding");
  if (opts_.h2o.on()) opts_.enable_prefix_caching = false;
  kv_ = std::make_unique<PagedKVCache>(c, ko);
  if (opts_.draft_model != nullptr) {
    DraftModelOptions d;
    d.block_size = opts_.block_size;
    d.kv_cache_dtype = opts_.kv_cache_dtype;
    d.max_context = reach;  // its drafts stay within the target's room, so within the request
    d.prefill_chunk = opts_.prefill_chunk;
    d.kv_cache_memory = opts_.kv_cache_memory;
    draft_ = std::make_unique<DraftModelProposer>(*opts_.draft_model, model, d, pool);
  }
}

Generator::~Generator() = default;

void Generator::check_fits(int64_t n_prompt, int64_t n_tokens, const char* what, int64_t max_chunk) const {
  const int64_t ctx = opts_.max_context;
  if (n_prompt >= ctx) fail("prompt has {} tokens, the context holds {}", n_prompt, ctx);
  if (opts_.max_request_tokens > 0 && n_tokens > opts_.max_request_tokens)
    fail("prompt ({} tokens) + {} ({}) = {} tokens is more than this generator's KV cache was sized for ({} tokens)",
         n_prompt, what, n_tokens - n_prompt, n_tokens, opts_.max_request_tokens);
  if (n_tokens > ctx)
    fail("prompt ({} tokens) + {} ({}) = {} tokens exceeds the context of {} tokens", n_prompt, what,
         n_tokens - n_prompt, n_tokens, ctx);
  const PagedKVCache& kv = *kv_;
  const int64_t capacity = kv.manager->capacity_tokens_for_chunk(max_chunk);
  if (n_tokens > capacity)
    fail("prompt ({} tokens) + {} ({}) = {} tokens does not fit in the KV cache: a budget of {} bytes ({}) "
         "holds {} block{} of {} tokens, room for {} tokens; raise the KV cache memory (--kv-cache-memory)",
         n_prompt, what, n_tokens - n_prompt, n_tokens, kv.budget_bytes, human_bytes(kv.budget_bytes), kv.num_blocks,
         kv.num_blocks == 1 ? "" : "s", kv.block_size, capacity);
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                                     const TokenCallback& on_token, std::shared_ptr<const Grammar> grammar) {
  using clock = std::chrono::steady_clock;
  params.validate();
  if (prompt_ids.empty()) fail("prompt is empty: at least one token is needed");
  const int32_t n_vocab = model_.config.n_vocab;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= n_vocab) fail("prompt token id {} is outside the vocabulary of {}", id, n_vocab);
  for (int32_t id : params.stop_token_ids)
    if (id >= n_vocab) fail("stop token id {} is outside the vocabulary of {}", id, n_vocab);
  const int64_t n_prompt = static_cast<int64_t>(prompt_ids.size());
  check_fits(n_prompt, n_prompt + params.max_tokens, "max_tokens", opts_.prefill_chunk);
  const int64_t ctx = opts_.max_context;

  GenerationResult r;
  r.prompt_ids = prompt_ids;
  std::optional<GrammarMatcher> matcher;
  if (grammar) {
    if (!grammar_table_) grammar_table_ = std::make_unique<GrammarTokenTable>(*model_.tokenizer);
    matcher.emplace(std::move(grammar), *grammar_table_);
  }
  const std::vector<int32_t> eog_ids = model_.tokenizer->eog_ids();
  Sampler sampler(params);
  sampler.set_prompt(prompt_ids);
  sampler.set_eog_tokens(eog_ids);
  StopChecker stops(params.stop);
  StreamDecoder decoder(*model_.tokenizer);
  decoder.start_after(prompt_ids);
  std::vector<float> logits;

  KVCacheManager& kv = *kv_->manager;
  const SequenceGuard guard{kv, next_seq_++};
  const SeqId seq = guard.seq;
  // The draft model's sequence, freed however the call ends; its sampler draws drafts under the request's
  // parameters from its own stream of random numbers and sees the emitted tokens (penalties).
  struct DraftReset {
    DraftModelProposer* d;
    ~DraftReset() {
      if (d != nullptr) d->reset();
    }
  } const draft_reset{draft_.get()};
  if (draft_) draft_->reset();
  SamplingParams draft_params = params;
  draft_params.seed = params.seed ^ 0x9E3779B97F4A7C15ull;
  draft_params.logprobs = 0;
  Sampler draft_sampler(draft_params);
  draft_sampler.set_prompt(prompt_ids);
  draft_sampler.set_eog_tokens(eog_ids);
  std::vector<float> draft_q;
  const int64_t long_after = long_rope_after(model_.config, opts_.rope_factors, opts_.streaming);
  bool long_rope = long_after >= 0 && n_prompt > long_after;
  // Every token whose K/V is (or is about to be) in the cache: the prompt, then each generated token.
  std::vector<int32_t> tokens = prompt_ids;
  tokens.reserve(prompt_ids.size() + static_cast<size_t>(params.max_tokens));
  CachedPrefix prefix;
  int64_t pos = 0;  // tokens whose K/V are in the cache
  // Starts the sequence (again) from the longest cached prefix of `tokens` computed with its RoPE factors.
  auto start_sequence = [&] {
    const std::string key = long_rope_cache_key({}, long_after, long_rope);
    prefix = opts_.enable_prefix_caching ? kv.get_computed_blocks(tokens, key) : CachedPrefix{};
    pos = prefix.num_tokens;
  };
  // Runs tokens[pos, pos + n) through the model into fresh slots of the sequence. Speculative tokens get
  // every position's logits and stay out of the prefix cache until verified.
  auto forward = [&](int64_t n, bool want_logits, bool speculative = false) {
    const bool first = !kv.has_sequence(seq);
    if (!kv.allocate_slots(seq, n, first ? prefix : CachedPrefix{}, long_rope_cache_key({}, long_after, long_rope)))
      fail("the KV cache has no free block for token {} ({} blocks of {} tokens in all)", pos + n, kv_->num_blocks,
           kv_->block_size);
    BatchSequence s;
    s.tokens = std::span<const int32_t>(tokens.data() + pos, static_cast<size_t>(n));
    s.pos0 = pos;
    set_block_tables(kv, seq, s);
    s.want_logits = want_logits && !speculative;
    s.all_logits = speculative;
    s.long_rope = long_rope;
    runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
    pos += n;
    if (opts_.enable_prefix_caching && !speculative) kv.cache_blocks(seq, tokens, pos);
  };
  // Computes every token not yet in the cache, prefill_chunk at a time; the logits are the last token's.
  auto catch_up = [&] {
    const int64_t end = static_cast<int64_t>(tokens.size());
    while (pos < end) {
      const int64_t n = std::min<int64_t>(opts_.prefill_chunk, end - pos);
      forward(n, pos + n == end);
    }
  };

  const auto t0 = clock::now();
  start_sequence();
  r.cached_tokens = static_cast<int>(prefix.num_tokens);
  catch_up();
  const auto t1 = clock::now();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

  r.finish_reason = "length";
  // Takes a sampled token into the output; false when generation ends with it.
  const auto emit = [&](int32_t id) {
    sampler.accept(id);
    draft_sampler.accept(id);
    r.generated_ids.push_back(id);
    if (ends_generation(params, *model_.tokenizer, id)) {
      r.finish_reason = "stop";
      if (params.ignore_eos || !model_.tokenizer->is_eog(id)) r.stop_token_id = id;
      return false;
    }
    std::string piece = stops.push(decoder.feed(id), static_cast<int>(r.generated_ids.size()) > params.min_tokens);
    r.text += piece;
    if (on_token && !on_token(id, piece)) return false;
    // A constrained text ends where its grammar does (the mask let through only a token it takes).
    if (stops.stopped() || (matcher && (!matcher->accept(id) || matcher->done()))) {
      r.finish_reason = "stop";
      r.stop_string = stops.matched();
      return false;
    }
    return static_cast<int>(r.generated_ids.size()) < params.max_tokens &&
           n_prompt + static_cast<int64_t>(r.generated_ids.size()) < ctx;
  };
  const NgramProposer proposer(opts_.ngram);
  DraftPacing pacing;
  size_t last_taken = 0;
  // Speculative step: the token just emitted and the drafts in one forward (every position's logits), each
  // draft the sampler takes emitted, then the cache cut back to what was taken. Returns the next token (the
  // sampler's correction, or a bonus from the last row when every draft was taken), or -1 when generation
  // ended on a taken draft.
  const auto verify_drafts = [&](const std::vector<int32_t>& drafts, const float* q) -> int32_t {
    const int64_t base = pos;  // tokens[base] was just emitted; [0, base) are in the cache
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());
    forward(static_cast<int64_t>(drafts.size()) + 1, false, true);
    r.draft_tokens += static_cast<int>(drafts.size());
    size_t taken = 0;
    int32_t next = -1;
    bool ended = false;
    for (; taken < drafts.size(); ++taken) {
      bool accepted = false;
      const int32_t t = sampler.sample_with_draft(logits.data() + taken * static_cast<size_t>(n_vocab), n_vocab,
                                                  drafts[taken], &accepted,
                                                  q != nullptr ? q + taken * static_cast<size_t>(n_vocab) : nullptr);
      if (!accepted) {
        next = t;
        break;
      }
      ++r.accepted_draft_tokens;
      if (!emit(t)) {
        ended = true;
        ++taken;
        break;
      }
    }
    if (!ended && next < 0) next = sampler.sample(logits.data() + drafts.size() * static_cast<size_t>(n_vocab), n_vocab);
    last_taken = taken;
    // The K/V of the emitted token and of the drafts taken stand; those of the rest are cut away.
    pos = base + 1 + static_cast<int64_t>(taken);
    tokens.resize(static_cast<size_t>(pos));
    kv.truncate(seq, pos);
    if (draft_) draft_->keep(pos);
    if (opts_.enable_prefix_caching) kv.cache_blocks(seq, tokens, pos);
    return ended ? -1 : next;
  };
  // The next token from the last logits: with a grammar, among the tokens it allows (where none can come, the
  // vocabulary cannot spell the grammar's text: the end).
  const auto draw = [&]() -> int32_t {
    if (matcher) matcher->mask_or_end(logits.data(), n_vocab, model_.tokenizer->eos());
    return sampler.sample(logits.data(), n_vocab);
  };
  int32_t id = params.max_tokens > 0 ? draw() : -1;
  while (id >= 0 && emit(id)) {
    tokens.push_back(id);
    if (long_after >= 0 && !long_rope && static_cast<int64_t>(tokens.size()) > long_after) {
      // Past the original context: the K/V rotated with the short factors are recomputed with the long ones.
      kv.free(seq);
      long_rope = true;
      ++r.rope_restarts;
      start_sequence();
      catch_up();
      id = draw();
      continue;
    }
    // Drafts that could still be emitted and fit the context (and, on short LongRoPE factors, stay within
    // the original context: the switch recomputes through the path above).
    int64_t room = std::min<int64_t>(params.max_tokens - static_cast<int64_t>(r.generated_ids.size()),
                                     ctx - static_cast<int64_t>(tokens.size()));
    if (long_after >= 0 && !long_rope) room = std::min<int64_t>(room, long_after - static_cast<int64_t>(tokens.size()));
    std::vector<int32_t> drafts;
    if (opts_.speculative_tokens > 0 && room > 0 && pacing.may_draft() && !matcher) {
      const int k = static_cast<int>(std::min<int64_t>(opts_.speculative_tokens, room));
      if (draft_) {
        draft_->propose(tokens, k, draft_sampler, drafts, draft_q);
      } else {
        drafts = proposer.propose(tokens, k);
      }
    }
    if (drafts.empty()) {
      forward(1, true);
      id = draw();
      continue;
    }
    id = verify_drafts(drafts, draft_ ? draft_q.data() : nullptr);
    pacing.record(static_cast<int64_t>(last_taken), static_cast<int64_t>(drafts.size()));
  }
  if (!stops.stopped()) {
    std::string rest = stops.push(decoder.flush());
    rest += stops.flush();
    r.text += rest;
    if (on_token && !rest.empty()) on_token(-1, rest);
  }
  r.generate_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

std::vector<std::vector<float>> Generator::teacher_forced_logits(const std::vector<int32_t>& ids, int prompt_len) {
  const int64_t n_ids = static_cast<int64_t>(ids.size());
  if (prompt_len < 1 || prompt_len > n_ids)
    fail("teacher forcing: prompt length {} is not in [1, {}]", prompt_len, n_ids);
  if (n_ids > opts_.max_context) fail("sequence longer than the context");
  check_fits(prompt_len, n_ids, "forced tokens", prompt_len);
  KVCacheManager& kv = *kv_->manager;
  const SequenceGuard guard{kv, next_seq_++};
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  // The prompt goes in as one batch (as the references do), then one token per step; no prefix reuse:
  // every position's logits are wanted.
  const int64_t long_after = long_rope_after(model_.config, opts_.rope_factors, opts_.streaming);
  BatchSequence s;
  for (int64_t pos = 0; pos < n_ids;) {
    int64_t n = pos == 0 ? prompt_len : 1;
    if (long_after >= 0 && !s.long_rope && pos + n > long_after) {
      // As generate(): past the original context, the whole sequence again with the long factors.
      if (kv.has_sequence(guard.seq)) kv.free(guard.seq);
      s.long_rope = true;
      n += pos;
      pos = 0;
    }
    if (!kv.allocate_slots(guard.seq, n)) fail("the KV cache has no room for {} tokens", pos + n);
    set_block_tables(kv, guard.seq, s);
    s.tokens = std::span<const int32_t>(ids.data() + pos, static_cast<size_t>(n));
    s.pos0 = pos;
    runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
    out.push_back(logits);
    pos += n;
  }
  return out;
}

std::vector<float> Generator::prefill_logits(const std::vector<int32_t>& ids, int64_t first) {
  const int64_t n_ids = static_cast<int64_t>(ids.size());
  if (first < 0 || first >= n_ids) fail("prefill logits: first position {} is not in [0, {})", first, n_ids);
  if (n_ids > opts_.max_context)
    fail("{} tokens do not fit the context of {} tokens", n_ids, opts_.max_context);
  check_fits(0, n_ids, "tokens", opts_.prefill_chunk);
  KVCacheManager& kv = *kv_->manager;
  const SequenceGuard guard{kv, next_seq_++};
  std::vector<float> out;
  out.reserve(static_cast<size_t>((n_ids - first) * model_.config.n_vocab));
  std::vector<float> logits;
  // The whole sequence is known: one factor set for all of it, as one pass over it would take.
  const int64_t long_after = long_rope_after(model_.config, opts_.rope_factors, opts_.streaming);
  const bool long_rope = long_after >= 0 && n_ids > long_after;
  for (int64_t pos = 0; pos < n_ids;) {
    // Chunks never straddle `first`: the ones before it need no logits.
    const int64_t end = std::min({n_ids, pos + opts_.prefill_chunk, pos < first ? first : n_ids});
    if (!kv.allocate_slots(guard.seq, end - pos)) fail("the KV cache has no room for {} tokens", end);
    BatchSequence s;
    s.tokens = std::span<const int32_t>(ids.data() + pos, static_cast<size_t>(end - pos));
    s.pos0 = pos;
    set_block_tables(kv, guard.seq, s);
    s.want_logits = false;
    s.all_logits = pos >= first;
    s.long_rope = long_rope;
    runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
    if (s.all_logits) out.insert(out.end(), logits.begin(), logits.end());
    pos = end;
  }
  return out;
}

}  // namespace kvserve
