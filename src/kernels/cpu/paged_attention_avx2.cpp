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
#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/paged_attention_impl.h"

namespace kvserve::detail {

namespace {

using avx2_inline::hsum;

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

// Lane j: the sum of the 8 lanes of a_j, always added in the same tree ((0+1)+(2+3))+((4+5)+(6+7)), so
// a lane's result never depends on the other vectors.
inline __m256 sum_lanes_of_8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                             __m256 a7) {
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));  // [lo 0..3 | hi 0..3]
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// Lane j: q . k_j for the 8 consecutive rows k_j = k + j * hd (hd a multiple of 8). One FMA chain per
// row and one transpose-reduce for all 8, instead of a horizontal sum per row.
inline __m256 dot_8_rows(const float* q, const float* k, int hd) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int d = 0; d < hd; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + d), a0);
    a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + hd + d), a1);
    a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * hd + d), a2);
    a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * hd + d), a3);
    a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 4 * hd + d), a4);
    a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 5 * hd + d), a5);
    a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 6 * hd + d), a6);
    a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 7 * hd + d), a7);
  }
  return sum_lanes_of_8(a0, a1, a2, a3, a4, a5, a6, a7);
}

inline size_t kv_elem_bytes(KVElemType type) { return type == KVElemType::F32 ? 4 : 2; }

// Asks for rows [first, first + n) of a cache array ahead of use: a sequence's blocks sit anywhere in the
// pool, so the hardware prefetcher cannot see the next one coming.
inline void prefetch_rows(const void* base, KVElemType type, int64_t first, int n, int hd) {
  const size_t bytes = static_cast<size_t>(n) * hd * kv_elem_bytes(type);
  const char* p = static_cast<const char*>(base) + static_cast<size_t>(first) * hd * kv_elem_bytes(type);
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
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

// acc[d] += p[s] * rows[s][d] for s = 0..n-1 in order, 64 lanes of acc in registers at a time (8
// independent FMA chains: fewer would wait on the FMA latency).
inline void accumulate_rows(float* acc, const float* const* rows, const float* p, int n, int hd) {
  int d = 0;
  for (; d + 64 <= hd; d += 64) {
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(acc + d + 8 * j);
    for (int s = 0; s < n; ++s) {
      const __m256 ps = _mm256_set1_ps(p[s]);
      const float* r = rows[s] + d;
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(ps, _mm256_loadu_ps(r + 8 * j), a[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a0 = _mm256_loadu_ps(acc + d);
    for (int s = 0; s < n; ++s) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[s]), _mm256_loadu_ps(rows[s] + d), a0);
    _mm256_storeu_ps(acc + d, a0);
  }
  for (; d < hd; ++d)
    for (int s = 0; s < n; ++s) acc[d] = std::fma(p[s], rows[s][d], acc[d]);
}

// e^x on 8 lanes for x <= 0 (scores minus their running max), relative error below 1e-6 (tested against
// std::exp): x = n ln2 + f with |f| <= ln2/2 (Cody-Waite split of ln2), e^f by its degree-7 Taylor
// polynomial, times 2^n built in the exponent bits. Inputs below -87 give e^-87 (~1.6e-38) instead of a
// denormal: such a weight is 0 next to the block maximum's e^0 = 1 either way.
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  f = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), f);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  for (const float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

// sc[s] = e^(sc[s] - max) for s < n, all through exp_nonpositive (the tail via a padded copy), and returns
// `sum` plus their sum (8 lanes summed across vectors, then the lanes in a fixed tree: the same order for
// a given n whatever else is in the batch).
inline float exp_block(float* sc, int n, float max, float sum) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  int s = 0;
  for (; s + 8 <= n; s += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(sc + s), vmax));
    _mm256_storeu_ps(sc + s, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (s < n) {
    alignas(32) float tail[8];
    for (int j = 0; j < 8; ++j) tail[j] = s + j < n ? sc[s + j] : max;
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(tail), vmax));
    _mm256_store_ps(tail, e);
    for (int j = 0; s + j < n; ++j) sc[s + j] = tail[j];
    const __m256 live = _mm256_cmp_ps(_mm256_set_ps(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_ps(static_cast<float>(n - s)),
                                      _CMP_LT_OQ);
    vsum = _mm256_add_ps(vsum, _mm256_and_ps(e, live));
  }
  return sum + hsum(vsum);
}

// max of x[0..n), n >= 1.
inline float max_of(const float* x, int n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int s = 0;
  for (; s + 8 <= n; s += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + s));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; s < n; ++s) r = std::max(r, x[s]);
  return r;
}

}  // namespace

float exp_nonpositive_avx2(float x) {
  alignas(32) float v[8];
  _mm256_store_ps(v, exp_nonpositive(_mm256_set1_ps(x)));
  return v[0];
}

namespace {

// Query tokens of one sequence that share a pass over their KV head's blocks: each K/V slot is widened
// and loaded once for all of them. Every token's arithmetic is the same as alone (its scores, block
// maxima, rescales and V sums happen in the same order), so grouping never changes a result.
constexpr int kTokenGroup = 4;

// Score rows and the widened K block are padded to whole groups of 8 slots.
inline int round_up_8(int n) { return (n + 7) / 8 * 8; }

void attend_token_group(const PagedAttentionArgs& a, int64_t t_begin, int n_tok, int kvh, float* scratch_base) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int bs = a.block_size;
  const int bs8 = round_up_8(bs);
  const int rows_per_tok = group;  // query heads per token in this KV group
  float* scores = scratch_base;                                           // [n_tok][group][bs8]
  float* acc = scores + static_cast<size_t>(kTokenGroup) * group * bs8;    // [n_tok][group][hd]
  float* run_max = acc + static_cast<size_t>(kTokenGroup) * group * hd;   // [n_tok][group]
  float* run_sum = run_max + kTokenGroup * group;                          // [n_tok][group]
  float* row = run_sum + kTokenGroup * group;                              // one widened K row
  float* v_block = row + hd;                                               // [bs][hd] widened V rows
  float* k_block = v_block + static_cast<size_t>(bs) * hd;                 // [bs8][hd] widened K rows
  thread_local std::vector<const float*> v_rows_storage;
  v_rows_storage.resize(bs);
  const float** v_rows = v_rows_storage.data();

  const float* q[kTokenGroup];
  int64_t last_pos[kTokenGroup];
  for (int i = 0; i < n_tok; ++i) {
    last_pos[i] = a.pos0 + t_begin + i;
    q[i] = a.q + ((t_begin + i) * a.n_heads + int64_t{kvh} * group) * hd;
  }
  std::fill(acc, acc + static_cast<size_t>(n_tok) * group * hd, 0.0f);
  std::fill(run_max, run_max + n_tok * group, -std::numeric_limits<float>::infinity());
  std::fill(run_sum, run_sum + n_tok * group, 0.0f);

  const int64_t n_blocks = last_pos[n_tok - 1] / bs + 1;
  for (int64_t lb = 0; lb < n_blocks; ++lb) {
    const int64_t phys = a.block_table[lb];
    const int64_t row0 = (phys * a.block_stride + int64_t{kvh} * bs * hd) / hd;
    int n_valid[kTokenGroup];
    int first_tok = n_tok;  // tokens before it do not reach this block (positions are increasing)
    for (int i = n_tok - 1; i >= 0; --i) {
      n_valid[i] = static_cast<int>(std::clamp<int64_t>(last_pos[i] + 1 - lb * bs, 0, bs));
      if (n_valid[i] > 0) first_tok = i;
    }
    const int max_valid = n_valid[n_tok - 1];
    if (lb + 1 < n_blocks) {
      const int next_rows = static_cast<int>(std::min<int64_t>(bs, last_pos[n_tok - 1] + 1 - (lb + 1) * bs));
      const int64_t next_row0 = (a.block_table[lb + 1] * a.block_stride + int64_t{kvh} * bs * hd) / hd;
      prefetch_rows(a.k_cache, a.kv_type, next_row0, next_rows, hd);
      prefetch_rows(a.v_cache, a.kv_type, next_row0, next_rows, hd);
    }

    if (hd % 8 == 0) {
      // The block's K rows widened once (zero rows pad the last group of 8), then 8 scores per dot_8_rows.
      const int rows8 = round_up_8(max_valid);
      for (int s = 0; s < max_valid; ++s) {
        float* dst = k_block + static_cast<size_t>(s) * hd;
        const float* k = load_row(a.k_cache, a.kv_type, row0 + s, hd, dst);
        if (k != dst) std::copy(k, k + hd, dst);
      }
      std::fill(k_block + static_cast<size_t>(max_valid) * hd, k_block + static_cast<size_t>(rows8) * hd, 0.0f);
      const __m256 vscale = _mm256_set1_ps(a.scale);
      for (int i = first_tok; i < n_tok; ++i) {
        for (int h = 0; h < rows_per_tok; ++h) {
          float* sc = scores + static_cast<size_t>(i * group + h) * bs8;
          const float* qh = q[i] + static_cast<size_t>(h) * hd;
          for (int s = 0; s < n_valid[i]; s += 8)
            _mm256_storeu_ps(sc + s, _mm256_mul_ps(dot_8_rows(qh, k_block + static_cast<size_t>(s) * hd, hd), vscale));
        }
      }
    } else {
      for (int s = 0; s < max_valid; ++s) {
        const float* k = load_row(a.k_cache, a.kv_type, row0 + s, hd, row);
        for (int i = first_tok; i < n_tok; ++i) {
          if (s >= n_valid[i]) continue;
          for (int h = 0; h < rows_per_tok; ++h)
            scores[(i * group + h) * bs8 + s] = dot(q[i] + static_cast<size_t>(h) * hd, k, hd) * a.scale;
        }
      }
    }
    for (int i = first_tok; i < n_tok; ++i) {
      for (int h = 0; h < group; ++h) {
        const int hh = i * group + h;
        float* sc = scores + static_cast<size_t>(hh) * bs8;
        const float new_max = std::max(run_max[hh], max_of(sc, n_valid[i]));
        // exp(0) is exactly 1: skip the call when the maximum did not move.
        const float correction = new_max > run_max[hh] ? std::exp(run_max[hh] - new_max) : 1.0f;
        if (correction != 1.0f) scale_in_place(acc + static_cast<size_t>(hh) * hd, correction, hd);
        run_sum[hh] = exp_block(sc, n_valid[i], new_max, run_sum[hh] * correction);
        run_max[hh] = new_max;
      }
    }
    // The block's V rows widened once; then each (token, head) adds p_s * V_s in slot order with its
    // output row held in registers (same arithmetic per element as one slot at a time, fewer loads and
    // stores).
    for (int s = 0; s < max_valid; ++s) v_rows[s] = load_row(a.v_cache, a.kv_type, row0 + s, hd, v_block + s * hd);
    for (int i = first_tok; i < n_tok; ++i) {
      for (int h = 0; h < group; ++h) {
        const int hh = i * group + h;
        accumulate_rows(acc + static_cast<size_t>(hh) * hd, v_rows, scores + static_cast<size_t>(hh) * bs8, n_valid[i],
                        hd);
      }
    }
  }
  for (int i = 0; i < n_tok; ++i) {
    for (int h = 0; h < group; ++h) {
      const int hh = i * group + h;
      float* o = a.out + ((t_begin + i) * a.n_heads + int64_t{kvh} * group + h) * hd;
      scale_in_place(acc + static_cast<size_t>(hh) * hd, 1.0f / run_sum[hh], hd);
      std::copy(acc + static_cast<size_t>(hh) * hd, acc + static_cast<size_t>(hh + 1) * hd, o);
    }
  }
}

}  // namespace

void paged_attention_items_avx2(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int bs = a.block_size;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(kTokenGroup) * group * (round_up_8(bs) + hd + 2) + hd +
                 static_cast<size_t>(bs + round_up_8(bs)) * hd);
  // Items are token * n_kv_heads + kv_head; for each KV head, the range's tokens go in groups.
  const int64_t nkv = a.n_kv_heads;
  for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
    const int64_t t_first = (begin - kvh + nkv - 1) / nkv;  // first t with t * nkv + kvh >= begin
    const int64_t t_end = (end - kvh + nkv - 1) / nkv;      // first t with t * nkv + kvh >= end
    for (int64_t t = std::max<int64_t>(0, t_first); t < t_end; t += kTokenGroup) {
      const int n_tok = static_cast<int>(std::min<int64_t>(kTokenGroup, t_end - t));
      attend_token_group(a, t, n_tok, kvh, scratch.data());
    }
  }
}

}  // namespace kvserve::detail
