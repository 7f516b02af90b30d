// Scheduler: exact token budgets, prompt chunking, admission order, prefix hits at admission, and
// preemption of the newest running sequence back to the front of the queue. No model: the "forward"
// is update_after_step, sampling is a push_back.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/scheduler.h"

using namespace kvserve;

namespace {

KVCacheManagerConfig kv_config(int32_t num_blocks, int block_size = 4) {
  KVCacheManagerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.model_id = "sched-test";
  return c;
}

SequenceState seq(SeqId id, int n_prompt, int32_t first_token = 0) {
  SequenceState s;
  s.id = id;
  s.tokens.resize(n_prompt);
  std::iota(s.tokens.begin(), s.tokens.end(), first_token);
  s.num_prompt_tokens = n_prompt;
  return s;
}

// (seq, start, num_tokens) of every chunk, for exact comparisons.
std::vector<std::tuple<SeqId, int64_t, int64_t>> chunks(const SchedulerOutput& out) {
  std::vector<std::tuple<SeqId, int64_t, int64_t>> v;
  for (const auto& c : out.chunks) v.emplace_back(c.seq, c.start, c.num_tokens);
  return v;
}

// Runs the step as the engine would: advance, then append a sampled token to every completed sequence.
void complete_step(Scheduler& s, const SchedulerOutput& out, int32_t token = 7) {
  s.update_after_step(out);
  for (const auto& c : out.chunks)
    if (c.completes_sequence) s.find(c.seq)->tokens.push_back(token);
}

using Chunks = std::vector<std::tuple<SeqId, int64_t, int64_t>>;

}  // namespace

TEST(Scheduler, AdmitsInOrderWithinTokenBudgetAndChunksLongPrompts) {
  KVCacheManager kv(kv_config(64));
  Scheduler s(kv, {.max_num_batched_tokens = 10, .max_num_seqs = 8});
  s.add_waiting(seq(1, 6));
  s.add_waiting(seq(2, 7));
  s.add_waiting(seq(3, 3));

  auto out = s.schedule();  // 6 of seq 1, then 4 of seq 2's 7 (chunked); seq 3 waits
  EXPECT_EQ(chunks(out), (Chunks{{1, 0, 6}, {2, 0, 4}}));
  EXPECT_TRUE(out.chunks[0].completes_sequence);
  EXPECT_FALSE(out.chunks[1].completes_sequence);
  EXPECT_EQ(out.total_tokens, 10);
  EXPECT_EQ(s.running(), (std::vector<SeqId>{1, 2}));
  EXPECT_EQ(s.waiting().size(), 1u);
  complete_step(s, out);

  out = s.schedule();  // decode 1 for seq 1, the last 3 of seq 2, then seq 3 whole (3): 7 of 10
  EXPECT_EQ(chunks(out), (Chunks{{1, 6, 1}, {2, 4, 3}, {3, 0, 3}}));
  EXPECT_EQ(out.total_tokens, 7);
  complete_step(s, out);

  out = s.schedule();  // all three decode
  EXPECT_EQ(chunks(out), (Chunks{{1, 7, 1}, {2, 7, 1}, {3, 3, 1}}));
}

TEST(Scheduler, MaxNumSeqsCapsAdmission) {
  KVCacheManager kv(kv_config(64));
  Scheduler s(kv, {.max_num_batched_tokens = 100, .max_num_seqs = 2});
  for (SeqId id = 1; id <= 3; ++id) s.add_waiting(seq(id, 2, static_cast<int32_t>(id * 100)));
  auto out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{1, 0, 2}, {2, 0, 2}}));
  complete_step(s, out);
  s.finish(1);
  out = s.schedule();  // seq 2 decodes, seq 3 takes the freed seat
  EXPECT_EQ(chunks(out), (Chunks{{2, 2, 1}, {3, 0, 2}}));
}

TEST(Scheduler, PrefixHitStartsAdmissionPastCachedBlocks) {
  KVCacheManager kv(kv_config(64, 4));
  Scheduler s(kv, {.max_num_batched_tokens = 100, .max_num_seqs = 8});
  s.add_waiting(seq(1, 10));
  auto out = s.schedule();
  complete_step(s, out);  // blocks [0,4) and [4,8) of seq 1 are now cached
  s.finish(1);

  s.add_waiting(seq(2, 10));  // same tokens: 8 cached, last 2 computed
  out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{2, 8, 2}}));
  EXPECT_EQ(s.find(2)->num_cached_tokens, 8);
  complete_step(s, out);
  s.add_waiting(seq(3, 8));  // whole prompt cached: capped so the last token is computed (hit = 4)
  out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{2, 10, 1}, {3, 4, 4}}));
  EXPECT_EQ(s.prefix_query_tokens(), 10u + 10u + 8u);
  EXPECT_EQ(s.prefix_hit_tokens(), 8u + 4u);
}

TEST(Scheduler, PreemptsNewestAndRequeuesItAtTheFront) {
  // 6 blocks of 4 tokens. Three sequences of 8 tokens take 2 blocks each; the first one to need a
  // third block preempts the newest (seq 3), which goes before seq 4 in the queue.
  KVCacheManager kv(kv_config(6, 4));
  Scheduler s(kv, {.max_num_batched_tokens = 100, .max_num_seqs = 8, .enable_prefix_caching = false});
  s.add_waiting(seq(1, 8, 0));
  s.add_waiting(seq(2, 8, 100));
  s.add_waiting(seq(3, 8, 200));
  s.add_waiting(seq(4, 2, 300));
  auto out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{1, 0, 8}, {2, 0, 8}, {3, 0, 8}}));  // no block left for seq 4
  complete_step(s, out);

  out = s.schedule();  // seq 1 needs a block: seq 3 (newest) is preempted; seq 2 then fits in it
  EXPECT_EQ(out.preempted, (std::vector<SeqId>{3}));
  EXPECT_EQ(chunks(out), (Chunks{{1, 8, 1}, {2, 8, 1}}));
  EXPECT_EQ(s.running(), (std::vector<SeqId>{1, 2}));
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{3, 4}));
  EXPECT_EQ(s.find(3)->num_computed_tokens, 0);
  EXPECT_EQ(s.find(3)->num_tokens(), 9);  // its sampled token is kept and recomputed
  EXPECT_EQ(s.num_preemptions(), 1u);
  complete_step(s, out);

  s.finish(1);
  out = s.schedule();  // seq 3 comes back first (recomputing all 9 tokens), ahead of seq 4
  EXPECT_EQ(chunks(out), (Chunks{{2, 9, 1}, {3, 0, 9}}));
  EXPECT_TRUE(out.chunks[1].completes_sequence);
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{4}));
}

TEST(Scheduler, StepThatPreemptsAdmitsNothing) {
  KVCacheManager kv(kv_config(4, 4));
  Scheduler s(kv, {.max_num_batched_tokens = 100, .max_num_seqs = 8, .enable_prefix_caching = false});
  s.add_waiting(seq(1, 8, 0));
  s.add_waiting(seq(2, 8, 100));
  auto out = s.schedule();
  complete_step(s, out);
  s.find(2)->tokens.push_back(9);  // seq 2 is further along but still newest
  out = s.schedule();  // seq 1 needs a block: preempts seq 2, then gets its block
  EXPECT_EQ(out.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(chunks(out), (Chunks{{1, 8, 1}}));
  // The step that preempted admits nothing, even though seq 2 would fit in what is left.
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{2}));
}

TEST(Scheduler, FinishFreesBlocksWhereverTheSequenceIs) {
  KVCacheManager kv(kv_config(8, 4));
  Scheduler s(kv, {.max_num_batched_tokens = 4, .max_num_seqs = 8});
  s.add_waiting(seq(1, 6));
  s.add_waiting(seq(2, 6, 50));
  auto out = s.schedule();  // 4 of seq 1's 6
  EXPECT_EQ(chunks(out), (Chunks{{1, 0, 4}}));
  complete_step(s, out);
  s.finish(1);  // mid-prompt
  s.finish(2);  // still waiting
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_TRUE(kv.sequences().empty());
}

TEST(Scheduler, NewestPreemptsItselfWhenItIsTheOneShortOfBlocks) {
  KVCacheManager kv(kv_config(4, 4));
  Scheduler s(kv, {.max_num_batched_tokens = 100, .max_num_seqs = 8, .enable_prefix_caching = false});
  s.add_waiting(seq(1, 7, 0));    // 2 blocks, room for one more token
  s.add_waiting(seq(2, 8, 100));  // 2 full blocks
  auto out = s.schedule();
  complete_step(s, out);
  out = s.schedule();  // seq 1 decodes in place; seq 2 needs a 5th block and is itself the newest
  EXPECT_EQ(out.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(chunks(out), (Chunks{{1, 7, 1}}));
  EXPECT_EQ(s.running(), (std::vector<SeqId>{1}));
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{2}));
  EXPECT_EQ(kv.num_free_blocks(), 2);
}

// LongRoPE on auto (long_rope_after 10): a running sequence that reaches 11 tokens gives its blocks back and
// is recomputed from the front of the queue with the long factors; the prefix cache keys its blocks apart
// from the short ones (no hit on them), and a prompt already past 10 tokens is admitted long.
TEST(Scheduler, SequenceOutgrowingItsShortRopeFactorsIsRecomputedWithTheLongOnes) {
  KVCacheManager kv(kv_config(64));
  Scheduler s(kv, {.max_num_batched_tokens = 100, .max_num_seqs = 8});
  SequenceState a = seq(1, 9);
  a.long_rope_after = 10;
  s.add_waiting(a);
  SequenceState b = seq(2, 12, 50);
  b.long_rope_after = 10;
  s.add_waiting(b);

  auto out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{1, 0, 9}, {2, 0, 12}}));
  EXPECT_FALSE(s.find(1)->long_rope);
  EXPECT_TRUE(s.find(2)->long_rope);
  complete_step(s, out);  // 10 tokens: still short
  out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{1, 9, 1}, {2, 12, 1}}));
  complete_step(s, out);  // 11 tokens: past the original context

  out = s.schedule();  // seq 1 restarts: every token again, its 8 short tokens in full blocks not reused
  EXPECT_EQ(chunks(out), (Chunks{{2, 13, 1}, {1, 0, 11}}));
  EXPECT_TRUE(s.find(1)->long_rope);
  EXPECT_EQ(s.num_rope_restarts(), 1u);
  EXPECT_EQ(s.num_preemptions(), 0u);
  EXPECT_EQ(s.running(), (std::vector<SeqId>{2, 1}));
  EXPECT_EQ(s.find(1)->prefix_cache_key(), "long-rope:");
  complete_step(s, out);
  out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{2, 14, 1}, {1, 11, 1}}));
  EXPECT_EQ(s.num_rope_restarts(), 1u);
  s.finish(1);
  s.finish(2);
  EXPECT_EQ(kv.num_free_blocks(), 64);
}

// Drafts (speculative decoding) go into a step whole with the token before them, or are dropped: when the
// step's budget cannot take them, when the pool has no blocks for them (before anything is preempted), and
// when their sequence is preempted (it would recompute them as verified). They never enter the prefix cache.
TEST(Scheduler, DraftsGoInWholeOrAreDropped) {
  KVCacheManager kv(kv_config(64));
  Scheduler s(kv, {.max_num_batched_tokens = 6, .max_num_seqs = 4});
  s.add_waiting(seq(1, 7));
  auto out = s.schedule();
  ASSERT_EQ(chunks(out), (Chunks{{1, 0, 6}}));
  complete_step(s, out);
  out = s.schedule();  // the prompt's last token
  complete_step(s, out);  // and a sampled token: 8 tokens, 7 computed
  SequenceState* a = s.find(1);
  a->tokens.insert(a->tokens.end(), {20, 21, 22});
  a->num_draft_tokens = 3;
  out = s.schedule();  // the token and its 3 drafts: 4 of the budget's 6
  ASSERT_EQ(chunks(out), (Chunks{{1, 7, 4}}));
  EXPECT_EQ(out.chunks[0].num_draft_tokens, 3);
  EXPECT_TRUE(out.chunks[0].completes_sequence);
  s.update_after_step(out);
  EXPECT_EQ(a->num_computed_tokens, 11);
  // Only the 8 verified tokens are looked up: the block of tokens 8..11 (drafts) is not cached.
  EXPECT_EQ(kv.get_computed_blocks(std::vector<int32_t>(a->tokens.begin(), a->tokens.end()), "").num_tokens, 8);
  // The engine keeps 1 draft: back to 9 computed of 10 tokens.
  a->drop_drafts();
  a->tokens.push_back(20);
  a->tokens.push_back(30);
  kv.truncate(1, 9);
  a->num_computed_tokens = 9;
  // Drafts beyond the step's budget are dropped, the token itself scheduled.
  a->tokens.insert(a->tokens.end(), {40, 41, 42, 43, 44, 45});
  a->num_draft_tokens = 6;
  out = s.schedule();
  EXPECT_EQ(chunks(out), (Chunks{{1, 9, 1}}));
  EXPECT_EQ(out.chunks[0].num_draft_tokens, 0);
  EXPECT_EQ(a->num_tokens(), 10);
  complete_step(s, out);

  // No room for the drafts: they are dropped instead of preempting another sequence.
  KVCacheManager small(kv_config(4));  // 16 tokens
  Scheduler t(small, {.max_num_batched_tokens = 16, .max_num_seqs = 4});
  t.add_waiting(seq(1, 7));
  t.add_waiting(seq(2, 7, 100));
  out = t.schedule();
  complete_step(t, out);  // 8 tokens each, 7 computed: 2 blocks each, all 4 taken
  SequenceState* b = t.find(1);
  b->tokens.insert(b->tokens.end(), {50, 51});
  b->num_draft_tokens = 2;
  out = t.schedule();  // 3 positions would need a third block for sequence 1
  EXPECT_EQ(chunks(out), (Chunks{{1, 7, 1}, {2, 7, 1}}));
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(b->num_draft_tokens, 0);
  complete_step(t, out);

  // A preempted sequence loses its drafts.
  SequenceState* c = t.find(2);
  c->tokens.insert(c->tokens.end(), {60});
  c->num_draft_tokens = 1;
  b->tokens.insert(b->tokens.end(), 8, 70);  // 17 tokens: sequence 1 needs a 5th block
  out = t.schedule();
  ASSERT_FALSE(out.preempted.empty());
  EXPECT_EQ(out.preempted.front(), 2);
  EXPECT_EQ(c->num_draft_tokens, 0);
  EXPECT_EQ(c->num_tokens(), 9);
}
