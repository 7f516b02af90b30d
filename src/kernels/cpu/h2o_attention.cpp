#include "kernels/cpu/h2o_attention.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kv_elem.h"

namespace kvserve {

namespace {
float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
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
  // Per slot index: its element offset (head kvh) and its record.
  std::vector<int64_t> offset(static_cast<size_t>(n_slots));
  std::vector<H2OSlot*> record(static_cast<size_t>(n_slots));
  for (int64_t s = 0; s < n_slots; ++s) {
    const int64_t block = a.block_table[s / bs];
    offset[static_cast<size_t>(s)] = block * a.block_stride + (kvh * bs + s % bs) * D;
    record[static_cast<size_t>(s)] = a.slots + (block * a.n_kv_heads + kvh) * bs + s % bs;
  }
  // The kept rows widened to f32 once per token for all the query heads.
  std::vector<float> keys(static_cast<size_t>(n_slots * D)), values(static_cast<size_t>(n_slots * D));
  std::vector<float> weights(static_cast<size_t>(n_slots)), sum(static_cast<size_t>(n_slots));
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int64_t pos = a.pos0 + t;
    const int64_t slot = h2o_choose_slot(pos, a.heavy, a.recent, record.data());
    const float* k_row = a.k + t * KD + kvh * D;
    const float* v_row = a.v + t * KD + kvh * D;
    encode_kv_row(a.kv_type, k_row, D, static_cast<std::byte*>(a.k_cache) + kv_bytes(a.kv_type, offset[slot]));
    encode_kv_row(a.kv_type, v_row, D, static_cast<std::byte*>(a.v_cache) + kv_bytes(a.kv_type, offset[slot]));
    *record[static_cast<size_t>(slot)] = H2OSlot{0.0f, static_cast<int32_t>(pos)};
    const int64_t n = std::min(pos + 1, budget);
    for (int64_t s = 0; s < n; ++s) {
      decode_kv_row(a.kv_type, static_cast<const std::byte*>(a.k_cache) + kv_bytes(a.kv_type, offset[s]), D,
                    keys.data() + s * D);
      decode_kv_row(a.kv_type, static_cast<const std::byte*>(a.v_cache) + kv_bytes(a.kv_type, offset[s]), D,
                    values.data() + s * D);
    }
    std::fill(sum.begin(), sum.begin() + n, 0.0f);
    for (int g = 0; g < group; ++g) {
      const int64_t h = int64_t{kvh} * group + g;
      const float* q = a.q + t * QD + h * D;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < n; ++s) {
        float x = dot(q, keys.data() + s * D, D) * a.scale;
        if (a.softcap > 0) x = std::tanh(x / a.softcap) * a.softcap;
        weights[static_cast<size_t>(s)] = x;
        max = std::max(max, x);
      }
      float total = 0.0f;
      for (int64_t s = 0; s < n; ++s) {
        weights[static_cast<size_t>(s)] = std::exp(weights[static_cast<size_t>(s)] - max);
        total += weights[static_cast<size_t>(s)];
      }
      float* out = a.out + t * QD + h * D;
      std::fill(out, out + D, 0.0f);
      const float inv = 1.0f / total;
      for (int64_t s = 0; s < n; ++s) {
        const float w = weights[static_cast<size_t>(s)] * inv;
        sum[static_cast<size_t>(s)] += w;
        const float* v = values.data() + s * D;
        for (int64_t d = 0; d < D; ++d) out[d] += w * v[d];
      }
    }
    for (int64_t s = 0; s < n; ++s) record[static_cast<size_t>(s)]->score += sum[static_cast<size_t>(s)];
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
