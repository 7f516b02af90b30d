// Two interleaved 8-row groups in one 512-bit register: the Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K / Q3_K / Q2_K kernels
// of interleaved_rows.h (avx512zmm namespace) for calls that take pairs of groups, above all batched
// decode and prefill, where the kernels are bound by instructions rather than by memory.
//
// Why: on a core with full-width AVX-512 (Zen 5, bench_cpu_peak Peak/*: vpdpbusd on zmm issues at the
// same instructions per cycle as on ymm) a zmm vpdpbusd does twice the multiply-adds, and the per-block
// float work (convert, scale, FMA) is done once for 16 rows. A zmm holds group 0's 8 rows in its low
// half and group 1's in its high half: the weights are in the pair layout (interleaved_rows.h), so that
// is one load per quant vector, shared by every token, and each token's broadcast activation is one
// vpbroadcastd for both groups.
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
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/interleaved_pairs_zmm.h"
#include "kernels/cpu/interleaved_q32_kernels.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see interleaved_q32_kernels.h

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// spread_block_prefetch for a K-quant pair kernel's record (two groups' records of kRecordBytes).
template <size_t kRecordBytes>
[[gnu::always_inline]] inline void pair_block_prefetch(const uint8_t* const (&rec)[1], const uint8_t* far, int64_t i,
                                                       int part) {
  spread_block_prefetch<2 * kRecordBytes, 1, far_bytes_per_block<kRecordBytes, kQK_K>()>(rec, far, i, part);
}

// One-token Q4 pairs ask 8 KiB ahead, unlike the 8-row kernels (q32_prefetch_distance): on the Zen 5 host
// whose two vCPUs sit now on one CCD, now on two, each core's own memory path in the split placement gives
// it ~40 GB/s, more than its stream prefetcher keeps in flight. Batch-1 decode, alternating binaries,
// split placement (round trip ~350 ns), 3 runs each: 1B-shaped Q4_0 95.6 / 90.7 / 95.1 -> 105.1 / 103.9 /
// 105.3 tok/s, SmolLM2 Q4_1 463 / 521 / 515 -> 526 / 572 / 578 (4 KiB: ~1.08x and ~1.03x; 2 KiB: none);
// sharing one CCD, within noise. Q8_0 keeps asking for nothing: 59.1 / 59.0 -> 56.8 / 55.2 at 8 KiB.
constexpr size_t kPairQ4DecodePrefetchAhead = 8192;
// On Intel (a 2-vCPU Xeon with 2 MiB L2 per core and AVX512-FP16/AMX, 2026-12-01) 8 KiB into L1 was the
// worst distance for 1B-shaped Q4_0 decode, from memory (2 runs each: 0 28.7 / 27.7, 1 KiB 33.4, 2 KiB
// 35.6 / 34.6, 4 KiB 31.4 / 32.2, 8 KiB 28.7 / 28.5 tok/s): far L1 prefetches hold the fill buffers the
// demand loads wait for. SmolLM2 Q4_1, whose 96 MB sit in that host's L3, wanted 8 KiB (2 KiB 267-278
// against 296-314). Both at once: 2 KiB into L1 and 8 KiB into L2 (prefetcht1), Q8_0 too (its 2 KiB alone
// 1.08x over nothing), alternating binaries, 2 runs: 1B Q4_0 38.0 / 36.0 against 32.0 / 32.0 tok/s at 8 KiB
// (1.16x), SmolLM2 360 / 352 against 341 / 325 (1.07x). AMD hosts keep the distances above
// (decode_l2_ahead_enabled in matmul.h). The K-quant pairs (which ask 2 KiB ahead whatever the tokens) add
// the same 8 KiB into L2 for one token: 1B-shaped
// Q4_K decode 34.0 / 33.9 / 33.5 -> 39.2 / 38.8 / 40.8 tok/s (1.17x, ~0.97 of the bound), Q6_K 23.2 / 23.6
// -> 24.2 / 23.6 (within noise; its kernel serves Q3_K and Q2_K too, not measured).
constexpr size_t kIntelDecodeL1Ahead = 2048;
constexpr size_t kIntelDecodeL2Ahead = 8192;
constexpr size_t pair_q32_prefetch_distance(Q32 type, int T, bool l2_ahead) {
  return T > 1 ? kPrefetchAhead : l2_ahead ? kIntelDecodeL1Ahead : type == Q32::kQ8_0 ? 0 : kPairQ4DecodePrefetchAhead;
}
// kBytes from kIntelDecodeL2Ahead past rec, into L2 (always_inline: see far_stream).
template <size_t kBytes>
[[gnu::always_inline]] inline void l2_ahead(const uint8_t* rec) {
  for (size_t off = 0; off < kBytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(rec + kIntelDecodeL2Ahead + off), _MM_HINT_T1);
}

// Q4_0 / Q4_1 / Q5_0 / IQ4_NL / MXFP4 / Q8_0 in the pair layout, P pairs of groups times T tokens: gemm_fixed,
// gemm_unsigned_fixed and gemm_signed8_fixed (kVnni = true) of interleaved_q32_kernels.h with both groups of a
// pair in one register. A block is 8 quant vectors g: Q4's 4 packed vectors as their low nibbles (elements
// 4g) then their high ones (16 + 4(g - 4)), Q5_0's with bit g of its bit vector's bytes as their bit 4
// (0..31, -16 * sum(y) at the start of the block's sum); Q8_0's 8 vectors as w + 128 unsigned, the 128 *
// sum(y) that adds taken off at the start of the block's sum; IQ4_NL's nibbles looked up as level + 128
// (the same start); MXFP4's as level + 12 (MXFP4Steps: 12 * sum(y) off), its scales 2^(e - 128) built from
// the exponents' bits as there. In the pair layout each vector of both groups is one 64-byte load: from the group
// layout (two 32-byte loads and an insert per vector) this kernel ran at ~0.9x (bench_matmul Q4_0 16 tokens, one
// thread).
template <Q32 kType, int P, int T, bool kL2Ahead = false>
void gemm_pairs_q32(int64_t nb, const uint8_t* pairs, size_t pair_bytes, const PackedActs32* acts, float* out,
                    int64_t stride, const uint8_t* far) {
  constexpr bool kQ8 = kType == Q32::kQ8_0, kQ4_1 = kType == Q32::kQ4_1, kQ5 = kType == Q32::kQ5_0;
  constexpr bool kNL = kType == Q32::kIQ4_NL, kMX = kType == Q32::kMXFP4;
  constexpr size_t kScaleBytes = kQ4_1 ? 64 : kMX ? 16 : 32;  // both groups' d (and m), or exponents
  constexpr size_t kRecordBytes = q32_record_bytes(kType);  // one group's
  // Q4_0's -8 * sum(y) (q4_offset), Q5_0's -16 * sum(y), or Q8_0's -128 * sum(y) = -16 * (8 * sum(y)).
  constexpr int kOffsetTimes = kQ8 || kNL ? -16 : kQ5 ? -2 : -1;
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i sign_flip = _mm512_set1_epi8(-128);
  [[maybe_unused]] const __m512i bit4 = _mm512_set1_epi8(0x10);
  // IQ4_NL's levels + 128 (vpdpbusd's unsigned side) in every 128-bit lane.
  [[maybe_unused]] const __m512i nl_table = _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values))), sign_flip);
  // MXFP4's levels + MXFP4Steps::kBias.
  [[maybe_unused]] const __m512i mx_table =
      _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Values))),
                      _mm512_set1_epi8(MXFP4Steps::kBias));
  __m512 acc[P][T];
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[P];
    // A pair's record is two groups' records; the far stream keeps the group layout's bytes per block.
    block_records<2 * kRecordBytes, P, 32, pair_q32_prefetch_distance(kType, T, kL2Ahead)>(pairs, pair_bytes, i, rec);
    far_stream<kRecordBytes>(far, i);
    if constexpr (kL2Ahead) {
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) l2_ahead<2 * kRecordBytes>(rec[p]);
    }
    constexpr bool kTwoChains = two_vnni_chains(P * T);
    __m512i sum[P][T];
    [[maybe_unused]] __m512i sum_odd[P][T];  // with kTwoChains: the odd vectors' sums
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i q[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const __m512i packed = load64(rec[p], kScaleBytes + 64 * (kQ8 ? g : g % 4));
        q[p] = kQ8 ? _mm512_xor_si512(packed, sign_flip)
                   : _mm512_and_si512(g < 4 ? packed : _mm512_srli_epi16(packed, 4), low_mask);
        if constexpr (kQ5) {
          // Bit g of each byte to bit 4 (16-bit shifts: the mask drops what crossed from the other byte).
          const __m512i bits = load64(rec[p], kScaleBytes + 4 * 64);
          const __m512i fifth = g < 4 ? _mm512_slli_epi16(bits, 4 - g) : _mm512_srli_epi16(bits, g - 4);
          q[p] = _mm512_ternarylogic_epi32(q[p], fifth, bit4, 0xF8);  // q | (fifth & bit4)
        }
        if constexpr (kNL) q[p] = _mm512_shuffle_epi8(nl_table, q[p]);
        if constexpr (kMX) q[p] = _mm512_shuffle_epi8(mx_table, q[p]);
      }
      const int elem = kQ8 || g < 4 ? 4 * g : 16 + 4 * (g - 4);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i y = broadcast4(acts[t].qs + 32 * i + elem);
        const __m512i start = kQ4_1 ? _mm512_setzero_si512()
                              : kMX ? _mm512_set1_epi32(-MXFP4Steps::offset(acts[t].q4_offset[i]))
                                    : _mm512_set1_epi32(kOffsetTimes * acts[t].q4_offset[i]);
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) {
          if (!kTwoChains || g % 2 == 0) {
            sum[p][t] = _mm512_dpbusd_epi32(g == 0 ? start : sum[p][t], q[p], y);
          } else {
            sum_odd[p][t] = _mm512_dpbusd_epi32(g == 1 ? _mm512_setzero_si512() : sum_odd[p][t], q[p], y);
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) {
      const __m512 dw = kMX ? mxfp4_scales16(rec[p]) : load_ph16(rec[p], 0);
      [[maybe_unused]] __m512 mw;
      if constexpr (kQ4_1) mw = load_ph16(rec[p], 32);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512 dy = _mm512_set1_ps(acts[t].d[i]);
        const __m512i isum = kTwoChains ? _mm512_add_epi32(sum[p][t], sum_odd[p][t]) : sum[p][t];
        acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dy), _mm512_cvtepi32_ps(isum), acc[p][t]);
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
  constexpr size_t kRecordBytes = q32_record_bytes(kType);
  const int64_t nb = n / 32;
  const size_t pair_bytes = 2 * static_cast<size_t>(nb) * kRecordBytes;
  if (n_tok == 1 && decode_l2_ahead_enabled()) {
    if (n_pairs >= 2) {
      gemm_pairs_q32<kType, 2, 1, true>(nb, pairs, pair_bytes, acts, out, out_stride, prefetch);
    } else {
      gemm_pairs_q32<kType, 1, 1, true>(nb, pairs, pair_bytes, acts, out, out_stride, prefetch);
    }
    return;
  }
  with_token_count<avx512zmm::kMaxZmmTokens>(n_tok, [&]<int T>() {
    if (n_pairs >= 2) {
      gemm_pairs_q32<kType, 2, T>(nb, pairs, pair_bytes, acts, out, out_stride, prefetch);
    } else {
      gemm_pairs_q32<kType, 1, T>(nb, pairs, pair_bytes, acts, out, out_stride, prefetch);
    }
  });
}

// Q4_K / Q5_K (kQ5) x Q8_K, a pair of groups (pair layout) times T tokens: gemm_q4_K_fixed<kVnni = true>
// of interleaved_kquant_kernels.h with both groups in one register. A sub-block's scales of the 16 rows
// widen from one 16-byte load; the mins of two sub-blocks (both groups' 16 bytes, one 32-byte load) go
// through a byte shuffle per sub-block, with group 0's in the low 256 bits and group 1's in the high.
// The int32 block sums are the same exact integers as there, so the results are bit-identical; only the
// instructions that form them differ (vpdpwssd for vpmulld + vpaddd, below). Batched decode of the
// 1B-shaped Q4_K on the Xeon host, alternating builds: ~1.08x for the vpdpwssd changes (KernelZmm
// Q4_K/g2/t8 ~1.18x), then ~1.15x for the spread prefetches (spread_block_prefetch).
template <bool kQ5, int T>
void gemm_pair_q4_K(int64_t nb, const uint8_t* pair, const BlockQ8_K* const* acts, float* out, int64_t stride,
                    const uint8_t* far) {
  constexpr size_t kRecordBytes = kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes;  // one group's
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  // [min of sub-block 2k, min of sub-block 2k + 1] per row from 16 bytes (sub-blocks 2k, 2k + 1, rows in
  // order) in each 128-bit lane: lanes 0 and 1 take rows 0-3 and 4-7 of group 0, lanes 2 and 3 those of
  // group 1. Paired with the token's sums of those two sub-blocks (one broadcast dword), one vpdpwssd per
  // two sub-blocks takes min x (sum of its 32 elements) with no per-token shuffles.
  const __m512i min_pick =
      _mm512_broadcast_i64x4(_mm256_setr_epi8(0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11, -1,  //
                                              4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15, -1));
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  // One token on Intel: 8 KiB into L2 as well (decode_l2_ahead_enabled).
  const bool l2 = T == 1 && decode_l2_ahead_enabled();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[1];
    if constexpr (T == 1) {
      block_records<2 * kRecordBytes, 1, kQK_K>(pair, 0, i, rec);
      far_stream<kRecordBytes, kQK_K>(far, i);
      if (l2) l2_ahead<2 * kRecordBytes>(rec[0]);
    } else {
      block_records<2 * kRecordBytes, 1, kQK_K, 0>(pair, 0, i, rec);
    }
    __m512i isum[T];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
        if constexpr (T > 1) pair_block_prefetch<kRecordBytes>(rec, far, i, 2 * k + e);
        // Each row's scale in the low int16 of its lane, 0 in the high one (vpdpwssd below).
        const __m512i scales =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[0] + 64 + 16 * (2 * k + e))));
        __m512i sum[T];
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m512i packed = load64(rec[0], 2 * 160 + 64 * (8 * k + g));
          __m512i q = _mm512_and_si512(e == 0 ? packed : _mm512_srli_epi16(packed, 4), low_mask);
          if constexpr (kQ5) {
            const __m512i planes = load64(rec[0], 2 * kQ4KRecordBytes + 64 * g);
            const int bit = 2 * k + e;
            const __m512i moved = bit < 4 ? _mm512_slli_epi16(planes, 4 - bit) : _mm512_srli_epi16(planes, bit - 4);
            q = _mm512_or_si512(q, _mm512_and_si512(moved, bit4));
          }
          // Q4_K: the scale goes on per 16 elements, by vpdpwssd on the partial sum's low int16 (|sum| <=
          // 16 * 15 * 128 = 30720 fits): one instruction where vpmulld + vpaddd per 32 elements take three
          // uops. Q5_K's 16-element sums (up to 16 * 31 * 128) do not fit, so it keeps vpmulld.
          const bool restart = kQ5 ? g == 0 : g % 4 == 0;
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i y = broadcast4(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
            sum[t] = _mm512_dpbusd_epi32(restart ? _mm512_setzero_si512() : sum[t], q, y);
          }
          if constexpr (!kQ5) {
            if (g % 4 == 3) {
              const bool first = k == 0 && e == 0 && g == 3;
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t)
                isum[t] = first ? _mm512_madd_epi16(sum[t], scales) : _mm512_dpwssd_epi32(isum[t], sum[t], scales);
            }
          }
        }
        if constexpr (kQ5) {
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i p = _mm512_mullo_epi32(sum[t], scales);
            isum[t] = k == 0 && e == 0 ? p : _mm512_add_epi32(isum[t], p);
          }
        }
      }
    }
    __m512i mins[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // [group 0's 16 bytes, group 1's] -> 128-bit lanes [group 0, group 0, group 1, group 1].
      const __m512i both = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[0] + 192) + k));
      const __m512i lanes = _mm512_shuffle_i64x2(both, both, 0x50);
      mins[k] = _mm512_shuffle_epi8(lanes, min_pick);
    }
    const __m512 d = load_ph16(rec[0], 0);
    const __m512 dmin = load_ph16(rec[0], 32);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& y = acts[t][i];
      const __m512 dy = _mm512_set1_ps(y.d);
      // The 8 sub-blocks' sums (each two 16-element bsums, within +-4096: exact in int16), two to a dword, as
      // the 8-row kernels pair them: 4 vpdpwssd and 4 broadcasts a token and block instead of one of each per
      // sub-block, and 4 mins vectors instead of 8 (GCC no longer spills accumulators at 8 tokens). Zen 5,
      // 1B-shaped Q4_K, batched decode of 16, alternating binaries: 4 pairs, every one faster, ~1.04x.
      const __m256i sums32 = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)), ones16);
      alignas(16) int32_t sub_pairs[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(sub_pairs),
                      _mm_packs_epi32(_mm256_castsi256_si128(sums32), _mm256_extracti128_si256(sums32, 1)));
      __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) msum = _mm512_dpwssd_epi32(msum, mins[k], _mm512_set1_epi32(sub_pairs[k]));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

// The pair layout's records of the K-quants with 16-element sub-blocks (interleaved_rows.h), as the
// kernel below takes them: quant vector h = 8k + g (elements 64k + 32e + 4g .. + 3 of both groups' rows,
// unsigned) and where the pieces sit. Each mirrors the 256-bit layout of interleaved_kquant_kernels.h.
// Q6_K: both groups' d (32 bytes), 16 sub-blocks' scales (16 bytes each), then 32 nibble vectors and 16
// vectors of top bits (64 bytes each); q + 32.
struct Q6KPairs {
  static constexpr size_t kRecordBytes = kQ6KRecordBytes;  // one group's
  static constexpr size_t kScales = 32, kNibbles = 32 + 256, kTops = kNibbles + 2048;
  static constexpr int kOffsetShift = 5;
  static constexpr bool kMins = false;
  [[gnu::always_inline]] static __m512i quants(const uint8_t* rec, int h, int e) {
    const __m512i nib = load64(rec, kNibbles + 64 * h);
    const __m512i top = load64(rec, kTops + 64 * (h / 2));
    const __m512i low = _mm512_and_si512(e == 0 ? nib : _mm512_srli_epi16(nib, 4), _mm512_set1_epi8(0x0F));
    const int shift = 4 * (h % 2) + 2 * e;
    const __m512i high = shift < 4    ? _mm512_slli_epi16(top, 4 - shift)
                         : shift == 4 ? top
                                      : _mm512_srli_epi16(top, shift - 4);
    return _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(0x30)));
  }
};
// Q3_K: d (32), scales (256), 16 low-bit vectors, 8 hmask vectors; q + 4.
struct Q3KPairs {
  static constexpr size_t kRecordBytes = kQ3KRecordBytes;
  static constexpr size_t kScales = 32, kLow = 32 + 256, kHigh = kLow + 1024;
  static constexpr int kOffsetShift = 2;
  static constexpr bool kMins = false;
  [[gnu::always_inline]] static __m512i quants(const uint8_t* rec, int h, int e) {
    const int k = h / 8, g = h % 8, j = 2 * (k % 2) + e, bit = 4 * (k / 2) + j;
    const __m512i low = _mm512_and_si512(_mm512_srli_epi16(load64(rec, kLow + 64 * (8 * (k / 2) + g)), 2 * j),
                                         _mm512_set1_epi8(3));
    const __m512i hmask = load64(rec, kHigh + 64 * g);
    const __m512i high = bit > 2 ? _mm512_srli_epi16(hmask, bit - 2) : _mm512_slli_epi16(hmask, 2 - bit);
    return _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(4)));
  }
};
// Q2_K: d and dmin (32 each), scales (256), mins (16 bytes per pair of sub-blocks), 16 low-bit vectors.
struct Q2KPairs {
  static constexpr size_t kRecordBytes = kQ2KRecordBytes;
  static constexpr size_t kScales = 64, kMinPairs = 64 + 256, kLow = kMinPairs + 128;
  static constexpr int kOffsetShift = 0;
  static constexpr bool kMins = true;
  [[gnu::always_inline]] static __m512i quants(const uint8_t* rec, int h, int e) {
    const int k = h / 8, g = h % 8, j = 2 * (k % 2) + e;
    return _mm512_and_si512(_mm512_srli_epi16(load64(rec, kLow + 64 * (8 * (k / 2) + g)), 2 * j), _mm512_set1_epi8(3));
  }
  // [min of 2m, min of 2m + 1] int16 pairs, row r of group h in 32-bit lane 8h + r.
  [[gnu::always_inline]] static __m512i min_pairs(const uint8_t* rec, int m) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kMinPairs + 16 * m)));
    return _mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0x0F)), _mm512_slli_epi32(_mm512_srli_epi32(b, 4), 16));
  }
};

// Q6_K x Q8_K, a pair of groups (pair layout) times T tokens: gemm_q6_K_fixed<kVnni = true> with both
// groups in one register (q6_K_quants on 512 bits; a sub-block's int8 scales of the 16 rows widened from
// one 16-byte load; the -32 offset's scale pairs through the same shuffle as there, group 0 in the low
// 256 bits). Q3_K and Q2_K (Pairs) as gemm_q6_K_fixed takes them.
template <typename Pairs, int T>
void gemm_pair_q6_K(int64_t nb, const uint8_t* pair, const BlockQ8_K* const* acts, float* out, int64_t stride,
                    const uint8_t* far) {
  constexpr size_t kScales = Pairs::kScales;
  const __m512i pair_pick = _mm512_broadcast_i64x4(
      _mm256_setr_epi8(-1, 0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11,  //
                       -1, 4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15));
  const __m512i sub_pick = _mm512_setr_epi64(0, 2, 0, 2, 1, 3, 1, 3);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  // One token on Intel: 8 KiB into L2 as well (decode_l2_ahead_enabled).
  const bool l2 = T == 1 && decode_l2_ahead_enabled();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[1];
    if constexpr (T == 1) {
      block_records<2 * Pairs::kRecordBytes, 1, kQK_K>(pair, 0, i, rec);
      far_stream<Pairs::kRecordBytes, kQK_K>(far, i);
      if (l2) l2_ahead<2 * Pairs::kRecordBytes>(rec[0]);
    } else {
      block_records<2 * Pairs::kRecordBytes, 1, kQK_K, 0>(pair, 0, i, rec);
    }
    __m512i isum[T];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
        if constexpr (T > 1) pair_block_prefetch<Pairs::kRecordBytes>(rec, far, i, 2 * k + e);
#pragma GCC unroll 2
        for (int j = 0; j < 2; ++j) {
          __m512i sum[T];
#pragma GCC unroll 4
          for (int g = 4 * j; g < 4 * j + 4; ++g) {
            const __m512i q = Pairs::quants(rec[0], 8 * k + g, e);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
              const __m512i y = broadcast4(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
              sum[t] = _mm512_dpbusd_epi32(g == 4 * j ? _mm512_setzero_si512() : sum[t], q, y);
            }
          }
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[0] + kScales + 16 * (4 * k + 2 * e + j))));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i p = _mm512_mullo_epi32(sum[t], sc);
            isum[t] = k == 0 && e == 0 && j == 0 ? p : _mm512_add_epi32(isum[t], p);
          }
        }
      }
    }
    // The offset (Q6_K's 32, Q3_K's 4) times sum_s scale_s * ysum_s, or Q2_K's sum_s min_s * ysum_s, pairs
    // of sub-blocks at a time.
    __m512i osum[T];
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) {
      __m512i sc;
      if constexpr (Pairs::kMins) {
        sc = Pairs::min_pairs(rec[0], m);
      } else {
        // Sub-blocks 2m and 2m + 1 as [group 0's 2m, group 1's 2m, group 0's 2m + 1, group 1's 2m + 1] (8
        // bytes each) -> 128-bit lanes [group 0's two, group 0's two, group 1's two, group 1's two].
        const __m512i both = _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[0] + kScales + 32 * m)));
        sc = _mm512_srai_epi16(_mm512_shuffle_epi8(_mm512_permutexvar_epi64(sub_pick, both), pair_pick), 8);
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        int32_t ysums;
        std::memcpy(&ysums, acts[t][i].bsums + 2 * m, 4);
        // vpdpwssd (one instruction for vpmaddwd + vpaddd): |osum| <= 16 * 127 * 2048, no wrap.
        const __m512i ys = _mm512_set1_epi32(ysums);
        osum[t] = m == 0 ? _mm512_madd_epi16(sc, ys) : _mm512_dpwssd_epi32(osum[t], sc, ys);
      }
    }
    const __m512 d = load_ph16(rec[0], 0);
    [[maybe_unused]] __m512 dmin;
    if constexpr (Pairs::kMins) dmin = load_ph16(rec[0], 32);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 dy = _mm512_set1_ps(acts[t][i].d);
      if constexpr (Pairs::kMins) {
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(osum[t]), acc[t]);
      } else {
        const __m512i total = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(osum[t], Pairs::kOffsetShift));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(total), acc[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

// IQ4_XS x Q8_K, a pair of groups (pair layout) times T tokens: gemm_iq4_xs_fixed<kVnni = true> with both
// groups in one register (the level table in every 128-bit lane; a sub-block's scales of the 16 rows
// widened from one 16-byte load).
template <int T>
void gemm_pair_iq4_xs(int64_t nb, const uint8_t* pair, const BlockQ8_K* const* acts, float* out, int64_t stride,
                      const uint8_t* far) {
  // Offsets in a pair's record: both groups' d (32 bytes), 8 sub-blocks' scales (16 bytes each), then
  // each sub-block's 4 quant vectors (64 bytes each).
  constexpr size_t kScales = 32, kQuants = 32 + 128;
  // The levels + 128 (unsigned, vpdpbusd's first operand), biased once here rather than per quant vector.
  const __m512i table = _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values))), _mm512_set1_epi8(-128));
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[1];
    // 2 KiB ahead also for one token (bench_matmul IQ4_XS one token cold, Zen 5: 161-172 us against ~250
    // without).
    if constexpr (T == 1) {
      block_records<2 * kIQ4XSRecordBytes, 1, kQK_K>(pair, 0, i, rec);
      far_stream<kIQ4XSRecordBytes, kQK_K>(far, i);
    } else {
      block_records<2 * kIQ4XSRecordBytes, 1, kQK_K, 0>(pair, 0, i, rec);
    }
    __m512i isum[T];
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      if constexpr (T > 1) pair_block_prefetch<kIQ4XSRecordBytes>(rec, far, i, s);
      __m512i sub[T];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i packed = load64(rec[0], kQuants + 64 * (4 * s + g % 4));
        const __m512i w_u =
            _mm512_shuffle_epi8(table, _mm512_and_si512(g < 4 ? packed : _mm512_srli_epi16(packed, 4), low_mask));
        const int elem = g < 4 ? 4 * g : 16 + 4 * (g - 4);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512i y = broadcast4(acts[t][i].qs + 32 * s + elem);
          const __m512i start = _mm512_set1_epi32(-128 * (acts[t][i].bsums[2 * s] + acts[t][i].bsums[2 * s + 1]));
          sub[t] = _mm512_dpbusd_epi32(g == 0 ? start : sub[t], w_u, y);
        }
      }
      const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[0] + kScales + 16 * s)));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i p = _mm512_mullo_epi32(sub[t], sc);
        isum[t] = s == 0 ? p : _mm512_add_epi32(isum[t], p);
      }
    }
    const __m512 d = load_ph16(rec[0], 0);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(acts[t][i].d)), _mm512_cvtepi32_ps(isum[t]), acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

// The K-quant pair kernels keep one pair's sums in registers: the pairs run one after another, n_tok
// (1..kMaxZmmTokens) tokens each, in passes of kMaxTok; the far stream goes with the first.
template <int kMaxTok = avx512zmm::kMaxZmmTokens, typename Kernel>
void kquant_pairs(Kernel kernel, int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok,
                  float* out, int64_t out_stride, const uint8_t* prefetch, size_t record_bytes) {
  const int64_t nb = n / kQK_K;
  const size_t pair_bytes = 2 * static_cast<size_t>(nb) * record_bytes;
  for (int p = 0; p < n_pairs; ++p)
    for (int t0 = 0; t0 < n_tok; t0 += kMaxTok)
      with_token_count<kMaxTok>(std::min(kMaxTok, n_tok - t0), [&]<int T>() {
        kernel.template operator()<T>(nb, pairs + p * pair_bytes, acts + t0, out + 16 * p + t0 * out_stride, out_stride,
                                      p || t0 ? nullptr : prefetch);
      });
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

void gemm_pairs_q5_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kQ5_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_pairs_iq4_nl(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kIQ4_NL>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_pairs_mxfp4(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                      int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kMXFP4>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_pairs_q8_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  gemm_pairs<Q32::kQ8_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch);
}

void gemm_pairs_q4_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  kquant_pairs([]<int T>(auto... a) { gemm_pair_q4_K<false, T>(a...); }, n, pairs, n_pairs, acts, n_tok, out, out_stride,
               prefetch, kQ4KRecordBytes);
}

void gemm_pairs_q5_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  kquant_pairs([]<int T>(auto... a) { gemm_pair_q4_K<true, T>(a...); }, n, pairs, n_pairs, acts, n_tok, out, out_stride,
               prefetch, kQ5KRecordBytes);
}

void gemm_pairs_q6_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  kquant_pairs([]<int T>(auto... a) { gemm_pair_q6_K<Q6KPairs, T>(a...); }, n, pairs, n_pairs, acts, n_tok, out,
               out_stride, prefetch, kQ6KRecordBytes);
}

void gemm_pairs_iq4_xs(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* prefetch) {
  kquant_pairs([]<int T>(auto... a) { gemm_pair_iq4_xs<T>(a...); }, n, pairs, n_pairs, acts, n_tok, out, out_stride,
               prefetch, kIQ4XSRecordBytes);
}

void gemm_pairs_q3_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  kquant_pairs([]<int T>(auto... a) { gemm_pair_q6_K<Q3KPairs, T>(a...); }, n, pairs, n_pairs, acts, n_tok, out,
               out_stride, prefetch, kQ3KRecordBytes);
}

void gemm_pairs_q2_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch) {
  // Up to 6 tokens: at 8 GCC spilled Q2_K's sums (bench_matmul Q2_K 16 tokens, Zen 5: ~650 against ~1800 us;
  // Q3_K measured the same at 6 and 8).
  kquant_pairs<6>([]<int T>(auto... a) { gemm_pair_q6_K<Q2KPairs, T>(a...); }, n, pairs, n_pairs, acts, n_tok, out,
                  out_stride, prefetch, kQ2KRecordBytes);
}

}  // namespace avx512zmm
}  // namespace kvserve
