// AVX2/FMA worker of paged attention; compiled with -mavx2 -mfma and only called after a CPUID check.
// Same algorithm as the portable worker in paged_attention.cpp: per (token, kv head), the KV head's
// slots of each block are read once for every query head of its group, with an online softmax that
// rescales the accumulators once per block.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/paged_attention_impl.h"

namespace kvserve::detail {

namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline float dot(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), s1);
  }
  for (; d + 8 <= n; d += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
  float sum = hsum(_mm256_add_ps(s0, s1));
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// Row `index` (hd elements) as f32: the row itself for f32, else widened 8 at a time into `tmp`.
inline const float* load_row(const void* base, KVElemType type, int64_t index, int hd, float* tmp) {
  const int64_t off = index * hd;
  if (type == KVElemType::F32) return static_cast<const float*>(base) + off;
  const uint16_t* h = static_cast<const uint16_t*>(base) + off;
  int d = 0;
  if (type == KVElemType::F16) {
    for (; d + 8 <= hd; d += 8)
      _mm256_storeu_ps(tmp + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + d))));
    for (; d < hd; ++d) tmp[d] = fp16_to_fp32(h[d]);
  } else {
    for (; d + 8 <= hd; d += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + d)));
      _mm256_storeu_ps(tmp + d, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; d < hd; ++d) tmp[d] = bf16_to_fp32(h[d]);
  }
  return tmp;
}

inline void scale_in_place(float* x, float c, int n) {
  const __m256 vc = _mm256_set1_ps(c);
  int d = 0;
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(x + d, _mm256_mul_ps(_mm256_loadu_ps(x + d), vc));
  for (; d < n; ++d) x[d] *= c;
}

}  // namespace

void paged_attention_items_avx2(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int bs = a.block_size;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(group) * (bs + hd + 2) + hd);
  float* scores = scratch.data();
  float* acc = scores + static_cast<size_t>(group) * bs;
  float* run_max = acc + static_cast<size_t>(group) * hd;
  float* run_sum = run_max + group;
  float* row = run_sum + group;  // one widened K or V row

  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / a.n_kv_heads;
    const int kvh = static_cast<int>(item % a.n_kv_heads);
    const int64_t last_pos = a.pos0 + t;
    const float* q = a.q + (t * a.n_heads + int64_t{kvh} * group) * hd;
    std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.0f);
    std::fill(run_max, run_max + group, -std::numeric_limits<float>::infinity());
    std::fill(run_sum, run_sum + group, 0.0f);

    const int64_t n_blocks = last_pos / bs + 1;
    for (int64_t lb = 0; lb < n_blocks; ++lb) {
      const int64_t phys = a.block_table[lb];
      const int64_t row0 = (phys * a.block_stride + int64_t{kvh} * bs * hd) / hd;
      const int n_valid = static_cast<int>(std::min<int64_t>(bs, last_pos + 1 - lb * bs));

      for (int s = 0; s < n_valid; ++s) {
        const float* k = load_row(a.k_cache, a.kv_type, row0 + s, hd, row);
        for (int h = 0; h < group; ++h) scores[h * bs + s] = dot(q + static_cast<size_t>(h) * hd, k, hd) * a.scale;
      }
      for (int h = 0; h < group; ++h) {
        float* sc = scores + h * bs;
        const float block_max = *std::max_element(sc, sc + n_valid);
        const float new_max = std::max(run_max[h], block_max);
        const float correction = std::exp(run_max[h] - new_max);
        if (correction != 1.0f) scale_in_place(acc + static_cast<size_t>(h) * hd, correction, hd);
        float sum = run_sum[h] * correction;
        for (int s = 0; s < n_valid; ++s) {
          sc[s] = std::exp(sc[s] - new_max);
          sum += sc[s];
        }
        run_sum[h] = sum;
        run_max[h] = new_max;
      }
      // V slot chunk loaded once, accumulated into every head of the group.
      for (int s = 0; s < n_valid; ++s) {
        const float* v = load_row(a.v_cache, a.kv_type, row0 + s, hd, row);
        int d = 0;
        for (; d + 8 <= hd; d += 8) {
          const __m256 vv = _mm256_loadu_ps(v + d);
          for (int h = 0; h < group; ++h) {
            float* acc_d = acc + static_cast<size_t>(h) * hd + d;
            _mm256_storeu_ps(acc_d, _mm256_fmadd_ps(_mm256_set1_ps(scores[h * bs + s]), vv, _mm256_loadu_ps(acc_d)));
          }
        }
        for (; d < hd; ++d) {
          for (int h = 0; h < group; ++h) acc[static_cast<size_t>(h) * hd + d] += scores[h * bs + s] * v[d];
        }
      }
    }
    for (int h = 0; h < group; ++h) {
      float* o = a.out + (t * a.n_heads + int64_t{kvh} * group + h) * hd;
      scale_in_place(acc + static_cast<size_t>(h) * hd, 1.0f / run_sum[h], hd);
      std::copy(acc + static_cast<size_t>(h) * hd, acc + static_cast<size_t>(h + 1) * hd, o);
    }
  }
}

}  // namespace kvserve::detail
