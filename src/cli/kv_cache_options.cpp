#include "cli/kv_cache_options.h"

#include "core/error.h"
#include "engine/paged_kv_cache.h"

namespace kvserve::cli {

namespace {
constexpr double kDefaultKVCacheMemory = 0.25;  // of RAM, as EngineOptions and GeneratorOptions
}  // namespace

double KVCacheArgs::kv_cache_memory_value() const {
  return kv_cache_memory.empty() ? kDefaultKVCacheMemory : parse_kv_cache_memory(kv_cache_memory);
}

KVCacheDType KVCacheArgs::kv_cache_dtype_value() const { return parse_kv_cache_dtype_flag(kv_cache_dtype); }

std::vector<KVLayerDtype> KVCacheArgs::kv_layer_dtypes_value() const { return parse_kv_layer_dtypes_flag(kv_layer_dtypes); }

std::vector<KVLayerDtype> parse_kv_layer_dtypes_flag(const std::string& text) {
  std::vector<KVLayerDtype> items;
  try {
    items = parse_kv_layer_dtypes(text);
  } catch (const Error& e) {
    fail("--kv-layer-dtypes: {}", e.what());
  }
  return items;
}

const char* const kKVLayerDtypesHelp =
    "Layers whose KV cache takes another dtype than --kv-cache-dtype: LAYERS=DTYPE,... with LAYERS an index or "
    "I:J, negative from the end (e.g. --kv-cache-dtype int8 --kv-layer-dtypes 0=f16,-1=f16)";

KVCacheDType parse_kv_cache_dtype_flag(const std::string& text) {
  KVCacheDType t;
  try {
    t = parse_kv_dtype(text);
  } catch (const Error& e) {
    fail("--kv-cache-dtype: {}", e.what());
  }
  return t;
}

const char* const kRopeFactorsHelp =
    "LongRoPE models (Phi-3 128k, Phi-3.5, Phi-4-mini): auto (short factors within the original context, long "
    "past it, a sequence that outgrows it recomputed; as Hugging Face), short, or long (always; as llama.cpp "
    "with a context beyond the original)";

void add_kv_cache_options(CLI::App& c, KVCacheArgs& a) {
  c.add_option("--kv-cache-memory", a.kv_cache_memory,
               "KV cache budget: bytes (512M, 2G, 1.5GiB; KB/MB/GB are powers of 1000) or a fraction of RAM "
               "(0.5, 50%; default 0.25)");
  c.add_option("--kv-cache-dtype", a.kv_cache_dtype,
               "KV cache element type: f32, f16, bf16, fp8 (E4M3; fp8_e5m2 too), int8 or int4 (ggml's q8_0 and q4_0: an "
               "f16 scale per 32 values; 8.5 and 4.5 bits a value)")
      ->capture_default_str();
  c.add_option("--block-size", a.block_size, "Tokens per KV block")->capture_default_str()->check(CLI::Range(1, 1024));
  c.add_flag("--no-hybrid-kv-cache", a.no_hybrid,
             "Keep every position's K/V in sliding-window layers too (default: a model with them, such as Gemma 2 "
             "and 3, gets a hybrid cache whose local layers hold only their window)");
  c.add_option("--kv-layer-dtypes", a.kv_layer_dtypes, kKVLayerDtypesHelp);
  c.add_option("--streaming-window", a.streaming_window,
               "StreamingLLM eviction: the full-attention layers attend to (and the cache keeps) only the last N "
               "positions of a sequence, plus --attention-sinks; sequences may then run past the model's context "
               "(0: off)")
      ->check(CLI::NonNegativeNumber);
  c.add_option("--attention-sinks", a.attention_sinks,
               "With --streaming-window: the first N positions stay attended as attention sinks (StreamingLLM uses 4)")
      ->check(CLI::NonNegativeNumber);
  c.add_option("--h2o-heavy", a.h2o_heavy,
               "H2O eviction: besides --h2o-recent, each full-attention layer keeps, per KV head, the N tokens that "
               "have drawn the most attention; a sequence's cache then holds heavy + recent tokens (prefix cache "
               "off, no speculative decoding)")
      ->check(CLI::NonNegativeNumber);
  c.add_option("--h2o-recent", a.h2o_recent, "H2O eviction: the latest N tokens are always kept (0: off)")
      ->check(CLI::NonNegativeNumber);
  c.add_option("--rope-factors", a.rope_factors, kRopeFactorsHelp)
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "short", "long"}));
}

}  // namespace kvserve::cli
