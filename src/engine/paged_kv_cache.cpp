#include "engine/paged_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace kvserve {
PagedKVCache::PagedKVCache(const ModelConfig& c, const PagedKVCacheOptions& opts) : block_size(opts.block_size) {
  const std::string_view who = opts.who;
  if (opts.block_size <= 0) fail("{}: block size must be positive, got {}", who, opts.block_size);
  if (!(opts.kv_cache_memory > 0)) fail("{}: kv cache memory must be positive, got {}", who, opts.kv_cache_memory);
  if (opts.max_model_len <= 0) fail("{}: context length must be positive, got {}", who, opts.max_model_len);

  KVLayout layout = KVLayout::mha(c.n_layers, c.n_kv_heads, c.head_dim, opts.kv_dtype, opts.block_size);
  if (!opts.layer_dtypes.empty()) {
    if (static_cast<int>(opts.layer_dtypes.size()) != c.n_layers)
      fail("{}: {} per-layer KV dtypes given for a model of {} layers", who, opts.layer_dtypes.size(), c.n_layers);
    layout.layer_dtypes = opts.layer_dtypes;
  }
  for (const KVCacheDType t : layout.layer_dtypes)
    if (!kv_dtype_supported(t))
      fail("{}: KV cache dtype {} is not supported yet (use f32, f16 or bf16)", who, kv_dtype_name(t));
  const bool uniform = std::all_of(layout.layer_dtypes.begin(), layout.layer_dtypes.end(),
                                   [&](KVCacheDType t) { return t == layout.layer_dtypes.front(); });
  for (size_t l = 0; l < layout.layer_dtypes.size() && (l == 0 || !uniform); ++l) {
    if (l > 0) dtype_names.push_back(',');
    dtype_names.append(kv_dtype_name(layout.layer_dtypes[l]));
  }
  budget_bytes = opts.kv_cache_memory > 1
                     ? static_cast<uint64_t>(opts.kv_cache_memory)
                     : static_cast<uint64_t>(opts.kv_cache_memory * static_cast<double>(total_ram_bytes()));
  bytes_per_block = layout.bytes_per_block();
  affordable_blocks = blocks_for_budget(layout, budget_bytes);
  // More blocks than every sequence at full context twice over would only hold cold prefixes (once over
  // when there is no prefix cache), and the storage is committed up front: a fraction of RAM for a
  // tiny model would otherwise take gigabytes.
  const int64_t blocks_per_seq = (opts.max_model_len + opts.block_size - 1) / opts.block_size;
  const int64_t useful = blocks_per_seq * std::max(opts.max_num_seqs, 1) * (opts.enable_prefix_caching ? 2 : 1);
  const int64_t n = std::min<int64_t>({affordable_blocks, useful, std::numeric_limits<int32_t>::max()});
  if (n < 1)
    fail("{}: a KV cache budget of {} bytes ({}) holds no block of {} tokens ({} bytes each); raise --kv-cache-memory",
         who, budget_bytes, human_bytes(budget_bytes), opts.block_size, bytes_per_block);
  num_blocks = static_cast<int32_t>(n);

  storage = std::make_unique<KVStorage>(layout, num_blocks, opts.prefault);
  storage_bytes = storage->bytes();
  for (int l = 0; l < c.n_layers; ++l) {
    view.k_layers.push_back(storage->k_layer(l));
    view.v_layers.push_back(storage->v_layer(l));
    const KVCacheDType t = storage->dtype(l);
    view.layer_types.push_back(t == KVCacheDType::F16    ? KVElemType::F16
                               : t == KVCacheDType::BF16 ? KVElemType::BF16
                                                         : KVElemType::F32);
  }
  view.block_size = opts.block_size;
  view.block_stride = storage->block_stride();
  view.n_blocks = num_blocks;

  KVCacheManagerConfig kc;
  kc.num_blocks = num_blocks;
  kc.block_size = opts.block_size;
  kc.enable_prefix_caching = opts.enable_prefix_caching;
  kc.prefix_cache_ttl_seconds = opts.prefix_cache_ttl_seconds;
  kc.model_id = opts.model_id;
  manager = std::make_unique<KVCacheManager>(kc);
}

std::string PagedKVCache::summary() const {
  std::string s = fmt::format("kv cache: {} blocks of {} tokens = {} tokens, {} {}", num_blocks, block_size,
                              capacity_tokens(), human_bytes(storage_bytes), dtype_names);
  if (num_blocks < affordable_blocks)
    s += fmt::format(" (budget {} allowed {} blocks; capped at what the context can use)", human_bytes(budget_bytes),
                     affordable_blocks);
  return s;
}

std::string human_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

double parse_kv_cache_memory(std::string_view text) {
  uint64_t bytes = 0;
  try {
    bytes = resolve_kv_memory_budget(text);
  } catch (const Error& e) {
    fail("--kv-cache-memory: {} (give bytes like 512M, 2G, 1.5GiB, or a fraction of RAM like 0.5 or 50%)", e.what());
  }
  // 1.0 would read as "all of RAM" downstream; a budget this small holds no block anyway.
  if (bytes <= 1)
    fail("--kv-cache-memory: '{}' bytes is too small for any KV block (for all of RAM write 1.0 or 100%)", text);
  return static_cast<double>(bytes);
}

}  // namespace kvserve
