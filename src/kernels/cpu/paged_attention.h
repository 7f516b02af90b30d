#pragma once
// Attention of a chunk of query tokens of one sequence against its K/V in the paged cache, read through
// the sequence's block table with a flash-style softmax (online across 128-position partitions; no full
// score matrix).
//
// Cache layout of one layer: block b starts at k_cache + b * block_stride (same for V), and inside a
// block the layout is [kv_head][slot][head_dim] (block_stride = n_kv_heads * block_size * head_dim), so
// a query group reads its KV head's slots contiguously.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/kv_elem.h"

namespace kvserve {

struct PagedAttentionArgs {
  const float* q = nullptr;  // [n_tokens][n_heads][head_dim]
  float* out = nullptr;      // [n_tokens][n_heads][head_dim]
  int n_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h uses kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  const int32_t* block_table = nullptr;  // logical block -> physical block
  int block_size = 16;
  int64_t pos0 = 0;  // query token i sits at position pos0 + i and attends to positions [0, pos0 + i]
  // > 0: a sliding-window layer, where token i attends only to the last `window` positions,
  // [pos0 + i - window + 1, pos0 + i] (Mistral, Gemma's local layers; llama.cpp's LLAMA_SWA_TYPE_STANDARD).
  int64_t window = 0;
  // > 0: chunked attention (Llama 4; llama.cpp's LLAMA_SWA_TYPE_CHUNKED): token i attends only to the positions
  // of its own chunk, [p - p % chunk, p] with p = pos0 + i (with a window too, the later of the two starts).
  int64_t chunk = 0;
  const void* k_cache = nullptr;  // elements of kv_type
  const void* v_cache = nullptr;
  KVElemType kv_type = KVElemType::F32;
  int64_t block_stride = 0;  // elements per block
  float scale = 1.0f;        // usually 1/sqrt(head_dim)
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) before the softmax (Gemma 2's attention
  // logit soft-capping, as llama.cpp: tanh(s * (1 / softcap)) * softcap).
  float softcap = 0.0f;
  // Not null: per (token, query head), [n_tokens][n_heads], the log of the softmax's denominator, max score
  // + ln(sum of exp(score - max)), so a caller can fold more keys into `out` (merge_attention_sinks).
  float* lse = nullptr;
};

// Fast path (AVX2 when available), parallel over (token, kv head) pairs.
void paged_attention(const PagedAttentionArgs& a, ThreadPool& pool = ThreadPool::global());
// Several sequences' chunks in one parallel pass (a batched step): the work items of all of them are
// spread over the pool at once instead of one dispatch per sequence. Same results as calling
// paged_attention on each.
void paged_attention_batch(std::span<const PagedAttentionArgs> batch, ThreadPool& pool = ThreadPool::global());
// Scalar reference with the same online-softmax algorithm.
void paged_attention_ref(const PagedAttentionArgs& a);

}  // namespace kvserve
