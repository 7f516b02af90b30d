#pragma once
// The paged KV cache of one model, built from a memory budget: the block count the budget buys (capped
// at what the sequences could ever use), the f32 storage behind the blocks, the view the ModelRunner
// reads through, and the KVCacheManager that hands the blocks out. Shared by the Engine (many sequences)
// and the Generator (one), so `kvserve serve` and `kvserve generate` size their caches the same way.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_runner.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"
#include "kv/kv_storage.h"
#include "model/model_config.h"

namespace kvserve {

struct PagedKVCacheOptions {
  // Budget: bytes (> 1) or a fraction of physical RAM (0 < x <= 1), as EngineOptions::kv_cache_memory.
  double kv_cache_memory = 0.25;
  int block_size = 16;
  KVCacheDType kv_dtype = KVCacheDType::F32;   // every layer's K/V element type...
  std::vector<KVCacheDType> layer_dtypes;      // ...unless given per layer (n_layers entries)
  int64_t max_model_len = 0;  // tokens one sequence can hold (already resolved, > 0)
  int max_num_seqs = 1;       // sequences that run at once
  bool enable_prefix_caching = true;
  double prefix_cache_ttl_seconds = 0;
  std::string model_id;
  bool prefault = false;  // KVStorage's prefault: the whole pool resident from the start
  // Most tokens a step computes for one sequence (scheduler budget, prefill chunk); 0: max_model_len.
  int64_t max_chunk_tokens = 0;
  // Models with sliding-window layers get a hybrid cache (KVCacheManager's groups), whose windowed groups
  // release what no later token attends to. Off: every layer keeps every position, as before.
  bool hybrid = true;
  // StreamingLLM eviction of the full-attention layers (needs `hybrid`): a windowed group with sinks.
  StreamingEviction streaming;
  // H2O eviction of the full-attention layers (needs `hybrid`; turns the prefix cache off).
  HeavyHitterEviction h2o;
  std::string_view who = "kv cache";  // prefix of error messages ("engine", "generate")
};

// How the model's layers share pool blocks (KVCacheManager's groups). Without sliding-window layers (or
// with the hybrid cache off, or a window no shorter than the context): one group, every layer in every
// block. Otherwise group 0 holds the full-attention layers, and the sliding-window ones follow in groups of
// as many layers (the last one padded), so a block holds `slots` layers of whichever group owns it.
struct KVCacheGroups {
  std::vector<int> layer_group;  // per model layer
  std::vector<int> layer_slot;   // per model layer: its K/V array in the storage
  std::vector<KVCacheDType> slot_dtypes;  // per storage array
  // Per storage array, its KV heads and head size: its layers' (a hybrid cache's array takes the largest rows of the
  // layers in it, Gemma 4's full and sliding ones differing; each layer reads and writes its own rows in a block).
  std::vector<int> slot_kv_heads, slot_head_dims;
  std::vector<int64_t> windows;  // per group (0: full attention)
  std::vector<int64_t> sinks;    // per group: attention sinks kept before its window
  std::vector<int64_t> caps;     // per group: H2O's slot budget (0: none)
  int slots() const { return static_cast<int>(slot_dtypes.size()); }
  bool hybrid() const {
    return windows.size() > 1 || (windows.size() == 1 && windows[0] > 0) ||
           std::any_of(caps.begin(), caps.end(), [](int64_t c) { return c > 0; });
  }
};
// layer_dtypes: one per layer. Layers sharing a storage array must share a dtype; where per-layer dtypes
// would put two different ones in one array, the cache stays one group. A layer on another's KV (Gemma 4's
// KV sharing) has no array of its own: it reads its source's, in its source's group.
// With streaming on, the full-attention layers form windowed groups of streaming.window with its sinks;
// with H2O on, full groups capped at its budget.
KVCacheGroups plan_kv_cache_groups(const ModelConfig& c, const std::vector<KVCacheDType>& layer_dtypes,
                                   int64_t max_model_len, bool hybrid, const StreamingEviction& streaming = {},
                                   const HeavyHitterEviction& h2o = {});

// The textbook layout of a model's KV per token: its layers that cache their own KV (Gemma 4's shared layers cache
// none), each with its own KV heads and head size, or MLA's latent rows.
KVLayout model_kv_layout(const ModelConfig& c, KVCacheDType dtype, int block_size);

struct PagedKVCache {
  PagedKVCache(const ModelConfig& config, const PagedKVCacheOptions& opts);

  uint64_t budget_bytes = 0;       // the budget, resolved to bytes
  int64_t affordable_blocks = 0;   // blocks the budget pays for
  int32_t num_blocks = 0;          // blocks allocated (affordable, capped at what can be used)
  int block_size = 16;
  std::string dtype_names;         // "f16", or "f32,f16,...,f32" when layers differ
  uint64_t bytes_per_block = 0;    // per the layout
  uint64_t storage_bytes = 0;      // memory the storage holds
  KVCacheGroups groups;
  int64_t capacity = 0;            // capacity_tokens() of the manager, kept when the engine takes it
  // The engine takes these three over; the figures above stay valid.
  std::unique_ptr<KVStorage> storage;
  KVCacheView view;
  std::unique_ptr<KVCacheManager> manager;

  // Most tokens one sequence can hold (with a hybrid cache: computed at most max_chunk_tokens a step).
  int64_t capacity_tokens() const { return capacity; }
  // "kv cache: 64 blocks of 16 tokens = 1024 tokens, 1.2 MiB f32 (budget 4.0 MiB)": the start-up log line.
  std::string summary() const;
};

// b.block_table and b.group_tables: the sequence's table in every group of the cache.
void set_block_tables(const KVCacheManager& kv, SeqId seq, BatchSequence& b);

// "512 B", "20.0 KiB", "1.5 MiB", "2.0 GiB": a byte count for messages.
std::string human_bytes(uint64_t bytes);

// Turns a --kv-cache-memory value into what PagedKVCacheOptions::kv_cache_memory expects, by the rules of
// resolve_kv_memory_budget (kv/kv_layout.h): a fraction of RAM ("0.5", "50%") or a byte size ("4096",
// "512M", "2G", "1.5GiB"; KB/MB/GB are powers of 1000). Fractions are resolved to bytes here. Throws
// Error naming the option on anything else, and on budgets of 0 or 1 byte.
double parse_kv_cache_memory(std::string_view text);

}  // namespace kvserve
