#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/paged_attention_impl.h"

namespace kvserve {

namespace detail {
__thread LinePrefetchStream t_next_sequence;
}  // namespace detail

namespace {

void validate(const PagedAttentionArgs& a) {
  if (a.n_tokens < 0) fail("paged_attention: n_tokens {} is negative", a.n_tokens);
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.head_dim <= 0)
    fail("paged_attention: bad shape n_heads={} n_kv_heads={} head_dim={}", a.n_heads, a.n_kv_heads, a.head_dim);
  if (a.n_heads % a.n_kv_heads != 0)
    fail("paged_attention: n_heads {} is not a multiple of n_kv_heads {}", a.n_heads, a.n_kv_heads);
  if (a.block_size <= 0) fail("paged_attention: block_size {} must be positive", a.block_size);
  if (a.pos0 < 0) fail("paged_attention: pos0 {} is negative", a.pos0);
  if (a.window < 0) fail("paged_attention: window {} is negative", a.window);
  if (a.chunk < 0) fail("paged_attention: chunk {} is negative", a.chunk);
  if (!(a.softcap >= 0) || !std::isfinite(a.softcap)) fail("paged_attention: softcap {} is not a non-negative number", a.softcap);
  const int64_t min_stride = int64_t{a.n_kv_heads} * a.block_size * a.head_dim;
  if (a.block_stride % a.head_dim != 0)
    fail("paged_attention: block_stride {} is not a multiple of head_dim {}", a.block_stride, a.head_dim);
  if (kv_elem_is_block_type(a.kv_type) && a.head_dim % kKVQuantGroup != 0)
    fail("paged_attention: an {} cache needs head_dim a multiple of {}, got {}", kv_elem_name(a.kv_type),
         kKVQuantGroup, a.head_dim);
  if (a.block_stride < min_stride)
    fail("paged_attention: block_stride {} is smaller than n_kv_heads*block_size*head_dim = {}", a.block_stride,
         min_stride);
  if (a.n_tokens > 0 && (!a.q || !a.out || !a.block_table || !a.k_cache || !a.v_cache))
    fail("paged_attention: null pointer argument");
}

// Portable worker, also the body of the reference. One item = (token, kv head): the KV head's slots of
// each block are read once and serve every query head of its group. Softmax is online per block: the
// block's scores are computed, the running max moves once, and the accumulator is rescaled once.
// Row `index` (hd elements) of a cache array as f32: the row itself for f32, else widened into `tmp`.
const float* load_row(const void* base, KVElemType type, int64_t index, int hd, float* tmp) {
  const int64_t off = index * hd;
  if (type == KVElemType::F32) return static_cast<const float*>(base) + off;
  decode_kv_row(type, static_cast<const char*>(base) + kv_bytes(type, off), hd, tmp);
  return tmp;
}

void attend_items_scalar(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int bs = a.block_size;
  // Scratch per thread: scores [group][block_size], accumulators [group][head_dim], max and sum per head,
  // and one widened K or V row.
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(group) * (bs + hd + 2) + hd);
  float* scores = scratch.data();
  float* acc = scores + static_cast<size_t>(group) * bs;
  float* run_max = acc + static_cast<size_t>(group) * hd;
  float* run_sum = run_max + group;
  float* row = run_sum + group;

  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / a.n_kv_heads;
    const int kvh = static_cast<int>(item % a.n_kv_heads);
    const int64_t last_pos = a.pos0 + t;  // causal: attends to [first_pos, last_pos]
    const int64_t first_pos = detail::first_attended(a, t);
    const float* q = a.q + (t * a.n_heads + int64_t{kvh} * group) * hd;
    std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.0f);
    std::fill(run_max, run_max + group, -std::numeric_limits<float>::infinity());
    std::fill(run_sum, run_sum + group, 0.0f);

    const int64_t n_blocks = last_pos / bs + 1;
    for (int64_t lb = first_pos / bs; lb < n_blocks; ++lb) {
      const int64_t phys = a.block_table[lb];
      // Rows are head_dim elements: the block's first attended row of this KV head, in rows; slots before
      // a sliding window's start are left out.
      const int64_t skip = std::max<int64_t>(0, first_pos - lb * bs);
      const int64_t row0 = (phys * a.block_stride + int64_t{kvh} * bs * hd) / hd + skip;
      const int n_valid = static_cast<int>(std::min<int64_t>(bs, last_pos + 1 - lb * bs) - skip);

      for (int s = 0; s < n_valid; ++s) {
        const float* k = load_row(a.k_cache, a.kv_type, row0 + s, hd, row);
        for (int h = 0; h < group; ++h) {
          const float* qh = q + static_cast<size_t>(h) * hd;
          float dot = 0.0f;
          for (int d = 0; d < hd; ++d) dot += qh[d] * k[d];
          scores[h * bs + s] = a.softcap > 0 ? detail::soft_cap(dot * a.scale, a.softcap) : dot * a.scale;
        }
      }
      for (int h = 0; h < group; ++h) {
        float* sc = scores + h * bs;
        const float block_max = *std::max_element(sc, sc + n_valid);
        const float new_max = std::max(run_max[h], block_max);
        const float correction = std::exp(run_max[h] - new_max);  // 0 on the first block (-inf)
        float* acc_h = acc + static_cast<size_t>(h) * hd;
        if (correction != 1.0f) {
          for (int d = 0; d < hd; ++d) acc_h[d] *= correction;
        }
        float sum = run_sum[h] * correction;
        for (int s = 0; s < n_valid; ++s) {
          sc[s] = std::exp(sc[s] - new_max);
          sum += sc[s];
        }
        run_sum[h] = sum;
        run_max[h] = new_max;
      }
      for (int s = 0; s < n_valid; ++s) {
        const float* v = load_row(a.v_cache, a.kv_type, row0 + s, hd, row);
        for (int h = 0; h < group; ++h) {
          const float p = scores[h * bs + s];
          float* acc_h = acc + static_cast<size_t>(h) * hd;
          for (int d = 0; d < hd; ++d) acc_h[d] += p * v[d];
        }
      }
    }
    for (int h = 0; h < group; ++h) {
      float* o = a.out + (t * a.n_heads + int64_t{kvh} * group + h) * hd;
      const float inv = 1.0f / run_sum[h];  // run_sum >= 1: the max score contributes exp(0)
      for (int d = 0; d < hd; ++d) o[d] = acc[static_cast<size_t>(h) * hd + d] * inv;
      if (a.lse != nullptr) a.lse[t * a.n_heads + int64_t{kvh} * group + h] = run_max[h] + std::log(run_sum[h]);
    }
  }
}

bool use_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  if (!cpu_has_avx2_fma_f16c()) return false;
  // Read every call (cheap next to the kernel) so tests and benchmarks can flip it at run time.
  const char* no_simd = std::getenv("KVSERVE_NO_SIMD");
  return !(no_simd && std::strcmp(no_simd, "1") == 0);
#else
  return false;
#endif
}

// Fewer (token, KV head) items than this per thread leave threads idle (3 KV heads on 2 threads: 2/1):
// then each item's context partitions become the work units instead.
constexpr int64_t kMinItemsPerThread = 4;

// The split path: every (sequence, token, partition, KV head) is a unit, computed in one parallel pass
// into a partials buffer; then each (sequence, token, KV head) folds its partitions.
// Units go partition by partition with the KV heads inside, which is address order (a block holds its
// heads side by side), and each thread walks a contiguous share of them: one region of the cache per
// thread. Handing out small pieces in turn instead (parallel_for_dynamic), the two threads' reads
// interleaved across the cache, ran 1.1-1.15x slower on a cold SmolLM2-shaped cache.
void attend_split(const detail::SimdWorker& worker, std::span<const PagedAttentionArgs> batch, ThreadPool& pool) {
  struct Item {  // one (sequence, token); partials [kv_head][part][group][head_dim + 2]
    size_t seq;
    int64_t t;
    size_t offset;       // floats into the partials buffer
    size_t head_stride;  // floats between two KV heads' partials
  };
  struct Unit {
    uint32_t item;
    int32_t kvh;
    int64_t part;
  };
  struct Merge {
    uint32_t item;
    int32_t kvh;
  };
  // Reused across calls (a decode step makes one per layer); the lambdas below see them through these
  // references, never through the thread_local names, which on a pool worker would mean its own copies.
  thread_local std::vector<Item> items_storage;
  thread_local std::vector<Unit> units_storage;
  thread_local std::vector<Merge> merges_storage;
  thread_local std::vector<float> partials_storage;
  std::vector<Item>& items = items_storage;
  std::vector<Unit>& units = units_storage;
  std::vector<Merge>& merges = merges_storage;
  std::vector<float>& partials = partials_storage;
  items.clear();
  units.clear();
  merges.clear();
  size_t floats = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const PagedAttentionArgs& a = batch[s];
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int64_t n_parts = detail::partition_count(a, t);
      const auto item = static_cast<uint32_t>(items.size());
      const size_t head_stride = static_cast<size_t>(n_parts) * detail::partition_partial_floats(a);
      for (int64_t p = 0; p < n_parts; ++p)
        for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) units.push_back({item, kvh, p});
      for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) merges.push_back({item, kvh});
      items.push_back({s, t, floats, head_stride});
      floats += static_cast<size_t>(a.n_kv_heads) * head_stride;
    }
  }
  partials.resize(floats);
  pool.parallel_for_balanced(
      static_cast<int64_t>(units.size()),
      [&](int64_t b, int64_t e) {
        for (int64_t u = b; u < e; ++u) {
          const Unit& unit = units[static_cast<size_t>(u)];
          const Item& it = items[unit.item];
          const PagedAttentionArgs& a = batch[it.seq];
          float* dst = partials.data() + it.offset + static_cast<size_t>(unit.kvh) * it.head_stride +
                       static_cast<size_t>(unit.part) * detail::partition_partial_floats(a);
          worker.partition(a, it.t, unit.kvh, unit.part, unit.part + 1, dst);
        }
      },
      1);
  // Fewer than kMinItemsPerThread * threads folds of a few partitions each: on this thread, which costs
  // less than waking the pool for them (a decode step makes one such pass per layer).
  for (const Merge& m : merges) {
    const Item& it = items[m.item];
    worker.merge(batch[it.seq], it.t, m.kvh, partials.data() + it.offset + static_cast<size_t>(m.kvh) * it.head_stride);
  }
}

// A batched decode step (one token per sequence, at least this many sequences a thread): whole sequences
// are the work units, so each thread knows the one it does next and streams that one's K/V in while it
// scores the current one (detail::LinePrefetchStream). 1B shapes, 16 sequences at 128-256 positions,
// attention alone inside the engine's decode: 14.2 -> 12.2 ns per (slot, KV head) (three alternating
// runs); SmolLM2-135M 14.9 -> 11.0, batched decode ~1.07x; `bench_paged_attention` batch16_f16_cold
// 1.11-1.15x, the cache-hot batch16_f16 ~0.9x (the prefetches are issued for nothing there).
constexpr size_t kMinSequencesPerThread = 4;

bool sequence_prefetch_enabled() {
  static const bool off = env_switch("KVSERVE_SEQ_PREFETCH") == 0;  // for A/B runs
  return !off;
}

// The K and V blocks a decode token of `a` reads (positions [0, pos0]) into `blocks`, and the stream over
// them spread across `slots` prefetching slots.
detail::LinePrefetchStream next_sequence_stream(const PagedAttentionArgs& a, int64_t slots,
                                                std::vector<const char*>& blocks) {
  const auto block_bytes = static_cast<int64_t>(kv_bytes(a.kv_type, a.block_stride));
  blocks.clear();
  for (int64_t b = 0; b <= a.pos0 / a.block_size; ++b) {
    blocks.push_back(static_cast<const char*>(a.k_cache) + a.block_table[b] * block_bytes);
    blocks.push_back(static_cast<const char*>(a.v_cache) + a.block_table[b] * block_bytes);
  }
  const int64_t block_lines = (block_bytes + 63) / 64;
  const int64_t n_lines = static_cast<int64_t>(blocks.size()) * block_lines;
  return {blocks.data(), block_lines, n_lines, 0, (n_lines + slots - 1) / std::max<int64_t>(1, slots), 0, 0};
}

// Clears this thread's stream however the sequence's items end.
struct NextSequenceScope {
  explicit NextSequenceScope(const detail::LinePrefetchStream& s) { detail::t_next_sequence = s; }
  ~NextSequenceScope() { detail::t_next_sequence = {}; }
  NextSequenceScope(const NextSequenceScope&) = delete;
  NextSequenceScope& operator=(const NextSequenceScope&) = delete;
};

// Each thread claims sequences one ahead of the one it works on; every item's arithmetic is the same as
// on the item path, so the results are too.
void attend_decode_sequences(const detail::SimdWorker& worker, std::span<const PagedAttentionArgs> batch,
                             ThreadPool& pool) {
  std::atomic<size_t> claimed{0};
  const size_t n = batch.size();
  const auto claim = [&] { return claimed.fetch_add(1, std::memory_order_relaxed); };
  pool.parallel_for(pool.size(), [&](int64_t, int64_t) {
    thread_local std::vector<const char*> blocks;
    size_t cur = claim();
    size_t next = cur < n ? claim() : n;
    while (cur < n) {
      const PagedAttentionArgs& a = batch[cur];
      // The current sequence's prefetching slots: one per context position and KV head.
      const int64_t slots = (a.pos0 + 1) * a.n_kv_heads;
      {
        const NextSequenceScope scope(next < n ? next_sequence_stream(batch[next], slots, blocks)
                                               : detail::LinePrefetchStream{});
        worker.items(a, 0, a.n_kv_heads);
      }
      cur = next;
      next = cur < n ? claim() : n;
    }
  });
}

}  // namespace

bool detail::attends_by_sequence(std::span<const PagedAttentionArgs> batch, int threads) {
  return batch.size() >= kMinSequencesPerThread * static_cast<size_t>(std::max(1, threads)) &&
         sequence_prefetch_enabled() &&
         std::all_of(batch.begin(), batch.end(), [](const PagedAttentionArgs& a) { return a.n_tokens == 1; });
}

bool detail::prefetches_contiguous_k() {
  static const bool on = [] {
    const int forced = env_switch("KVSERVE_ATTN_CONTIG_K_PREFETCH");
    return forced >= 0 ? forced == 1 : cpu_amd_family() != 0x19;
  }();
  return on;
}

const detail::SimdWorker& detail::simd_worker() {
  static const SimdWorker avx2{paged_attention_items_avx2, paged_attention_partition_avx2, paged_attention_merge_avx2,
                               paged_attention_partition_heads_avx2};
  static const SimdWorker avx512{paged_attention_items_avx512, paged_attention_partition_avx512,
                                 paged_attention_merge_avx512, paged_attention_partition_heads_avx512};
  // Also where zmm ops are split in two halves (Zen 4): the 16-lane chains still issue half the
  // instructions. bench_paged_attention there, alternating: Llama3_1B batch16_f16/512 ~1.1x,
  // single_f16/512 ~1.13x, single_f16_cold/512 ~1.19x; Llama3_8B 0.94-1.1x, cold 1.1-1.25x.
  // KVSERVE_ATTN_ZMM=0|1 overrides, for A/B runs.
  static const bool zmm = cpu_uses_zmm_path(env_switch("KVSERVE_ATTN_ZMM"), /*pays_on_split_zmm=*/true);
  return zmm ? avx512 : avx2;
}

const detail::SimdWorker* detail::simd_worker_in_use() { return use_avx2() ? &simd_worker() : nullptr; }

void detail::attend_decode_units(const SimdWorker& w, const PagedAttentionArgs& a, int64_t first, int64_t last,
                                 float* partials) {
  const int64_t n_parts = partition_count(a, 0);
  const int64_t kvh = a.n_kv_heads;
  const size_t unit_floats = partition_partial_floats(a);
  // The KV heads [first, second) of partition p among the units.
  const auto heads_of = [&](int64_t p) {
    return std::pair{std::clamp<int64_t>(first - p * kvh, 0, kvh), std::clamp<int64_t>(last - p * kvh, 0, kvh)};
  };
  // The calls: runs of partitions with the same heads. A contiguous range of units makes at most three (a
  // partial partition, whole ones, a partial one).
  struct Call {
    int64_t p0, p1, h0, h1;
  };
  Call calls[3];
  int n_calls = 0;
  for (int64_t p0 = first / kvh; p0 < n_parts && p0 * kvh < last;) {
    const auto heads = heads_of(p0);
    int64_t p1 = p0 + 1;
    while (p1 < n_parts && heads_of(p1) == heads) ++p1;
    if (heads.first < heads.second) calls[n_calls++] = {p0, p1, heads.first, heads.second};
    p0 = p1;
  }
  // Whole partitions first: their blocks are read in address order, which the core's stream prefetcher
  // follows from a cold start; a partial partition's heads are pieces of each block, and it starts
  // streamed in by the call before (`after`). SmolLM2 at ~600 positions: a share that began with two
  // heads of a partition took ~40 ns a (slot, head) against ~25 for the whole ones.
  std::stable_partition(calls, calls + n_calls, [&](const Call& c) { return c.h1 - c.h0 == kvh; });
  for (int i = 0; i < n_calls; ++i) {
    const Call& c = calls[i];
    NextPartition next{};
    if (i + 1 < n_calls)
      next = {calls[i + 1].p0, static_cast<int>(calls[i + 1].h0), static_cast<int>(calls[i + 1].h1 - calls[i + 1].h0)};
    w.partition_heads(a, 0, static_cast<int>(c.h0), static_cast<int>(c.h1 - c.h0), c.p0, c.p1,
                      partials + static_cast<size_t>(c.h0 * n_parts + c.p0) * unit_floats,
                      static_cast<size_t>(n_parts) * unit_floats, i + 1 < n_calls ? &next : nullptr);
  }
}

void paged_attention(const PagedAttentionArgs& a, ThreadPool& pool) { paged_attention_batch({&a, 1}, pool); }

void paged_attention_batch(std::span<const PagedAttentionArgs> batch, ThreadPool& pool) {
  // Prefix sums of each sequence's items; a range [b, e) of the flattened items may span sequences.
  std::vector<int64_t> first(batch.size() + 1, 0);
  for (size_t i = 0; i < batch.size(); ++i) {
    validate(batch[i]);
    first[i + 1] = first[i] + int64_t{batch[i].n_tokens} * batch[i].n_kv_heads;
  }
  const int64_t n_items = first.back();
  if (n_items == 0) return;
  const detail::SimdWorker* simd = detail::simd_worker_in_use();
  if (simd != nullptr && pool.size() > 1 && n_items < kMinItemsPerThread * pool.size())
    return attend_split(*simd, batch, pool);
  if (simd != nullptr && detail::attends_by_sequence(batch, pool.size()))
    return attend_decode_sequences(*simd, batch, pool);
  const std::vector<int64_t>& starts = first;
  pool.parallel_for_dynamic(n_items, [&](int64_t b, int64_t e) {
    size_t s = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), b) - starts.begin()) - 1;
    while (b < e) {
      const int64_t end_here = std::min(e, starts[s + 1]);
      if (end_here > b) {
        if (simd != nullptr)
          simd->items(batch[s], b - starts[s], end_here - starts[s]);
        else
          attend_items_scalar(batch[s], b - starts[s], end_here - starts[s]);
      }
      b = end_here;
      ++s;
    }
  });
}

void paged_attention_ref(const PagedAttentionArgs& a) {
  validate(a);
  if (a.n_tokens == 0) return;
  attend_items_scalar(a, 0, int64_t{a.n_tokens} * a.n_kv_heads);
}

}  // namespace kvserve
