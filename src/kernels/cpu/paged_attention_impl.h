#pragma once
// Internal to the paged attention kernel: the per-range workers that paged_attention() dispatches to.
// The AVX2 worker lives in its own translation unit (compiled with -mavx2 -mfma) so nothing in the
// portable file can pick up AVX2 instructions by accident.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "kernels/cpu/paged_attention.h"

namespace kvserve::detail {

// The AVX2 worker splits each token's context into partitions of partition_blocks(block_size) blocks: one
// softmax over each partition's scores, and partitions folded left to right, so one token's
// partitions can also be computed on different threads (decode with few KV heads) and merged after,
// with the same arithmetic.
inline constexpr int64_t kPartitionTokens = 128;
inline int64_t partition_blocks(int block_size) { return std::max<int64_t>(1, kPartitionTokens / block_size); }
// Partitions of token t's context (positions [0, pos0 + t]).
inline int64_t partition_count(const PagedAttentionArgs& a, int64_t t) {
  return (a.pos0 + t) / a.block_size / partition_blocks(a.block_size) + 1;
}
// Gemma 2's attention logit soft-capping of one scaled score, as llama.cpp computes it.
inline float soft_cap(float s, float cap) { return std::tanh(s * (1.0f / cap)) * cap; }
// First position token t attends to: 0, or the start of its sliding window or of its chunk. Partitions before
// the one holding it are empty (sum 0, see fold_partition) and read nothing.
inline int64_t first_attended(const PagedAttentionArgs& a, int64_t t) {
  const int64_t p = a.pos0 + t;
  const int64_t in_window = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
  return a.chunk > 0 ? std::max(in_window, p - p % a.chunk) : in_window;
}

// Computes the outputs of work items [begin, end), item = token * n_kv_heads + kv_head: every query
// head of that KV head's group for that token. Arguments are already validated.
void paged_attention_items_avx2(const PagedAttentionArgs& a, int64_t begin, int64_t end);

// Split path: partitions [part_begin, part_end) of token t's context for KV head kvh, each written to
// `partials` as [part - part_begin][group][head_dim + 2] (output row normalized by its own sum, max, sum),
// the same bits whether computed in one call or one at a time (one call streams the next partition's K
// in while finishing the last one); then the merge folds token t's partition_count partials
// ([part][group][head_dim + 2]) and writes its outputs.
void paged_attention_partition_avx2(const PagedAttentionArgs& a, int64_t t, int kvh, int64_t part_begin,
                                    int64_t part_end, float* partials);
void paged_attention_merge_avx2(const PagedAttentionArgs& a, int64_t t, int kvh, const float* partials);
// paged_attention_partition for KV heads [kvh, kvh + n_kvh) of token t over the same partitions, head
// kvh + i's partials head_stride floats after head kvh's: the blocks are read in address order, every
// head of a block together (a block holds its heads side by side). The same bits as one call per head.
// `after`, if not null, is the partition the caller reads next on this thread: its K rows stream in during
// this call's last values pass, as the next partition's do inside a call.
struct NextPartition {
  int64_t part;
  int kvh, n_kvh;  // KV heads [kvh, kvh + n_kvh)
};
void paged_attention_partition_heads_avx2(const PagedAttentionArgs& a, int64_t t, int kvh, int n_kvh,
                                          int64_t part_begin, int64_t part_end, float* partials, size_t head_stride,
                                          const NextPartition* after);

// The same in 512-bit registers (paged_attention_zmm_avx512vnni.cpp), bit-identical to the AVX2
// ones; only where cpu_prefers_zmm().
void paged_attention_items_avx512(const PagedAttentionArgs& a, int64_t begin, int64_t end);
void paged_attention_partition_avx512(const PagedAttentionArgs& a, int64_t t, int kvh, int64_t part_begin,
                                      int64_t part_end, float* partials);
void paged_attention_merge_avx512(const PagedAttentionArgs& a, int64_t t, int kvh, const float* partials);
void paged_attention_partition_heads_avx512(const PagedAttentionArgs& a, int64_t t, int kvh, int n_kvh,
                                            int64_t part_begin, int64_t part_end, float* partials, size_t head_stride,
                                            const NextPartition* after);

// Runs of 64-byte lines asked for into L2 a few at a time (prefetch_stream_step in the SIMD worker, per_slot
// lines at each slot a kernel walks), so coming reads overlap the math instead of following it. Two
// streams use it:
// - The next sequence's K and V blocks while a thread scores the current one's (a batched decode step,
//   paged_attention.cpp), stepped wherever RowPrefetch::slot is: whole blocks (all KV heads: 16 KiB of K
//   at 1B shapes) in order, which the memory serves much faster than one head's 2 KiB pieces across
//   blocks. Thread-local (one stream per thread, set for one sequence's items); its fields stay zero (no
//   stream) everywhere else. local-exec: the library is linked into executables only, and the
//   initial-exec access GCC emits inside the AVX-512 loops could not be relaxed by the linker.
// - The next partition's K rows during a partition's values pass (attend_token_group).
struct LinePrefetchStream {
  const char* const* runs;  // run starts, in order
  int64_t run_lines;        // 64-byte lines per run
  int64_t n_lines;          // lines in all: 0 = no stream
  int64_t next;             // next line to ask for
  int64_t per_slot;
  // `next` as (run, line within it), kept in step with it: the step's address then needs no division (a
  // 64-bit idiv a line took ~45 % of the values pass's samples, cache hot).
  int64_t next_run;
  int64_t next_in_run;
};
// The stream's next per_slot lines (fewer at its end), each passed to ask(address) in order.
template <typename Ask>
inline void step_line_stream(LinePrefetchStream& s, Ask&& ask) {
  const int64_t end = std::min(s.n_lines, s.next + s.per_slot);
  if (s.next >= end) return;
  int64_t run = s.next_run, in_run = s.next_in_run;
  for (int64_t line = s.next; line < end; ++line) {
    ask(s.runs[run] + in_run * 64);
    if (++in_run == s.run_lines) {
      in_run = 0;
      ++run;
    }
  }
  s.next = end;
  s.next_run = run;
  s.next_in_run = in_run;
}
extern __thread LinePrefetchStream t_next_sequence __attribute__((tls_model("local-exec")));
// Whether a walk over whole blocks (every KV head of each) asks for the K rows of a block that follows
// its predecessor in memory (a request's blocks allocated in a row), as it does for any other block. On
// Zen 4 (2026-11-29) it did not pay: the core's stream prefetcher was already fetching that block, and the
// prefetches took the miss buffers the V rows' hints needed (SmolLM2 batch-1 decode after 512 positions,
// attention 4-10 % faster without them, the step 1.5-5 %). On Zen 5 (2026-12-05) the opposite. SmolLM2
// batch-1 decode after 512 positions, alternating runs, attention us a step per thread without -> with:
// 485-535 -> 422-464 with the two vCPUs on one CCD (6 rounds), 450-550 -> 355-470 on two CCDs (4 rounds);
// after 2048 positions 1720-2150 -> 1590-1690. The step's tokens/s, one binary and this switch, one CCD:
// 1.025x (0.976-1.039, 8 rounds). Batched decode (16 sequences) SmolLM2 ~1.02x, 1B-shaped Q4_0 within
// noise. So Zen 4 (AMD family 0x19) skips them and other cores ask; KVSERVE_ATTN_CONTIG_K_PREFETCH=0|1
// overrides, for A/B runs.
bool prefetches_contiguous_k();
// Whether paged_attention_batch takes `batch` sequence by sequence with that stream (on the SIMD worker,
// with `threads` threads): a decode step (one token each) of enough sequences, unless
// KVSERVE_SEQ_PREFETCH=0.
bool attends_by_sequence(std::span<const PagedAttentionArgs> batch, int threads);

// The SIMD worker paged_attention() runs on this CPU (needs AVX2): the 512-bit one where
// cpu_prefers_zmm(), else the AVX2 one.
struct SimdWorker {
  void (*items)(const PagedAttentionArgs& a, int64_t begin, int64_t end);
  void (*partition)(const PagedAttentionArgs& a, int64_t t, int kvh, int64_t part_begin, int64_t part_end,
                    float* partials);
  void (*merge)(const PagedAttentionArgs& a, int64_t t, int kvh, const float* partials);
  void (*partition_heads)(const PagedAttentionArgs& a, int64_t t, int kvh, int n_kvh, int64_t part_begin,
                          int64_t part_end, float* partials, size_t head_stride, const NextPartition* after);
};
const SimdWorker& simd_worker();
// The worker paged_attention() uses now: simd_worker(), or nullptr where it takes the portable path (no
// AVX2, or KVSERVE_NO_SIMD=1).
const SimdWorker* simd_worker_in_use();
// Partition partials' floats for one (token, KV head, partition): [group][head_dim + 2].
inline size_t partition_partial_floats(const PagedAttentionArgs& a) {
  return static_cast<size_t>(a.n_heads / a.n_kv_heads) * (static_cast<size_t>(a.head_dim) + 2);
}

// One token's (token 0's) attention units [first, last): unit u is (partition u / n_kv_heads, KV head u %
// n_kv_heads), partition-major, which is the cache's address order since a block holds its KV heads side
// by side. Walked in as few partition_heads calls as possible, each over a run of partitions that take
// the same heads, so the next partition's K rows stream in while one finishes. Unit (p, h)'s partials
// go to partials + (h * n_parts + p) * partition_partial_floats(a): each KV head's partitions in a row,
// as merge reads them. The batch-1 decode step splits the units over its threads and calls this with
// each thread's share (ModelRunner::forward_single_token; bench_paged_attention's region_cold too).
void attend_decode_units(const SimdWorker& w, const PagedAttentionArgs& a, int64_t first, int64_t last,
                         float* partials);

// The AVX2 worker's scores (for tests): scores[h * stride + s] = q_h . K row (row0 + s) * scale for h <
// n_heads (query rows hd apart) and s < n; hd must be a multiple of 8.
void attention_block_scores_avx2(const float* q, int n_heads, int hd, const void* k_cache, KVElemType type,
                                 int64_t row0, int n, float scale, float* scores, int stride);

// H2O's attention (kernels/cpu/h2o_attention.h) of one token's query heads of one KV head (group rows hd
// apart from q) over its n kept slots, block b's rows starting at K/V row block_row0[b]: the group's
// output rows into out, and drawn[s] += the slot's weight summed over the group's softmaxes. scores:
// h2o_attend_scratch(group, n, block_size) floats. hd % 8 == 0.
inline size_t h2o_attend_scratch(int group, int64_t n, int block_size) {
  return static_cast<size_t>(group) * static_cast<size_t>((n + block_size - 1) / block_size * block_size + 16);
}
void h2o_attend_avx2(const float* q, int group, int hd, const void* k_cache, const void* v_cache, KVElemType type,
                     const int64_t* block_row0, int block_size, int64_t n, float scale, float softcap, float* scores,
                     float* out, float* drawn);
void h2o_attend_avx512(const float* q, int group, int hd, const void* k_cache, const void* v_cache, KVElemType type,
                       const int64_t* block_row0, int block_size, int64_t n, float scale, float softcap, float* scores,
                       float* out, float* drawn);

// The AVX2 worker's softmax exponential on one value (for tests): e^x for x <= 0.
float exp_nonpositive_avx2(float x);

// The 512-bit worker's scores and exponential, as the two above.
void attention_block_scores_avx512(const float* q, int n_heads, int hd, const void* k_cache, KVElemType type,
                                   int64_t row0, int n, float scale, float* scores, int stride);
float exp_nonpositive_avx512(float x);

}  // namespace kvserve::detail
