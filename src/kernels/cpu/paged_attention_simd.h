// The SIMD worker of paged attention, compiled twice: paged_attention_avx2.cpp (-mavx2 -mfma, 256-bit
// registers, the *_avx2 entry points) and paged_attention_zmm_avx512vnni.cpp (KVSERVE_ATTN_ZMM: the two
// inner loops, K-row dot products and V-row sums, on 512-bit registers; the *_avx512 entry points). Each
// is only called after its CPUID check. Every lane of a zmm loop gets the operations, in the same order,
// of the matching lane of the ymm loop (a 16-lane dot chain is the ymm loop's two 8-lane chains side by
// side), so both builds give the same bits (test: PagedAttention.ZmmWorkerIsBitIdenticalToAvx2).
//
// Per (token, kv head), the KV head's slots are read once for every query head of its group. A token's
// context is cut into partitions of 128 positions (paged_attention_impl.h): inside one, all scores
// first, then one softmax normalized as llama.cpp's is, then the V rows weighted into an output row held
// in registers; partitions are folded left to right, so they can also run on different threads. (The
// portable worker in paged_attention.cpp, the reference, rescales online per block: the same values to
// rounding.)
//
// Include once, from those two files only, after defining KVSERVE_ATTN_SUFFIX (and KVSERVE_ATTN_ZMM).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/paged_attention_impl.h"

#ifndef KVSERVE_ATTN_SUFFIX
#error "define KVSERVE_ATTN_SUFFIX (avx2 or avx512) before including paged_attention_simd.h"
#endif
#ifndef KVSERVE_ATTN_ZMM
#define KVSERVE_ATTN_ZMM 0
#endif
#define KVSERVE_ATTN_CAT2(a, b) a##_##b
#define KVSERVE_ATTN_CAT(a, b) KVSERVE_ATTN_CAT2(a, b)
// name_avx2 or name_avx512: the entry points of this build.
#define KVSERVE_ATTN_NAME(name) KVSERVE_ATTN_CAT(name, KVSERVE_ATTN_SUFFIX)

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
  // An explicit fma: a plain `sum += a[d] * b[d]` is vectorized by GCC as an in-order reduction of
  // rounded products for some trip counts and contracted to fma for others, differently in the AVX2
  // and AVX-512 builds, so a head size with a tail gave different bits there.
  for (; d < n; ++d) sum = std::fma(a[d], b[d], sum);
  return sum;
}

// The q8_0 block holding element `index` of a Q8_0 array, its scale, and where the element's int8 sits.
inline const int8_t* q8_elements(const void* base, size_t index, float* scale) {
  const auto* blk = static_cast<const unsigned char*>(base) + index / kKVQuantGroup * kKVQ8BlockBytes;
  uint16_t d16;
  std::memcpy(&d16, blk, 2);
  *scale = _cvtsh_ss(d16);  // F16C: exact, as fp16_to_fp32, in one instruction
  return reinterpret_cast<const int8_t*>(blk + 2) + index % kKVQuantGroup;
}

// The q4_0 block holding element `index` (a multiple of 8) of a Q4_0 array, its scale, where the 8 bytes
// holding that element's nibble and the next 7 start, and whether they are the high nibbles.
inline const uint8_t* q4_elements(const void* base, size_t index, float* scale, bool* high) {
  const auto* blk = static_cast<const unsigned char*>(base) + index / kKVQuantGroup * kKVQ4BlockBytes;
  uint16_t d16;
  std::memcpy(&d16, blk, 2);
  *scale = _cvtsh_ss(d16);
  const size_t j = index % kKVQuantGroup;
  *high = j >= kKVQuantGroup / 2;
  return blk + 2 + j % (kKVQuantGroup / 2);
}

// fp8 codes in the high bytes of 16-bit lanes (code << 8) as IEEE half bits. E5M2 is a half's high byte
// already. E4M3's 4 exponent and 3 mantissa bits go under a half's 5 and 10, the sign on top: shifted
// right arithmetically by one (the sign copied into the exponent's top bit) and that bit cleared, a half
// of 2^-8 times the E4M3 value, subnormals included (both formats' subnormals line up), which the caller
// scales by 2^8 exactly. The NaN code is never stored (writes saturate).
template <KVElemType kType>
inline __m128i fp8_to_half_bits(__m128i hi_bytes) {
  if constexpr (kType == KVElemType::FP8_E5M2) return hi_bytes;
  return _mm_and_si128(_mm_srai_epi16(hi_bytes, 1), _mm_set1_epi16(static_cast<int16_t>(0xBFFF)));
}
#if KVSERVE_ATTN_ZMM
template <KVElemType kType>
inline __m256i fp8_to_half_bits(__m256i hi_bytes) {
  if constexpr (kType == KVElemType::FP8_E5M2) return hi_bytes;
  return _mm256_and_si256(_mm256_srai_epi16(hi_bytes, 1), _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
}
#endif
constexpr float kFp8E4M3HalfScale = 256.0f;

// 8 consecutive cache elements as f32 (for Q8_0 and Q4_0, index a multiple of 8: they share a block).
template <KVElemType kType>
inline __m256 load8(const void* base, size_t index) {
  if constexpr (kType == KVElemType::Q8_0) {
    float d;
    const int8_t* q = q8_elements(base, index, &d);
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
    return _mm256_mul_ps(v, _mm256_set1_ps(d));
  } else if constexpr (kType == KVElemType::Q4_0) {
    float d;
    bool high;
    const uint8_t* q = q4_elements(base, index, &d, &high);
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
    if (high) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(0x0f));
    const __m256i i = _mm256_sub_epi32(_mm256_cvtepu8_epi32(b), _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(d));
  } else if constexpr (kType == KVElemType::FP8_E4M3 || kType == KVElemType::FP8_E5M2) {
    // The 8 codes into the high bytes of 8 16-bit lanes, low bytes zero.
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + index));
    const __m256 v = _mm256_cvtph_ps(fp8_to_half_bits<kType>(_mm_unpacklo_epi8(_mm_setzero_si128(), b)));
    if constexpr (kType == KVElemType::FP8_E4M3) return _mm256_mul_ps(v, _mm256_set1_ps(kFp8E4M3HalfScale));
    return v;
  } else if constexpr (kType == KVElemType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + index);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + index));
    if constexpr (kType == KVElemType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

#if KVSERVE_ATTN_ZMM
// 16 consecutive cache elements as f32 (for Q8_0 and Q4_0, index a multiple of 16).
template <KVElemType kType>
inline __m512 load16(const void* base, size_t index) {
  if constexpr (kType == KVElemType::Q8_0) {
    float d;
    const int8_t* q = q8_elements(base, index, &d);
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
    return _mm512_mul_ps(v, _mm512_set1_ps(d));
  } else if constexpr (kType == KVElemType::Q4_0) {
    float d;
    bool high;
    const uint8_t* q = q4_elements(base, index, &d, &high);
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    if (high) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(0x0f));
    const __m512i i = _mm512_sub_epi32(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(d));
  } else if constexpr (kType == KVElemType::FP8_E4M3 || kType == KVElemType::FP8_E5M2) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + index));
    const __m256i hi_bytes = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);
    const __m512 v = _mm512_cvtph_ps(fp8_to_half_bits<kType>(hi_bytes));
    if constexpr (kType == KVElemType::FP8_E4M3) return _mm512_mul_ps(v, _mm512_set1_ps(kFp8E4M3HalfScale));
    return v;
  } else if constexpr (kType == KVElemType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + index);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + index));
    if constexpr (kType == KVElemType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
#endif

// f(std::integral_constant<KVElemType, T>{}) for the runtime type T: one switch for every typed entry.
template <class F>
inline void with_kv_type(KVElemType type, F&& f) {
  switch (type) {
    case KVElemType::F32: f(std::integral_constant<KVElemType, KVElemType::F32>{}); return;
    case KVElemType::F16: f(std::integral_constant<KVElemType, KVElemType::F16>{}); return;
    case KVElemType::BF16: f(std::integral_constant<KVElemType, KVElemType::BF16>{}); return;
    case KVElemType::FP8_E4M3: f(std::integral_constant<KVElemType, KVElemType::FP8_E4M3>{}); return;
    case KVElemType::FP8_E5M2: f(std::integral_constant<KVElemType, KVElemType::FP8_E5M2>{}); return;
    case KVElemType::Q8_0: f(std::integral_constant<KVElemType, KVElemType::Q8_0>{}); return;
    case KVElemType::Q4_0: f(std::integral_constant<KVElemType, KVElemType::Q4_0>{}); return;
  }
}

// For HN query heads (rows hd apart from q) against one K row: out[h] = the 8-lane vector that dot()
// would reduce, accumulated in dot()'s order (16-wide steps into two chains, an 8-wide tail into the
// first). The K row is widened in registers once for all HN heads.
template <KVElemType kType, int HN>
inline void slot_partials(const float* q, int hd, const void* k_base, size_t k_index, __m256* out) {
#if KVSERVE_ATTN_ZMM
  // Lanes 0-7 are the ymm loop's first chain, lanes 8-15 its second.
  __m512 s[HN];
  for (int h = 0; h < HN; ++h) s[h] = _mm512_setzero_ps();
  int dz = 0;
  for (; dz + 16 <= hd; dz += 16) {
    const __m512 k = load16<kType>(k_base, k_index + dz);
    for (int h = 0; h < HN; ++h) s[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * hd + dz), k, s[h]);
  }
  for (int h = 0; h < HN; ++h) {
    __m256 lo = _mm512_castps512_ps256(s[h]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[h]), 1));
    if (dz < hd) lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + dz), load8<kType>(k_base, k_index + dz), lo);
    out[h] = _mm256_add_ps(lo, hi);
  }
#else
  __m256 s0[HN], s1[HN];
  for (int h = 0; h < HN; ++h) s0[h] = s1[h] = _mm256_setzero_ps();
  int d = 0;
  for (; d + 16 <= hd; d += 16) {
    const __m256 k0 = load8<kType>(k_base, k_index + d);
    const __m256 k1 = load8<kType>(k_base, k_index + d + 8);
    for (int h = 0; h < HN; ++h) {
      s0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + d), k0, s0[h]);
      s1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + d + 8), k1, s1[h]);
    }
  }
  if (d < hd) {
    const __m256 k0 = load8<kType>(k_base, k_index + d);
    for (int h = 0; h < HN; ++h) s0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + d), k0, s0[h]);
  }
  for (int h = 0; h < HN; ++h) out[h] = _mm256_add_ps(s0[h], s1[h]);
#endif
}

#if KVSERVE_ATTN_ZMM
// slot_partials for two K rows at once (k_index0 and k_index1), for many heads on a long row (MLA's 16 x
// 576, whose query rows outgrow L1). Against slot_partials<8> one slot at a time: MLA prefill_f16/512
// 1.03-1.17x, decode within noise (GCC folds the query loads into both FMAs anyway). The same chains as
// slot_partials, so the same bits.
template <KVElemType kType, int HN>
inline void slot_partials_two(const float* q, int hd, const void* k_base, size_t k_index0, size_t k_index1,
                              __m256* out0, __m256* out1) {
  __m512 s0[HN], s1[HN];
  for (int h = 0; h < HN; ++h) s0[h] = s1[h] = _mm512_setzero_ps();
  int dz = 0;
  for (; dz + 16 <= hd; dz += 16) {
    const __m512 k0 = load16<kType>(k_base, k_index0 + dz);
    const __m512 k1 = load16<kType>(k_base, k_index1 + dz);
    for (int h = 0; h < HN; ++h) {
      const __m512 qv = _mm512_loadu_ps(q + h * hd + dz);
      s0[h] = _mm512_fmadd_ps(qv, k0, s0[h]);
      s1[h] = _mm512_fmadd_ps(qv, k1, s1[h]);
    }
  }
  const auto high_half = [](__m512 s) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)); };
  for (int h = 0; h < HN; ++h) {
    __m256 lo0 = _mm512_castps512_ps256(s0[h]), lo1 = _mm512_castps512_ps256(s1[h]);
    const __m256 hi0 = high_half(s0[h]), hi1 = high_half(s1[h]);
    if (dz < hd) {
      const __m256 qt = _mm256_loadu_ps(q + h * hd + dz);
      lo0 = _mm256_fmadd_ps(qt, load8<kType>(k_base, k_index0 + dz), lo0);
      lo1 = _mm256_fmadd_ps(qt, load8<kType>(k_base, k_index1 + dz), lo1);
    }
    out0[h] = _mm256_add_ps(lo0, hi0);
    out1[h] = _mm256_add_ps(lo1, hi1);
  }
}
#endif

// Lane j = hsum(v[j]) for 8 vectors at once, with exactly hsum's additions: (x_i + x_i+4), then
// (.0 + .2) and (.1 + .3), then those two. So a score is the same bits as one dot() at a time.
inline __m256 hsum8(const __m256 (&v)[8]) {
  __m256 t[4];
  for (int j = 0; j < 4; ++j)
    t[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[j], v[j + 4], 0x20), _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
  // t[j] = [4 lanes of slot j | 4 lanes of slot j + 4]
  const __m256 u01 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 u23 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // u01 = [2 lanes of slot 0, 2 of slot 1 | slot 4, slot 5]; u23 likewise for slots 2, 3 | 6, 7
  return _mm256_add_ps(_mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Coming K and V rows, asked for row by row while the current block's scores are computed: with slot j
// of this block go K row j of a block ahead and V row j of this block (read in the values pass, a few
// blocks later). One burst of a whole block's lines at the block start filled the core's miss buffers
// and stalled on its own prefetches (a quarter of the kernel's non-FMA time in perf); a byte stream
// spread over the slots overlapped the math, but its bookkeeping took a quarter of the score loop's
// samples with the cache hot. The V rows go to L2 only: a partition's V rows of 3-4 KV heads (48-64 KiB
// of f16 at 64 dims) do not stay in L1 until their pass, and the hint spares the L1 miss buffers for the
// K rows about to be scored (SmolLM2 shapes, bench_paged_attention region_cold: ~1.05x alone).
// The stream's next per_slot lines, into L2.
inline void prefetch_stream_step(LinePrefetchStream& s) {
  step_line_stream(s, [](const char* line) { _mm_prefetch(line, _MM_HINT_T1); });
}

struct RowPrefetch {
  const char* k = nullptr;  // the block ahead's K rows, or null
  const char* v = nullptr;  // this block's V rows, or null
  size_t row_bytes = 0;

  // Out of line: the zmm score loop unrolls 16 slots, and 16 inlined copies of this made
  // block_scores_in_registers<f16, 3 heads> 10 KB instead of 4. A decode step runs attention with its code
  // cold (the layer's matmuls evict it between calls: SmolLM2, a call right after a dummy one over another
  // layer's K/V took ~15 % less), so the smaller loop gains more than a call a slot costs. Alternating
  // binaries: SmolLM2 batch-1 decode after 512 positions on two CCDs 1.011 / 1.015 / 1.018 / 1.016 / 0.996
  // / 1.001x (6 runs of 5-8 rounds), 1B-shaped Q4_0 1.007x (attention 615 -> 571 us a step); batched
  // decode (16 x 128 after 128) SmolLM2 1.037x and 1.026x, 1B-shaped Q4_0 1.011x and 1.008x (4 rounds
  // each); bench_paged_attention's cache-hot region/512 unchanged.
  [[gnu::noinline]] void slot(int j) const {
    const size_t off = static_cast<size_t>(j) * row_bytes;
    for (size_t b = 0; b < row_bytes; b += 64) {
      if (k != nullptr) _mm_prefetch(k + off + b, _MM_HINT_T0);
      if (v != nullptr) _mm_prefetch(v + off + b, _MM_HINT_T1);
    }
    prefetch_stream_step(t_next_sequence);
  }
  // Rows [from, to) of both.
  void rows(int from, int to) const {
    for (int j = from; j < to; ++j) slot(j);
  }
};

// The scores of sn <= 8 slots of HN heads from their partial vectors (part[h][j]: slot j of head h; the
// slots past sn are zeroed), reduced by hsum8, times scale, to sc[h * sc_stride + j].
template <int HN>
inline void store_slot_scores(__m256 (&part)[HN][8], int sn, __m256 vscale, float* sc, int sc_stride) {
  for (int h = 0; h < HN; ++h) {
    for (int j = sn; j < 8; ++j) part[h][j] = _mm256_setzero_ps();
    const __m256 r = _mm256_mul_ps(hsum8(part[h]), vscale);
    float* dst = sc + static_cast<size_t>(h) * sc_stride;
    if (sn == 8) {
      _mm256_storeu_ps(dst, r);
    } else {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, r);
      std::copy(lanes, lanes + sn, dst);
    }
  }
}

// sc[h * sc_stride + s] = the HN partial vectors `partials(k_index, out)` gives for K row (row0 + s),
// summed, times scale, for slots s < n.
template <int HN, typename Partials>
inline void block_scores_loop(int hd, int64_t row0, int n, float scale, float* sc, int sc_stride, const RowPrefetch* pf,
                              const Partials& partials) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int s0 = 0; s0 < n; s0 += 8) {
    const int sn = std::min(8, n - s0);
    __m256 part[HN][8];
    for (int j = 0; j < sn; ++j) {
      if (pf != nullptr) pf->slot(s0 + j);
      __m256 out[HN];
      partials(static_cast<size_t>(row0 + s0 + j) * hd, out);
      for (int h = 0; h < HN; ++h) part[h][j] = out[h];
    }
    store_slot_scores<HN>(part, sn, vscale, sc + s0, sc_stride);
  }
}

#if KVSERVE_ATTN_ZMM
// s[h] = the 16 lanes of head h's dot chains against K row k_index (lanes 0-7 the ymm loop's first chain,
// 8-15 its second), for hd == 16 * NZ with the HN query rows in registers.
template <KVElemType kType, int HN, int NZ>
inline void slot_sums(const __m512 (&qv)[HN][NZ], const void* k_base, size_t k_index, __m512 (&s)[HN]) {
  for (int h = 0; h < HN; ++h) s[h] = _mm512_setzero_ps();
  for (int dz = 0; dz < NZ; ++dz) {
    const __m512 k = load16<kType>(k_base, k_index + 16 * static_cast<size_t>(dz));
    for (int h = 0; h < HN; ++h) s[h] = _mm512_fmadd_ps(qv[h][dz], k, s[h]);
  }
}

// The score reduction on 16 lanes, with hsum8's additions in its order (so the same bits as the ymm
// build): four steps, each adding two halves of a pair of vectors.
// a, b: two slots' sums -> [a's lo + hi (8 lanes) | b's lo + hi], slot_partials' out of each.
inline __m512 add_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Two of those (slots a, b and c, d) -> per slot its 4-lane x_i + x_(i+4), in 128-bit lanes a, b, c, d.
inline __m512 add_quarters(__m512 ab, __m512 cd) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

// For hd == 16 * NZ with the HN query rows loaded into registers once: block_scores_loop's scores, 16
// slots at a time, reduced on 16 lanes: ~3 instructions a (slot, head) where the 8-lane lo + hi and
// hsum8 took ~5 and spilled their 24 partial vectors to the stack. One thread, cache hot, SmolLM2 shape
// at 512 positions: 12.8 -> 11.0 us (bench_paged_attention single_f16, with RowPrefetch).
template <KVElemType kType, int HN, int NZ>
void block_scores_in_registers(const float* q, const void* k_base, int64_t row0, int n, float scale, float* sc,
                               int sc_stride, const RowPrefetch* pf) {
  constexpr int hd = 16 * NZ;
  __m512 qv[HN][NZ];
  for (int h = 0; h < HN; ++h)
    for (int dz = 0; dz < NZ; ++dz) qv[h][dz] = _mm512_loadu_ps(q + (h * NZ + dz) * 16);
  const __m512 vscale = _mm512_set1_ps(scale);
  // After the last step, lane 4k + m holds slot 4m + k.
  const __m512i slot_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int s0 = 0; s0 < n; s0 += 16) {
    // quads[m][h]: slots s0 + 4m .. + 3 after add_quarters.
    __m512 quads[4][HN];
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      __m512 pairs[2][HN];
#pragma GCC unroll 2
      for (int p = 0; p < 2; ++p) {
        __m512 sums[2][HN];
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          const int j = s0 + 4 * m + 2 * p + e;
          if (j < n) {
            if (pf != nullptr) pf->slot(j);
            slot_sums<kType, HN, NZ>(qv, k_base, static_cast<size_t>(row0 + j) * hd, sums[e]);
          } else {
            for (int h = 0; h < HN; ++h) sums[e][h] = _mm512_setzero_ps();
          }
        }
        for (int h = 0; h < HN; ++h) pairs[p][h] = add_halves(sums[0][h], sums[1][h]);
      }
      for (int h = 0; h < HN; ++h) quads[m][h] = add_quarters(pairs[0][h], pairs[1][h]);
    }
    const int sn = std::min(16, n - s0);
    for (int h = 0; h < HN; ++h) {
      // hsum8's last two steps, per 128-bit lane: (y0 + y2, y1 + y3), then their sum.
      const __m512 q01 = _mm512_add_ps(_mm512_shuffle_ps(quads[0][h], quads[1][h], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_ps(quads[0][h], quads[1][h], _MM_SHUFFLE(3, 2, 3, 2)));
      const __m512 q23 = _mm512_add_ps(_mm512_shuffle_ps(quads[2][h], quads[3][h], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_ps(quads[2][h], quads[3][h], _MM_SHUFFLE(3, 2, 3, 2)));
      const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(q01, q23, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_ps(q01, q23, _MM_SHUFFLE(3, 1, 3, 1)));
      const __m512 r = _mm512_mul_ps(_mm512_permutexvar_ps(slot_order, sums), vscale);
      float* dst = sc + static_cast<size_t>(h) * sc_stride + s0;
      if (sn == 16) {
        _mm512_storeu_ps(dst, r);
      } else {
        _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << sn) - 1), r);
      }
    }
  }
}
#endif

#if !KVSERVE_ATTN_ZMM
// out[h] = slot_partials' 8-lane vector of head h for hd == 16 * NS, the dot loop unrolled.
template <KVElemType kType, int HN, int NS>
inline void slot_partials_fixed(const float* q, const void* k_base, size_t k_index, __m256 (&out)[HN]) {
  __m256 s0[HN], s1[HN];
  for (int h = 0; h < HN; ++h) s0[h] = s1[h] = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int d = 0; d < NS; ++d) {
    const __m256 k0 = load8<kType>(k_base, k_index + 16 * static_cast<size_t>(d));
    const __m256 k1 = load8<kType>(k_base, k_index + 16 * static_cast<size_t>(d) + 8);
    for (int h = 0; h < HN; ++h) {
      s0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * 16 * NS + 16 * d), k0, s0[h]);
      s1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * 16 * NS + 16 * d + 8), k1, s1[h]);
    }
  }
  for (int h = 0; h < HN; ++h) out[h] = _mm256_add_ps(s0[h], s1[h]);
}

// block_scores_loop for hd == 16 * NS and up to 2 heads: hsum8's steps taken as soon as their inputs
// exist (slots j and j + 4 together, then pairs of those), so the partial vectors of 8 slots never
// outgrow the 16 registers (the loop spilled its 8 x HN of them to the stack, and its dot loop was not
// unrolled). The same additions in the same order: the same bits.
template <KVElemType kType, int HN, int NS>
void block_scores_fixed(const float* q, const void* k_base, int64_t row0, int n, float scale, float* sc,
                        int sc_stride, const RowPrefetch* pf) {
  static_assert(HN <= 2, "more heads spill; take them two at a time");
  constexpr int hd = 16 * NS;
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int s0 = 0; s0 < n; s0 += 8) {
    __m256 t_prev[HN], u01[HN];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const auto partials = [&](int slot, __m256(&out)[HN]) {
        if (slot < n) {
          if (pf != nullptr) pf->slot(slot);
          slot_partials_fixed<kType, HN, NS>(q, k_base, static_cast<size_t>(row0 + slot) * hd, out);
        } else {
          for (int h = 0; h < HN; ++h) out[h] = _mm256_setzero_ps();
        }
      };
      __m256 lo[HN], hi[HN];  // slots j and j + 4
      partials(s0 + j, lo);
      partials(s0 + j + 4, hi);
      for (int h = 0; h < HN; ++h) {
        const __m256 t = _mm256_add_ps(_mm256_permute2f128_ps(lo[h], hi[h], 0x20), _mm256_permute2f128_ps(lo[h], hi[h], 0x31));
        if (j % 2 == 0) {
          t_prev[h] = t;
          continue;
        }
        const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(t_prev[h], t, _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm256_shuffle_ps(t_prev[h], t, _MM_SHUFFLE(3, 2, 3, 2)));
        if (j == 1) {
          u01[h] = u;
          continue;
        }
        const __m256 r = _mm256_mul_ps(_mm256_add_ps(_mm256_shuffle_ps(u01[h], u, _MM_SHUFFLE(2, 0, 2, 0)),
                                                     _mm256_shuffle_ps(u01[h], u, _MM_SHUFFLE(3, 1, 3, 1))),
                                       vscale);
        float* dst = sc + static_cast<size_t>(h) * sc_stride + s0;
        if (n - s0 >= 8) {
          _mm256_storeu_ps(dst, r);
        } else {
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, r);
          std::copy(lanes, lanes + (n - s0), dst);
        }
      }
    }
  }
}

// block_scores_fixed over HN heads, two at a time (a second pass reads the block's K rows from L1).
template <KVElemType kType, int HN, int NS>
void block_scores_fixed_heads(const float* q, const void* k_base, int64_t row0, int n, float scale, float* sc,
                              int sc_stride, const RowPrefetch* pf) {
  if constexpr (HN <= 2) {
    block_scores_fixed<kType, HN, NS>(q, k_base, row0, n, scale, sc, sc_stride, pf);
  } else {
    block_scores_fixed<kType, 2, NS>(q, k_base, row0, n, scale, sc, sc_stride, pf);
    block_scores_fixed_heads<kType, HN - 2, NS>(q + 2 * 16 * NS, k_base, row0, n, scale,
                                                sc + 2 * static_cast<size_t>(sc_stride), sc_stride, nullptr);
  }
}
#endif

// sc[h * sc_stride + s] = dot(q_h, K row (row0 + s)) * scale for HN heads and slots s < n, hd % 8 == 0.
template <KVElemType kType, int HN>
void block_scores_heads(const float* q, int hd, const void* k_base, int64_t row0, int n, float scale, float* sc,
                        int sc_stride, const RowPrefetch* pf) {
#if KVSERVE_ATTN_ZMM
  // Query rows in registers where they fit beside the sums: 4 vectors a head at hd 64; 8 at hd 128, two
  // heads a pass (a third and fourth head take a second pass over the block's K rows, from L1).
  if (hd == 64) return block_scores_in_registers<kType, HN, 4>(q, k_base, row0, n, scale, sc, sc_stride, pf);
  if (hd == 128) {
    if constexpr (HN <= 2) {
      return block_scores_in_registers<kType, HN, 8>(q, k_base, row0, n, scale, sc, sc_stride, pf);
    } else {
      block_scores_in_registers<kType, 2, 8>(q, k_base, row0, n, scale, sc, sc_stride, pf);
      return block_scores_in_registers<kType, HN - 2, 8>(q + 2 * hd, k_base, row0, n, scale,
                                                         sc + 2 * static_cast<size_t>(sc_stride), sc_stride, nullptr);
    }
  }
#else
  if (hd == 64) return block_scores_fixed_heads<kType, HN, 4>(q, k_base, row0, n, scale, sc, sc_stride, pf);
  if (hd == 128) return block_scores_fixed_heads<kType, HN, 8>(q, k_base, row0, n, scale, sc, sc_stride, pf);
#endif
  block_scores_loop<HN>(hd, row0, n, scale, sc, sc_stride, pf, [&](size_t k_index, __m256* out) {
    slot_partials<kType, HN>(q, hd, k_base, k_index, out);
  });
}

#if KVSERVE_ATTN_ZMM
// block_scores_loop's scores for HN heads on rows of other sizes than 64 and 128, two slots at a time
// (slot_partials_two): the same partial vectors, reduced the same way.
template <KVElemType kType, int HN>
void block_scores_two_slots(const float* q, int hd, const void* k_base, int64_t row0, int n, float scale, float* sc,
                            int sc_stride, const RowPrefetch* pf) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int s0 = 0; s0 < n; s0 += 8) {
    const int sn = std::min(8, n - s0);
    __m256 part[HN][8];
    int j = 0;
    for (; j + 2 <= sn; j += 2) {
      if (pf != nullptr) {
        pf->slot(s0 + j);
        pf->slot(s0 + j + 1);
      }
      __m256 out0[HN], out1[HN];
      slot_partials_two<kType, HN>(q, hd, k_base, static_cast<size_t>(row0 + s0 + j) * hd,
                                   static_cast<size_t>(row0 + s0 + j + 1) * hd, out0, out1);
      for (int h = 0; h < HN; ++h) {
        part[h][j] = out0[h];
        part[h][j + 1] = out1[h];
      }
    }
    if (j < sn) {
      if (pf != nullptr) pf->slot(s0 + j);
      __m256 out[HN];
      slot_partials<kType, HN>(q, hd, k_base, static_cast<size_t>(row0 + s0 + j) * hd, out);
      for (int h = 0; h < HN; ++h) part[h][j] = out[h];
    }
    store_slot_scores<HN>(part, sn, vscale, sc + s0, sc_stride);
  }
}
#endif

template <KVElemType kType>
void block_scores_typed(const float* q, int n_heads, int hd, const void* k_base, int64_t row0, int n, float scale,
                        float* sc, int sc_stride, const RowPrefetch* pf) {
  int h0 = 0;
#if KVSERVE_ATTN_ZMM
  // Many heads on other row sizes (MLA's 576): 8 heads and two slots a pass, each K vector widened once for
  // 8 heads, not 4 (MLA decode attention, bench_paged_attention single_f16/4096: 1.3x with the V sums'
  // change alone, 1.6x with this too).
  if (hd != 64 && hd != 128) {
    for (; h0 + 8 <= n_heads; h0 += 8)
      block_scores_two_slots<kType, 8>(q + static_cast<size_t>(h0) * hd, hd, k_base, row0, n, scale,
                                       sc + static_cast<size_t>(h0) * sc_stride, sc_stride, h0 == 0 ? pf : nullptr);
  }
#endif
  for (int h = h0; h < n_heads; h += 4) {
    const float* qh = q + static_cast<size_t>(h) * hd;
    float* sch = sc + static_cast<size_t>(h) * sc_stride;
    switch (std::min(4, n_heads - h)) {
      case 1:
        block_scores_heads<kType, 1>(qh, hd, k_base, row0, n, scale, sch, sc_stride, h == 0 ? pf : nullptr);
        break;
      case 2:
        block_scores_heads<kType, 2>(qh, hd, k_base, row0, n, scale, sch, sc_stride, h == 0 ? pf : nullptr);
        break;
      case 3:
        block_scores_heads<kType, 3>(qh, hd, k_base, row0, n, scale, sch, sc_stride, h == 0 ? pf : nullptr);
        break;
      default:
        block_scores_heads<kType, 4>(qh, hd, k_base, row0, n, scale, sch, sc_stride, h == 0 ? pf : nullptr);
        break;
    }
  }
}

// Scores of n_heads consecutive query heads against K rows [row0, row0 + n) straight from the cache.
void block_scores(const float* q, int n_heads, int hd, const void* k_base, KVElemType type, int64_t row0, int n,
                  float scale, float* sc, int sc_stride, const RowPrefetch* pf = nullptr) {
  with_kv_type(type, [&](auto t) {
    block_scores_typed<decltype(t)::value>(q, n_heads, hd, k_base, row0, n, scale, sc, sc_stride, pf);
  });
}

// Row `index` (hd elements) as f32: the row itself for f32, else widened 8 at a time into `tmp` (a tail
// of under 8, only where the type has no blocks, by the scalar conversion, which gives the same values).
inline const float* load_row(const void* base, KVElemType type, int64_t index, int hd, float* tmp) {
  const int64_t off = index * hd;
  if (type == KVElemType::F32) return static_cast<const float*>(base) + off;
  with_kv_type(type, [&](auto t) {
    constexpr KVElemType kType = decltype(t)::value;
    int d = 0;
    for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(tmp + d, load8<kType>(base, static_cast<size_t>(off + d)));
    if (d < hd) decode_kv_row(kType, static_cast<const char*>(base) + kv_bytes(kType, off + d), hd - d, tmp + d);
  });
  return tmp;
}

inline void scale_in_place(float* x, float c, int n) {
  int d = 0;
#if KVSERVE_ATTN_ZMM
  const __m512 vc16 = _mm512_set1_ps(c);
  for (; d + 16 <= n; d += 16) _mm512_storeu_ps(x + d, _mm512_mul_ps(_mm512_loadu_ps(x + d), vc16));
#endif
  const __m256 vc = _mm256_set1_ps(c);
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
// Its constants, in one place for the 8- and the 16-lane form (which must give the same bits).
namespace exp_consts {
constexpr float kLowest = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in few bits
constexpr float kLn2Lo = 1.428606765330187045e-06f;
// 1/7!, 1/6!, ... 1/1!, 1/0!: Horner's order.
constexpr float kTaylor[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
                              1.0f / 6.0f,    0.5f,          1.0f,          1.0f};
}  // namespace exp_consts

inline __m256 exp_nonpositive(__m256 x) {
  using namespace exp_consts;
  x = _mm256_max_ps(x, _mm256_set1_ps(kLowest));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  f = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), f);
  __m256 p = _mm256_set1_ps(kTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kTaylor[i]));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

#if KVSERVE_ATTN_ZMM
// exp_nonpositive on 16 lanes: each lane gets the same operations.
inline __m512 exp_nonpositive16(__m512 x) {
  using namespace exp_consts;
  x = _mm512_max_ps(x, _mm512_set1_ps(kLowest));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  f = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), f);
  __m512 p = _mm512_set1_ps(kTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kTaylor[i]));
  const __m512i pow2n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(pow2n));
}
#endif

// sc[s] = e^(sc[s] - max) for s < n, all through exp_nonpositive, and returns `sum` plus their sum: 8-lane
// chunks of even index summed into one vector and odd ones into another (lanes 0-7 and 8-15 of one
// 16-lane sum in the zmm build), then those two added and the lanes in hsum's fixed tree. The same order
// for a given n whatever else is in the batch, and in both builds.
inline float exp_block(float* sc, int n, float max, float sum) {
#if KVSERVE_ATTN_ZMM
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 vsum = _mm512_setzero_ps();
  int s = 0;
  for (; s + 16 <= n; s += 16) {
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(sc + s), vmax));
    _mm512_storeu_ps(sc + s, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (s < n) {
    // Lanes past n read as `max` (e^0, in range) and add nothing.
    const auto live = static_cast<__mmask16>((1u << (n - s)) - 1);
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_mask_loadu_ps(vmax, live, sc + s), vmax));
    _mm512_mask_storeu_ps(sc + s, live, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(live, e));
  }
  const __m256 halves = _mm256_add_ps(_mm512_castps512_ps256(vsum),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(vsum), 1)));
  return sum + hsum(halves);
#else
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 vsum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int s = 0;
  for (; s + 8 <= n; s += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(sc + s), vmax));
    _mm256_storeu_ps(sc + s, e);
    vsum[(s / 8) % 2] = _mm256_add_ps(vsum[(s / 8) % 2], e);
  }
  if (s < n) {
    alignas(32) float tail[8];
    for (int j = 0; j < 8; ++j) tail[j] = s + j < n ? sc[s + j] : max;
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(tail), vmax));
    _mm256_store_ps(tail, e);
    for (int j = 0; s + j < n; ++j) sc[s + j] = tail[j];
    const __m256 live =
        _mm256_cmp_ps(_mm256_set_ps(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_ps(static_cast<float>(n - s)), _CMP_LT_OQ);
    vsum[(s / 8) % 2] = _mm256_add_ps(vsum[(s / 8) % 2], _mm256_and_ps(e, live));
  }
  return sum + hsum(_mm256_add_ps(vsum[0], vsum[1]));
#endif
}

// max of x[0..n), n >= 1.
inline float max_of(const float* x, int n) {
  int s = 0;
#if KVSERVE_ATTN_ZMM
  __m512 m16 = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (; s + 16 <= n; s += 16) m16 = _mm512_max_ps(m16, _mm512_loadu_ps(x + s));
  __m256 m = _mm256_max_ps(_mm512_castps512_ps256(m16),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m16), 1)));
#else
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
#endif
  for (; s + 8 <= n; s += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + s));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; s < n; ++s) r = std::max(r, x[s]);
  return r;
}

}  // namespace

void KVSERVE_ATTN_NAME(attention_block_scores)(const float* q, int n_heads, int hd, const void* k_cache, KVElemType type,
                                 int64_t row0, int n, float scale, float* scores, int stride) {
  block_scores(q, n_heads, hd, k_cache, type, row0, n, scale, scores, stride);
}

float KVSERVE_ATTN_NAME(exp_nonpositive)(float x) {
  alignas(32) float v[8];
  _mm256_store_ps(v, exp_nonpositive(_mm256_set1_ps(x)));
  return v[0];
}

namespace {

// Query tokens of one sequence that share a pass over their KV head's blocks: each K/V slot is widened
// and loaded once for all of them. Every token's arithmetic is the same as alone (its scores, partition
// maxima, sums and V sums happen in the same order), so grouping never changes a result.
constexpr int kTokenGroup = 4;

// How many blocks ahead of the one being scored its K rows are asked for. Farther (4, 6, 8) measured
// no faster with the cache in memory (bench_paged_attention single_f16_cold, one thread), nor did the
// T1, T2 or NTA hints.
constexpr int kAheadBlocks = 2;

// One (token, query head)'s softmax state over the partitions folded so far, or over one partition:
// max score, sum of e^(score - max), and the output row normalized by that sum.
struct SoftmaxState {
  float* max;
  float* sum;
  float* acc;  // hd values
};

// Folds partition state `p` into `into` (a plain copy for the first partition): the two normalized rows
// weighted by their shares of the combined sum. Partitions are always folded left to right through this
// one function, on one thread or after a split across threads, so a token's output never depends on how
// the work was spread. A partition wholly before a sliding window is empty (sum 0, every other sum is at
// least 1: its max contributes e^0) and folds to nothing.
inline void fold_partition(const SoftmaxState& into, bool first, float p_max, float p_sum, const float* p_acc, int hd) {
  if (p_sum == 0.0f && !first) return;
  if (first || *into.sum == 0.0f) {
    *into.max = p_max;
    *into.sum = p_sum;
    std::copy(p_acc, p_acc + hd, into.acc);
    return;
  }
  const float new_max = std::max(*into.max, p_max);
  const float wa = new_max > *into.max ? *into.sum * std::exp(*into.max - new_max) : *into.sum;
  const float wb = new_max > p_max ? p_sum * std::exp(p_max - new_max) : p_sum;
  const float sum = wa + wb;
  const float a = wa / sum, b = wb / sum;
  *into.sum = sum;
  *into.max = new_max;
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int d = 0;
  for (; d + 8 <= hd; d += 8)
    _mm256_storeu_ps(into.acc + d,
                     _mm256_fmadd_ps(_mm256_loadu_ps(p_acc + d), vb, _mm256_mul_ps(_mm256_loadu_ps(into.acc + d), va)));
  for (; d < hd; ++d) into.acc[d] = std::fma(p_acc[d], b, into.acc[d] * a);
}

// Rows of one block that a partition pass reads: rows [row0, row0 + n) of the cache, which are slots
// [first, first + n) of the partition (the index into its score rows).
struct BlockRows {
  int64_t row0;
  int first;
  int n;
};

// Most runs (a block's rows of one KV head) of the next partition's K rows streamed during a values pass.
constexpr int64_t kMaxNextKRuns = 64;

// acc_h[d] += p_h[s] * V[s][d] for HN heads over every slot of `blocks` in order (p rows p_stride apart,
// acc rows hd apart), lanes [d0, d0 + 8 * NV) held in registers across all the blocks of a partition.
// Each V vector is widened once for all HN heads.
template <KVElemType kType, int HN, int NV>
inline void accumulate_blocks_chunk(float* acc, int hd, const float* p, int p_stride, const void* v_base,
                                    const BlockRows* blocks, int n_blocks, int d0, LinePrefetchStream* vpf) {
#if KVSERVE_ATTN_ZMM
  if constexpr (NV % 2 == 0) {
    constexpr int NZ = NV / 2;  // 16 lanes a register
    __m512 a[HN][NZ];
    for (int h = 0; h < HN; ++h)
      for (int j = 0; j < NZ; ++j) a[h][j] = _mm512_loadu_ps(acc + static_cast<size_t>(h) * hd + d0 + 16 * j);
    for (int b = 0; b < n_blocks; ++b) {
      const BlockRows& blk = blocks[b];
      for (int s = 0; s < blk.n; ++s) {
        if (vpf != nullptr) prefetch_stream_step(*vpf);
        __m512 ps[HN];
        for (int h = 0; h < HN; ++h) ps[h] = _mm512_set1_ps(p[static_cast<size_t>(h) * p_stride + blk.first + s]);
        const size_t index = static_cast<size_t>(blk.row0 + s) * hd + d0;
        for (int j = 0; j < NZ; ++j) {
          const __m512 v = load16<kType>(v_base, index + 16 * j);
          for (int h = 0; h < HN; ++h) a[h][j] = _mm512_fmadd_ps(ps[h], v, a[h][j]);
        }
      }
    }
    for (int h = 0; h < HN; ++h)
      for (int j = 0; j < NZ; ++j) _mm512_storeu_ps(acc + static_cast<size_t>(h) * hd + d0 + 16 * j, a[h][j]);
    return;
  }
#endif
  __m256 a[HN][NV];
  for (int h = 0; h < HN; ++h)
    for (int j = 0; j < NV; ++j) a[h][j] = _mm256_loadu_ps(acc + static_cast<size_t>(h) * hd + d0 + 8 * j);
  for (int b = 0; b < n_blocks; ++b) {
    const BlockRows& blk = blocks[b];
    for (int s = 0; s < blk.n; ++s) {
      if (vpf != nullptr) prefetch_stream_step(*vpf);
      __m256 ps[HN];
      for (int h = 0; h < HN; ++h) ps[h] = _mm256_set1_ps(p[static_cast<size_t>(h) * p_stride + blk.first + s]);
      const size_t index = static_cast<size_t>(blk.row0 + s) * hd + d0;
      for (int j = 0; j < NV; ++j) {
        const __m256 v = load8<kType>(v_base, index + 8 * j);
        for (int h = 0; h < HN; ++h) a[h][j] = _mm256_fmadd_ps(ps[h], v, a[h][j]);
      }
    }
  }
  for (int h = 0; h < HN; ++h)
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(acc + static_cast<size_t>(h) * hd + d0 + 8 * j, a[h][j]);
}

template <KVElemType kType, int HN>
inline void accumulate_blocks_heads(float* acc, int hd, const float* p, int p_stride, const void* v_base,
                                    const BlockRows* blocks, int n_blocks, LinePrefetchStream* vpf) {
  // Lanes held per pass: as many as the registers take (16 ymm; with zmm 32 registers of 16 lanes, so a
  // 64-wide head in one pass over the partition's V rows).
  constexpr int kNV = KVSERVE_ATTN_ZMM ? (HN == 1 ? 16 : 8) : HN == 1 ? 8 : HN == 4 ? 2 : 4;
  int d = 0;
  for (; d + 8 * kNV <= hd; d += 8 * kNV)
    accumulate_blocks_chunk<kType, HN, kNV>(acc, hd, p, p_stride, v_base, blocks, n_blocks, d, vpf);
  for (; d < hd; d += 8) accumulate_blocks_chunk<kType, HN, 1>(acc, hd, p, p_stride, v_base, blocks, n_blocks, d, vpf);
}

template <KVElemType kType>
void partition_values_typed(float* acc, int n_heads, int hd, const float* p, int p_stride, const void* v_base,
                            const BlockRows* blocks, int n_blocks, LinePrefetchStream* vpf) {
  for (int h = 0; h < n_heads; h += 4) {
    float* acch = acc + static_cast<size_t>(h) * hd;
    const float* ph = p + static_cast<size_t>(h) * p_stride;
    switch (std::min(4, n_heads - h)) {
      case 1: accumulate_blocks_heads<kType, 1>(acch, hd, ph, p_stride, v_base, blocks, n_blocks, vpf); break;
      case 2: accumulate_blocks_heads<kType, 2>(acch, hd, ph, p_stride, v_base, blocks, n_blocks, vpf); break;
      case 3: accumulate_blocks_heads<kType, 3>(acch, hd, ph, p_stride, v_base, blocks, n_blocks, vpf); break;
      default: accumulate_blocks_heads<kType, 4>(acch, hd, ph, p_stride, v_base, blocks, n_blocks, vpf); break;
    }
  }
}

// acc rows of n_heads consecutive heads += their softmax weights times the V rows of `blocks` (a
// partition's blocks in order), read straight from the cache; hd % 8 == 0. vpf (or null) is stepped at
// every slot.
void partition_values(float* acc, int n_heads, int hd, const float* p, int p_stride, const void* v_base,
                      KVElemType type, const BlockRows* blocks, int n_blocks, LinePrefetchStream* vpf) {
  with_kv_type(type, [&](auto t) {
    partition_values_typed<decltype(t)::value>(acc, n_heads, hd, p, p_stride, v_base, blocks, n_blocks, vpf);
  });
}

// 8 or 16 f32 lanes: what accumulate_many_heads_chunk needs of a register width.
struct Lanes8 {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* x, V v) { _mm256_storeu_ps(x, v); }
  static V fma(float p, V v, V acc) { return _mm256_fmadd_ps(_mm256_set1_ps(p), v, acc); }
  template <KVElemType kType>
  static V widen(const void* base, size_t index) {
    return load8<kType>(base, index);
  }
};
#if KVSERVE_ATTN_ZMM
struct Lanes16 {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V load(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* x, V v) { _mm512_storeu_ps(x, v); }
  static V fma(float p, V v, V acc) { return _mm512_fmadd_ps(_mm512_set1_ps(p), v, acc); }
  template <KVElemType kType>
  static V widen(const void* base, size_t index) {
    return load16<kType>(base, index);
  }
};
#endif

// Lanes [d, d + L::kWidth) of HN heads' acc rows += p_h[s] * V row s over every slot of `blocks` in order.
template <class L, KVElemType kType, int HN>
inline void accumulate_many_heads_lanes(float* acc, int hd, int d, const float* p, int p_stride, const void* v_base,
                                        const BlockRows* blocks, int n_blocks) {
  typename L::V a[HN];
  for (int h = 0; h < HN; ++h) a[h] = L::load(acc + static_cast<size_t>(h) * hd + d);
  for (int b = 0; b < n_blocks; ++b) {
    const BlockRows& blk = blocks[b];
    const float* pb = p + blk.first;
    for (int s = 0; s < blk.n; ++s) {
      const typename L::V v = L::template widen<kType>(v_base, static_cast<size_t>(blk.row0 + s) * hd + d);
      for (int h = 0; h < HN; ++h) a[h] = L::fma(pb[static_cast<size_t>(h) * p_stride + s], v, a[h]);
    }
  }
  for (int h = 0; h < HN; ++h) L::store(acc + static_cast<size_t>(h) * hd + d, a[h]);
}

// acc rows of HN heads (hd apart) += p_h[s] * V row s over every slot of `blocks` in order, for the many
// query heads of one KV head (MQA; MLA's 16 heads on a 576-value latent row): 16 (8) lanes of every head
// held in registers while the partition's slots go by, so each V vector is widened once for all the heads
// and every V row read once per lane chunk. Widening a block into a buffer that each head then read (the
// path below) read 16 x 36 KiB of f32 rows a block from L2 at MLA's shape. Each lane is one chain in slot
// order, as in accumulate_rows and accumulate_blocks_chunk: the same bits in both builds.
template <KVElemType kType, int HN>
inline void accumulate_many_heads_chunk(float* acc, int hd, const float* p, int p_stride, const void* v_base,
                                        const BlockRows* blocks, int n_blocks) {
  int d = 0;
#if KVSERVE_ATTN_ZMM
  for (; d + 16 <= hd; d += 16)
    accumulate_many_heads_lanes<Lanes16, kType, HN>(acc, hd, d, p, p_stride, v_base, blocks, n_blocks);
#endif
  for (; d + 8 <= hd; d += 8)
    accumulate_many_heads_lanes<Lanes8, kType, HN>(acc, hd, d, p, p_stride, v_base, blocks, n_blocks);
}

// accumulate_many_heads_chunk over n_heads heads, as many at a time as the registers hold beside a V
// vector and a broadcast weight (16 of 32 zmm; 12 of 16 ymm).
template <KVElemType kType>
void accumulate_many_heads_typed(float* acc, int n_heads, int hd, const float* p, int p_stride, const void* v_base,
                                 const BlockRows* blocks, int n_blocks) {
  constexpr int kMax = KVSERVE_ATTN_ZMM ? 16 : 12;
  for (int h = 0; h < n_heads;) {
    const int hn = std::min(kMax, n_heads - h);
    float* ah = acc + static_cast<size_t>(h) * hd;
    const float* ph = p + static_cast<size_t>(h) * p_stride;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((hn == I + 1 ? accumulate_many_heads_chunk<kType, I + 1>(ah, hd, ph, p_stride, v_base, blocks, n_blocks)
                    : void()),
       ...);
    }(std::make_integer_sequence<int, kMax>{});
    h += hn;
  }
}

void accumulate_many_heads(float* acc, int n_heads, int hd, const float* p, int p_stride, const void* v_base,
                           KVElemType type, const BlockRows* blocks, int n_blocks) {
  with_kv_type(type, [&](auto t) {
    accumulate_many_heads_typed<decltype(t)::value>(acc, n_heads, hd, p, p_stride, v_base, blocks, n_blocks);
  });
}

// Slots of one partition: partition_blocks(block_size) blocks.
inline int64_t partition_slots(int block_size) { return partition_blocks(block_size) * block_size; }

// Tokens [t_begin, t_begin + n_tok) of one KV head over the partitions [part_begin, part_end) of their
// context (each token stops at its own last block). A partition is three passes: every score of the
// partition, then one softmax over them (a single max, so no rescaling of the output row inside a
// partition), then the V rows weighted into the output row, held in registers across the partition's
// blocks. A token's partition state either goes to `partials` (one token: the split path writes
// [part - part_begin][group][hd + 2] = acc, max, sum) or is folded into the running merge and, after the
// token's last partition, written to a.out.
//
// With n_kvh > 1 (one token, hd % 8 == 0, up to 4 query heads per KV head, n_kvh <= kTokenGroup) the rows
// are KV heads kvh .. kvh + n_kvh - 1 of that token instead of tokens: the scores pass goes block by block
// with the heads inside, so the cache is read in address order (a block holds its heads side by side),
// and head i's partials go head_stride floats after head 0's. Each head's arithmetic is the one-head
// walk's, so the same bits.
void attend_token_group(const PagedAttentionArgs& a, int64_t t_begin, int n_tok, int kvh, int64_t part_begin,
                        int64_t part_end, float* scratch_base, float* partials, int n_kvh = 1, size_t head_stride = 0,
                        const NextPartition* after = nullptr) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int bs = a.block_size;
  const int64_t bpp = partition_blocks(bs);
  const int ps = static_cast<int>(partition_slots(bs));
  const size_t n_rows = static_cast<size_t>(kTokenGroup) * group;
  float* scores = scratch_base;                                // [n_tok][group][ps]
  float* acc = scores + n_rows * ps;                           // [n_tok][group][hd]
  float* part_max = acc + n_rows * hd;                         // [n_tok][group]
  float* part_sum = part_max + n_rows;                         // [n_tok][group]
  float* v_block = part_sum + n_rows;                          // [bs][hd] widened V rows
  float* k_block = v_block + static_cast<size_t>(bs) * hd;     // [bs][hd] widened K rows
  float* merged_acc = k_block + static_cast<size_t>(bs) * hd;  // [n_tok][group][hd] folded partitions
  float* merged_max = merged_acc + n_rows * hd;                // [n_tok][group]
  float* merged_sum = merged_max + n_rows;                     // [n_tok][group]
  thread_local std::vector<const float*> v_rows_storage;
  v_rows_storage.resize(bs);
  const float** v_rows = v_rows_storage.data();
  thread_local std::vector<BlockRows> blocks_storage;
  blocks_storage.resize(static_cast<size_t>(bpp));
  const size_t row_bytes = kv_bytes(a.kv_type, hd);

  const bool heads = n_kvh > 1;
  if (heads) n_tok = n_kvh;  // rows are KV heads of token t_begin
  const float* q[kTokenGroup];
  int64_t last_pos[kTokenGroup] = {};
  int64_t first_pos[kTokenGroup] = {};  // sliding window start, else 0
  int64_t last_block[kTokenGroup] = {};
  int row_kvh[kTokenGroup];  // each row's KV head
  for (int i = 0; i < n_tok; ++i) {
    const int64_t t = heads ? t_begin : t_begin + i;
    row_kvh[i] = heads ? kvh + i : kvh;
    last_pos[i] = a.pos0 + t;
    first_pos[i] = first_attended(a, t);
    last_block[i] = last_pos[i] / bs;
    q[i] = a.q + (t * a.n_heads + int64_t{row_kvh[i]} * group) * hd;
  }
  const int64_t lb_last = last_block[n_tok - 1];
  const bool whole_blocks = (heads ? n_tok : 1) == a.n_kv_heads;
  const bool skip_contiguous_k = whole_blocks && !prefetches_contiguous_k();
  auto block_row0_of = [&](int64_t lb, int h) {
    return (a.block_table[lb] * a.block_stride + int64_t{h} * bs * hd) / hd;
  };
  auto block_row0 = [&](int64_t lb) { return block_row0_of(lb, kvh); };

  for (int64_t part = part_begin; part < part_end; ++part) {
    const int64_t lb0 = part * bpp;
    const int64_t lb1 = std::min(lb0 + bpp, lb_last + 1);
    if (lb0 >= lb1) break;
    // Slots of the partition each token attends to (tokens before first_tok ended in an earlier partition).
    int n_valid[kTokenGroup];
    int first_tok = n_tok;
    for (int i = n_tok - 1; i >= 0; --i) {
      n_valid[i] = static_cast<int>(std::clamp<int64_t>(last_pos[i] + 1 - lb0 * bs, 0, ps));
      if (n_valid[i] > 0) first_tok = i;
    }
    const int max_valid = n_valid[n_tok - 1];
    // Slots before a token's sliding window: [0, f_valid) of the partition. Their scores are computed with
    // the rest and then weigh 0; a partition that no token attends to is skipped, its states empty.
    int f_valid[kTokenGroup] = {};
    bool any_attended = false;
    for (int i = first_tok; i < n_tok; ++i) {
      f_valid[i] = static_cast<int>(std::clamp<int64_t>(first_pos[i] - lb0 * bs, 0, ps));
      any_attended |= f_valid[i] < n_valid[i];
    }

    // The partition's state per (token, head): out to the split path's partials, or folded.
    const auto emit_states = [&] {
      for (int i = first_tok; i < n_tok; ++i) {
        for (int h = 0; h < group; ++h) {
          const int hh = i * group + h;
          const float* p_acc = acc + static_cast<size_t>(hh) * hd;
          if (partials != nullptr) {
            float* dst = partials + (heads ? static_cast<size_t>(i) * head_stride : 0) +
                         static_cast<size_t>((part - part_begin) * group + h) * (hd + 2);
            std::copy(p_acc, p_acc + hd, dst);
            dst[hd] = part_max[hh];
            dst[hd + 1] = part_sum[hh];
            continue;
          }
          const SoftmaxState merged{merged_max + hh, merged_sum + hh, merged_acc + static_cast<size_t>(hh) * hd};
          fold_partition(merged, part == 0, part_max[hh], part_sum[hh], p_acc, hd);
          if (last_block[i] < lb0 + bpp) {
            float* o = a.out + ((t_begin + i) * a.n_heads + int64_t{kvh} * group + h) * hd;
            std::copy(merged.acc, merged.acc + hd, o);
            if (a.lse != nullptr)
              a.lse[(t_begin + i) * a.n_heads + int64_t{kvh} * group + h] = *merged.max + std::log(*merged.sum);
          }
        }
      }
    };
    if (!any_attended) {
      std::fill(acc, acc + static_cast<size_t>(n_tok) * group * hd, 0.0f);
      std::fill(part_max, part_max + static_cast<size_t>(n_tok) * group, 0.0f);
      std::fill(part_sum, part_sum + static_cast<size_t>(n_tok) * group, 0.0f);
      emit_states();
      continue;
    }

    // Pass 1: scores. While block lb's scores are computed, the K rows of block lb + 2 and this block's V
    // rows (read in pass 3, a few blocks later) stream in.
    for (int64_t lb = lb0; lb < lb1; ++lb) {
      const int first = static_cast<int>((lb - lb0) * bs);
      const int64_t row0 = block_row0(lb);
      const int rows_max = std::min(bs, max_valid - first);
      // K of the block two ahead (and, at the call's first block, of the next one, which no earlier block
      // asked for): one block ahead, the K rows of a cache in memory arrived after their scores started
      // (perf: the first FMA on each K row took a sixth of the scores' samples). On Zen 4 not where the
      // walk reads whole blocks (every KV head) and that block follows its predecessor in memory (a
      // request's blocks allocated in a row; prefetches_contiguous_k).
      const auto k_rows_of = [&](int64_t b, int h) -> const char* {
        if (b > lb_last || !(b < lb1 || part + 1 < part_end)) return nullptr;
        if (skip_contiguous_k && b > 0 && a.block_table[b] == a.block_table[b - 1] + 1) return nullptr;
        return static_cast<const char*>(a.k_cache) + static_cast<size_t>(block_row0_of(b, h)) * row_bytes;
      };
      if (lb == lb0 && part == part_begin)
        for (int i = 0; i < (heads ? n_tok : 1); ++i)
          for (int64_t b = lb + 1; b < lb + kAheadBlocks; ++b)
            RowPrefetch{k_rows_of(b, row_kvh[i]), nullptr, row_bytes}.rows(0, bs);
      // Row i's prefetches (with several heads, each head asks for its own rows).
      const auto pf_of = [&](int i) {
        const int h = row_kvh[i];
        return RowPrefetch{k_rows_of(lb + kAheadBlocks, h),
                           static_cast<const char*>(a.v_cache) + static_cast<size_t>(block_row0_of(lb, h)) * row_bytes,
                           row_bytes};
      };
      const RowPrefetch pf = pf_of(first_tok);
      // The rows the first token's scores walk ask for their prefetches; the rest of the block's after
      // (all of them where that token's context ended in an earlier block: tiny blocks, a chunk's tokens).
      const int pf_rows = hd % 8 == 0 ? std::clamp(n_valid[first_tok] - first, 0, bs) : 0;
      if (heads) {
        for (int i = 0; i < n_tok; ++i) {
          const RowPrefetch pf_i = pf_of(i);
          block_scores(q[i], group, hd, a.k_cache, a.kv_type, block_row0_of(lb, row_kvh[i]), rows_max, a.scale,
                       scores + static_cast<size_t>(i * group) * ps + first, ps, &pf_i);
        }
      } else if (hd % 8 == 0) {
        for (int i = first_tok; i < n_tok; ++i) {
          const int rows = std::min(bs, n_valid[i] - first);
          if (rows <= 0) continue;
          block_scores(q[i], group, hd, a.k_cache, a.kv_type, row0, rows, a.scale,
                       scores + static_cast<size_t>(i * group) * ps + first, ps, i == first_tok ? &pf : nullptr);
        }
      } else {
        const float* k_rows = k_block;
        if (a.kv_type == KVElemType::F32) {
          k_rows = static_cast<const float*>(a.k_cache) + row0 * hd;
        } else {
          for (int s = 0; s < rows_max; ++s)
            load_row(a.k_cache, a.kv_type, row0 + s, hd, k_block + static_cast<size_t>(s) * hd);
        }
        for (int i = first_tok; i < n_tok; ++i) {
          const int rows = std::min(bs, n_valid[i] - first);
          for (int h = 0; h < group; ++h) {
            float* sc = scores + static_cast<size_t>(i * group + h) * ps + first;
            const float* qh = q[i] + static_cast<size_t>(h) * hd;
            for (int s = 0; s < rows; ++s) sc[s] = dot(qh, k_rows + static_cast<size_t>(s) * hd, hd) * a.scale;
          }
        }
      }
      if (!heads) pf.rows(pf_rows, rows_max);
    }

    // Pass 2: one softmax per (token, head) over its slots of the partition (from its window's start).
    for (int i = first_tok; i < n_tok; ++i) {
      const int fv = f_valid[i];
      for (int h = 0; h < group; ++h) {
        const int hh = i * group + h;
        float* sc = scores + static_cast<size_t>(hh) * ps;
        if (fv >= n_valid[i]) {  // this token's window starts after the partition
          part_max[hh] = 0.0f;
          part_sum[hh] = 0.0f;
          std::fill(sc, sc + n_valid[i], 0.0f);
          continue;
        }
        if (a.softcap > 0)
          for (int s = fv; s < n_valid[i]; ++s) sc[s] = soft_cap(sc[s], a.softcap);
        part_max[hh] = max_of(sc + fv, n_valid[i] - fv);
        part_sum[hh] = exp_block(sc + fv, n_valid[i] - fv, part_max[hh], 0.0f);
        // Normalized before the V sums, as llama.cpp's softmax does (its outputs match more often).
        scale_in_place(sc + fv, 1.0f / part_sum[hh], n_valid[i] - fv);
        std::fill(sc, sc + fv, 0.0f);
      }
      std::fill(acc + static_cast<size_t>(i) * group * hd, acc + static_cast<size_t>(i + 1) * group * hd, 0.0f);
    }

    // Pass 3: each (token, head) adds p_s * V_s in slot order. With hd % 8 == 0 the V rows are widened in
    // registers once per token for all its heads (up to 4 heads with whole rows in registers; more with 16
    // or 8 lanes of each at a time, accumulate_many_heads); other head sizes widen a block into v_block.
    // The many-heads sums do not stream the next partition's K rows in: stepped at every slot of each of
    // their passes, the stream cost MQA_8x64 ~8 % (bench_paged_attention single_f16_cold) and gained MLA's
    // shape 3-4 %. (Leaving out MLA's V-row hints, which name the K rows being scored, cost it ~5 %.)
    if (hd % 8 == 0 && group <= 4) {
      // The next partition's K rows (its blocks in order, each block's rows of every KV head of the call)
      // stream into L2 during this values pass, which reads V rows the scores pass already brought in:
      // without it the memory sat idle through this pass and the next partition's scores started from
      // memory. With the V hint of RowPrefetch, bench_paged_attention (three alternating runs, medians of
      // 3): region_cold SmolLM2 ~1.27x at 512 positions and ~1.5x at 2048, Llama3_1B ~1.25x at 512;
      // batch16_f16_cold ~1.06x. Attention is ~18 % of a SmolLM2 batch-1 decode step at 640 positions.
      // After the call's last partition, the caller's next one (`after`): a thread's units can take
      // several calls (attend_decode_units), and without it each started from memory.
      const char* next_k_runs[kMaxNextKRuns];
      LinePrefetchStream next_k{next_k_runs, 0, 0, 0, 0, 0, 0};
      const bool last_part = part + 1 == part_end;
      const int64_t next_part = !last_part ? part + 1 : after != nullptr ? after->part : -1;
      const int next_kvh = !last_part ? row_kvh[0] : after != nullptr ? after->kvh : 0;
      const int n_heads_read = !last_part ? (heads ? n_tok : 1) : after != nullptr ? after->n_kvh : 0;
      const int64_t nb0 = next_part * bpp, nb1 = std::min(nb0 + bpp, lb_last + 1);
      // Whole lines of each block's rows: none where they are under a line (tiny blocks of tiny heads),
      // and then no stream.
      next_k.run_lines = static_cast<int64_t>(static_cast<size_t>(bs) * row_bytes / 64);
      if (next_part >= 0 && nb0 < nb1 && (nb1 - nb0) * n_heads_read <= kMaxNextKRuns) {
        int64_t n_runs = 0;
        for (int64_t lb = nb0; lb < nb1; ++lb)
          for (int i = 0; i < n_heads_read; ++i)
            next_k_runs[n_runs++] =
                static_cast<const char*>(a.k_cache) + static_cast<size_t>(block_row0_of(lb, next_kvh + i)) * row_bytes;
        next_k.n_lines = n_runs * next_k.run_lines;
        int64_t slots = 0;
        for (int i = first_tok; i < n_tok; ++i) slots += n_valid[i];
        next_k.per_slot = (next_k.n_lines + slots - 1) / std::max<int64_t>(1, slots);
      }
      LinePrefetchStream* vpf = next_k.n_lines > 0 ? &next_k : nullptr;
      for (int i = first_tok; i < n_tok; ++i) {
        BlockRows* blocks = blocks_storage.data();
        int n_blocks = 0;
        for (int64_t lb = lb0; lb < lb1; ++lb) {
          const int first = static_cast<int>((lb - lb0) * bs);
          const int lo = std::max(first, f_valid[i]);  // a sliding window's first slot in this block
          const int rows = std::min(bs, n_valid[i] - first) - (lo - first);
          if (rows > 0) blocks[n_blocks++] = {block_row0_of(lb, row_kvh[i]) + (lo - first), lo, rows};
        }
        partition_values(acc + static_cast<size_t>(i * group) * hd, group, hd,
                         scores + static_cast<size_t>(i * group) * ps, ps, a.v_cache, a.kv_type, blocks, n_blocks, vpf);
      }
    } else if (hd % 8 == 0) {
      for (int i = first_tok; i < n_tok; ++i) {
        BlockRows* blocks = blocks_storage.data();
        int n_blocks = 0;
        for (int64_t lb = lb0; lb < lb1; ++lb) {
          const int first = static_cast<int>((lb - lb0) * bs);
          const int lo = std::max(first, f_valid[i]);
          const int rows = std::min(bs, n_valid[i] - first) - (lo - first);
          if (rows > 0) blocks[n_blocks++] = {block_row0_of(lb, row_kvh[i]) + (lo - first), lo, rows};
        }
        accumulate_many_heads(acc + static_cast<size_t>(i * group) * hd, group, hd,
                              scores + static_cast<size_t>(i * group) * ps, ps, a.v_cache, a.kv_type, blocks, n_blocks);
      }
    } else {
      for (int64_t lb = lb0; lb < lb1; ++lb) {
        const int first = static_cast<int>((lb - lb0) * bs);
        const int64_t row0 = block_row0(lb);
        const int rows_max = std::min(bs, max_valid - first);
        for (int s = 0; s < rows_max; ++s) v_rows[s] = load_row(a.v_cache, a.kv_type, row0 + s, hd, v_block + s * hd);
        for (int i = first_tok; i < n_tok; ++i) {
          const int rows = std::min(bs, n_valid[i] - first);
          if (rows <= 0) continue;
          for (int h = 0; h < group; ++h) {
            const int hh = i * group + h;
            accumulate_rows(acc + static_cast<size_t>(hh) * hd, v_rows, scores + static_cast<size_t>(hh) * ps + first,
                            rows, hd);
          }
        }
      }
    }

    emit_states();
  }
}

size_t scratch_floats(const PagedAttentionArgs& a) {
  const size_t group = static_cast<size_t>(a.n_heads / a.n_kv_heads);
  const size_t hd = static_cast<size_t>(a.head_dim);
  const size_t bs = static_cast<size_t>(a.block_size);
  const size_t ps = static_cast<size_t>(partition_slots(a.block_size));
  const size_t n_rows = kTokenGroup * group;
  return n_rows * (ps + hd + 2) + 2 * bs * hd + n_rows * (hd + 2);
}

}  // namespace

void KVSERVE_ATTN_NAME(paged_attention_items)(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
  thread_local std::vector<float> scratch;
  scratch.resize(scratch_floats(a));
  // Items are token * n_kv_heads + kv_head; for each KV head, the range's tokens go in groups.
  const int64_t nkv = a.n_kv_heads;
  for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
    const int64_t t_first = (begin - kvh + nkv - 1) / nkv;  // first t with t * nkv + kvh >= begin
    const int64_t t_end = (end - kvh + nkv - 1) / nkv;      // first t with t * nkv + kvh >= end
    for (int64_t t = std::max<int64_t>(0, t_first); t < t_end; t += kTokenGroup) {
      const int n_tok = static_cast<int>(std::min<int64_t>(kTokenGroup, t_end - t));
      const int64_t n_parts = partition_count(a, t + n_tok - 1);
      attend_token_group(a, t, n_tok, kvh, 0, n_parts, scratch.data(), nullptr);
    }
  }
}

void KVSERVE_ATTN_NAME(paged_attention_partition)(const PagedAttentionArgs& a, int64_t t, int kvh, int64_t part_begin,
                                                  int64_t part_end, float* partials) {
  thread_local std::vector<float> scratch;
  scratch.resize(scratch_floats(a));
  attend_token_group(a, t, 1, kvh, part_begin, part_end, scratch.data(), partials);
}

void KVSERVE_ATTN_NAME(paged_attention_partition_heads)(const PagedAttentionArgs& a, int64_t t, int kvh, int n_kvh,
                                                        int64_t part_begin, int64_t part_end, float* partials,
                                                        size_t head_stride, const NextPartition* after) {
  thread_local std::vector<float> scratch;
  scratch.resize(scratch_floats(a));
  const int group = a.n_heads / a.n_kv_heads;
  // The shapes attend_token_group walks several heads of (others: one head at a time, the same bits).
  const int max_heads = a.head_dim % 8 == 0 && group <= 4 ? kTokenGroup : 1;
  for (int h = 0; h < n_kvh; h += max_heads) {
    const int n = std::min(max_heads, n_kvh - h);
    // Each walk but the last is followed by the next heads' first partition.
    const NextPartition next_heads{part_begin, kvh + h + n, std::min(max_heads, n_kvh - h - n)};
    attend_token_group(a, t, 1, kvh + h, part_begin, part_end, scratch.data(),
                       partials + static_cast<size_t>(h) * head_stride, n, head_stride,
                       h + n < n_kvh ? &next_heads : after);
  }
}

void KVSERVE_ATTN_NAME(paged_attention_merge)(const PagedAttentionArgs& a, int64_t t, int kvh, const float* partials) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int64_t n_parts = partition_count(a, t);
  // Partitions wholly before a sliding window are empty and fold to nothing: they are not read, so a caller
  // need not compute them (the batch-1 decode step gives none of its units to them).
  const int64_t p_first = first_attended(a, t) / a.block_size / partition_blocks(a.block_size);
  thread_local std::vector<float> merged;
  merged.resize(static_cast<size_t>(hd) + 2);
  for (int h = 0; h < group; ++h) {
    const SoftmaxState state{merged.data() + hd, merged.data() + hd + 1, merged.data()};
    for (int64_t p = p_first; p < n_parts; ++p) {
      const float* src = partials + (static_cast<size_t>(p) * group + h) * (hd + 2);
      fold_partition(state, p == p_first, src[hd], src[hd + 1], src, hd);
    }
    std::copy(state.acc, state.acc + hd, a.out + (t * a.n_heads + int64_t{kvh} * group + h) * hd);
    if (a.lse != nullptr) a.lse[t * a.n_heads + int64_t{kvh} * group + h] = *state.max + std::log(*state.sum);
  }
}

void KVSERVE_ATTN_NAME(h2o_attend)(const float* q, int group, int hd, const void* k_cache, const void* v_cache,
                                   KVElemType type, const int64_t* block_row0, int block_size, int64_t n, float scale,
                                   float softcap, float* scores, float* out, float* drawn) {
  // Each head's scores row holds whole blocks and 16 more: a block's scores are written in vectors, past
  // its last row (as the partitions' rows of paged attention allow), and must not reach the next head's.
  const int64_t n_blocks = (n + block_size - 1) / block_size;
  const auto stride = static_cast<int>(n_blocks * block_size + 16);
  thread_local std::vector<BlockRows> blocks;
  blocks.clear();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int m = static_cast<int>(std::min<int64_t>(block_size, n - b * block_size));
    block_scores(q, group, hd, k_cache, type, block_row0[b], m, scale, scores + b * block_size, stride);
    blocks.push_back({block_row0[b], static_cast<int>(b * block_size), m});
  }
  // One softmax per query head over every kept slot; its weights are also what the slots drew.
  for (int h = 0; h < group; ++h) {
    float* sc = scores + static_cast<size_t>(h) * static_cast<size_t>(stride);
    if (softcap > 0)
      for (int64_t s = 0; s < n; ++s) sc[s] = soft_cap(sc[s], softcap);
    const float mx = max_of(sc, static_cast<int>(n));
    // The paged kernel's exponentials and sum order (exp_block), the same bits in both builds.
    const float inv = 1.0f / exp_block(sc, static_cast<int>(n), mx, 0.0f);
    for (int64_t s = 0; s < n; ++s) {
      sc[s] *= inv;
      drawn[s] += sc[s];
    }
  }
  std::fill(out, out + static_cast<size_t>(group) * static_cast<size_t>(hd), 0.0f);
  if (group > 4) {  // MQA, MLA's latent rows: as the paged kernel's values pass, the same bits
    accumulate_many_heads(out, group, hd, scores, stride, v_cache, type, blocks.data(), static_cast<int>(blocks.size()));
  } else {
    partition_values(out, group, hd, scores, stride, v_cache, type, blocks.data(), static_cast<int>(blocks.size()),
                     nullptr);
  }
}

}  // namespace kvserve::detail

#undef KVSERVE_ATTN_NAME
#undef KVSERVE_ATTN_CAT
#undef KVSERVE_ATTN_CAT2
