// Prefix caching through KVCacheManager, in the manner of vLLM's test_prefix_caching.py: exact block
// ids, ref counts and free-queue order after every step.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_cache_manager.h"

using namespace kvserve;

namespace {

using Ids = std::vector<int32_t>;
using Tokens = std::vector<int32_t>;

Tokens iota_tokens(int n, int start = 0) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

KVCacheManagerConfig config(int32_t num_blocks, int block_size = 4, double ttl = 0) {
  KVCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.prefix_cache_ttl_seconds = ttl;
  c.model_id = "test-model";
  return c;
}

// Admits a request the way the scheduler does: lookup, allocate, compute the whole prompt, cache.
bool admit(KVCacheManager& m, SeqId seq, const Tokens& prompt, const std::string& salt = "") {
  const CachedPrefix prefix = m.get_computed_blocks(prompt, salt);
  if (!m.allocate_slots(seq, static_cast<int64_t>(prompt.size()) - prefix.num_tokens, prefix, salt)) return false;
  m.cache_blocks(seq, prompt, static_cast<int64_t>(prompt.size()));
  return true;
}

}  // namespace

TEST(PrefixCache, SecondRequestReusesFullBlocks) {
  KVCacheManager m(config(10));
  // Request A: 10 tokens = 2 full blocks + a partial one.
  const Tokens a = iota_tokens(10);
  CachedPrefix miss = m.get_computed_blocks(a);
  EXPECT_TRUE(miss.block_ids.empty());
  EXPECT_EQ(miss.num_tokens, 0);
  ASSERT_TRUE(m.allocate_slots(1, 10, miss));
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1, 2}));
  m.cache_blocks(1, a, 10);
  EXPECT_TRUE(m.pool().block(0).hash && m.pool().block(1).hash);
  EXPECT_FALSE(m.pool().block(2).hash);  // partial: not cached
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{3, 4, 5, 6, 7, 8, 9}));

  // Request B shares the first 8 tokens, while A is still running.
  Tokens b = iota_tokens(8);
  b.insert(b.end(), {100, 101, 102});
  CachedPrefix hit = m.get_computed_blocks(b);
  EXPECT_EQ(hit.block_ids, (Ids{0, 1}));
  EXPECT_EQ(hit.num_tokens, 8);
  ASSERT_TRUE(m.allocate_slots(2, 3, hit));
  EXPECT_EQ(m.block_table(2).ids(), (Ids{0, 1, 3}));
  EXPECT_EQ(m.pool().block(0).ref_count, 2);
  EXPECT_EQ(m.pool().block(1).ref_count, 2);
  EXPECT_EQ(m.pool().block(3).ref_count, 1);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9}));

  // Both finish: tail blocks first, so a request's last blocks are evicted before its first.
  m.free(1);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 2}));
  EXPECT_EQ(m.pool().block(0).ref_count, 1);
  m.free(2);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 6, 7, 8, 9, 2, 3, 1, 0}));

  // Request C hits A's blocks from the free queue: they leave it; the new block is taken from the front.
  Tokens c = iota_tokens(8);
  c.push_back(55);
  hit = m.get_computed_blocks(c);
  EXPECT_EQ(hit.block_ids, (Ids{0, 1}));
  ASSERT_TRUE(m.allocate_slots(3, 1, hit));
  EXPECT_EQ(m.block_table(3).ids(), (Ids{0, 1, 4}));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{5, 6, 7, 8, 9, 2, 3}));

  const PrefixCacheStats s = m.stats();
  EXPECT_EQ(s.queries, 3u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.hit_tokens, 16u);
  EXPECT_EQ(s.query_tokens, 10u + 11u + 9u);
}

TEST(PrefixCache, HitIsCappedAtPromptMinusOneToken) {
  KVCacheManager m(config(8));
  const Tokens p = iota_tokens(8);  // exactly two full blocks
  ASSERT_TRUE(admit(m, 1, p));
  m.free(1);
  // The same 8-token prompt may reuse only 7 tokens -> 1 whole block; its last token must be computed.
  CachedPrefix hit = m.get_computed_blocks(p);
  EXPECT_EQ(hit.block_ids, (Ids{0}));
  EXPECT_EQ(hit.num_tokens, 4);
  // 9 tokens: both blocks.
  Tokens longer = p;
  longer.push_back(8);
  EXPECT_EQ(m.get_computed_blocks(longer).num_tokens, 8);
  // A one-token prompt never hits.
  EXPECT_EQ(m.get_computed_blocks(Tokens{0}).num_tokens, 0);
}

TEST(PrefixCache, DifferentSaltsNeverShareBlocks) {
  KVCacheManager m(config(12));
  const Tokens p = iota_tokens(13);
  ASSERT_TRUE(admit(m, 1, p, "tenant-a"));
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1, 2, 3}));
  EXPECT_TRUE(m.get_computed_blocks(p, "tenant-b").block_ids.empty());
  EXPECT_TRUE(m.get_computed_blocks(p, "").block_ids.empty());
  EXPECT_EQ(m.get_computed_blocks(p, "tenant-a").block_ids, (Ids{0, 1, 2}));
  ASSERT_TRUE(admit(m, 2, p, "tenant-b"));
  EXPECT_EQ(m.block_table(2).ids(), (Ids{4, 5, 6, 7}));
  for (int32_t id = 0; id < 8; ++id) EXPECT_EQ(m.pool().block(id).ref_count, 1);
  // Both salts' chains are cached side by side, each hitting only its own.
  EXPECT_EQ(m.get_computed_blocks(p, "tenant-b").block_ids, (Ids{4, 5, 6}));
}

TEST(PrefixCache, DifferentModelsNeverShareBlocks) {
  // Two managers over "different pools" would trivially not share; the model id must also change the
  // hash itself, so a persisted or shared index cannot mix them up.
  const Tokens p = iota_tokens(4);
  EXPECT_NE(hash_full_blocks(p, 4, {"", "model-a"})[0], hash_full_blocks(p, 4, {"", "model-b"})[0]);
}

TEST(PrefixCache, TtlStopsStaleBlocksMatching) {
  double now = 0;
  KVCacheManager m(config(8, 4, /*ttl=*/30), [&] { return now; });
  const Tokens p = iota_tokens(9);
  ASSERT_TRUE(admit(m, 1, p));
  now = 100;  // running sequences' blocks never expire
  EXPECT_EQ(m.get_computed_blocks(p).num_tokens, 8);
  m.free(1);
  now = 120;
  EXPECT_EQ(m.get_computed_blocks(p).num_tokens, 8);
  now = 131;  // 31 s idle
  EXPECT_EQ(m.get_computed_blocks(p).num_tokens, 0);
  EXPECT_EQ(m.stats().expirations, 1u);  // only the first block is looked up: the chain stops there
  // Recomputing re-caches (the expired blocks' entries are gone, fresh blocks take over).
  ASSERT_TRUE(admit(m, 2, p));
  m.free(2);
  EXPECT_EQ(m.get_computed_blocks(p).num_tokens, 8);
}

TEST(PrefixCache, PinnedPrefixSurvivesEvictionPressure) {
  KVCacheManager m(config(6));
  const Tokens sys = iota_tokens(9);  // 2 full blocks + 1
  ASSERT_TRUE(admit(m, 1, sys));
  m.free(1);
  EXPECT_EQ(m.pin_prefix(sys), 8);
  EXPECT_TRUE(m.pool().block(0).pinned && m.pool().block(1).pinned);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{3, 4, 5, 2}));
  EXPECT_EQ(m.num_free_blocks(), 4);
  // A request using every free block cannot evict the pinned ones; one more is "not now".
  ASSERT_TRUE(admit(m, 2, iota_tokens(16, 1000)));
  EXPECT_EQ(m.block_table(2).ids(), (Ids{3, 4, 5, 2}));
  EXPECT_FALSE(admit(m, 3, iota_tokens(5, 2000)));
  m.free(2);
  Tokens again = sys;
  again.push_back(77);
  EXPECT_EQ(m.get_computed_blocks(again).block_ids, (Ids{0, 1}));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{2, 5, 4, 3}));
  // Unpinned: evictable again, tail block first.
  EXPECT_EQ(m.unpin_prefix(sys), 8);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{2, 5, 4, 3, 1, 0}));
  EXPECT_EQ(m.num_free_blocks(), 6);
}

TEST(PrefixCache, EvictionIsLeastRecentlyUsedFirst) {
  KVCacheManager m(config(4));
  const Tokens x = iota_tokens(5, 0), y = iota_tokens(5, 100);
  ASSERT_TRUE(admit(m, 1, x));  // blocks 0 (full, cached), 1
  ASSERT_TRUE(admit(m, 2, y));  // blocks 2 (full, cached), 3
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{1, 0, 3, 2}));
  // Two new blocks: the uncached tail 1 and x's cached block 0 go first; y stays cached.
  ASSERT_TRUE(admit(m, 3, iota_tokens(6, 500)));
  EXPECT_EQ(m.block_table(3).ids(), (Ids{1, 0}));
  EXPECT_EQ(m.get_computed_blocks(x).num_tokens, 0);
  EXPECT_EQ(m.get_computed_blocks(y).num_tokens, 4);
  EXPECT_EQ(m.stats().evictions, 1u);
}

TEST(PrefixCache, HitBlocksCountAgainstFreeBlocks) {
  // Blocks hit from the free queue leave it, so they must be counted when checking capacity.
  KVCacheManager m(config(3));
  const Tokens p = iota_tokens(9);
  ASSERT_TRUE(admit(m, 1, p));  // 0 1 2, all used
  m.free(1);
  CachedPrefix hit = m.get_computed_blocks(p);
  ASSERT_EQ(hit.num_tokens, 8);
  // 8 cached + 5 new tokens = 4 blocks > 3: not now, and nothing changed.
  EXPECT_FALSE(m.allocate_slots(2, 5, hit));
  EXPECT_FALSE(m.has_sequence(2));
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{2, 1, 0}));
  EXPECT_TRUE(m.allocate_slots(2, 1, hit));
  EXPECT_EQ(m.block_table(2).ids(), (Ids{0, 1, 2}));
}

TEST(PrefixCache, IdenticalConcurrentPromptsDoNotDuplicateIndex) {
  KVCacheManager m(config(8));
  const Tokens p = iota_tokens(9);
  const CachedPrefix none1 = m.get_computed_blocks(p);
  const CachedPrefix none2 = m.get_computed_blocks(p);
  ASSERT_TRUE(m.allocate_slots(1, 9, none1));
  ASSERT_TRUE(m.allocate_slots(2, 9, none2));
  m.cache_blocks(1, p, 9);
  m.cache_blocks(2, p, 9);
  EXPECT_EQ(m.pool().num_cached_blocks(), 2u);
  EXPECT_FALSE(m.pool().block(3).hash);  // seq 2's duplicates stay unindexed
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.get_computed_blocks(p).block_ids, (Ids{0, 1}));
}

TEST(PrefixCache, BlocksAreCachedOnlyOnceComputed) {
  KVCacheManager m(config(8));
  const Tokens p = iota_tokens(12);
  ASSERT_TRUE(m.allocate_slots(1, 12, m.get_computed_blocks(p)));
  // Chunked prefill: only the first 6 tokens computed -> one full block cached.
  m.cache_blocks(1, p, 6);
  EXPECT_TRUE(m.pool().block(0).hash);
  EXPECT_FALSE(m.pool().block(1).hash);
  Tokens q = p;
  q.push_back(1);
  EXPECT_EQ(m.get_computed_blocks(q).num_tokens, 4);
  m.cache_blocks(1, p, 12);
  EXPECT_EQ(m.get_computed_blocks(q).num_tokens, 12);
}

TEST(PrefixCache, DecodedTokensFillAndCacheBlocks) {
  KVCacheManager m(config(8));
  Tokens t = iota_tokens(3);
  ASSERT_TRUE(admit(m, 1, t));
  for (int32_t tok : {50, 51, 52, 53, 54}) {
    ASSERT_TRUE(m.allocate_slots(1, 1));
    t.push_back(tok);
    m.cache_blocks(1, t, static_cast<int64_t>(t.size()));
  }
  EXPECT_EQ(m.num_tokens(1), 8);
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1}));
  Tokens q = t;
  q.push_back(9);
  EXPECT_EQ(m.get_computed_blocks(q).block_ids, (Ids{0, 1}));
}
