#pragma once
// StreamingLLM's attention sinks (Xiao et al. 2023) beside a sliding window: a token at position p attends
// to the first `sinks` positions of its sequence and to its window [p - window + 1, p], and the kept
// tokens take the positions 0, 1, ... in cache order, so the model never sees a position past
// sinks + window - 1 however long the sequence runs.
//
// The cache keeps keys rotated at their text positions, and RoPE scores depend only on the difference of
// the query's and the key's positions. Within the window that difference is the same in text and in cache
// order, so the window's attention is the plain sliding-window kernel; only the sinks see a different
// distance, which a second query rotated at position min(p, sinks + window - 1) gives them. The window is
// attended first (paged_attention with `lse`), then the sink keys are folded into its rows here: no key
// is rewritten, so blocks shared through the prefix cache stay as they are.
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/cpu/paged_attention.h"

namespace kvserve {

// a: the window's attention of one sequence's chunk, already run, with a.window > 0 and a.lse set (its
// rows stay untouched where the window reaches back to the sinks). q_sink: the query rows rotated for the
// sinks, laid out as a.q. Token t's out row becomes the softmax over positions [0, min(sinks, p - window +
// 1)) scored with q_sink and its window scored with q.
void merge_attention_sinks(const PagedAttentionArgs& a, const float* q_sink, int64_t sinks,
                           ThreadPool& pool = ThreadPool::global());

// The same for token t's query heads of KV head kvh only, on this thread (the batch-1 decode region folds
// each KV head where it merged it).
void fold_attention_sinks(const PagedAttentionArgs& a, const float* q_sink, int64_t sinks, int64_t t, int kvh);

// The position a token at `pos` takes in the cache's order (its query's rotation for the sinks).
inline int64_t sink_query_position(int64_t pos, int64_t sinks, int64_t window) {
  return pos < sinks + window ? pos : sinks + window - 1;
}

}  // namespace kvserve
