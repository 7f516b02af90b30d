#pragma once
// The KV cache flags `kvserve serve`, `generate` and `perplexity` share: --kv-cache-memory, --block-size and
// the rest, with one spelling, one default and one parser (parse_kv_cache_memory). --rope-factors is here
// too: which LongRoPE factors rotate a sequence decides what its K/V hold.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/long_rope.h"
#include "engine/heavy_hitter_eviction.h"
#include "engine/streaming_eviction.h"
#include "kv/kv_layer_dtypes.h"
#include "kv/kv_layout.h"

namespace kvserve::cli {

struct KVCacheArgs {
  std::string kv_cache_memory;  // empty: the default budget
  int block_size = 16;
  std::string kv_cache_dtype;  // set to the command's default before add_kv_cache_options
  bool no_hybrid = false;      // --no-hybrid-kv-cache: sliding-window layers keep every position
  std::string rope_factors = "auto";  // --rope-factors: auto, short or long (LongRoPE models)
  std::string kv_layer_dtypes;        // --kv-layer-dtypes: layers that differ from --kv-cache-dtype
  int64_t streaming_window = 0;       // --streaming-window: StreamingLLM eviction (0: off)
  int64_t attention_sinks = 0;        // --attention-sinks: positions kept before the window
  int64_t h2o_heavy = 0;              // --h2o-heavy: H2O eviction's heavy hitters
  int64_t h2o_recent = 0;             // --h2o-recent: its latest tokens (0: off)

  // The budget in the form EngineOptions / GeneratorOptions take (bytes > 1, or a fraction of RAM);
  // throws Error naming the flag when the text is not a budget.
  double kv_cache_memory_value() const;
  // The dtype (f32, f16, bf16, fp8, fp8_e5m2, int8, int4); throws Error naming the flag otherwise.
  KVCacheDType kv_cache_dtype_value() const;
  LongRopeFactors rope_factors_value() const { return parse_long_rope_factors(rope_factors); }
  // The per-layer items; throws Error naming the flag when the text is not LAYERS=DTYPE,...
  std::vector<KVLayerDtype> kv_layer_dtypes_value() const;
  StreamingEviction streaming() const { return {streaming_window, attention_sinks}; }
  HeavyHitterEviction h2o() const { return {h2o_heavy, h2o_recent}; }
};

// --kv-layer-dtypes' value, checked as the engine will need it (each dtype one it can store).
std::vector<KVLayerDtype> parse_kv_layer_dtypes_flag(const std::string& text);
extern const char* const kKVLayerDtypesHelp;

// The help text of --rope-factors (bench's offline mode has the flag too).
extern const char* const kRopeFactorsHelp;

// --kv-cache-dtype's value (f32, f16, bf16, fp8, fp8_e5m2, int8, int4); throws Error naming the flag otherwise.
KVCacheDType parse_kv_cache_dtype_flag(const std::string& text);

void add_kv_cache_options(CLI::App& command, KVCacheArgs& args);

}  // namespace kvserve::cli
