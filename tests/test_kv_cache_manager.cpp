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

// Speculative tokens that were not accepted: the sequence is cut back, its blocks past the kept tokens go back
// to the pool (tail first), and a cut into a block already in the prefix cache is refused.
TEST(KVCacheManager, TruncateCutsTheTailBackAndKeepsCachedBlocks) {
  KVCacheManager m(config(8));
  const Tokens t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  ASSERT_TRUE(m.allocate_slots(1, 6));
  m.cache_blocks(1, t, 6);  // block 0 full: cached
  ASSERT_TRUE(m.allocate_slots(1, 5));  // 11 tokens: 3 blocks
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1, 2}));
  m.truncate(1, 7);
  EXPECT_EQ(m.num_tokens(1), 7);
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0, 1}));
  EXPECT_EQ(m.num_free_blocks(), 6);
  m.truncate(1, 7);  // nothing to cut
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_THROW(m.truncate(1, 8), Error);  // more than it holds
  EXPECT_THROW(m.truncate(1, 3), Error);  // into the cached block 0
  m.truncate(1, 4);
  EXPECT_EQ(m.block_table(1).ids(), (Ids{0}));
  ASSERT_TRUE(m.allocate_slots(1, 5));  // grows again from there
  EXPECT_EQ(m.num_tokens(1), 9);
  EXPECT_EQ(m.block_table(1).size(), 3u);
  m.free(1);
  EXPECT_EQ(m.num_free_blocks(), 8);
  EXPECT_THROW(m.truncate(1, 0), Error);  // unknown sequence
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
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0], (BlockCopy{1, 2}));
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
  EXPECT_TRUE(r.copies.empty());
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

// A hybrid cache: group 0 full attention, group 1 a sliding window of 32 positions, blocks of 16.
KVCacheManagerConfig hybrid_config(int32_t num_blocks, double ttl = 0) {
  KVCacheManagerConfig c = config(num_blocks, 16);
  c.group_windows = {0, 32};
  c.prefix_cache_ttl_seconds = ttl;
  return c;
}

Tokens counting(int n, int from = 0) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

TEST(KVCacheManager, WindowedGroupReleasesBlocksNoLaterTokenAttendsTo) {
  KVCacheManager m(hybrid_config(20));
  const int32_t null = m.null_block();
  EXPECT_EQ(null, 20);
  ASSERT_TRUE(m.allocate_slots(1, 100));  // 7 blocks in each group
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_EQ(m.num_held_blocks(1), 14);
  const Ids window_blocks = m.block_table(1, 1).ids();
  // The token at 100 attends to [69, 100]: blocks 0-3 (positions 0-63) of the windowed group go, 4 stays.
  ASSERT_TRUE(m.allocate_slots(1, 1));
  EXPECT_EQ(m.block_table(1, 1).ids(),
            (Ids{null, null, null, null, window_blocks[4], window_blocks[5], window_blocks[6]}));
  EXPECT_EQ(m.block_table(1, 0).size(), 7u);  // the full group keeps everything
  EXPECT_EQ(m.num_held_blocks(1), 10);
  EXPECT_EQ(m.num_free_blocks(), 10);
  // 28 more tokens: [101, 129) need block 8 in both groups; the first new token (101) attends from 70.
  ASSERT_TRUE(m.allocate_slots(1, 28));
  EXPECT_EQ(m.block_table(1, 1).size(), 9u);
  EXPECT_EQ(m.num_held_blocks(1), 9 + 5);
  // The next allocation starts at 129, whose window starts at 98: blocks 4 and 5 go.
  ASSERT_TRUE(m.allocate_slots(1, 0));
  EXPECT_EQ(m.num_held_blocks(1), 9 + 3);
  m.free(1);
  EXPECT_EQ(m.num_free_blocks(), 20);
}

// Blocks a windowed group has released stay cached until evicted or expired. A prefix hit needs the full
// group's blocks of the whole prefix, and the windowed group's blocks that the first token computed after
// it attends to; where those are gone, the hit shrinks to the longest prefix that has them.
TEST(KVCacheManager, PrefixHitNeedsOnlyTheWindowsBlocks) {
  double now = 0;
  KVCacheManager m(hybrid_config(40, 20), [&] { return now; });
  const int32_t null = m.null_block();
  const Tokens a = counting(96);
  ASSERT_TRUE(m.allocate_slots(1, 48));
  m.cache_blocks(1, a, 48);
  now = 10;
  ASSERT_TRUE(m.allocate_slots(1, 48));  // starts at 48, whose window starts at 17: block 0 goes (t = 10)
  m.cache_blocks(1, a, 96);
  EXPECT_EQ(m.block_table(1, 1)[0], null);
  const Ids windowed = m.block_table(1, 1).ids();
  now = 20;
  ASSERT_TRUE(m.allocate_slots(1, 1));  // starts at 96, window from 65: blocks 1-3 go (t = 20)
  const Ids full = m.block_table(1, 0).ids();
  EXPECT_EQ(m.block_table(1, 1)[3], null);
  const Ids kept_window{null, null, null, null, windowed[4], windowed[5]};
  now = 30;
  m.free(1);
  now = 35;  // TTL 20: block 0 of the windowed group (idle since 10) has expired, blocks 1-3 (20) have not

  // A prompt of 5 full blocks + 1 token: its token 80 attends from 49, blocks 3 and 4.
  Tokens p = counting(80);
  p.push_back(1000);
  CachedPrefix hit = m.get_computed_blocks(p);
  EXPECT_EQ(hit.num_tokens, 80);
  EXPECT_EQ(hit.block_ids, Ids(full.begin(), full.begin() + 5));
  ASSERT_EQ(hit.other_groups.size(), 1u);
  EXPECT_EQ(hit.other_groups[0], (Ids{null, null, null, windowed[3], windowed[4]}));
  // 6 blocks + 1: token 96 attends from 65, blocks 4 and 5.
  p = counting(96);
  p.push_back(1000);
  hit = m.get_computed_blocks(p);
  EXPECT_EQ(hit.num_tokens, 96);
  EXPECT_EQ(hit.other_groups[0], kept_window);
  // 2 blocks + 1: token 32 attends from 1, blocks 0 and 1; block 0 expired, so no prefix of it works
  // (a hit of 1 block needs block 0 too).
  p = counting(32);
  p.push_back(1000);
  hit = m.get_computed_blocks(p);
  EXPECT_EQ(hit.num_tokens, 0);
  EXPECT_TRUE(hit.block_ids.empty());

  // Admitting from the 6-block hit holds 6 + 2 cached blocks and one new block per group.
  p = counting(96);
  p.push_back(1000);
  hit = m.get_computed_blocks(p);
  ASSERT_TRUE(m.allocate_slots(2, 1, hit));
  EXPECT_EQ(m.num_held_blocks(2), 6 + 2 + 2);
  Ids want_window = kept_window;
  want_window.push_back(m.block_table(2, 1).back());
  EXPECT_EQ(m.block_table(2, 1).ids(), want_window);
  m.free(2);
  EXPECT_EQ(m.num_free_blocks(), 40);
}

TEST(KVCacheManager, CapacityOfAHybridCacheCountsOnlyTheWindowOfWindowedGroups) {
  KVCacheManagerConfig c = hybrid_config(100);
  c.max_chunk_tokens = 64;
  const KVCacheManager m(c);
  // A windowed group holds at most ceil((32 + 64) / 16) + 1 = 7 blocks at once; the full group the rest.
  EXPECT_EQ(m.capacity_tokens(), (100 - 7) * 16);
  // Computed all at once, a sequence holds every block in both groups.
  EXPECT_EQ(m.capacity_tokens_for_chunk(0), 50 * 16);
  // A pool too small for a whole window per group: both groups hold every block.
  c.num_blocks = 10;
  EXPECT_EQ(KVCacheManager(c).capacity_tokens(), 5 * 16);
  // One group: the whole pool, as before.
  EXPECT_EQ(KVCacheManager(config(100, 16)).capacity_tokens(), 100 * 16);
}

// Windowed groups of different windows (Gemma's sliding one beside a streaming window with sinks): each
// holds at most its own window's blocks, as PagedKVCache sizes the pool.
TEST(KVCacheManager, CapacityCountsEachWindowedGroupByItsOwnWindow) {
  KVCacheManagerConfig c = config(16, 16);
  c.group_windows = {32, 48};
  c.group_sinks = {0, 4};
  c.max_chunk_tokens = 64;
  // At most ceil((32 + 64) / 16) + 1 = 7 and ceil((48 + 64) / 16) + 1 + 1 = 9 blocks: 16 hold any length.
  EXPECT_GT(KVCacheManager(c).capacity_tokens(), int64_t{1} << 40);
  // One block fewer: B blocks need min(B, 7) + min(B, 9), so 8 blocks (7 + 8 = 15).
  c.num_blocks = 15;
  EXPECT_EQ(KVCacheManager(c).capacity_tokens(), 8 * 16);
}

// Thousands of random admit / append / fork / free / pin operations on a small pool, checking the
// invariants of DESIGN.md after every one. A shadow copy of each block's "KV" (the tokens written into
// its slots, tagged with the salt and the group) proves every prefix hit returns the right content.
// With several groups (a hybrid cache), windowed groups' released entries must be exactly a prefix of
// their tables, never one a later token could attend to, and a hit must hold every block its window needs.
void run_randomized_operations(const std::vector<int64_t>& windows, uint32_t seed) {
  constexpr int kBlockSize = 4;
  constexpr int32_t kBlocks = 48;
  const int n_groups = windows.empty() ? 1 : static_cast<int>(windows.size());
  const auto window = [&](int g) { return windows.empty() ? int64_t{0} : windows[static_cast<size_t>(g)]; };
  // First logical block a token at `pos` attends to in group g.
  const auto first_needed = [&](int g, int64_t pos) {
    return window(g) == 0 ? int64_t{0} : std::max<int64_t>(0, pos - window(g) + 1) / kBlockSize;
  };
  double now = 0;
  KVCacheManagerConfig cfg = config(kBlocks, kBlockSize);
  cfg.prefix_cache_ttl_seconds = 50;
  cfg.group_windows = windows;
  KVCacheManager m(cfg, [&] { return now; });
  const int32_t null_block = m.null_block();
  std::mt19937 rng(seed);
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
    int group = -1;
  };
  std::vector<std::vector<SlotContent>> kv(kBlocks, std::vector<SlotContent>(kBlockSize));
  struct Seq {
    Tokens tokens;
    int salt = 0;  // index into salts
  };
  std::map<SeqId, Seq> live;
  std::vector<Tokens> pinned_prefixes;
  SeqId next_id = 1;
  int not_now = 0, hits = 0, forks = 0, released = 0;

  // "Computes" tokens [from, to) of seq: writes them into its blocks' slots in every group. A slot of a
  // shared block that already holds data must hold the very same token (shared blocks are never
  // overwritten), and no token lands in a released entry.
  auto compute = [&](SeqId id, int64_t from, int64_t to) {
    const Seq& s = live.at(id);
    for (int g = 0; g < n_groups; ++g) {
      const BlockTable& table = m.block_table(id, g);
      for (int64_t p = from; p < to; ++p) {
        const int32_t b = table[static_cast<size_t>(p / kBlockSize)];
        ASSERT_NE(b, null_block) << "token " << p << " written to a released entry of group " << g;
        SlotContent& slot = kv[b][p % kBlockSize];
        if (m.pool().block(b).ref_count > 1) {
          ASSERT_EQ(slot.token, s.tokens[p]) << "shared block overwritten";
          ASSERT_EQ(slot.salt, s.salt);
          ASSERT_EQ(slot.group, g);
        }
        slot.token = s.tokens[p];
        slot.salt = s.salt;
        slot.group = g;
      }
    }
    m.cache_blocks(id, s.tokens, to);
  };

  auto check_invariants = [&](int step) {
    const BlockPool& pool = m.pool();
    std::vector<int> holders(kBlocks, 0);
    std::vector<std::set<int>> holder_salts(kBlocks);
    for (const auto& [id, s] : live) {
      ASSERT_EQ(m.num_tokens(id), static_cast<int64_t>(s.tokens.size()));
      const auto want_hashes = hash_full_blocks(s.tokens, kBlockSize, {salts[s.salt], "test-model"});
      int64_t held = 0;
      for (int g = 0; g < n_groups; ++g) {
        const BlockTable& table = m.block_table(id, g);
        ASSERT_EQ(table.size(), (s.tokens.size() + kBlockSize - 1) / kBlockSize) << "step " << step;
        // Released entries: a prefix of the table, all before what the next token attends to.
        size_t n_null = 0;
        while (n_null < table.size() && table[n_null] == null_block) ++n_null;
        ASSERT_LE(static_cast<int64_t>(n_null), first_needed(g, static_cast<int64_t>(s.tokens.size())))
            << "group " << g << " step " << step;
        for (size_t i = n_null; i < table.size(); ++i) {
          ASSERT_NE(table[i], null_block) << "a hole in group " << g << " step " << step;
          holders[table[i]]++;
          ++held;
          holder_salts[table[i]].insert(s.salt);
          // A cached block's hash is the chain hash of its holder's tokens under the holder's salt and group.
          const KVBlock& b = pool.block(table[i]);
          if (b.hash) {
            ASSERT_LT(i, want_hashes.size()) << "partial block has a hash, step " << step;
            ASSERT_EQ(*b.hash, group_block_hash(want_hashes[i], g)) << "step " << step;
          }
          for (size_t slot = 0; slot < kBlockSize && i * kBlockSize + slot < s.tokens.size(); ++slot) {
            ASSERT_EQ(kv[table[i]][slot].token, s.tokens[i * kBlockSize + slot]) << "step " << step;
            ASSERT_EQ(kv[table[i]][slot].group, g) << "step " << step;
          }
        }
      }
      ASSERT_EQ(m.num_held_blocks(id), held);
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
      ASSERT_EQ(static_cast<int>(prefix.other_groups.size()), n_groups - 1);
      // The hit's content must be this prompt under this salt, in every block a group keeps.
      for (int g = 0; g < n_groups; ++g) {
        const std::vector<int32_t>& ids = g == 0 ? prefix.block_ids : prefix.other_groups[static_cast<size_t>(g - 1)];
        ASSERT_EQ(ids.size(), prefix.block_ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
          ASSERT_EQ(ids[i] == null_block, static_cast<int64_t>(i) < first_needed(g, prefix.num_tokens))
              << "group " << g << " block " << i << " step " << step;
          if (ids[i] == null_block) continue;
          for (int slot = 0; slot < kBlockSize; ++slot) {
            ASSERT_EQ(kv[ids[i]][slot].token, s.tokens[i * kBlockSize + slot]) << "step " << step;
            ASSERT_EQ(kv[ids[i]][slot].salt, s.salt) << "step " << step;
            ASSERT_EQ(kv[ids[i]][slot].group, g) << "step " << step;
          }
        }
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
      const int64_t held_before = m.num_held_blocks(it->first);
      const int32_t free_before = m.num_free_blocks();
      if (m.allocate_slots(it->first, n)) {
        const int64_t from = static_cast<int64_t>(it->second.tokens.size());
        for (int i = 0; i < n; ++i) it->second.tokens.push_back(static_cast<int32_t>(rng() % 6));
        compute(it->first, from, from + n);
      } else {
        ++not_now;
        // "Not now" still released what the window left behind (blocks other sequences share stay
        // held), and took nothing.
        ASSERT_LE(m.num_held_blocks(it->first), held_before);
        ASSERT_GE(m.num_free_blocks(), free_before);
        ASSERT_LE(m.num_free_blocks() - free_before, held_before - m.num_held_blocks(it->first));
      }
      released += m.num_held_blocks(it->first) < held_before;
    } else if (op < 70) {  // fork (n > 1 sampling)
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      const SeqId child = next_id++;
      ForkResult r = m.fork(it->first, child);
      if (r) {
        ++forks;
        ASSERT_TRUE(r.copies.empty() || static_cast<int>(r.copies.size()) == n_groups);
        for (const BlockCopy& c : r.copies) kv[c.dst] = kv[c.src];
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
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(not_now, 0);  // the pool really ran short
  EXPECT_GT(hits, 50);
  EXPECT_GT(forks, 50);
  if (m.has_windowed_groups()) {
    EXPECT_GT(released, 50);
  }

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

TEST(KVCacheManager, RandomizedOperationsKeepInvariants) { run_randomized_operations({}, 20240611); }

// A hybrid cache: one full-attention group and two sliding-window ones (window 6 positions, block 4).
TEST(KVCacheManager, RandomizedOperationsKeepInvariantsWithWindowedGroups) {
  run_randomized_operations({0, 6, 6}, 20261130);
}

// Every group windowed, with a window shorter than a block.
TEST(KVCacheManager, RandomizedOperationsKeepInvariantsAllWindowed) { run_randomized_operations({3, 3}, 7); }
