// PagedKVCache: how a model's layers are grouped for the hybrid cache (sliding-window layers beside full
// ones), and what the grouping buys in tokens per sequence for a memory budget.
#include <gtest/gtest.h>

#include <vector>

#include "engine/paged_kv_cache.h"

using namespace kvserve;

namespace {

// Gemma-3-1B's attention shape: 26 layers, every 6th global (5, 11, 17, 23), window 512, one KV head of 256.
ModelConfig gemma3_1b() {
  ModelConfig c;
  c.n_layers = 26;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.head_dim = 256;
  c.n_embd = 1152;
  c.sliding_window = 512;
  for (int l = 0; l < c.n_layers; ++l) c.swa_layers.push_back((l + 1) % 6 != 0);
  return c;
}

std::vector<KVCacheDType> all(KVCacheDType t, int n) { return std::vector<KVCacheDType>(static_cast<size_t>(n), t); }

}  // namespace

TEST(KVCacheGroups, Gemma3PutsItsGlobalLayersInOneGroupAndItsLocalOnesInGroupsOfAsMany) {
  const ModelConfig c = gemma3_1b();
  const KVCacheGroups g = plan_kv_cache_groups(c, all(KVCacheDType::F16, 26), 32768, true);
  ASSERT_TRUE(g.hybrid());
  EXPECT_EQ(g.slots(), 4);
  // 22 local layers in groups of 4: 6 groups, the last one half used.
  EXPECT_EQ(g.windows, (std::vector<int64_t>{0, 512, 512, 512, 512, 512, 512}));
  for (int l : {5, 11, 17, 23}) {
    EXPECT_EQ(g.layer_group[static_cast<size_t>(l)], 0) << l;
    EXPECT_EQ(g.layer_slot[static_cast<size_t>(l)], l / 6) << l;
  }
  // Local layers in order: 0-4, 6-10, ...: layer 4 is the 5th, so group 2, slot 0; layer 25 the 22nd.
  EXPECT_EQ(g.layer_group[0], 1);
  EXPECT_EQ(g.layer_slot[3], 3);
  EXPECT_EQ(g.layer_group[4], 2);
  EXPECT_EQ(g.layer_slot[4], 0);
  EXPECT_EQ(g.layer_group[25], 6);
  EXPECT_EQ(g.layer_slot[25], 1);
  // Every (group, slot) pair belongs to one layer.
  std::vector<std::vector<int>> owner(7, std::vector<int>(4, -1));
  for (int l = 0; l < 26; ++l) {
    int& o = owner[static_cast<size_t>(g.layer_group[static_cast<size_t>(l)])]
                  [static_cast<size_t>(g.layer_slot[static_cast<size_t>(l)])];
    EXPECT_EQ(o, -1) << "layer " << l << " shares a slot";
    o = l;
  }
}

TEST(KVCacheGroups, OneGroupWhereGroupsWouldNotHelpOrCannotBeBuilt) {
  const ModelConfig c = gemma3_1b();
  // Off, or a window that covers the whole context.
  EXPECT_FALSE(plan_kv_cache_groups(c, all(KVCacheDType::F16, 26), 32768, false).hybrid());
  EXPECT_FALSE(plan_kv_cache_groups(c, all(KVCacheDType::F16, 26), 512, true).hybrid());
  // No sliding-window layers.
  ModelConfig llama = c;
  llama.swa_layers.clear();
  const KVCacheGroups one = plan_kv_cache_groups(llama, all(KVCacheDType::F32, 26), 32768, true);
  EXPECT_FALSE(one.hybrid());
  EXPECT_EQ(one.slots(), 26);
  EXPECT_EQ(one.layer_slot[25], 25);
  // Per-layer dtypes that would share one storage array: layer 0 (group 1, slot 0) bf16, layer 5
  // (group 0, slot 0) f16.
  std::vector<KVCacheDType> mixed = all(KVCacheDType::F16, 26);
  mixed[0] = KVCacheDType::BF16;
  EXPECT_FALSE(plan_kv_cache_groups(c, mixed, 32768, true).hybrid());
  // Per-layer dtypes by slot are fine: slot 0 is layers 0, 4, 5 (global), 9, ...
  std::vector<KVCacheDType> by_slot = all(KVCacheDType::F16, 26);
  const KVCacheGroups g = plan_kv_cache_groups(c, by_slot, 32768, true);
  for (int l = 0; l < 26; ++l)
    if (g.layer_slot[static_cast<size_t>(l)] == 0) by_slot[static_cast<size_t>(l)] = KVCacheDType::F32;
  const KVCacheGroups g2 = plan_kv_cache_groups(c, by_slot, 32768, true);
  ASSERT_TRUE(g2.hybrid());
  EXPECT_EQ(g2.slot_dtypes, (std::vector<KVCacheDType>{KVCacheDType::F32, KVCacheDType::F16, KVCacheDType::F16,
                                                       KVCacheDType::F16}));
}

// 64 MiB of f16 K/V at Gemma-3-1B's shape and a 32k context: a full cache holds 157 blocks of all 26
// layers (416 KiB each) = 2,512 tokens. The hybrid one holds 1,023 blocks of 4 layers (64 KiB each, one
// more is the null block); a sequence computed 512 tokens a step needs at most ceil(1024 / 16) + 1 = 65
// blocks in each of its 6 local groups, which leaves 633 blocks, 10,128 tokens, for its global layers.
TEST(PagedKVCache, HybridCacheHoldsFourTimesTheTokensAtGemma3Shape) {
  const ModelConfig c = gemma3_1b();
  PagedKVCacheOptions o;
  o.kv_cache_memory = 64.0 * 1024 * 1024;
  o.kv_dtype = KVCacheDType::F16;
  o.max_model_len = 32768;
  o.max_num_seqs = 4;
  o.max_chunk_tokens = 512;
  o.hybrid = false;
  const PagedKVCache full(c, o);
  EXPECT_EQ(full.bytes_per_block, 26u * 16 * 1024);
  EXPECT_EQ(full.num_blocks, 157);
  EXPECT_EQ(full.capacity_tokens(), 157 * 16);
  o.hybrid = true;
  const PagedKVCache hybrid(c, o);
  EXPECT_EQ(hybrid.bytes_per_block, 4u * 16 * 1024);
  EXPECT_EQ(hybrid.num_blocks, 1023);
  EXPECT_EQ(hybrid.storage_bytes, 1024u * 64 * 1024);  // the budget, to the byte
  EXPECT_EQ(hybrid.capacity_tokens(), (1023 - 6 * 65) * 16);
  EXPECT_EQ(hybrid.view.n_blocks, 1024);
  EXPECT_EQ(hybrid.manager->null_block(), 1023);
  EXPECT_NE(hybrid.summary().find("hybrid: 1 full-attention and 6 sliding-window groups of 4 layers, window 512"),
            std::string::npos)
      << hybrid.summary();
}

// Gemma 3 with a streaming window: its local groups keep their sliding window, its global group the
// streaming window and sinks, and the pool sized for one sequence's windows holds any prompt (it was
// refused past 560 tokens, every group counted at the larger window).
TEST(PagedKVCache, StreamingGemma3PoolHoldsPromptsOfAnyLength) {
  ModelConfig c = gemma3_1b();
  c.sliding_window = 32;
  PagedKVCacheOptions o;
  o.kv_dtype = KVCacheDType::F32;
  o.max_model_len = 4096;
  o.max_chunk_tokens = 512;
  o.streaming.window = 48;
  o.streaming.sinks = 4;
  const PagedKVCache kv(c, o);
  EXPECT_GT(kv.capacity_tokens(), int64_t{1} << 40);
  EXPECT_GT(kv.manager->capacity_tokens_for_chunk(512), int64_t{1} << 40);
}

namespace {

// A Gemma-4-E2B-shaped attention: 35 layers, every 5th full attention (4, 9, ...) with one KV head of 512, the others
// sliding (window 512) with one of 256; the last 20 layers on the KV of the last earlier layer of their kind.
ModelConfig gemma4_e2b() {
  ModelConfig c;
  c.n_layers = 35;
  c.n_heads = 8;
  c.n_kv_heads = 1;
  c.head_dim = 512;
  c.head_dim_swa = 256;
  c.n_embd = 1536;
  c.sliding_window = 512;
  c.n_kv_shared_layers = 20;
  for (int l = 0; l < c.n_layers; ++l) c.swa_layers.push_back(l % 5 != 4);
  return c;
}

}  // namespace

TEST(KVCacheGroups, Gemma4SharedLayersReadTheirSourcesArraysAndEachArrayFitsItsLargestRows) {
  const ModelConfig c = gemma4_e2b();
  EXPECT_EQ(c.kv_source_layer(14), 14);
  EXPECT_EQ(c.kv_source_layer(15), 13);  // sliding: the last earlier sliding layer with its own KV
  EXPECT_EQ(c.kv_source_layer(19), 14);  // full
  EXPECT_EQ(c.kv_source_layer(34), 14);
  const KVCacheGroups g = plan_kv_cache_groups(c, all(KVCacheDType::F16, 35), 32768, true);
  ASSERT_TRUE(g.hybrid());
  // 15 layers with their own KV: 3 full ones in group 0, 12 sliding ones in 4 groups of 3.
  EXPECT_EQ(g.slots(), 3);
  EXPECT_EQ(g.windows, (std::vector<int64_t>{0, 512, 512, 512, 512}));
  // Each array holds a full layer's rows in group 0's blocks and a sliding layer's in the others': room for the larger.
  EXPECT_EQ(g.slot_head_dims, (std::vector<int>{512, 512, 512}));
  EXPECT_EQ(g.slot_kv_heads, (std::vector<int>{1, 1, 1}));
  for (int l = 15; l < 35; ++l) {
    const auto src = static_cast<size_t>(c.kv_source_layer(l));
    EXPECT_EQ(g.layer_group[static_cast<size_t>(l)], g.layer_group[src]) << l;
    EXPECT_EQ(g.layer_slot[static_cast<size_t>(l)], g.layer_slot[src]) << l;
  }
  // One group: an array per layer with its own KV, each as its layer's rows.
  const KVCacheGroups one = plan_kv_cache_groups(c, all(KVCacheDType::F16, 35), 32768, false);
  EXPECT_EQ(one.slots(), 15);
  EXPECT_EQ(one.slot_head_dims[static_cast<size_t>(one.layer_slot[4])], 512);
  EXPECT_EQ(one.slot_head_dims[static_cast<size_t>(one.layer_slot[0])], 256);
  EXPECT_EQ(one.layer_slot[34], one.layer_slot[14]);

  // The textbook figure per token: 12 sliding layers of 2 x 256 f16 values and 3 full ones of 2 x 512, no more.
  PagedKVCacheOptions o;
  o.kv_cache_memory = 64.0 * 1024 * 1024;
  o.kv_dtype = KVCacheDType::F16;
  o.max_model_len = 4096;
  o.hybrid = false;
  const PagedKVCache cache(c, o);
  EXPECT_EQ(cache.bytes_per_block, 16u * (12 * 2 * 256 * 2 + 3 * 2 * 512 * 2));
  EXPECT_EQ(cache.view.stride(4), 16 * 512);
  EXPECT_EQ(cache.view.stride(0), 16 * 256);
  EXPECT_EQ(cache.view.k_layers[34], cache.view.k_layers[14]);
  EXPECT_EQ(cache.view.k_layers[15], cache.view.k_layers[13]);
}

// What benchmarks count as K/V per token: the layers with their own KV, each kind's heads (Gemma 4), MLA's latent rows.
TEST(KVCacheGroups, ModelKVLayoutCountsWhatTheCacheHolds) {
  const ModelConfig c = gemma4_e2b();
  EXPECT_EQ(model_kv_layout(c, KVCacheDType::F16, 16).bytes_per_token(), 12u * 2 * 256 * 2 + 3u * 2 * 512 * 2);
  ModelConfig g3 = gemma3_1b();
  EXPECT_EQ(model_kv_layout(g3, KVCacheDType::F16, 16).bytes_per_token(), 26u * 2 * 256 * 2);
  ModelConfig mla = g3;
  mla.kv_lora_rank = 512;
  mla.n_rot = 64;
  EXPECT_EQ(model_kv_layout(mla, KVCacheDType::F16, 16).bytes_per_token(), 26u * (512 + 64) * 2);
}
