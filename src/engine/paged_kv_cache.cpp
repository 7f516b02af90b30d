#include "engine/paged_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "core/error.h"

namespace kvserve {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

KVCacheGroups plan_kv_cache_groups(const ModelConfig& c, const std::vector<KVCacheDType>& layer_dtypes,
                                   int64_t max_model_len, bool hybrid, const StreamingEviction& streaming,
                                   const HeavyHitterEviction& h2o) {
  KVCacheGroups g;
  const int n = c.n_layers;
  std::vector<int> full, windowed;
  for (int l = 0; l < n; ++l)
    if (c.has_own_kv(l)) (c.is_swa_layer(l) ? windowed : full).push_back(l);
  // Each array's rows: the largest of its layers'.
  const auto add_geometry = [&](KVCacheGroups& groups) {
    groups.slot_kv_heads.assign(static_cast<size_t>(groups.slots()), 0);
    groups.slot_head_dims.assign(static_cast<size_t>(groups.slots()), 0);
    for (int l = 0; l < n; ++l) {
      if (!c.has_own_kv(l)) continue;
      const auto s = static_cast<size_t>(groups.layer_slot[static_cast<size_t>(l)]);
      const int64_t have = int64_t{groups.slot_kv_heads[s]} * groups.slot_head_dims[s];
      if (int64_t{c.kv_heads_of(l)} * c.head_dim_of(l) > have) {
        groups.slot_kv_heads[s] = c.kv_heads_of(l);
        groups.slot_head_dims[s] = c.head_dim_of(l);
      }
    }
    // A layer on another's KV reads its source's array in its source's group.
    for (int l = 0; l < n; ++l) {
      const auto src = static_cast<size_t>(c.kv_source_layer(l));
      groups.layer_group[static_cast<size_t>(l)] = groups.layer_group[src];
      groups.layer_slot[static_cast<size_t>(l)] = groups.layer_slot[src];
    }
    return groups;
  };
  const auto one_group = [&] {
    KVCacheGroups one;
    one.windows = {0};
    one.sinks = {0};
    one.caps = {0};
    for (int l = 0; l < n; ++l) {
      one.layer_group.push_back(0);
      one.layer_slot.push_back(c.has_own_kv(l) ? static_cast<int>(one.slot_dtypes.size()) : -1);
      if (c.has_own_kv(l)) one.slot_dtypes.push_back(layer_dtypes[static_cast<size_t>(l)]);
    }
    return add_geometry(one);
  };
  // A window that covers the whole context releases nothing: the groups would only cost their padding.
  if (streaming.on() || h2o.on()) {
    if (!hybrid) fail("kv cache: attention sinks / a streaming window / H2O eviction need the hybrid cache");
  } else if (!hybrid || windowed.empty() || c.sliding_window <= 0 || c.sliding_window >= max_model_len) {
    return one_group();
  }
  const int per_block = static_cast<int>(full.empty() ? windowed.size() : full.size());
  g.layer_group.assign(static_cast<size_t>(n), -1);
  g.layer_slot.assign(static_cast<size_t>(n), -1);
  std::vector<std::optional<KVCacheDType>> slot_dtype(static_cast<size_t>(per_block));
  bool uniform = true;
  const auto place = [&](const std::vector<int>& layers, int64_t window, int64_t sinks, int64_t cap) {
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % static_cast<size_t>(per_block) == 0) {
        g.windows.push_back(window);
        g.sinks.push_back(sinks);
        g.caps.push_back(cap);
      }
      const int l = layers[i];
      const size_t slot = i % static_cast<size_t>(per_block);
      g.layer_group[static_cast<size_t>(l)] = static_cast<int>(g.windows.size()) - 1;
      g.layer_slot[static_cast<size_t>(l)] = static_cast<int>(slot);
      const KVCacheDType t = layer_dtypes[static_cast<size_t>(l)];
      if (slot_dtype[slot] && *slot_dtype[slot] != t) uniform = false;
      slot_dtype[slot] = t;
    }
  };
  // A window that covers the context keeps the local layers whole (H2O with such a model).
  const bool local_windows = !windowed.empty() && c.sliding_window > 0 && c.sliding_window < max_model_len;
  place(full, streaming.window, streaming.sinks, h2o.on() ? h2o.budget() : 0);
  place(windowed, local_windows ? c.sliding_window : 0, 0, 0);
  if (!uniform) {
    if (streaming.on() || h2o.on())
      fail("kv cache: a streaming window or H2O eviction needs one KV dtype for the layers that share a block; these per-layer "
           "dtypes differ there");
    return one_group();
  }
  for (const auto& t : slot_dtype) g.slot_dtypes.push_back(*t);
  return add_geometry(g);
}

KVLayout model_kv_layout(const ModelConfig& c, KVCacheDType dtype, int block_size) {
  if (c.mla()) return KVLayout::mla(c.n_layers, c.kv_lora_rank, c.n_rot, dtype, block_size);
  std::vector<int> own;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.has_own_kv(l)) own.push_back(l);
  KVLayout layout = KVLayout::mha(static_cast<int>(own.size()), c.n_kv_heads, c.head_dim, dtype, block_size);
  if (!c.uniform_layers()) {
    for (int l : own) {
      layout.layer_kv_heads.push_back(c.kv_heads_of(l));
      layout.layer_head_dims.push_back(c.head_dim_of(l));
    }
    layout.validate();
  }
  return layout;
}

PagedKVCache::PagedKVCache(const ModelConfig& c, const PagedKVCacheOptions& opts) : block_size(opts.block_size) {
  const std::string_view who = opts.who;
  if (opts.block_size <= 0) fail("{}: block size must be positive, got {}", who, opts.block_size);
  if (!(opts.kv_cache_memory > 0)) fail("{}: kv cache memory must be positive, got {}", who, opts.kv_cache_memory);
  if (opts.max_model_len <= 0) fail("{}: context length must be positive, got {}", who, opts.max_model_len);

  // MLA caches one latent row per token and layer (no V: attention reads the row's first kv_lora_rank values).
  KVLayout layout = c.mla() ? KVLayout::mla(c.n_layers, c.kv_lora_rank, c.n_rot, opts.kv_dtype, opts.block_size)
                            : KVLayout::mha(c.n_layers, c.n_kv_heads, c.head_dim, opts.kv_dtype, opts.block_size);
  if (!opts.layer_dtypes.empty()) {
    if (static_cast<int>(opts.layer_dtypes.size()) != c.n_layers)
      fail("{}: {} per-layer KV dtypes given for a model of {} layers", who, opts.layer_dtypes.size(), c.n_layers);
    layout.layer_dtypes = opts.layer_dtypes;
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const KVCacheDType t = layout.layer_dtypes[static_cast<size_t>(l)];
    const int row = c.mla() ? c.kv_row_dim() : c.head_dim_of(l);
    if (kv_dtype_has_scales(t) && row % kKVScaleGroup != 0)
      fail(
          "{}: an {} KV cache keeps each cached row in blocks of {} values, and this model's head size is {}; "
          "use f16, bf16 or fp8",
          who, kv_dtype_name(t), kKVScaleGroup, row);
  }
  const bool uniform = std::all_of(layout.layer_dtypes.begin(), layout.layer_dtypes.end(),
                                   [&](KVCacheDType t) { return t == layout.layer_dtypes.front(); });
  for (size_t l = 0; l < layout.layer_dtypes.size() && (l == 0 || !uniform); ++l) {
    if (l > 0) dtype_names.push_back(',');
    dtype_names.append(kv_dtype_name(layout.layer_dtypes[l]));
  }
  budget_bytes = opts.kv_cache_memory > 1
                     ? static_cast<uint64_t>(opts.kv_cache_memory)
                     : static_cast<uint64_t>(opts.kv_cache_memory * static_cast<double>(total_ram_bytes()));
  if (opts.streaming.window < 0 || opts.streaming.sinks < 0)
    fail("{}: streaming window {} and attention sinks {} must not be negative", who, opts.streaming.window,
         opts.streaming.sinks);
  if (opts.streaming.sinks > 0 && !opts.streaming.on())
    fail("{}: attention sinks ({}) need a streaming window (--streaming-window)", who, opts.streaming.sinks);
  const HeavyHitterEviction& h2o = opts.h2o;
  if (h2o.heavy < 0 || h2o.recent < 0)
    fail("{}: H2O heavy hitters {} and recent tokens {} must not be negative", who, h2o.heavy, h2o.recent);
  if (h2o.heavy > 0 && !h2o.on())
    fail("{}: H2O heavy hitters ({}) need recent tokens too (--h2o-recent >= 1)", who, h2o.heavy);
  if (h2o.on() && opts.streaming.on())
    fail("{}: choose one eviction: a streaming window or H2O, not both", who);
  // H2O's kernel keeps no softmax denominators, which a learned sink needs to join.
  if (h2o.on() && c.learned_sinks)
    fail("{}: H2O eviction does not support {}'s learned attention sinks; use a streaming window instead", who, c.arch);
  // H2O's scores are what a layer's own queries paid its slots; a second layer reading the same slots would count
  // twice and evict for both.
  if (h2o.on() && c.n_kv_shared_layers > 0)
    fail("{}: H2O eviction does not support {}'s KV sharing across layers; use a streaming window instead", who,
         c.arch);
  layout.eviction_records = h2o.on();
  const bool prefix_caching = opts.enable_prefix_caching && !h2o.on();
  groups = plan_kv_cache_groups(c, layout.layer_dtypes, opts.max_model_len, opts.hybrid, opts.streaming, h2o);
  const bool hybrid = groups.hybrid();
  // A block holds `slots` layers; a hybrid cache keeps one more, the null block of released entries.
  KVLayout block_layout = layout;
  block_layout.n_layers = groups.slots();
  block_layout.layer_dtypes = groups.slot_dtypes;
  if (!c.mla()) {
    block_layout.layer_kv_heads = groups.slot_kv_heads;
    block_layout.layer_head_dims = groups.slot_head_dims;
  }
  bytes_per_block = block_layout.stored_bytes_per_block();
  affordable_blocks = blocks_for_budget(block_layout, budget_bytes) - (hybrid ? 1 : 0);
  // More blocks than every sequence at full context twice over would only hold cold prefixes (once over
  // when there is no prefix cache), and the storage is committed up front: a fraction of RAM for a
  // tiny model would otherwise take gigabytes.
  const int64_t bs = opts.block_size;
  const int64_t chunk =
      opts.max_chunk_tokens > 0 ? std::min(opts.max_chunk_tokens, opts.max_model_len) : opts.max_model_len;
  int64_t blocks_per_seq = 0;
  for (size_t gi = 0; gi < groups.windows.size(); ++gi) {
    const int64_t w = groups.windows[gi];
    if (groups.caps[gi] > 0) {
      blocks_per_seq += ceil_div(std::min(opts.max_model_len, groups.caps[gi]), bs);
      continue;
    }
    blocks_per_seq += w == 0 ? ceil_div(opts.max_model_len, bs)
                             : std::min(ceil_div(opts.max_model_len, bs),
                                        ceil_div(w + chunk, bs) + 1 + ceil_div(groups.sinks[gi], bs));
  }
  const int64_t useful = blocks_per_seq * std::max(opts.max_num_seqs, 1) * (prefix_caching ? 2 : 1);
  const int64_t n = std::min<int64_t>({affordable_blocks, useful, std::numeric_limits<int32_t>::max()});
  if (n < 1)
    fail("{}: a KV cache budget of {} bytes ({}) holds no block of {} tokens ({} bytes each); raise --kv-cache-memory",
         who, budget_bytes, human_bytes(budget_bytes), opts.block_size, bytes_per_block);
  num_blocks = static_cast<int32_t>(n);

  storage = std::make_unique<KVStorage>(block_layout, num_blocks + (hybrid ? 1 : 0), opts.prefault);
  storage_bytes = storage->bytes();
  bool uniform_strides = true;
  for (int l = 0; l < c.n_layers; ++l) {
    const int slot = groups.layer_slot[static_cast<size_t>(l)];
    view.k_layers.push_back(storage->k_layer(slot));
    view.v_layers.push_back(storage->v_layer(slot));
    const KVCacheDType t = storage->dtype(slot);
    view.layer_types.push_back(kv_elem_type(t));
    view.layer_block_strides.push_back(storage->block_stride(slot));
    uniform_strides = uniform_strides && view.layer_block_strides.back() == view.layer_block_strides.front();
  }
  if (uniform_strides) view.layer_block_strides.clear();
  if (hybrid) view.layer_group = groups.layer_group;
  view.streaming = opts.streaming;
  view.h2o = h2o;
  if (h2o.on())
    for (int l = 0; l < c.n_layers; ++l) {
      const auto li = static_cast<size_t>(l);
      const bool capped = groups.caps[static_cast<size_t>(groups.layer_group[li])] > 0;
      view.h2o_records.push_back(capped ? storage->eviction_records(groups.layer_slot[li]) : nullptr);
    }
  view.block_size = opts.block_size;
  view.block_stride = storage->block_stride();
  view.n_blocks = storage->num_blocks();

  KVCacheManagerConfig kc;
  kc.num_blocks = num_blocks;
  kc.block_size = opts.block_size;
  kc.enable_prefix_caching = prefix_caching;
  kc.prefix_cache_ttl_seconds = opts.prefix_cache_ttl_seconds;
  kc.model_id = opts.model_id;
  kc.group_windows = groups.windows;
  kc.group_sinks = groups.sinks;
  kc.group_caps = groups.caps;
  kc.max_chunk_tokens = chunk;
  manager = std::make_unique<KVCacheManager>(kc);
  capacity = manager->capacity_tokens();
}

std::string PagedKVCache::summary() const {
  std::string s =
      fmt::format("kv cache: {} block{} of {} tokens = {} tokens, {} {}", num_blocks, num_blocks == 1 ? "" : "s",
                  block_size, int64_t{num_blocks} * block_size, human_bytes(storage_bytes), dtype_names);
  if (view.streaming.on()) {
    s += fmt::format(" (streaming: the full-attention layers keep {} sink position{} and the last {} of each sequence, "
                     "{} group{} of {} layer{})",
                     view.streaming.sinks, view.streaming.sinks == 1 ? "" : "s", view.streaming.window,
                     groups.windows.size(), groups.windows.size() == 1 ? "" : "s", groups.slots(),
                     groups.slots() == 1 ? "" : "s");
  } else if (view.h2o.on()) {
    s += fmt::format(" (H2O: the full-attention layers keep {} heavy hitters and the last {} tokens of each sequence, "
                     "{} bytes of records per KV head and token; prefix cache off; {} group{} of {} layer{})",
                     view.h2o.heavy, view.h2o.recent, kHeavyHitterRecordBytes, groups.windows.size(),
                     groups.windows.size() == 1 ? "" : "s", groups.slots(), groups.slots() == 1 ? "" : "s");
  } else if (groups.hybrid()) {
    int n_windowed = 0;
    for (int64_t w : groups.windows) n_windowed += w > 0 ? 1 : 0;
    const int n_full = static_cast<int>(groups.windows.size()) - n_windowed;
    // With every layer windowed (Mistral v0.1) no group grows with the sequence: no length bound.
    const std::string reach = capacity >= std::numeric_limits<int64_t>::max() / 2
                                  ? std::string("no limit on a sequence's length")
                                  : fmt::format("{} tokens per sequence", capacity);
    s += fmt::format(" (hybrid: {} full-attention and {} sliding-window group{} of {} layer{}, window {}, {})", n_full,
                     n_windowed, n_windowed == 1 ? "" : "s", groups.slots(), groups.slots() == 1 ? "" : "s",
                     *std::max_element(groups.windows.begin(), groups.windows.end()), reach);
  }
  if (num_blocks < affordable_blocks)
    s += fmt::format(" (budget {} allowed {} blocks; capped at what the sequences can reach)",
                     human_bytes(budget_bytes), affordable_blocks);
  return s;
}

void set_block_tables(const KVCacheManager& kv, SeqId seq, BatchSequence& b) {
  b.block_table = kv.block_table(seq).ids();
  b.group_tables.clear();
  for (int g = 1; g < kv.num_groups(); ++g) b.group_tables.push_back(kv.block_table(seq, g).ids());
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
