// BlockPool in the manner of vLLM's test_prefix_caching.py: exact block ids, ref counts and free-queue
// order after every step.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

using namespace kvserve;

namespace {

BlockHash fake_hash(uint64_t v) { return BlockHash{v, ~v}; }

using Ids = std::vector<int32_t>;

}  // namespace

TEST(BlockPool, FreshPoolHandsOutBlocksInIdOrder) {
  BlockPool pool(6);
  EXPECT_EQ(pool.num_blocks(), 6);
  EXPECT_EQ(pool.num_free_blocks(), 6);
  EXPECT_EQ(pool.free_queue_order(), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(pool.get_new_blocks(3), (Ids{0, 1, 2}));
  for (int32_t id : {0, 1, 2}) EXPECT_EQ(pool.block(id).ref_count, 1);
  EXPECT_EQ(pool.block(3).ref_count, 0);
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 4, 5}));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.5);
}

// The high-water mark: one past the highest block id ever handed out, whatever was freed since.
TEST(BlockPool, HighWaterMarksTheBlocksEverHandedOut) {
  BlockPool pool(6);
  EXPECT_EQ(pool.high_water(), 0);
  pool.get_new_blocks(3);  // 0 1 2
  EXPECT_EQ(pool.high_water(), 3);
  pool.free_blocks(Ids{2, 1, 0});
  EXPECT_EQ(pool.high_water(), 3);
  EXPECT_EQ(pool.get_new_blocks(2), (Ids{3, 4}));  // the never-used ones first
  EXPECT_EQ(pool.high_water(), 5);
  EXPECT_EQ(pool.get_new_blocks(4), (Ids{5, 2, 1, 0}));
  EXPECT_EQ(pool.high_water(), 6);
}

TEST(BlockPool, FreeAppendsInGivenOrderAndGetNewPopsFront) {
  BlockPool pool(6);
  pool.get_new_blocks(4);                    // 0 1 2 3
  pool.free_blocks(Ids{2, 1});               // tail first: 2 evicted before 1
  EXPECT_EQ(pool.free_queue_order(), (Ids{4, 5, 2, 1}));
  EXPECT_EQ(pool.get_new_blocks(3), (Ids{4, 5, 2}));
  EXPECT_EQ(pool.free_queue_order(), (Ids{1}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
}

TEST(BlockPool, SharedBlockReturnsToQueueOnlyAtZeroRefs) {
  BlockPool pool(3);
  pool.get_new_blocks(1);  // 0
  pool.touch(Ids{0});
  EXPECT_EQ(pool.block(0).ref_count, 2);
  pool.free_blocks(Ids{0});
  EXPECT_EQ(pool.block(0).ref_count, 1);
  EXPECT_EQ(pool.free_queue_order(), (Ids{1, 2}));
  pool.free_blocks(Ids{0});
  EXPECT_EQ(pool.free_queue_order(), (Ids{1, 2, 0}));
  EXPECT_THROW(pool.free_blocks(Ids{0}), Error);
}

TEST(BlockPool, LazyEvictionKeepsHashUntilReuse) {
  BlockPool pool(3);
  pool.get_new_blocks(2);  // 0 1
  ASSERT_TRUE(pool.cache_full_block(0, fake_hash(10)));
  pool.free_blocks(Ids{0});
  EXPECT_EQ(pool.free_queue_order(), (Ids{2, 0}));
  // Still findable after being freed.
  EXPECT_EQ(pool.get_cached_block(fake_hash(10)), 0);
  EXPECT_EQ(pool.num_cached_blocks(), 1u);
  // Reusing block 2 leaves 0 cached; reusing 0 evicts it.
  EXPECT_EQ(pool.get_new_blocks(1), (Ids{2}));
  EXPECT_EQ(pool.get_cached_block(fake_hash(10)), 0);
  EXPECT_EQ(pool.evictions(), 0u);
  EXPECT_EQ(pool.get_new_blocks(1), (Ids{0}));
  EXPECT_EQ(pool.get_cached_block(fake_hash(10)), std::nullopt);
  EXPECT_FALSE(pool.block(0).hash.has_value());
  EXPECT_EQ(pool.evictions(), 1u);
}

TEST(BlockPool, TouchTakesIdleCachedBlockOutOfTheMiddleOfTheQueue) {
  BlockPool pool(5);
  pool.get_new_blocks(3);  // 0 1 2
  pool.cache_full_block(1, fake_hash(1));
  pool.free_blocks(Ids{2, 1, 0});
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 4, 2, 1, 0}));
  pool.touch(Ids{1});
  EXPECT_EQ(pool.block(1).ref_count, 1);
  EXPECT_FALSE(pool.block(1).in_free_queue);
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 4, 2, 0}));
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(BlockPool, EvictsLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  pool.get_new_blocks(4);
  for (int32_t id = 0; id < 4; ++id) pool.cache_full_block(id, fake_hash(100 + id));
  pool.free_blocks(Ids{3});
  pool.free_blocks(Ids{1});
  pool.free_blocks(Ids{0});
  pool.free_blocks(Ids{2});
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 1, 0, 2}));
  EXPECT_EQ(pool.get_new_blocks(2), (Ids{3, 1}));
  EXPECT_EQ(pool.get_cached_block(fake_hash(103)), std::nullopt);
  EXPECT_EQ(pool.get_cached_block(fake_hash(101)), std::nullopt);
  EXPECT_EQ(pool.get_cached_block(fake_hash(100)), 0);
  EXPECT_EQ(pool.get_cached_block(fake_hash(102)), 2);
  EXPECT_EQ(pool.evictions(), 2u);
}

TEST(BlockPool, DuplicateHashStaysUnindexed) {
  BlockPool pool(3);
  pool.get_new_blocks(2);
  EXPECT_TRUE(pool.cache_full_block(0, fake_hash(7)));
  EXPECT_FALSE(pool.cache_full_block(1, fake_hash(7)));
  EXPECT_FALSE(pool.block(1).hash.has_value());
  EXPECT_EQ(pool.get_cached_block(fake_hash(7)), 0);
  // Registering the same block again with its own hash is a no-op.
  EXPECT_TRUE(pool.cache_full_block(0, fake_hash(7)));
}

TEST(BlockPool, PinnedBlocksAreNeverEvicted) {
  BlockPool pool(3);
  pool.get_new_blocks(1);  // 0
  pool.cache_full_block(0, fake_hash(5));
  pool.pin(0);
  pool.free_blocks(Ids{0});
  EXPECT_EQ(pool.block(0).ref_count, 0);
  EXPECT_FALSE(pool.block(0).in_free_queue);
  EXPECT_EQ(pool.free_queue_order(), (Ids{1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(pool.get_new_blocks(2), (Ids{1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_EQ(pool.get_cached_block(fake_hash(5)), 0);
  EXPECT_THROW(pool.get_new_blocks(1), Error);
  pool.unpin(0);
  EXPECT_EQ(pool.free_queue_order(), (Ids{0}));
  // A block without a hash cannot be pinned.
  EXPECT_THROW(pool.pin(1), Error);
}

TEST(BlockPool, TtlExpiresIdleCachedBlocksOnly) {
  double now = 1000.0;
  BlockPool pool(4, true, [&] { return now; });
  pool.set_cache_ttl(60);
  pool.get_new_blocks(3);
  pool.cache_full_block(0, fake_hash(1));
  pool.cache_full_block(1, fake_hash(2));
  pool.cache_full_block(2, fake_hash(3));
  pool.pin(2);
  pool.free_blocks(Ids{0, 2});  // 1 stays held
  now += 59;
  EXPECT_EQ(pool.get_cached_block(fake_hash(1)), 0);
  now += 2;  // 61 s idle
  EXPECT_EQ(pool.get_cached_block(fake_hash(1)), std::nullopt);
  EXPECT_EQ(pool.expirations(), 1u);
  EXPECT_FALSE(pool.block(0).hash.has_value());
  EXPECT_EQ(pool.get_cached_block(fake_hash(2)), 1);  // held by a sequence: never expires
  EXPECT_EQ(pool.get_cached_block(fake_hash(3)), 2);  // pinned: never expires
  // The expired block stays where it was in the free queue.
  EXPECT_EQ(pool.free_queue_order(), (Ids{3, 0}));
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenIdle) {
  BlockPool pool(2);
  pool.get_new_blocks(1);
  pool.cache_full_block(0, fake_hash(9));
  EXPECT_FALSE(pool.reset_prefix_cache());
  pool.free_blocks(Ids{0});
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.get_cached_block(fake_hash(9)), std::nullopt);
}

TEST(BlockPool, CachingDisabledNeverMatches) {
  BlockPool pool(2, false);
  pool.get_new_blocks(1);
  EXPECT_FALSE(pool.cache_full_block(0, fake_hash(1)));
  EXPECT_EQ(pool.get_cached_block(fake_hash(1)), std::nullopt);
}

TEST(BlockPool, RejectsBadArguments) {
  EXPECT_THROW(BlockPool(0), Error);
  BlockPool pool(2);
  EXPECT_THROW(pool.block(2), Error);
  EXPECT_THROW(pool.get_new_blocks(3), Error);
  EXPECT_THROW(pool.get_new_blocks(-1), Error);
  EXPECT_THROW(pool.cache_full_block(0, fake_hash(1)), Error);  // idle block
}

TEST(BlockHash, ChainsParentTokensAndExtraKeys) {
  const std::vector<int32_t> a{1, 2, 3, 4}, b{1, 2, 3, 5};
  const BlockHashExtraKeys plain{"", "m"}, salted{"tenant-a", "m"}, other_model{"", "m2"};
  const BlockHash ha = hash_block_tokens(std::nullopt, a, plain);
  EXPECT_EQ(ha, hash_block_tokens(std::nullopt, a, plain));
  EXPECT_NE(ha, hash_block_tokens(std::nullopt, b, plain));
  EXPECT_NE(ha, hash_block_tokens(std::nullopt, a, salted));
  EXPECT_NE(ha, hash_block_tokens(std::nullopt, a, other_model));
  EXPECT_NE(ha, hash_block_tokens(BlockHash{}, a, plain));  // a zero parent is not "no parent"
  // Same block tokens after different prefixes hash differently.
  const std::vector<int32_t> two = {1, 2, 3, 4, 9, 9, 9, 9}, two_b = {1, 2, 3, 5, 9, 9, 9, 9};
  const auto h1 = hash_full_blocks(two, 4, plain), h2 = hash_full_blocks(two_b, 4, plain);
  ASSERT_EQ(h1.size(), 2u);
  EXPECT_EQ(h1[0], ha);
  EXPECT_NE(h1[1], h2[1]);
  EXPECT_EQ(hash_full_blocks(std::vector<int32_t>{1, 2, 3}, 4, plain).size(), 0u);
  // Salt and model strings are length-delimited.
  EXPECT_NE(hash_block_tokens(std::nullopt, a, {"ab", "c"}), hash_block_tokens(std::nullopt, a, {"a", "bc"}));
}
