#pragma once
// Offline benchmark: N prompts through the Engine (continuous batching) in-process, with `batch`
// requests in flight at a time (closed loop: a new one is added as soon as one finishes), greedy decoding
// of exactly output_len tokens each (EOS ignored).
#include <cstdint>
#include <vector>

#include "bench/bench_metrics.h"
#include "bench/bound_segments.h"
#include "bench/phase_table.h"
#include "bench/prompts.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kvserve::bench {

struct OfflineBenchOptions {
  OfflineBenchOptions() { engine.kv_cache_memory = 0; }
  PromptSpec prompts;
  int output_len = 128;
  int batch = 1;          // concurrent sequences (also the engine's max_num_seqs)
  int warmup = 1;         // short requests run (and not measured) before the timed run
  float temperature = 0;  // 0 = greedy
  // > 0 (batch 1 only): time the decode in segments of this many steps, each with a triad and a
  // core-to-core round trip measured right before and after it (BoundProbe). The summary's rates then
  // include those pauses; the segments' do not.
  int bound_segment_steps = 0;
  // Time the phases of the one-token steps (after the warm-up): OfflineBenchResult::phases.
  bool phase_profile = false;
  // Engine settings; max_num_seqs is set from batch, and kv_cache_memory (when 0) from what the run
  // needs: batch x (prompt + output) tokens of cache, plus room for cached prefixes.
  EngineOptions engine;
};

struct OfflineBenchResult {
  BenchSummary summary;
  EngineStats engine_stats;  // after the run (preemptions, prefix queries/hits, ...)
  uint64_t kv_cache_bytes = 0;
  std::vector<BoundSegment> bound_segments;  // with bound_segment_steps
  PhaseSummary phases;                       // with phase_profile
};

// Throws Error when the options cannot run (prompt + output beyond the context, ...).
OfflineBenchResult run_offline_bench(const Model& model, const OfflineBenchOptions& opts);

// KV bytes of `tokens` tokens of cache for this model in the engine's (f32) layout.
uint64_t kv_bytes_for_tokens(const Model& model, int64_t tokens, int block_size, KVCacheDType dtype = KVCacheDType::F32);

}  // namespace kvserve::bench
