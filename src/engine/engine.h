#pragma once
// The serving engine: a background loop that runs continuous batching (vLLM v1 style) over every live
// request: each step the Scheduler picks prefill chunks and decode tokens within the token budget, the
// KVCacheManager gives them blocks (or preempts the newest request when it can't), the ModelRunner does
// one forward over all of them, and the Sampler picks each sequence's next token. Results stream back
// through per-request callbacks.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/long_rope.h"
#include "engine/heavy_hitter_eviction.h"
#include "engine/streaming_eviction.h"
#include "engine/ngram_proposer.h"
#include "engine/json_grammar.h"
#include "engine/sampling_params.h"
#include "kv/kv_layer_dtypes.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace kvserve {

class StepPhaseProfile;  // engine/step_phase_profile.h

struct EngineOptions {
  // KV budget: bytes (> 1) or a fraction of physical RAM (0 < x <= 1).
  double kv_cache_memory = 0.25;
  int block_size = 16;
  KVCacheDType kv_cache_dtype = KVCacheDType::F32;
  std::vector<KVLayerDtype> kv_layer_dtypes;  // layers that differ from kv_cache_dtype (kv/kv_layer_dtypes.h)
  int max_num_batched_tokens = 512;           // tokens per forward step
  int max_num_seqs = 64;                      // sequences per step
  int64_t max_model_len = 0;                  // 0 = the model's training context
  bool enable_prefix_caching = true;
  double prefix_cache_ttl_seconds = 0;  // 0 = cached blocks never expire
  std::string model_id;                 // part of every block hash
  // Touch the whole KV pool when the engine starts (as llama.cpp clears its KV buffer and vLLM allocates
  // its cache zeroed), so no decode step stops in a first-touch page fault; the pool is then resident
  // from the start. `kvserve bench` sets it (steady-state figures); `serve --kv-prefault`.
  bool prefault_kv = false;
  // While idle, commit the KV pages the next blocks will be written into (KVStorage::commit_ahead: the next
  // huge page of every array past the blocks used so far), a piece at a time between looks at the inbox, so
  // that the steps reaching them do not stop in first-touch faults; the pool grows resident only as far as
  // it is used. `kvserve serve` sets it (SmolLM2: the first request after start 0.06x the time without).
  bool commit_kv_ahead = false;
  // Models with sliding-window layers: their windowed layers release the positions no token will attend
  // to again (PagedKVCacheOptions::hybrid). Off keeps every layer's K/V of every position.
  bool hybrid_kv_cache = true;
  // StreamingLLM eviction (kernels/cpu/attention_sinks.h): the full-attention layers keep only their sinks
  // and window, and a sequence may then run past the model's context (max_model_len 0: no limit).
  StreamingEviction streaming;
  // H2O eviction (engine/heavy_hitter_eviction.h): the full-attention layers keep, per KV head, the most
  // attended tokens and the latest ones. Turns the prefix cache off; no speculative decoding with it.
  HeavyHitterEviction h2o;
  // LongRoPE models (Phi-3 128k): which factors a sequence rotates with (engine/long_rope.h).
  LongRopeFactors rope_factors = LongRopeFactors::Auto;
  // Speculative decoding with prompt-lookup drafts, as GeneratorOptions::speculative_tokens: each decoding
  // sequence proposes up to this many tokens, computed with its next one in the same batched step and
  // verified by exact rejection sampling. 0: off.
  int speculative_tokens = 0;
  NgramProposerOptions ngram;
  // With speculative_tokens > 0, drafts come from this model instead (BatchDraftProposer: the same
  // vocabulary, its own KV cache of this engine's block size and dtype, every decoding sequence's drafts in
  // one batched pass a position), each drawn from its distribution and verified against it. Not owned: it
  // must outlive the Engine.
  const Model* draft_model = nullptr;
  // > 0: no drafts in a step where more sequences than this decode (a batched step already shares each
  // weight read among its sequences, and drafting adds compute, and a draft model's forwards, on top).
  int speculative_max_batch = 0;
  double draft_kv_cache_memory = 0;  // its cache's budget, as kv_cache_memory (0: the same as kv_cache_memory)
};

struct TokenInfo {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), when logprobs were asked for
  int rank = 0;                                // a prompt token's: 1 + the tokens more likely (0: not computed)
};

// One delivery to a request's callback. `index` is the choice (0..n-1).
struct RequestEvent {
  int index = 0;
  std::vector<TokenInfo> tokens;  // tokens produced since the last event
  std::string text;               // text safe to show (stop strings held back / removed)
  bool finished = false;
  std::string finish_reason;  // "stop", "length", "abort", or "error"
  std::string error;          // set when finish_reason == "error"
  // What ended a "stop" choice, as vLLM's stop_reason: the stop string it matched, or the stop_token_ids token
  // it drew; neither (empty, -1) for the vocabulary's end of generation or a grammar's end.
  std::string stop_string;
  int32_t stop_token_id = -1;
  // With params.prompt_logprobs >= 0, on each choice's first event: the prompt's tokens, the first with a NaN
  // logprob (nothing before it), each other with its log-probability given those before it.
  std::vector<TokenInfo> prompt_tokens_info;
  // Usage, filled on the event that finishes a choice:
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

struct EngineRequest {
  std::string id;  // unique, chosen by the caller
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  int n = 1;               // parallel samples: the prompt is computed once and forked copy-on-write
  std::string cache_salt;  // prefix-cache isolation key (tenant)
  // Control tokens whose text the output shows (tool-call markers a parser reads; StreamDecoder::show_tokens).
  std::vector<int32_t> shown_special_tokens;
  // Structured output: each choice's text follows this grammar (json_grammar.h); the choice ends ("stop")
  // when nothing more can follow. Null: free text.
  std::shared_ptr<const Grammar> grammar;
  // Called on the engine thread; must be quick and must not call back into the engine.
  std::function<void(const RequestEvent&)> on_event;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int64_t num_blocks = 0;
  int64_t free_blocks = 0;                       // free and holding no cached prefix
  int64_t used_blocks = 0;                       // held by running sequences
  int64_t cached_blocks = 0;                     // free but still holding a cached prefix (reusable)
  double kv_usage = 0;                           // used / total
  uint64_t prefix_queries = 0, prefix_hits = 0;  // in tokens
  uint64_t prefix_evictions = 0;                 // cached blocks reused for new data (LRU)
  uint64_t preemptions = 0;
  uint64_t rope_restarts = 0;  // LongRoPE sequences recomputed with the long factors past the original context
  uint64_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding: proposed, and taken
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  uint64_t requests_finished = 0;
};

// Per block: -1 free, -2 cached (free, holds a prefix), otherwise a small owner number
// (stable per request), and whether it is shared by more than one sequence.
struct BlockMap {
  std::vector<int32_t> owner;
  std::vector<uint8_t> shared;
};

class Engine {
 public:
  Engine(const Model& model, EngineOptions opts);
  ~Engine();  // stops the loop; unfinished requests get finish_reason "abort"

  // Validates and queues. Throws Error (a 4xx for the server) when the request can never run:
  // prompt longer than the context, prompt + max_tokens beyond it, more blocks than the whole pool.
  void add_request(EngineRequest req);
  // Several requests queued together, all or none: each is validated as add_request does (ids also
  // unique among them), then all enter the queue under one lock, so the next step sees every one of
  // them (an offline batch starts as one batch, not with whichever request arrived first).
  void add_requests(std::vector<EngineRequest> reqs);
  // Cancels a request (client went away): its blocks are freed at the next step.
  void abort_request(const std::string& id);
  // Stop admitting; returns when every queued and running request has finished.
  void drain();
  // Returns once every accepted request has finished and stats()/block_map()/check_invariants() show
  // the idle engine (tests, and the server's shutdown path).
  void wait_until_idle();
  // Empty when, at the last moment the engine was idle, every block was free or cached and no sequence
  // or request was left behind; otherwise what was wrong. Call after wait_until_idle().
  std::string check_invariants() const;

  EngineStats stats() const;
  // Times the phases of the one-token steps from now on, from zero (ModelRunner::set_phase_profile), or
  // stops. Both only while the engine is idle (after wait_until_idle), as the profile is written by steps.
  void set_phase_profile(bool on);
  const StepPhaseProfile* phase_profile() const;
  BlockMap block_map() const;
  const Model& model() const;
  const EngineOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
