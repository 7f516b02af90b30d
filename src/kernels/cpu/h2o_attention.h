#pragma once
// Attention with H2O eviction (engine/heavy_hitter_eviction.h) for one layer. A sequence's tokens of the
// layer live in `budget` slots per KV head (the first budget / block_size blocks of its table, as the
// paged layout): while it is shorter, the token at position p sits in slot p; after that each new token
// takes the slot of the token evicted for it, which differs from head to head. Every slot carries an
// H2OSlot record: the position it holds and the attention it has drawn.
//
// The decisions follow the token sequence alone: token by token, whatever the chunking of the prefill or
// the batch around it, the new token (1) evicts, when every slot is taken, the slot outside the `recent`
// latest positions with the least accumulated attention (the lower position on a tie), (2) is written to
// its slot, (3) attends to every kept token and itself, and (4) adds its attention weights (summed over
// the query heads of the KV head) to the slots' scores. So a recomputed (preempted) sequence rebuilds the
// very same cache, and heavy = 0 is a sliding window of `recent` tokens.
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve {

struct H2OSlot {
  float score = 0.0f;  // attention drawn since the token was cached
  int32_t pos = -1;    // the token's position in the sequence
};

struct H2OAttentionArgs {
  // The chunk's rows as the projections give them (after RoPE and any rotation of the cache dtype):
  // q [n_tokens][n_heads][head_dim], k and v [n_tokens][n_kv_heads][head_dim]; out as q.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int n_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t pos0 = 0;  // position of the chunk's first token (the sequence's tokens before it are cached)
  // The sequence's blocks: at least ceil(min(pos0 + n_tokens, budget) / block_size) of them.
  const int32_t* block_table = nullptr;
  int block_size = 16;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  KVElemType kv_type = KVElemType::F32;
  int64_t block_stride = 0;  // elements per block of k_cache / v_cache
  H2OSlot* slots = nullptr;  // the layer's records, [block][kv_head][slot] (block_size per head)
  int64_t heavy = 0;
  int64_t recent = 1;  // >= 1: the new token is always kept
  float scale = 1.0f;
  float softcap = 0.0f;  // Gemma 2's attention logit soft-capping (0: none)
};

// Runs the chunk for KV head kvh: stores its K/V rows, and writes the out rows of its query heads.
void h2o_attention_head(const H2OAttentionArgs& a, int kvh);

// Every sequence's chunk, one (sequence, KV head) per task on the pool.
void h2o_attention_batch(std::span<const H2OAttentionArgs> batch, ThreadPool& pool = ThreadPool::global());

// The slot a token at `pos` takes among a KV head's `budget` slots (`slots` as laid out above, its
// records by slot index through `at`): exposed for the tests.
int64_t h2o_choose_slot(int64_t pos, int64_t heavy, int64_t recent, const H2OSlot* const* by_slot);

}  // namespace kvserve
