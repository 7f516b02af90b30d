#pragma once
// Single-request generation: prefill the prompt in chunks, then decode token by token, streaming text
// through the stop-string checker. The server's scheduler batches many of these; the CLI runs one.
// The K/V live in the same paged cache the Engine uses (PagedKVCache: blocks from a memory budget,
// handed out by a KVCacheManager), one sequence at a time; with prefix caching on, a later generate()
// on the same Generator starts from the full blocks an earlier prompt left in the cache.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/draft_model_proposer.h"
#include "engine/grammar_matcher.h"
#include "engine/long_rope.h"
#include "engine/model_runner.h"
#include "engine/ngram_proposer.h"
#include "engine/paged_kv_cache.h"
#include "engine/sampler.h"
#include "kv/kv_layer_dtypes.h"
#include "model/model.h"

namespace kvserve {

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;
  std::string finish_reason;  // "stop" (EOS or stop string) or "length"
  // What ended a "stop" result, as vLLM's stop_reason (and RequestEvent's): the stop string matched, or the
  // stop_token_ids token drawn; neither (empty, -1) for the vocabulary's end of generation or a grammar's end.
  std::string stop_string;
  int32_t stop_token_id = -1;
  int cached_tokens = 0;      // prompt tokens served from the prefix cache
  int rope_restarts = 0;      // LongRoPE: the sequence was recomputed with the long factors (0 or 1)
  int draft_tokens = 0;       // speculative decoding: tokens proposed
  int accepted_draft_tokens = 0;  // of those, taken by the sampler's verification
  double prompt_seconds = 0;
  double generate_seconds = 0;
};

// Called with each new token and the text that became safe to emit; return false to cancel.
using TokenCallback = std::function<bool(int32_t id, const std::string& text)>;

struct GeneratorOptions {
  int block_size = 16;
  KVCacheDType kv_cache_dtype = KVCacheDType::F32;  // f32 keeps the reference numerics
  std::vector<KVLayerDtype> kv_layer_dtypes;         // as EngineOptions::kv_layer_dtypes
  int64_t max_context = 0;   // 0 = the model's training context
  // The most positions one generate() call will hold (its prompt + max_tokens), when known up front; 0: up to
  // max_context. The KV pool is sized for it: its storage is committed lazily, page by page, on huge pages
  // in each layer's array, so a pool sized for the whole context made a 4-token prompt stop in a huge-page
  // fault per layer's K and V (SmolLM2: prompt time 0.17x with the pool sized to the request).
  int64_t max_request_tokens = 0;
  int prefill_chunk = 512;   // prompt tokens per forward step
  // KV budget: bytes (> 1) or a fraction of physical RAM (0 < x <= 1), as EngineOptions (see
  // parse_kv_cache_memory for the command-line spelling). Capped at what one sequence can use.
  double kv_cache_memory = 0.25;
  bool enable_prefix_caching = true;
  bool hybrid_kv_cache = true;  // as EngineOptions::hybrid_kv_cache
  StreamingEviction streaming;  // as EngineOptions::streaming (max_context 0: no limit)
  HeavyHitterEviction h2o;      // as EngineOptions::h2o
  LongRopeFactors rope_factors = LongRopeFactors::Auto;  // as EngineOptions::rope_factors
  // Speculative decoding with prompt-lookup drafts (NgramProposer): up to this many tokens proposed a step
  // and verified in one forward, each taken with the sampler's exact rejection rule (Sampler::
  // sample_with_draft), so the output follows the same distribution (greedy: the same tokens). 0: off.
  int speculative_tokens = 0;
  NgramProposerOptions ngram;
  // With speculative_tokens > 0, drafts come from this model instead (DraftModelProposer: same vocabulary,
  // its own KV cache of this generator's dtype, block size and budget), each drawn from its distribution
  // and verified against it. Not owned: it must outlive the Generator.
  const Model* draft_model = nullptr;
};

// The context a Generator with these options holds: max_context, else unbounded under a streaming window, else
// the model's training context (2048 where the file names none).
int64_t generator_context(const ModelConfig& c, const GeneratorOptions& o);

class Generator {
 public:
  Generator(const Model& model, GeneratorOptions opts, ThreadPool& pool = ThreadPool::global());
  ~Generator();

  // With a grammar, each step's tokens are masked to those it allows next and the text ends where it does
  // (finish "stop"); no drafts are taken then, as the engine takes none for constrained choices.
  GenerationResult generate(const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                            const TokenCallback& on_token = {}, std::shared_ptr<const Grammar> grammar = nullptr);

  // Logits of every position of `ids` fed one token at a time (teacher forcing), for tests.
  std::vector<std::vector<float>> teacher_forced_logits(const std::vector<int32_t>& ids, int prompt_len);

  // Logits of positions [first, ids.size()) of `ids` ([row][n_vocab], row i after ids[first + i]), the whole
  // sequence run as prompt chunks (prefill_chunk tokens, cut at `first`): one perplexity chunk.
  std::vector<float> prefill_logits(const std::vector<int32_t>& ids, int64_t first);

  // The paged cache: block counts and budget (summary() is the start-up log line), and its manager,
  // whose pool shows every block free or cached between calls.
  const PagedKVCache& kv_cache() const { return *kv_; }
  const KVCacheManager& kv_cache_manager() const { return *kv_->manager; }
  // The draft model's cache (null without one), free between calls as the target's.
  const PagedKVCache* draft_kv_cache() const { return draft_ ? &draft_->kv_cache() : nullptr; }
  int64_t max_context() const { return opts_.max_context; }

 private:
  // Throws Error when a sequence of `n_tokens` (prompt + max_tokens) can never fit the cache.
  // n_tokens must fit the context and the cache, computed at most max_chunk tokens a step.
  void check_fits(int64_t n_prompt, int64_t n_tokens, const char* what, int64_t max_chunk) const;

  const Model& model_;
  GeneratorOptions opts_;
  ModelRunner runner_;
  std::unique_ptr<PagedKVCache> kv_;
  std::unique_ptr<DraftModelProposer> draft_;
  std::unique_ptr<GrammarTokenTable> grammar_table_;  // built at the first constrained call
  SeqId next_seq_ = 1;
};

}  // namespace kvserve
