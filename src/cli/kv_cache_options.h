#pragma once
// The KV cache flags `kvserve serve` and `kvserve generate` share: --kv-cache-memory and --block-size,
// with one spelling, one default and one parser (parse_kv_cache_memory).
#include <CLI/CLI.hpp>
#include <string>

namespace kvserve::cli {

struct KVCacheArgs {
  std::string kv_cache_memory;  // empty: the default budget
  int block_size = 16;

  // The budget in the form EngineOptions / GeneratorOptions take (bytes > 1, or a fraction of RAM);
  // throws Error naming the flag when the text is not a budget.
  double kv_cache_memory_value() const;
};

void add_kv_cache_options(CLI::App& command, KVCacheArgs& args);

}  // namespace kvserve::cli
