#include "kernels/cpu/h2o_attention.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kv_elem.h"
#include "kernels/cpu/paged_attention_impl.h"

namespace kvserve {

namespace {
// Eight running sums (one SSE/AVX register's worth the compiler can keep without reassociating).
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

int64_t h2o_choose_slot(int64_t pos, int64_t heavy, int64_t recent, const H2OSlot* const* by_slot) {
  const int64_t budget = heavy + recent;
  if (pos < budget) return pos;
  // Every slot is taken, by distinct earlier positions; those up to pos - recent may go.
  int64_t best = -1;
  for (int64_t s = 0; s < budget; ++s) {
    const H2OSlot& r = *by_slot[s];
    if (r.pos > pos - recent) continue;
    if (best < 0) {
      best = s;
      continue;
    }
    const H2OSlot& b = *by_slot[best];
    if (r.score < b.score || (r.score == b.score && r.pos < b.pos)) best = s;
  }
  if (best < 0) fail("h2o attention: no evictable slot for position {} (heavy {}, recent {})", pos, heavy, recent);
  return best;
}

void h2o_attention_head(const H2OAttentionArgs& a, int kvh) {
  const int64_t D = a.head_dim, bs = a.block_size;
  const int64_t budget = a.heavy + a.recent;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t QD = int64_t{a.n_heads} * D, KD = int64_t{a.n_kv_heads} * D;
  const int64_t end = a.pos0 + a.n_tokens;
  const int64_t n_slots = std::min(end, budget);
  // Per slot index: its K/V element offset (head kvh) and its record.
  // Thread-local: a decode step calls this for every layer and KV head.
  thread_local std::vector<int64_t> offset;
  thread_local std::vector<H2OSlot*> record;
  offset.resize(static_cast<size_t>(n_slots));
  record.resize(static_cast<size_t>(n_slots));
  for (int64_t s = 0; s < n_slots; ++s) {
    const int64_t block = a.block_table[s / bs];
    offset[static_cast<size_t>(s)] = block * a.block_stride + (kvh * bs + s % bs) * D;
    record[static_cast<size_t>(s)] = a.slots + (block * a.n_kv_heads + kvh) * bs + s % bs;
  }
  // The kept slots are the positions of a sequence of n tokens to the paged kernel: KV head kvh's rows,
  // seen as a cache of one KV head (its block stride unchanged), attended by its group's query heads.
  PagedAttentionArgs view;
  view.n_tokens = 1;
  view.n_heads = group;
  view.n_kv_heads = 1;
  view.head_dim = a.head_dim;
  view.block_table = a.block_table;
  view.block_size = a.block_size;
  view.k_cache = static_cast<std::byte*>(a.k_cache) + kv_bytes(a.kv_type, kvh * bs * D);
  view.v_cache = static_cast<std::byte*>(a.v_cache) + kv_bytes(a.kv_type, kvh * bs * D);
  view.kv_type = a.kv_type;
  view.block_stride = a.block_stride;
  view.scale = a.scale;
  view.softcap = a.softcap;
  thread_local std::vector<float> lse, row, scores, drawn;
  thread_local std::vector<int64_t> block_row0;
  lse.resize(static_cast<size_t>(group));
  row.resize(static_cast<size_t>(D));
  scores.resize(detail::h2o_attend_scratch(group, n_slots, a.block_size));
  drawn.resize(static_cast<size_t>(n_slots));
  block_row0.resize(static_cast<size_t>((n_slots + bs - 1) / bs));
  const detail::SimdWorker* simd = detail::simd_worker_in_use();
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int64_t pos = a.pos0 + t;
    const int64_t slot = h2o_choose_slot(pos, a.heavy, a.recent, record.data());
    const auto at = static_cast<size_t>(slot);
    encode_kv_row(a.kv_type, a.k + t * KD + kvh * D, D,
                  static_cast<std::byte*>(a.k_cache) + kv_bytes(a.kv_type, offset[at]));
    encode_kv_row(a.kv_type, a.v + t * KD + kvh * D, D,
                  static_cast<std::byte*>(a.v_cache) + kv_bytes(a.kv_type, offset[at]));
    *record[at] = H2OSlot{0.0f, static_cast<int32_t>(pos)};
    const int64_t n = std::min(pos + 1, budget);
    const float* q = a.q + t * QD + int64_t{kvh} * group * D;
    float* out = a.out + t * QD + int64_t{kvh} * group * D;
    if (simd != nullptr && D % 8 == 0) {
      // Scores, one softmax a head and the values in one pass over the kept slots (SIMD, every dtype).
      for (int64_t b = 0; b * bs < n; ++b) block_row0[static_cast<size_t>(b)] = offset[static_cast<size_t>(b * bs)] / D;
      std::fill(drawn.begin(), drawn.begin() + n, 0.0f);
      detail::h2o_attend_avx2(q, group, a.head_dim, a.k_cache, a.v_cache, a.kv_type, block_row0.data(), a.block_size,
                              n, a.scale, a.softcap, scores.data(), out, drawn.data());
      for (int64_t s = 0; s < n; ++s) record[static_cast<size_t>(s)]->score += drawn[static_cast<size_t>(s)];
      continue;
    }
    // Portable: the paged kernel's reference on a one-KV-head view of the slots, then each slot's weight in
    // every query head's softmax from the head's log-sum.
    view.q = q;
    view.out = out;
    view.pos0 = n - 1;  // slots [0, n)
    view.lse = lse.data();
    paged_attention_ref(view);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t off = offset[static_cast<size_t>(s)];
      const float* k = row.data();
      if (a.kv_type == KVElemType::F32)
        k = static_cast<const float*>(a.k_cache) + off;
      else
        decode_kv_row(a.kv_type, static_cast<const std::byte*>(a.k_cache) + kv_bytes(a.kv_type, off), D, row.data());
      float drawn_here = 0.0f;
      for (int g = 0; g < group; ++g) {
        float x = dot(q + g * D, k, D) * a.scale;
        if (a.softcap > 0) x = detail::soft_cap(x, a.softcap);
        drawn_here += std::exp(x - lse[static_cast<size_t>(g)]);
      }
      record[static_cast<size_t>(s)]->score += drawn_here;
    }
  }
}

void h2o_attention_batch(std::span<const H2OAttentionArgs> batch, ThreadPool& pool) {
  int64_t n_tasks = 0;
  for (const H2OAttentionArgs& a : batch) {
    if (a.recent < 1 || a.heavy < 0) fail("h2o attention: recent {} must be >= 1 and heavy {} >= 0", a.recent, a.heavy);
    if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
      fail("h2o attention: {} query heads do not group over {} KV heads", a.n_heads, a.n_kv_heads);
    n_tasks += a.n_kv_heads;
  }
  // A record corrupted so that no slot can go throws on a worker: carried back to the caller.
  std::mutex error_mu;
  std::exception_ptr error;
  pool.parallel_for_dynamic(n_tasks, [&](int64_t begin, int64_t end) {
    try {
      int64_t first = 0;
      for (const H2OAttentionArgs& a : batch) {
        for (int h = 0; h < a.n_kv_heads; ++h) {
          const int64_t task = first + h;
          if (task >= begin && task < end) h2o_attention_head(a, h);
        }
        first += a.n_kv_heads;
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace kvserve
