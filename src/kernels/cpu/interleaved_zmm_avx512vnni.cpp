// Two interleaved 8-row groups in one 512-bit register: the Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K kernels
// of interleaved_rows.h (avx512zmm namespace) for calls that take pairs of groups, above all batched
// decode and prefill, where the kernels are bound by instructions rather than by memory.
//
// Why: on a core with full-width AVX-512 (Zen 5, bench_cpu_peak Peak/*: vpdpbusd on zmm issues at the
// same instructions per cycle as on ymm) a zmm vpdpbusd does twice the multiply-adds, and the per-block
// float work (convert, scale, FMA) is done once for 16 rows. A zmm holds group 0's 8 rows in its low
// half and group 1's in its high half, so the records stay as they are (one load and one 256-bit insert
// per quant vector, shared by every token; Q4_0 / Q4_1 / Q8_0 use the pair layout instead, one load), and
// each token's broadcast activation is one vpbroadcastd for both groups.
//
// Each lane is one row and gets exactly the operations the 8-row VNNI kernel gives it (the same exact
// int32 block sums, then the same float multiply, convert and FMA in the same order), so results are
// bit-identical to avx512vnni:: and avx2:: (tests: VnniKernelsAreBitIdenticalToAvx2, which also runs these).
//
// Compiled with the *_avx512vnni.cpp flags; only called after cpu_has_avx512_vnni().
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (_mm512_cvtph_ps, _mm512_cvtepi32_ps, _mm512_castsi256_si512, ...) pass an
// _mm512_undefined_*() value that is initialized from itself, which -W(maybe-)uninitialized reports once
// they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/interleaved_q32_kernels.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/quants.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see interleaved_q32_kernels.h

// The 32 bytes at offset `off` of both groups' records: group 0's in the low half.
inline __m512i load_pair(const uint8_t* rec0, const uint8_t* rec1, size_t off) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec0 + off))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec1 + off)), 1);
}

// The 8 fp16 values at offset `off` of both records, as 16 floats (rows of group 0, then group 1).
inline __m512 load_pair_ph(const uint8_t* rec0, const uint8_t* rec1, size_t off) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec0 + off));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec1 + off));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

enum class Q32 { kQ4_0, kQ4_1, kQ8_0 };

// Q4_0 / Q4_1 / Q8_0 in the pair layout, P pairs of groups times T tokens: gemm_fixed and gemm_q8_0_fixed
// (kVnni = true) of interleaved_q32_kernels.h with both groups of a pair in one register. A block is 8
// quant vectors g: Q4's 4 packed vectors as their low nibbles (elements 4g) then their high ones (16 + 4(g
// - 4)); Q8_0's 8 vectors as w + 128 unsigned, the 128 * sum(y) that adds taken off at the start of the
// block's sum. In the pair layout each vector of both groups is one 64-byte load: from the group layout
// (two 32-byte loads and an insert per vector) this kernel ran at ~0.9x (bench_matmul Q4_0 16 tokens,
// one thread).
template <Q32 kType, int P, int T>
void gemm_pairs_q32(int64_t nb, const uint8_t* pairs, size_t pair_bytes, const PackedActs32* acts, float* out,
                    int64_t stride, const uint8_t* far) {
  constexpr bool kQ8 = kType == Q32::kQ8_0, kQ4_1 = kType == Q32::kQ4_1;
  constexpr size_t kScaleBytes = kQ4_1 ? 64 : 32;  // both groups' d (and m)
  constexpr size_t kRecordBytes = kQ8 ? kQ8_0RecordBytes : kQ4RecordBytes<kQ4_1>;  // one group's
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i sign_flip = _mm512_set1_epi8(-128);
  __m512 acc[P][T];
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[P];
    // A pair's record is two groups' records; the far stream keeps the group layout's bytes per block.
    block_records<2 * kRecordBytes, P>(pairs, pair_bytes, i, rec);
    far_stream<kRecordBytes>(far, i);
    __m512i sum[P][T];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i q[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const __m512i packed =
            _mm512_loadu_si512(reinterpret_cast<const __m512i*>(rec[p] + kScaleBytes) + (kQ8 ? g : g % 4));
        q[p] = kQ8 ? _mm512_xor_si512(packed, sign_flip)
                   : _mm512_and_si512(g < 4 ? packed : _mm512_srli_epi16(packed, 4), low_mask);
      }
      const int elem = kQ8 || g < 4 ? 4 * g : 16 + 4 * (g - 4);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i y = broadcast4(acts[t].qs + 32 * i + elem);
        // Q4_0's -8 * sum(y), or Q8_0's -128 * sum(y) = -16 * (8 * sum(y)), exact in int32.
        const __m512i start = kQ4_1 ? _mm512_setzero_si512()
                                    : _mm512_set1_epi32((kQ8 ? -16 : -1) * acts[t].q4_offset[i]);
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) sum[p][t] = _mm512_dpbusd_epi32(g == 0 ? start : sum[p][t], q[p], y);
      }
    }
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[p])));
      [[maybe_unused]] __m512 mw;
      if constexpr (kQ4_1) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[p] + 32)));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512 dy = _mm512_set1_ps(acts[t].d[i]);
        acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dy), _mm512_cvtepi32_ps(sum[p][t]), acc[p][t]);
        if constexpr (kQ4_1) acc[p][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(acts[t].s[i]), acc[p][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + t * stride + 16 * p, acc[p][t]);
}

// n_pairs (1..kMaxZmmPairs) pairs times n_tok (1..kMaxZmmTokens) tokens of one Q32 type.
template <Q32 kType>
void gemm_pairs(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                int64_t out_stride, const uint8_t* prefetch) {
  constexpr size_t kRecordBytes = kType == Q32::kQ8_0 ? kQ8_0RecordBytes : kQ4RecordBytes<kType == Q32::kQ4_1>;
  const int64_t nb = n / 32;
  const size_t pair_bytes = 2 * static_cast<size_t>(nb) * kRecordBytes;
  with_token_count<avx512zmm::kMaxZmmTokens>(n_tok, [&]<int T>() {
    if (n_pairs >= 2) {
      gemm_pairs_q32<kType, 2, T>(nb, pairs, pair_bytes, acts, out, out_stride, prefetch);
    } else {
      gemm_pairs_q32<kType, 1, T>(nb, pairs, pair_bytes, acts, out, out_stride, prefetch);
    }
  });
}

// Q4_K / Q5_K (kQ5) x Q8_K, a pair of groups times T tokens: gemm_q4_K_fixed<kVnni = true> of
// interleaved_kquant_kernels.h with both groups in one register. The sub-block scales of the 16 rows
// widen from two 8-byte loads; the mins go through the same byte shuffle as there, with group 0's 16
// bytes in the low 256 bits and group 1's in the high ones.
template <bool kQ5, int T>
void gemm_pair_q4_K(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                    int64_t stride, const uint8_t* far) {
  constexpr size_t kRecordBytes = kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes;
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  // [min of sub-block 2k, min of 2k + 1] per row from 16 bytes (sub-blocks 2k, 2k + 1, rows in order) in
  // each 128-bit lane: lanes 0 and 1 take rows 0-3 and 4-7 of group 0, lanes 2 and 3 those of group 1.
  const __m512i min_pick = _mm512_broadcast_i64x4(
      _mm256_setr_epi8(0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11, -1,  //
                       4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15, -1));
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[2];
    block_records<kRecordBytes, 2, kQK_K>(group, group_bytes, i, rec, far);
    __m512i isum[T];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
        __m512i sum[T];
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m512i packed = load_pair(rec[0], rec[1], 160 + 32 * (8 * k + g));
          __m512i q = _mm512_and_si512(e == 0 ? packed : _mm512_srli_epi16(packed, 4), low_mask);
          if constexpr (kQ5) {
            const __m512i planes = load_pair(rec[0], rec[1], kQ4KRecordBytes + 32 * g);
            const int bit = 2 * k + e;
            const __m512i moved = bit < 4 ? _mm512_slli_epi16(planes, 4 - bit) : _mm512_srli_epi16(planes, bit - 4);
            q = _mm512_or_si512(q, _mm512_and_si512(moved, bit4));
          }
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i y = broadcast4(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
            sum[t] = _mm512_dpbusd_epi32(g == 0 ? _mm512_setzero_si512() : sum[t], q, y);
          }
        }
        const size_t scale_off = 32 + 8 * (2 * k + e);
        const __m512i scales = _mm512_cvtepu8_epi32(
            _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[0] + scale_off)),
                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[1] + scale_off))));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512i p = _mm512_mullo_epi32(sum[t], scales);
          isum[t] = k == 0 && e == 0 ? p : _mm512_add_epi32(isum[t], p);
        }
      }
    }
    __m512i mins[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[0] + 96) + k);
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[1] + 96) + k);
      mins[k] = _mm512_shuffle_epi8(
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(lo)), _mm256_broadcastsi128_si256(hi), 1),
          min_pick);
    }
    const __m512 d = load_pair_ph(rec[0], rec[1], 0);
    const __m512 dmin = load_pair_ph(rec[0], rec[1], 16);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& y = acts[t][i];
      alignas(16) int32_t ysum_pairs[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(ysum_pairs),
                      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8))));
      const __m512 dy = _mm512_set1_ps(y.d);
      __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mins[k], _mm512_set1_epi32(ysum_pairs[k])));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

// Q6_K x Q8_K, a pair of groups times T tokens: gemm_q6_K_fixed<kVnni = true> with both groups in one
// register (q6_K_quants on 512 bits; int8 scales widened from two 8-byte loads; the -32 offset's scale
// pairs through the same shuffle as there, group 0 in the low 256 bits).
template <int T>
void gemm_pair_q6_K(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                    int64_t stride, const uint8_t* far) {
  constexpr size_t kNibbles = 144, kTops = 144 + 1024;
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i top_mask = _mm512_set1_epi8(0x30);
  const __m512i pair_pick = _mm512_broadcast_i64x4(
      _mm256_setr_epi8(-1, 0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11,  //
                       -1, 4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15));
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[2];
    block_records<kQ6KRecordBytes, 2, kQK_K>(group, group_bytes, i, rec, far);
    __m512i isum[T];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
#pragma GCC unroll 2
        for (int j = 0; j < 2; ++j) {
          __m512i sum[T];
#pragma GCC unroll 4
          for (int g = 4 * j; g < 4 * j + 4; ++g) {
            const int h = 8 * k + g;
            const __m512i nib = load_pair(rec[0], rec[1], kNibbles + 32 * h);
            const __m512i top = load_pair(rec[0], rec[1], kTops + 32 * (h / 2));
            const __m512i low = _mm512_and_si512(e == 0 ? nib : _mm512_srli_epi16(nib, 4), low_mask);
            const int shift = 4 * (h % 2) + 2 * e;
            const __m512i high = shift < 4    ? _mm512_slli_epi16(top, 4 - shift)
                                 : shift == 4 ? top
                                              : _mm512_srli_epi16(top, shift - 4);
            const __m512i q = _mm512_or_si512(low, _mm512_and_si512(high, top_mask));
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
              const __m512i y = broadcast4(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
              sum[t] = _mm512_dpbusd_epi32(g == 4 * j ? _mm512_setzero_si512() : sum[t], q, y);
            }
          }
          const size_t scale_off = 16 + 8 * (4 * k + 2 * e + j);
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[0] + scale_off)),
                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[1] + scale_off))));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i p = _mm512_mullo_epi32(sum[t], sc);
            isum[t] = k == 0 && e == 0 && j == 0 ? p : _mm512_add_epi32(isum[t], p);
          }
        }
      }
    }
    // The -32 offset: sum_s scale_s * ysum_s, pairs of sub-blocks at a time.
    __m512i osum[T];
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[0] + 16 + 16 * m));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[1] + 16 + 16 * m));
      const __m512i sc = _mm512_srai_epi16(
          _mm512_shuffle_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(lo)),
                                                 _mm256_broadcastsi128_si256(hi), 1),
                              pair_pick),
          8);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        int32_t ysums;
        std::memcpy(&ysums, acts[t][i].bsums + 2 * m, 4);
        const __m512i p = _mm512_madd_epi16(sc, _mm512_set1_epi32(ysums));
        osum[t] = m == 0 ? p : _mm512_add_epi32(osum[t], p);
      }
    }
    const __m512 d = load_pair_ph(rec[0], rec[1], 0);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i total = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(osum[t], 5));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(acts[t][i].d)), _mm512_cvtepi32_ps(total), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

// A lone group (a chunk's odd one, a range edge) through the ymm kernel, in passes of at most its
// kMaxInterleavedTokens tokens.
template <typename Fn, typename Acts>
void lone_group(Fn ymm_gemm, int64_t n, const uint8_t* group, const Acts* acts, int n_tok, float* out,
                int64_t out_stride, const uint8_t* prefetch) {
  constexpr int kPass = avx2::kMaxInterleavedTokens;
  for (int t0 = 0; t0 < n_tok; t0 += kPass)
    ymm_gemm(n, group, 1, acts + t0, std::min(kPass, n_tok - t0), out + t0 * out_stride, out_stride,
             t0 == 0 ? prefetch : nullptr);
}

// The K-quant pair kernels keep one pair's sums in registers: P pairs run one after another.
template <bool kQ5, int P, int T>
void gemm_pairs_q4_K(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                     int64_t stride, const uint8_t* far) {
  for (int p = 0; p < P; ++p)
    gemm_pair_q4_K<kQ5, T>(nb, group + 2 * p * group_bytes, group_bytes, acts, out + 16 * p, stride, p ? nullptr : far);
}

template <int P, int T>
void gemm_pairs_q6_K(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                     int64_t stride, const uint8_t* far) {
  for (int p = 0; p < P; ++p)
    gemm_pair_q6_K<T>(nb, group + 2 * p * group_bytes, group_bytes, acts, out + 16 * p, stride, p ? nullptr : far);
}

// n_groups (1..kMaxZmmGroups) groups from `group` (records of kRecordBytes per kBlockCols columns): four
// as two pairs, else a pair, and an odd group left over through the ymm kernel. pairs.operator()<P, T>(nb,
// group, group_bytes, acts, out, stride, far) runs P pairs x T tokens.
template <int kBlockCols, size_t kRecordBytes, typename Acts, typename Pairs, typename Fn>
void gemm_groups(const Pairs& pairs, Fn ymm_gemm, int64_t n, const uint8_t* group, int n_groups, const Acts* acts,
                 int n_tok, float* out, int64_t out_stride, const uint8_t* prefetch) {
  const int64_t nb = n / kBlockCols;
  const size_t group_bytes = static_cast<size_t>(nb) * kRecordBytes;
  const int done = n_groups >= 4 ? 4 : n_groups >= 2 ? 2 : 0;
  if (done > 0)
    with_token_count<avx512zmm::kMaxZmmTokens>(n_tok, [&]<int T>() {
      if (done == 4) {
        pairs.template operator()<2, T>(nb, group, group_bytes, acts, out, out_stride, prefetch);
      } else {
        pairs.template operator()<1, T>(nb, group, group_bytes, acts, out, out_stride, prefetch);
      }
    });
  if (done < n_groups)
    lone_group(ymm_gemm, n, group + done * group_bytes, acts, n_tok, out + done * kInterleaveRows, out_stride,
               done == 0 ? prefetch : nullptr);
}

}  // namespace

namespace avx512zmm {

void gemm_pairs_q4_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kQ4_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_pairs_q4_1(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kQ4_1>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_pairs_q8_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kQ8_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_groups<kQK_K, kQ4KRecordBytes>([]<int P, int T>(auto... a) { gemm_pairs_q4_K<false, P, T>(a...); },
                                      avx512vnni::gemm_interleaved_q4_K, n, group, n_groups, acts, n_tok, out,
                                      out_stride, prefetch);
}

void gemm_interleaved_q5_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_groups<kQK_K, kQ5KRecordBytes>([]<int P, int T>(auto... a) { gemm_pairs_q4_K<true, P, T>(a...); },
                                      avx512vnni::gemm_interleaved_q5_K, n, group, n_groups, acts, n_tok, out,
                                      out_stride, prefetch);
}

void gemm_interleaved_q6_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_groups<kQK_K, kQ6KRecordBytes>([]<int P, int T>(auto... a) { gemm_pairs_q6_K<P, T>(a...); },
                                      avx512vnni::gemm_interleaved_q6_K, n, group, n_groups, acts, n_tok, out,
                                      out_stride, prefetch);
}

}  // namespace avx512zmm
}  // namespace kvserve
