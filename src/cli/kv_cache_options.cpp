#include "cli/kv_cache_options.h"

#include "engine/paged_kv_cache.h"

namespace kvserve::cli {

namespace {
constexpr double kDefaultKVCacheMemory = 0.25;  // of RAM, as EngineOptions and GeneratorOptions
}  // namespace

double KVCacheArgs::kv_cache_memory_value() const {
  return kv_cache_memory.empty() ? kDefaultKVCacheMemory : parse_kv_cache_memory(kv_cache_memory);
}

void add_kv_cache_options(CLI::App& c, KVCacheArgs& a) {
  c.add_option("--kv-cache-memory", a.kv_cache_memory,
               "KV cache budget: bytes (512M, 2G, 1.5GiB; KB/MB/GB are powers of 1000) or a fraction of RAM "
               "(0.5, 50%; default 0.25)");
  c.add_option("--block-size", a.block_size, "Tokens per KV block")->capture_default_str()->check(CLI::Range(1, 1024));
}

}  // namespace kvserve::cli
