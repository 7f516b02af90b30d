#pragma once
// The KV cache flags `kvserve serve` and `kvserve generate` share: --kv-cache-memory and --block-size,
// with one spelling, one default and one parser (parse_kv_cache_memory).
#include <CLI/CLI.hpp>
#include <string>

#include "kv/kv_layout.h"

namespace kvserve::cli {

struct KVCacheArgs {
  std::string kv_cache_memory;  // empty: the default budget
  int block_size = 16;
  std::string kv_cache_dtype;  // set to the command's default before add_kv_cache_options
  bool no_hybrid = false;      // --no-hybrid-kv-cache: sliding-window layers keep every position

  // The budget in the form EngineOptions / GeneratorOptions take (bytes > 1, or a fraction of RAM);
  // throws Error naming the flag when the text is not a budget.
  double kv_cache_memory_value() const;
  // The dtype (f32, f16, bf16); throws Error naming the flag otherwise.
  KVCacheDType kv_cache_dtype_value() const;
};

// --kv-cache-dtype's value (f32, f16, bf16); throws Error naming the flag otherwise.
KVCacheDType parse_kv_cache_dtype_flag(const std::string& text);

void add_kv_cache_options(CLI::App& command, KVCacheArgs& args);

}  // namespace kvserve::cli
