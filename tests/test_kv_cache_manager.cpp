// KVCacheManager: slot allocation, "not now" on exhaustion, fork with copy-on-write, free order, and a
// randomized run checking the cache invariants after every operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

using namespace kvserve;

namespace {

using Ids = std::vector<int32_t>;
using Tokens = std::vector<int32_t>;

KVCacheManagerConfig config(int32_t num_blocks, int block_size = 4) {
  KVCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.model_id = "test-model";
  return c;
}

}  // namespace

TEST(KVCacheManager, AllocatesBlocksAsTokensArrive) {
  KVCacheManager m(config(10));
  ASSERT_TRUE(m.allocate_slots(1, 5));
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1}));
  EXPECT_EQ(m.num_tokens(1), 5);
  ASSERT_TRUE(m.allocate_slots(1, 3));  // 8 tokens still fit in 2 blocks
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1}));
  ASSERT_TRUE(m.allocate_slots(1, 1));
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1, 2}));
  ASSERT_TRUE(m.allocate_slots(1, 0));
  EXPECT_EQ(m.num_tokens(1), 9);
  EXPECT_EQ(m.capacity_tokens(), 40);
  EXPECT_DOUBLE_EQ(m.usage(), 0.3);
}

TEST(KVCacheManager, ShortPoolSaysNotNowAndChangesNothing) {
  KVCacheManager m(config(4));
  ASSERT_TRUE(m.allocate_slots(1, 12));  // 3 blocks
  EXPECT_FALSE(m.allocate_slots(2, 5));  // needs 2, 1 free
  EXPECT_FALSE(m.has_sequence(2));
  EXPECT_FALSE(m.allocate_slots(1, 5));  // existing sequence: 17 tokens need 5 blocks
  EXPECT_EQ(m.num_tokens(1), 12);
  EXPECT_EQ(m.block_table(1).size(), 3u);
  EXPECT_EQ(m.num_free_blocks(), 1);
  EXPECT_TRUE(m.allocate_slots(2, 4));
  EXPECT_FALSE(m.allocate_slots(3, 1));
  m.free(1);
  EXPECT_TRUE(m.allocate_slots(3, 1));
  EXPECT_EQ(m.block_table(3).ids(), (Ids{2}));  // tail of seq 1 was freed first
}

TEST(KVCacheManager, FreeReleasesTailFirst) {
  KVCacheManager m(config(6));
  ASSERT_TRUE(m.allocate_slots(1, 12));
  m.free(1);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{3, 4, 5, 2, 1, 0}));
  EXPECT_THROW(m.free(1), Error);
}

TEST(KVCacheManager, ForkSharesFullBlocksAndCopiesPartialTail) {
  KVCacheManager m(config(6));
  const Tokens t{1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(m.allocate_slots(1, 7));
  m.cache_blocks(1, t, 7);
  ForkResult r = m.fork(1, 2);
  ASSERT_TRUE(r);
  ASSERT_TRUE(r.copy.has_value());
  EXPECT_EQ(*r.copy, (BlockCopy{1, 2}));
  EXPECT_EQ(m.block_table(2).ids(), (Ids{0, 2}));
  EXPECT_EQ(m.num_tokens(2), 7);
  EXPECT_EQ(m.pool().block(0).ref_count, 2);
  EXPECT_EQ(m.pool().block(1).ref_count, 1);
  EXPECT_EQ(m.pool().block(2).ref_count, 1);
  // Each continues on its own tail; the child's next block is its own.
  ASSERT_TRUE(m.allocate_slots(2, 2));
  EXPECT_EQ(m.block_table(2).ids(), (Ids{0, 2, 3}));
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1}));
  m.free(1);
  EXPECT_EQ(m.pool().block(0).ref_count, 1);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 1}));
  m.free(2);
  EXPECT_EQ(m.pool().free_queue_order(), (Ids{4, 5, 1, 3, 2, 0}));
}

TEST(KVCacheManager, ForkOfFullTailSharesEverything) {
  KVCacheManager m(config(4));
  ASSERT_TRUE(m.allocate_slots(1, 8));
  ForkResult r = m.fork(1, 2);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r.copy.has_value());
  EXPECT_EQ(m.block_table(2).ids(), (Ids{0, 1}));
  EXPECT_EQ(m.pool().block(1).ref_count, 2);
  EXPECT_THROW(m.fork(1, 2), Error);  // child id taken
}

TEST(KVCacheManager, ForkWithoutABlockForTheCopyIsNotNow) {
  KVCacheManager m(config(2));
  ASSERT_TRUE(m.allocate_slots(1, 5));
  ForkResult r = m.fork(1, 2);
  EXPECT_FALSE(r);
  EXPECT_FALSE(m.has_sequence(2));
  EXPECT_EQ(m.pool().block(0).ref_count, 1);
}

TEST(KVCacheManager, RejectsMisuse) {
  KVCacheManager m(config(4));
  EXPECT_THROW(m.allocate_slots(1, -1), Error);
  EXPECT_THROW(m.block_table(9), Error);
  EXPECT_THROW(m.fork(9, 10), Error);
  KVCacheManagerConfig bad = config(4);
  bad.block_size = 0;
  EXPECT_THROW(KVCacheManager{bad}, Error);
  bad = config(0);
  EXPECT_THROW(KVCacheManager{bad}, Error);
}

// Thousands of random admit / append / fork / free / pin operations on a small pool, checking the
// invariants of DESIGN.md after every one. A shadow copy of each block's "KV" (the tokens written into
// its slots, tagged with the salt) proves every prefix hit returns the right content.
TEST(KVCacheManager, RandomizedOperationsKeepInvariants) {
  constexpr int kBlockSize = 4;
  constexpr int32_t kBlocks = 48;
  double now = 0;
  KVCacheManagerConfig cfg = config(kBlocks, kBlockSize);
  cfg.prefix_cache_ttl_seconds = 50;
  KVCacheManager m(cfg, [&] { return now; });
  std::mt19937 rng(20240611);
  const std::vector<std::string> salts{"", "a", "b"};
  // A few shared "system prompts" so prefixes recur.
  std::vector<Tokens> stems;
  for (int i = 0; i < 4; ++i) {
    Tokens s(static_cast<size_t>(3 + 5 * i));
    for (auto& x : s) x = static_cast<int32_t>(rng() % 6);
    stems.push_back(s);
  }
  // Salts are recorded by index: GCC 12 gives a false -Wrestrict on copying these strings around.
  struct SlotContent {
    int32_t token = -1;
    int salt = -1;
  };
  std::vector<std::vector<SlotContent>> kv(kBlocks, std::vector<SlotContent>(kBlockSize));
  struct Seq {
    Tokens tokens;
    int salt = 0;  // index into salts
  };
  std::map<SeqId, Seq> live;
  std::vector<Tokens> pinned_prefixes;
  SeqId next_id = 1;
  int not_now = 0, hits = 0, forks = 0;

  // "Computes" tokens [from, to) of seq: writes them into its blocks' slots. A slot of a shared block
  // that already holds data must hold the very same token (shared blocks are never overwritten).
  auto compute = [&](SeqId id, int64_t from, int64_t to) {
    const Seq& s = live.at(id);
    const BlockTable& table = m.block_table(id);
    for (int64_t p = from; p < to; ++p) {
      SlotContent& slot = kv[table[p / kBlockSize]][p % kBlockSize];
      if (m.pool().block(table[p / kBlockSize]).ref_count > 1) {
        ASSERT_EQ(slot.token, s.tokens[p]) << "shared block overwritten";
        ASSERT_EQ(slot.salt, s.salt);
      }
      slot.token = s.tokens[p];
      slot.salt = s.salt;
    }
    m.cache_blocks(id, s.tokens, to);
  };

  auto check_invariants = [&](int step) {
    const BlockPool& pool = m.pool();
    std::vector<int> holders(kBlocks, 0);
    std::vector<std::set<int>> holder_salts(kBlocks);
    for (const auto& [id, s] : live) {
      const BlockTable& table = m.block_table(id);
      ASSERT_EQ(m.num_tokens(id), static_cast<int64_t>(s.tokens.size()));
      ASSERT_EQ(table.size(), (s.tokens.size() + kBlockSize - 1) / kBlockSize) << "step " << step;
      const auto want_hashes = hash_full_blocks(s.tokens, kBlockSize, {salts[s.salt], "test-model"});
      for (size_t i = 0; i < table.size(); ++i) {
        holders[table[i]]++;
        holder_salts[table[i]].insert(s.salt);
        // A cached block's hash is the chain hash of its holder's tokens under the holder's salt.
        const KVBlock& b = pool.block(table[i]);
        if (b.hash) {
          ASSERT_LT(i, want_hashes.size()) << "partial block has a hash, step " << step;
          ASSERT_EQ(*b.hash, want_hashes[i]) << "step " << step;
        }
        for (size_t slot = 0; slot < kBlockSize && i * kBlockSize + slot < s.tokens.size(); ++slot)
          ASSERT_EQ(kv[table[i]][slot].token, s.tokens[i * kBlockSize + slot]) << "step " << step;
      }
    }
    int in_queue = 0, used = 0;
    for (int32_t id = 0; id < kBlocks; ++id) {
      const KVBlock& b = pool.block(id);
      ASSERT_EQ(b.ref_count, holders[id]) << "block " << id << " step " << step;
      ASSERT_LE(holder_salts[id].size(), 1u) << "block " << id << " shared across salts, step " << step;
      ASSERT_EQ(b.in_free_queue, b.ref_count == 0 && !b.pinned) << "block " << id << " step " << step;
      in_queue += b.in_free_queue;
      used += !b.in_free_queue;
    }
    ASSERT_EQ(in_queue, pool.num_free_blocks());
    ASSERT_EQ(in_queue + used, kBlocks);
    ASSERT_EQ(static_cast<int>(pool.free_queue_order().size()), in_queue);
  };

  for (int step = 0; step < 4000; ++step) {
    now += 0.1;
    const int op = static_cast<int>(rng() % 100);
    if (op < 30 || live.empty()) {  // admit a request
      Seq s;
      s.salt = static_cast<int>(rng() % salts.size());
      s.tokens = stems[rng() % stems.size()];
      const int tail = static_cast<int>(rng() % 10);
      for (int i = 0; i < tail; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % 6));
      if (s.tokens.empty()) s.tokens.push_back(1);
      const CachedPrefix prefix = m.get_computed_blocks(s.tokens, salts[s.salt]);
      ASSERT_LT(prefix.num_tokens, static_cast<int64_t>(s.tokens.size()));
      // The hit's content must be this prompt under this salt.
      for (size_t i = 0; i < prefix.block_ids.size(); ++i)
        for (int slot = 0; slot < kBlockSize; ++slot) {
          ASSERT_EQ(kv[prefix.block_ids[i]][slot].token, s.tokens[i * kBlockSize + slot]) << "step " << step;
          ASSERT_EQ(kv[prefix.block_ids[i]][slot].salt, s.salt) << "step " << step;
        }
      const SeqId id = next_id++;
      if (!m.allocate_slots(id, static_cast<int64_t>(s.tokens.size()) - prefix.num_tokens, prefix, salts[s.salt])) {
        ++not_now;
      } else {
        hits += !prefix.block_ids.empty();
        const int64_t n = static_cast<int64_t>(s.tokens.size());
        live.emplace(id, std::move(s));
        compute(id, prefix.num_tokens, n);
      }
    } else if (op < 60) {  // decode a few tokens
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      const int n = 1 + static_cast<int>(rng() % 3);
      if (m.allocate_slots(it->first, n)) {
        const int64_t from = static_cast<int64_t>(it->second.tokens.size());
        for (int i = 0; i < n; ++i) it->second.tokens.push_back(static_cast<int32_t>(rng() % 6));
        compute(it->first, from, from + n);
      } else {
        ++not_now;
      }
    } else if (op < 70) {  // fork (n > 1 sampling)
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      const SeqId child = next_id++;
      ForkResult r = m.fork(it->first, child);
      if (r) {
        ++forks;
        if (r.copy) kv[r.copy->dst] = kv[r.copy->src];
        live.emplace(child, it->second);
      } else {
        ++not_now;
      }
    } else if (op < 95) {  // finish (or preempt) a request
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      m.free(it->first);
      live.erase(it);
    } else if (op < 98) {  // pin a stem's prefix
      const Tokens& stem = stems[rng() % stems.size()];
      if (m.pin_prefix(stem) > 0) pinned_prefixes.push_back(stem);
    } else if (!pinned_prefixes.empty()) {
      m.unpin_prefix(pinned_prefixes.back());
      pinned_prefixes.pop_back();
    }
    if (step % 500 == 0) now += 60;  // let idle cached blocks expire now and then
    check_invariants(step);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(not_now, 0);  // the pool really ran short
  EXPECT_GT(hits, 50);
  EXPECT_GT(forks, 50);

  // Everything ends: all blocks free or cached.
  for (const auto& [id, s] : live) m.free(id);
  live.clear();
  for (const Tokens& p : pinned_prefixes) m.unpin_prefix(p);
  for (int32_t id = 0; id < kBlocks; ++id) {
    // Pinned blocks whose prefix was partly evicted before pinning are only reachable by id.
    if (m.pool().block(id).pinned) m.pool().unpin(id);
  }
  check_invariants(-1);
  EXPECT_EQ(m.num_free_blocks(), kBlocks);
  for (int32_t id = 0; id < kBlocks; ++id) EXPECT_EQ(m.pool().block(id).ref_count, 0);
}
