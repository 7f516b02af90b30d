#pragma once
// The 8-row interleaved Q4_K / Q5_K / Q6_K kernels (interleaved_rows.h), against Q8_K activation rows.
// Included, like interleaved_q32_kernels.h and for the same reason with internal linkage, by
// interleaved_rows_avx2.cpp (kVnni = false) and interleaved_rows_avx512vnni.cpp (kVnni = true, Q4_K and
// Q5_K: bit-identical results).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/interleaved_q32_kernels.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/quants.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see interleaved_q32_kernels.h

// Quant vector g of sub-block 2k + e in a Q4_K (or, kQ5, Q5_K) record: the low (e = 0) or high nibbles
// of packed vector 8k + g and, for Q5_K, bit 2k + e of bit-plane vector g moved to bit 4 (16-bit shifts
// by <= 4 keep each byte's bit 4 its own). The callers' loops are unrolled: every shift is a constant.
template <bool kQ5>
[[gnu::always_inline]] inline __m256i q4_K_quants(const uint8_t* rec, int k, int e, int g, __m256i low_mask,
                                                  __m256i bit4) {
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 160) + 8 * k + g);
  __m256i q = _mm256_and_si256(e == 0 ? packed : _mm256_srli_epi16(packed, 4), low_mask);
  if constexpr (kQ5) {
    const __m256i planes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQ4KRecordBytes) + g);
    const int bit = 2 * k + e;
    const __m256i moved = bit < 4 ? _mm256_slli_epi16(planes, 4 - bit) : _mm256_srli_epi16(planes, bit - 4);
    q = _mm256_or_si256(q, _mm256_and_si256(moved, bit4));
  }
  return q;
}

// An unpacked copy of a Q5_K or Q6_K group (q5_K_unpack, q6_K_unpack): per group and block
// kUnpackedKBlockBytes, the 64 quant vectors in the order the kernels take them (vector v at 32 v).
inline __m256i unpacked_k_vector(const uint8_t* unpacked, int64_t nb, int r, int64_t i, int v) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
      unpacked + static_cast<size_t>(r * nb + i) * kUnpackedKBlockBytes + static_cast<size_t>(v) * 32));
}

// n_groups consecutive Q5_K groups of nb blocks into dst (n_groups * nb * kUnpackedKBlockBytes bytes):
// vector 8 (2k + e) + g is q4_K_quants<true>(rec, k, e, g).
inline void q5_K_unpack(int64_t nb, const uint8_t* group, int64_t n_groups, uint8_t* dst) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  for (int64_t gi = 0; gi < n_groups * nb; ++gi) {
    const uint8_t* rec = group + gi * kQ5KRecordBytes;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e)
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + gi * kUnpackedKBlockBytes + (8 * (2 * k + e) + g) * 32),
                              q4_K_quants<true>(rec, k, e, g, low_mask, bit4));
  }
}

// Dword j (0..3) of each 128-bit half, broadcast within its half; j is a constant once the callers'
// loops are unrolled (the switch keeps every shuffle's immediate a literal, also without optimization).
[[gnu::always_inline]] inline __m256i dword_in_halves(__m256i v, int j) {
  switch (j) {
    case 0:
      return _mm256_shuffle_epi32(v, 0x00);
    case 1:
      return _mm256_shuffle_epi32(v, 0x55);
    case 2:
      return _mm256_shuffle_epi32(v, 0xAA);
    default:
      return _mm256_shuffle_epi32(v, 0xFF);
  }
}

// One token's Q4_K block sums with vpdpbusd: isum[r] = sum_s scale_s * (sub-block s of q . y) for the
// R groups' records of one block (decode). With one token each quant vector and broadcast activation
// feeds a single vpdpbusd, and the general kernel below waited on its loads (two a cycle on Zen 4, the
// prefetches among them) and on the sub-blocks' chains of 8 dependent vpdpbusd. This one:
// - loads each packed vector once: the low nibbles (sub-block 2k) are q & 0x0F, the high ones (2k + 1)
//   stay in place as q & 0xF0 = 16 x quant (no shift; products <= 240 * 128, 4 a lane: exact in int32).
//   Their scaled sums, 16 x the true ones, add up apart and are shifted back once (4 sub-blocks of at
//   most 16 * 32 * 15 * 128 * 63 each: < 2^31). The same integers as the general kernel, so the same bits;
// - loads the activations 16 bytes at a time and broadcasts each dword from the register (vpshufd);
// - runs two k's sub-blocks side by side, vector g of each in turn: 4 chains in flight.
// bench_cpu_peak KernelVnni/Q4_K g1/t1 ~93 against ~73 G MAC/s, g2/t1 ~104 against ~78. Four k's side by
// side (8 chains) ran ~97 in L1 but ~0.94x from memory (4 streams 256 bytes apart through each record),
// one k (2 chains, in address order) ~80. From memory this one is about even (bench_matmul Q4_K
// 8192x2048 tokens:1/cold, 12 alternating runs: median 1.04x, spread +-20 % on this noisy host): decode
// waits on memory; the kernel's time shows where the weights are cached, or memory is faster per core.
template <int R>
[[gnu::always_inline]] inline void q4_K_block_sums_one_token(const uint8_t* const (&rec)[R], const int8_t* y_qs,
                                                             __m256i (&isum)[R]) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i high_mask = _mm256_set1_epi8(static_cast<char>(0xF0));
  __m256i sub[4][2][R];  // [k][e]: sub-block 2k + e (e = 1: 16 x)
  __m256i y16[4][2];     // [k][e]: activations 64k + 32e + 16h .. + 15 for the half h = g / 4 in use
  constexpr int kSpan = 2;
#pragma GCC unroll 4
  for (int kb = 0; kb < 4; kb += kSpan)
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 4
      for (int k = kb; k < kb + kSpan; ++k) {
        if (g % 4 == 0) {
#pragma GCC unroll 2
          for (int e = 0; e < 2; ++e)
            y16[k][e] = _mm256_broadcastsi128_si256(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(y_qs + 64 * k + 32 * e + 4 * g)));
        }
        const __m256i y_lo = dword_in_halves(y16[k][0], g % 4);
        const __m256i y_hi = dword_in_halves(y16[k][1], g % 4);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[r] + 160) + 8 * k + g);
          opaque(packed);  // one load for both masks (GCC otherwise folds it into each and loads it twice)
          sub[k][0][r] =
              dpbusd(g == 0 ? _mm256_setzero_si256() : sub[k][0][r], _mm256_and_si256(packed, low_mask), y_lo);
          sub[k][1][r] =
              dpbusd(g == 0 ? _mm256_setzero_si256() : sub[k][1][r], _mm256_and_si256(packed, high_mask), y_hi);
        }
      }
    }
  __m256i lo_sum[R], hi_sum[R];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const auto scaled = [&](int k, int e) {
      const __m256i scales =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[r] + 32 + 8 * (2 * k + e))));
      return _mm256_mullo_epi32(sub[k][e][r], scales);
    };
    lo_sum[r] = scaled(0, 0);
    hi_sum[r] = scaled(0, 1);
#pragma GCC unroll 3
    for (int k = 1; k < 4; ++k) {
      lo_sum[r] = _mm256_add_epi32(lo_sum[r], scaled(k, 0));
      hi_sum[r] = _mm256_add_epi32(hi_sum[r], scaled(k, 1));
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) isum[r] = _mm256_add_epi32(lo_sum[r], _mm256_srai_epi32(hi_sum[r], 4));
}

// Q4_K x Q8_K, R groups of 8 rows times T tokens per 256-element block:
//   row . y = d * dy * sum_s scale_s * (sum over sub-block s of q * y) - dmin * dy * sum_s min_s * ysum_s
// Each 32-element sub-block is 8 maddubs per (group, token) into int16 sums as in the Q4 kernels
// (pair sums <= 2 * 15 * 127, 16 of them <= 30480: exact), then one madd by the 8 rows' scales (a
// shuffle of the record's unpacked scale bytes into [scale, scale] int16 pairs) into int32 (<= 63 *
// 30480 * 2 per sub-block, 8 sub-blocks: far from overflow). The min term takes the Q8_K sums of 32
// elements as int16 pairs against the rows' mins, 4 madds per block and token. Every (row, token) is
// computed with the same operations in the same order whatever R and T are.
//
// Q5_K (kQ5) is the same with each quant's 5th bit moved from its bit plane to bit 4 (one shift and
// mask per vector, shared by the tokens) and OR'ed in. Quants reach 31, so a maddubs pair sum reaches
// 2 * 31 * 127 and only 4 fit in int16 (<= 31496): each sub-block is madd'ed by its scales in two halves.
//
// With vpdpbusd (kVnni) each sub-block's 8 products per lane go straight into int32 and are multiplied by
// the rows' scales (vpmulld, exact): the same integers as the int16 route, so the same bits.
//
// With kUnpacked (Q5_K only), the quants come from q5_K_unpack's copy of the R groups instead of
// being rebuilt from the nibbles and bit planes: the same vectors, so the same integers and bits.
template <bool kVnni, bool kQ5, int R, int T, bool kUnpacked = false>
void gemm_q4_K_fixed(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                     int64_t stride, const uint8_t* far, const uint8_t* unpacked = nullptr) {
  static_assert(kQ5 || !kUnpacked, "only Q5_K has an unpacked copy");
  constexpr size_t kRecordBytes = kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes;
  // One-token Q5_K asks 8 KiB ahead: its records take longer to multiply than Q4_K's (the bit planes),
  // and at 2 KiB its decode read memory at about half the bound. 1B-shaped, Zen 4, 7 alternating pairs:
  // 1.06-1.23x (median ~1.1x). One-token Q4_K asks for nothing with vpdpbusd, as Q4_0
  // (q32_prefetch_distance): 1B-shaped decode 0.80-1.00x the step time of 2 KiB (6 in-process runs; it
  // measured 0.74-0.84x at 8 KiB). The AVX2 kernel asks 8 KiB ahead, as the AVX2 Q4_0 one: Zen 3 (2026-12-02),
  // 1B-shaped batch-1 decode after 512 tokens against asking for nothing, alternating binaries: 1.12 +- 0.02x
  // (10 rounds, every one faster; 4 more with the order swapped: 1.17x). So does the AVX-VNNI build
  // (kVectorRegisters 16; Xeon, alternating binaries: ~1.25x, q32_prefetch_distance).
  constexpr size_t kAhead = T > 1   ? kPrefetchAhead
                            : kQ5   ? kQ5KDecodePrefetchAhead
                            : kAvx512VnniBuild<kVnni> ? 0
                                                      : kAvx2DecodePrefetchAhead;
  // With AVX-VNNI's 16 registers the block sums (isum) live in memory, an add from L1 once per sub-block, so
  // the registers hold the R x T running sub-block sums: their chains of dependent vpdpbusd need about 10 in
  // flight to keep two a cycle going (passes of 6 tokens, kQ4KPassTokens). Xeon (Emerald Rapids),
  // bench_cpu_peak, best of 9 alternating runs: KernelAvxVnni/Q4_K g2/t6 ~101 -> ~115 G MAC/s, g2/t4 ~91 ->
  // ~110. Unpacked Q5_K takes two groups a pass with it (KernelUnpackedAvxVnni/Q5_K g2/t6 ~1.08x, median of
  // 15 alternating pairs against two one-group passes). The AVX-512 build (32 registers) gained nothing
  // (KernelVnni/Q4_K g2/t6 ~118 either way) and packed Q5_K (one group, bit planes) lost ~0.9x: they keep
  // theirs in registers.
  constexpr bool kIsumInMemory = kVnni && !kAvx512VnniBuild<kVnni> && (!kQ5 || kUnpacked);
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  // Lane j of 128-bit half L is row 4L + j: [scale, 0, scale, 0] for sub-block 2k + e takes byte 8e + 4L + j
  // of 16 bytes holding sub-blocks 2k and 2k + 1, broadcast to both halves.
  const __m256i scale_pick[2] = {_mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                                  4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1),
                                 _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1,  //
                                                  12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1)};
  // [min of sub-block 2k, min of 2k + 1] per row, from the same 16-byte layout.
  const __m256i min_pick = _mm256_setr_epi8(0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11, -1,  //
                                            4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15, -1);
  __m256 acc[R][T];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[R];
    block_records<kRecordBytes, R, kQK_K, kAhead>(group, group_bytes, i, rec, far);
    __m256i isum[R][T];
    if constexpr (kVnni && !kQ5 && T == 1) {
      __m256i one[R];
      q4_K_block_sums_one_token<R>(rec, acts[0][i].qs, one);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) isum[r][0] = one[r];
    } else {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          __m256i sum16[R][T];
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) {
            __m256i q[R];
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r) {
              if constexpr (kUnpacked) {
                q[r] = unpacked_k_vector(unpacked, nb, r, i, 8 * (2 * k + e) + g);
              } else {
                q[r] = q4_K_quants<kQ5>(rec[r], k, e, g, low_mask, bit4);
              }
            }
#pragma GCC unroll 6
            for (int t = 0; t < T; ++t) {
              const __m256i y = broadcast_4_bytes(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
#pragma GCC unroll 2
              for (int r = 0; r < R; ++r) {
                if constexpr (kVnni) {
                  sum16[r][t] = dpbusd(g == 0 ? _mm256_setzero_si256() : sum16[r][t], q[r], y);
                } else {
                  const __m256i p = _mm256_maddubs_epi16(q[r], y);
                  sum16[r][t] = g == 0 || (kQ5 && g == 4) ? p : _mm256_add_epi16(sum16[r][t], p);
                  opaque(sum16[r][t]);
                }
              }
            }
            if (kVnni && g == 7) {
#pragma GCC unroll 2
              for (int r = 0; r < R; ++r) {
                const __m256i scales = _mm256_cvtepu8_epi32(
                    _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[r] + 32 + 8 * (2 * k + e))));
#pragma GCC unroll 6
                for (int t = 0; t < T; ++t) {
                  const __m256i p = _mm256_mullo_epi32(sum16[r][t], scales);
                  isum[r][t] = k == 0 && e == 0 ? p : _mm256_add_epi32(isum[r][t], p);
                  if constexpr (kIsumInMemory) asm("" : "+m"(isum[r][t]));  // keeps GCC from promoting it
                }
              }
            }
            if (!kVnni && (g == 7 || (kQ5 && g == 3))) {
#pragma GCC unroll 2
              for (int r = 0; r < R; ++r) {
                const __m256i scales = _mm256_shuffle_epi8(
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r] + 32) + k)),
                    scale_pick[e]);
#pragma GCC unroll 6
                for (int t = 0; t < T; ++t) {
                  const __m256i p = _mm256_madd_epi16(sum16[r][t], scales);
                  isum[r][t] = k == 0 && e == 0 && g == (kQ5 ? 3 : 7) ? p : _mm256_add_epi32(isum[r][t], p);
                }
              }
            }
          }
        }
      }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& y = acts[t][i];
      // ysum[s] = sum of y over sub-block s, as int16 (|sum| <= 32 * 128), pairs [2k, 2k + 1] in int32 k.
      alignas(16) int32_t ysum_pairs[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(ysum_pairs),
                      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8))));
      const __m256 dy = _mm256_set1_ps(y.d);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m256i mins = _mm256_shuffle_epi8(
              _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r] + 96) + k)),
              min_pick);
          msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins, _mm256_set1_epi32(ysum_pairs[k])));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r])));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r] + 16)));
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
        acc[r][t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(msum), acc[r][t]);
      }
    }
  }
  store_groups<R, T>(acc, out, stride);
}

template <bool kVnni, bool kQ5, int R, bool kUnpacked = false>
void gemm_q4_K_tokens(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, int n_tok,
                      float* out, int64_t stride, const uint8_t* far, const uint8_t* unpacked = nullptr) {
  with_token_count<6>(n_tok, [&]<int T>() {
    gemm_q4_K_fixed<kVnni, kQ5, R, T, kUnpacked>(nb, group, group_bytes, acts, out, stride, far, unpacked);
  });
}

// The Q5_K / Q6_K passes over q5_K_unpack's / q6_K_unpack's copy of the n_groups groups (a multiple of
// kGroups): kGroups groups and kUnpackedKPassTokens tokens a call, against 4 / 3 while unpacking (the
// unpacking no longer holds registers; the float sums, touched once a block, spill). `tokens` is
// gemm_q4_K_tokens<kVnni, true, kGroups, true> or gemm_q6_K_tokens<false, kGroups, kUnpackedKPassTokens,
// true>. (kUnpacked is a template argument: as a run-time test of `unpacked` inside the vector loop, once
// the packed and unpacked calls shared an instantiation, 1B-shaped Q5_K decode with vpdpbusd ran at 25
// against 34 tok/s.)
template <size_t kRecordBytes, int kGroups, typename Tokens>
inline void unpacked_k_passes(int64_t n, const uint8_t* group, int n_groups, const uint8_t* unpacked,
                              const BlockQ8_K* const* acts, int n_tok, float* out, int64_t out_stride,
                              const uint8_t* far, Tokens tokens) {
  const int64_t nb = n / kQK_K;
  const size_t group_bytes = static_cast<size_t>(nb) * kRecordBytes;
  constexpr int kPass = kUnpackedKPassTokens;
  for (int g = 0; g < n_groups; g += kGroups)
    for (int t0 = 0; t0 < n_tok; t0 += kPass)
      tokens(nb, group + g * group_bytes, group_bytes, acts + t0, std::min(kPass, n_tok - t0),
             out + t0 * out_stride + g * kInterleaveRows, out_stride, g == 0 && t0 == 0 ? far : nullptr,
             unpacked + static_cast<size_t>(g * nb) * kUnpackedKBlockBytes);
}

// Tokens a pass of Q4_K's two-group kernel holds: 6 with vpdpbusd, 3 with AVX2's int16 sums (past 3 they
// spill: bench_cpu_peak Kernel/Q4_K g2/t3 ~1.3x g2/t6). On AVX-VNNI's 16 registers the block sums live in
// memory (kIsumInMemory in gemm_q4_K_fixed), so 12 running sub-block sums, 2 quant vectors and a broadcast
// fit; passes of 3 there left 6 chains of dependent vpdpbusd, too few to cover its latency.
template <bool kVnni>
constexpr int kQ4KPassTokens = kVnni ? 6 : 3;

// Tokens a pass of Q6_K's one-group kernel holds: 6 with vpdpbusd and 32 registers, 3 where AVX2's int16
// sums or 16 registers spill past that (measured at the caller).
template <bool kVnni>
constexpr int kQ6KPassTokens = kVnni && kVectorRegisters == 32 ? 6 : 3;

// Q4_K and Q5_K calls.
template <bool kVnni, bool kQ5>
void gemm_k_scale_min(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                      float* out, int64_t out_stride, const uint8_t* far) {
  const int64_t nb = n / kQK_K;
  const size_t group_bytes = static_cast<size_t>(nb) * (kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes);
  if constexpr (kQ5) {
    // Q5_K's bit-plane work per vector leaves no room for a second group: one group and up to 4 tokens
    // per pass (bench_cpu_peak Kernel/Q5_K: g1/t4 ~1.05-1.1x g1/t3, t5, t6 and ~1.4x g2 at any count).
    for (int g = 0; g < n_groups; ++g)
      for (int t0 = 0; t0 < n_tok; t0 += 4)
        gemm_q4_K_tokens<kVnni, true, 1>(nb, group + g * group_bytes, group_bytes, acts + t0, std::min(4, n_tok - t0),
                                         out + t0 * out_stride + g * kInterleaveRows, out_stride,
                                         g == 0 && t0 == 0 ? far : nullptr);
  } else if (n_groups == 2) {
    // Two groups keep 2 x T int16 and int32 sums live: past 3 tokens they spill (bench_cpu_peak
    // Kernel/Q4_K: g2/t3 ~1.3x g2/t6), so larger token counts run as passes of 3. With vpdpbusd there
    // are no int16 sums: passes of 6 (kQ4KPassTokens; Zen 4,
    // KernelVnni/Q4_K g2/t6 148 G MAC/s against 134 G as passes of 3, g2/t4 142 against 115).
    constexpr int kPass = kQ4KPassTokens<kVnni>;
    for (int t0 = 0; t0 < n_tok; t0 += kPass)
      gemm_q4_K_tokens<kVnni, kQ5, 2>(nb, group, group_bytes, acts + t0, std::min(kPass, n_tok - t0),
                                      out + t0 * out_stride, out_stride, t0 == 0 ? far : nullptr);
  } else {
    gemm_q4_K_tokens<kVnni, kQ5, 1>(nb, group, group_bytes, acts, n_tok, out, out_stride, far);
  }
}

// Nibble vector h's quants (q + 32, 0..63) in one Q6_K record: its low (e = 0) or high (e = 1) nibbles
// and their top 2 bits, which sit in vector h / 2 of the top bits at 4 * (h % 2) + 2 * e. The callers'
// loops are unrolled, so every shift count is a constant.
inline __m256i q6_K_quants(const uint8_t* rec, int h, int e) {
  constexpr size_t kNibbles = 144, kTops = 144 + 1024;
  const __m256i nib = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kNibbles) + h);
  const __m256i top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kTops) + h / 2);
  const __m256i low = _mm256_and_si256(e == 0 ? nib : _mm256_srli_epi16(nib, 4), _mm256_set1_epi8(0x0F));
  const int shift = 4 * (h % 2) + 2 * e;
  const __m256i high = shift < 4    ? _mm256_slli_epi16(top, 4 - shift)
                       : shift == 4 ? top
                                    : _mm256_srli_epi16(top, shift - 4);
  return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
}

// n_groups consecutive Q6_K groups of nb blocks into dst (n_groups * nb * kUnpackedKBlockBytes bytes):
// vector 2h + e is q6_K_quants(rec, h, e).
inline void q6_K_unpack(int64_t nb, const uint8_t* group, int64_t n_groups, uint8_t* dst) {
  for (int64_t gi = 0; gi < n_groups * nb; ++gi) {
    const uint8_t* rec = group + gi * kQ6KRecordBytes;
#pragma GCC unroll 32
    for (int h = 0; h < 32; ++h)
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + gi * kUnpackedKBlockBytes + (2 * h + e) * 32),
                            q6_K_quants(rec, h, e));
  }
}

// The K-quants with 16-element sub-blocks and a signed byte scale per row and sub-block in their records
// (interleaved_rows.h), for the kernel below: where the scales sit, each quant vector (elements 64k + 32e +
// 4g .. + 3 of the 8 rows for h = 8k + g, unsigned), and how the quants' offset comes off.
// Q6_K: q + 32 (0..63); minus 32 * sum_s scale_s * ysum_s.
struct Q6KLayout {
  static constexpr size_t kRecordBytes = kQ6KRecordBytes;
  static constexpr size_t kScales = 16;
  static constexpr int kOffsetShift = 5;
  static constexpr bool kMins = false;
  static __m256i quants(const uint8_t* rec, int h, int e) { return q6_K_quants(rec, h, e); }
};

// Q3_K: the 2 low bits of h's elements sit in 2-bit field j = 2 (k % 2) + e of the low-bit vector 8 (k /
// 2) + g, their top bit in bit 4 (k / 2) + j of hmask vector g; together q + 4 (0..7); minus 4 * sum_s
// scale_s * ysum_s. 16-bit shifts by < 8 keep every byte's kept bits its own.
struct Q3KLayout {
  static constexpr size_t kRecordBytes = kQ3KRecordBytes;
  static constexpr size_t kScales = 16;
  static constexpr int kOffsetShift = 2;
  static constexpr bool kMins = false;
  static constexpr size_t kLow = 16 + 128, kHigh = kLow + 512;
  [[gnu::always_inline]] static __m256i quants(const uint8_t* rec, int h, int e) {
    const int k = h / 8, g = h % 8, j = 2 * (k % 2) + e, bit = 4 * (k / 2) + j;
    const __m256i low2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kLow) + 8 * (k / 2) + g);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kHigh) + g);
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(low2, 2 * j), _mm256_set1_epi8(3));
    const __m256i high = bit > 2 ? _mm256_srli_epi16(hmask, bit - 2) : _mm256_slli_epi16(hmask, 2 - bit);
    return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(4)));
  }
};

// Q2_K: q (0..3) in 2-bit field j of the low-bit vector as Q3_K's; its mins are a term of their own, with
// dmin (min_sums below).
struct Q2KLayout {
  static constexpr size_t kRecordBytes = kQ2KRecordBytes;
  static constexpr size_t kScales = 32;
  static constexpr int kOffsetShift = 0;
  static constexpr bool kMins = true;
  static constexpr size_t kMinPairs = 32 + 128, kLow = kMinPairs + 64;
  [[gnu::always_inline]] static __m256i quants(const uint8_t* rec, int h, int e) {
    const int k = h / 8, g = h % 8, j = 2 * (k % 2) + e;
    const __m256i low2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kLow) + 8 * (k / 2) + g);
    return _mm256_and_si256(_mm256_srli_epi16(low2, 2 * j), _mm256_set1_epi8(3));
  }
  // [min of sub-block 2m, min of 2m + 1] as int16 pairs, row r in 32-bit lane r (the record's byte 8m + r
  // holds them in its low and high nibbles).
  [[gnu::always_inline]] static __m256i min_pairs(const uint8_t* rec, int m) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + kMinPairs + 8 * m)));
    return _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(0x0F)),
                           _mm256_slli_epi32(_mm256_srli_epi32(b, 4), 16));
  }
};

// Q6_K x Q8_K, R groups of 8 rows times T tokens per 256-element block, quants unsigned (q + 32):
//   row . y = d * dy * (sum_s scale_s * (sum over sub-block s of q * y) - 32 * sum_s scale_s * ysum_s)
// with 16-element sub-blocks and the Q8_K sums of 16 as ysum_s. Quants reach 63, so a maddubs pair sum
// is up to 2 * 63 * 128 and only two fit an int16 lane: each pair of maddubs is madd'ed by the rows'
// scales (int8, sign-extended into [scale, scale] int16 pairs) into int32. All integer, exact; every
// (row, token) gets the same operations in the same order whatever R and T are.
//
// With vpdpbusd (kVnni) a 16-element sub-block's 4 vectors go straight into int32 (at most 16 * 63 *
// 128 per lane) and one vpmulld by the rows' scales adds it to the block sum: the same integers as the
// pairs above, so the same bits, with no int16 pair sums to keep and fewer operations per token.
//
// With kUnpacked (AVX2 only), the quants come from q6_K_unpack's copy of the R groups (unpacked +
// r * nb * kUnpackedKBlockBytes) instead of being rebuilt from the nibbles and top bits: the same
// vectors, so the same integers and bits. Passes over many tokens then pay the unpacking once.
//
// Q3_K and Q2_K (Layout) are the same sums over their own quants (0..7, 0..3), Q3_K's offset 4, Q2_K's
// mins taken off after the float step as ggml does: dall * isum - dmin * sum_s min_s * ysum_s.
template <bool kVnni, int R, int T, bool kUnpacked = false, typename Layout = Q6KLayout>
void gemm_q6_K_fixed(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                     int64_t stride, const uint8_t* far, const uint8_t* unpacked = nullptr) {
  static_assert(!kUnpacked || std::is_same_v<Layout, Q6KLayout>, "only Q6_K has an unpacked copy");
  constexpr size_t kRecordBytes = Layout::kRecordBytes;
  constexpr size_t kScales = Layout::kScales;
  // From 16 scale bytes (sub-blocks 2m and 2m + 1, rows in order) broadcast to both 128-bit halves, the
  // byte goes to the high half of each int16 (then an arithmetic shift by 8 sign-extends it). Lane j of
  // half L is row 4L + j: [scale, scale] of sub-block 2m + e, or [scale of 2m, scale of 2m + 1].
  const __m256i scale_pick[2] = {_mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,  //
                                                  -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7),
                                 _mm256_setr_epi8(-1, 8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11,  //
                                                  -1, 12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15)};
  const __m256i pair_pick = _mm256_setr_epi8(-1, 0, -1, 8, -1, 1, -1, 9, -1, 2, -1, 10, -1, 3, -1, 11,  //
                                             -1, 4, -1, 12, -1, 5, -1, 13, -1, 6, -1, 14, -1, 7, -1, 15);
  const auto scales16 = [](const uint8_t* sixteen, __m256i pick) {
    return _mm256_srai_epi16(
        _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sixteen))),
                            pick),
        8);
  };
  __m256 acc[R][T];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[R];
    // 2 KiB ahead for one token too: the AVX2 kernel at Q4_K's 8 KiB measured 0.94 +- 0.03x (Zen 3, 1B-shaped
    // Q6_K batch-1 decode, 8 alternating rounds).
    block_records<kRecordBytes, R, kQK_K>(group, group_bytes, i, rec, far);
    __m256i isum[R][T];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {
        // Elements 64k + 32e .. +31: sub-block 4k + 2e (g = 0..3), then 4k + 2e + 1 (g = 4..7).
        if constexpr (kVnni) {
#pragma GCC unroll 2
          for (int j = 0; j < 2; ++j) {
            __m256i sum32[R][T];
#pragma GCC unroll 4
            for (int g = 4 * j; g < 4 * j + 4; ++g) {
              __m256i q[R];
#pragma GCC unroll 2
              for (int r = 0; r < R; ++r) q[r] = Layout::quants(rec[r], 8 * k + g, e);
#pragma GCC unroll 6
              for (int t = 0; t < T; ++t) {
                const __m256i y = broadcast_4_bytes(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
#pragma GCC unroll 2
                for (int r = 0; r < R; ++r)
                  sum32[r][t] = dpbusd(g == 4 * j ? _mm256_setzero_si256() : sum32[r][t], q[r], y);
              }
            }
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r) {
              // Sub-block 4k + 2e + j's scales of the 8 rows, sign-extended.
              const __m256i sc = _mm256_cvtepi8_epi32(
                  _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[r] + kScales + 8 * (4 * k + 2 * e + j))));
#pragma GCC unroll 6
              for (int t = 0; t < T; ++t) {
                const __m256i p = _mm256_mullo_epi32(sum32[r][t], sc);
                isum[r][t] = k == 0 && e == 0 && j == 0 ? p : _mm256_add_epi32(isum[r][t], p);
              }
            }
          }
          continue;
        }
#pragma GCC unroll 4
        for (int gp = 0; gp < 4; ++gp) {
          __m256i sum16[R][T];
#pragma GCC unroll 2
          for (int gg = 0; gg < 2; ++gg) {
            const int g = 2 * gp + gg;
            __m256i q[R];
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r)
              q[r] = kUnpacked ? unpacked_k_vector(unpacked, nb, r, i, 2 * (8 * k + g) + e)
                               : Layout::quants(rec[r], 8 * k + g, e);
#pragma GCC unroll 6
            for (int t = 0; t < T; ++t) {
              const __m256i y = broadcast_4_bytes(acts[t][i].qs + 64 * k + 32 * e + 4 * g);
#pragma GCC unroll 2
              for (int r = 0; r < R; ++r) {
                const __m256i p = _mm256_maddubs_epi16(q[r], y);
                sum16[r][t] = gg == 0 ? p : _mm256_add_epi16(sum16[r][t], p);
                opaque(sum16[r][t]);
              }
            }
          }
#pragma GCC unroll 2
          for (int r = 0; r < R; ++r) {
            const __m256i sc = scales16(rec[r] + kScales + 16 * (2 * k + e), scale_pick[gp / 2]);
#pragma GCC unroll 6
            for (int t = 0; t < T; ++t) {
              const __m256i p = _mm256_madd_epi16(sum16[r][t], sc);
              isum[r][t] = k == 0 && e == 0 && gp == 0 ? p : _mm256_add_epi32(isum[r][t], p);
            }
          }
        }
      }
    }
    // The offset (Q6_K's 32, Q3_K's 4) times sum_s scale_s * ysum_s, or Q2_K's sum_s min_s * ysum_s, pairs
    // of sub-blocks at a time.
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      __m256i osum[T];
#pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) {
        __m256i sc;
        if constexpr (Layout::kMins) {
          sc = Layout::min_pairs(rec[r], m);
        } else {
          sc = scales16(rec[r] + kScales + 16 * m, pair_pick);
        }
#pragma GCC unroll 6
        for (int t = 0; t < T; ++t) {
          int32_t ysums;
          std::memcpy(&ysums, acts[t][i].bsums + 2 * m, 4);
          const __m256i p = _mm256_madd_epi16(sc, _mm256_set1_epi32(ysums));
          osum[t] = m == 0 ? p : _mm256_add_epi32(osum[t], p);
        }
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r])));
      [[maybe_unused]] __m256 dmin;
      if constexpr (Layout::kMins) dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r] + 16)));
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const __m256 dy = _mm256_set1_ps(acts[t][i].d);
        if constexpr (Layout::kMins) {
          acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
          acc[r][t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(osum[t]), acc[r][t]);
        } else {
          const __m256i total = _mm256_sub_epi32(isum[r][t], _mm256_slli_epi32(osum[t], Layout::kOffsetShift));
          acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(total), acc[r][t]);
        }
      }
    }
  }
  store_groups<R, T>(acc, out, stride);
}

template <bool kVnni, int R, int kMaxTok, bool kUnpacked = false, typename Layout = Q6KLayout>
void gemm_q6_K_tokens(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, int n_tok,
                      float* out, int64_t stride, const uint8_t* far, const uint8_t* unpacked = nullptr) {
  with_token_count<kMaxTok>(n_tok, [&]<int T>() {
    gemm_q6_K_fixed<kVnni, R, T, kUnpacked, Layout>(nb, group, group_bytes, acts, out, stride, far, unpacked);
  });
}

// Q6_K, Q3_K or Q2_K (Layout) groups.
template <bool kVnni, typename Layout = Q6KLayout>
void gemm_q6_K_any(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok, float* out,
                   int64_t out_stride, const uint8_t* far) {
  const int64_t nb = n / kQK_K;
  const size_t group_bytes = static_cast<size_t>(nb) * Layout::kRecordBytes;
  // One group per pass. AVX2: up to 3 tokens, as the unpacked quants, the pair sums and the int32 sums of
  // more spill (bench_cpu_peak Kernel/Q6_K: g1/t3 beats g2 at any token count and g1/t4..6). With
  // vpdpbusd there are no pair sums and 32 registers: up to 6 tokens (KernelVnni/Q6_K: g1/t6 ~1.95x the
  // AVX2 g1/t3; two groups per pass, g2, ran at ~0.8x g1). With AVX-VNNI's 16 registers, 3 (Xeon,
  // KernelAvxVnni/Q6_K g1/t3 ~61 G MAC/s against g1/t6 ~56, medians of 7).
  constexpr int kPass = kQ6KPassTokens<kVnni>;
  for (int g = 0; g < n_groups; ++g)
    for (int t0 = 0; t0 < n_tok; t0 += kPass)
      gemm_q6_K_tokens<kVnni, 1, kPass, false, Layout>(nb, group + g * group_bytes, group_bytes, acts + t0,
                                        std::min(kPass, n_tok - t0), out + t0 * out_stride + g * kInterleaveRows,
                                        out_stride, g == 0 && t0 == 0 ? far : nullptr);
}

// IQ4_XS x Q8_K, R groups of 8 rows times T tokens per 256-element block:
//   row . y = d * dy * sum_s scale_s * (sum over sub-block s of level(q) * y)
// Each sub-block of 32 is IQ4_NL's block (levels by shuffle, signed products). AVX2: |level| * (y * sign)
// pairs (within +-32258) are madd'ed straight by the rows' scales as int16 pairs, so a sub-block's scale
// costs nothing per token. vpdpbusd: level + 128 (unsigned) times y into int32 from -128 * sum(y) (the
// sub-block's two Q8_K bsums), then times the rows' scales (vpmulld). Both are the same exact integers
// (at most 8 x 32 x 127 x 127 x 32 in magnitude: far within int32), so the same bits; then ggml's float
// step, once per block.
template <bool kVnni, int R, int T>
void gemm_iq4_xs_fixed(int64_t nb, const uint8_t* group, size_t group_bytes, const BlockQ8_K* const* acts, float* out,
                       int64_t stride, const uint8_t* far) {
  IQ4_NLVectors vectors(kIQ4Values);
  // vpdpbusd takes level + 128: the table's entries with their top bit flipped give it in one shuffle.
  if constexpr (kVnni) vectors.table = _mm256_xor_si256(vectors.table, _mm256_set1_epi8(-128));
  // As Q4_K's (gemm_q4_K_fixed): with AVX-VNNI's 16 registers the block sums live in memory, so the R x T
  // running sub-block sums of a two-group pass of 6 tokens keep 12 vpdpbusd chains going.
  constexpr bool kIsumInMemory = kVnni && !kAvx512VnniBuild<kVnni>;
  __m256 acc[R][T];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[R];
    // 2 KiB ahead also for one token, unlike Q4_0's (bench_matmul IQ4_XS one token cold, Zen 5, 3
    // alternating runs: ~1.1x).
    block_records<kIQ4XSRecordBytes, R, kQK_K>(group, group_bytes, i, rec, far);
    __m256i isum[R][T];
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const auto row_scales = [&](int r) {
        return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec[r] + 16 + 8 * s));
      };
      // AVX2: [scale, scale] per row as int16 pairs, for every product. vpdpbusd takes them after the
      // sub-block (below), so they hold no register across it.
      [[maybe_unused]] __m256i scales[R];
      if constexpr (!kVnni) {
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          const __m128i s16 = _mm_cvtepi8_epi16(row_scales(r));
          scales[r] = _mm256_set_m128i(_mm_unpackhi_epi16(s16, s16), _mm_unpacklo_epi16(s16, s16));
        }
      }
      [[maybe_unused]] __m256i sub[R][T];  // vpdpbusd: the sub-block's unscaled sums
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        __m256i w[R], w_abs[R];
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          w[r] = vectors.levels(rec[r] + 80 + 128 * s, g);
          w_abs[r] = kVnni ? w[r] : _mm256_sign_epi8(w[r], w[r]);
        }
#pragma GCC unroll 6
        for (int t = 0; t < T; ++t) {
          const __m256i y = broadcast_4_bytes(acts[t][i].qs + 32 * s + IQ4_NLVectors::elem(g));
#pragma GCC unroll 2
          for (int r = 0; r < R; ++r) {
            if constexpr (kVnni) {
              const __m256i start =
                  _mm256_set1_epi32(-128 * (acts[t][i].bsums[2 * s] + acts[t][i].bsums[2 * s + 1]));
              sub[r][t] = dpbusd(g == 0 ? start : sub[r][t], w_abs[r], y);
            } else {
              const __m256i p =
                  _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs[r], _mm256_sign_epi8(y, w[r])), scales[r]);
              isum[r][t] = s == 0 && g == 0 ? p : _mm256_add_epi32(isum[r][t], p);
              opaque(isum[r][t]);
            }
          }
        }
      }
      if constexpr (kVnni) {
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          const __m256i sub_scales = _mm256_cvtepi8_epi32(row_scales(r));
#pragma GCC unroll 6
          for (int t = 0; t < T; ++t) {
            const __m256i scaled = _mm256_mullo_epi32(sub[r][t], sub_scales);
            isum[r][t] = s == 0 ? scaled : _mm256_add_epi32(isum[r][t], scaled);
            if constexpr (kIsumInMemory) asm("" : "+m"(isum[r][t]));  // keeps GCC from promoting it
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r])));
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t)
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(acts[t][i].d)), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
    }
  }
  store_groups<R, T>(acc, out, stride);
}

// IQ4_XS groups in passes of kIQ4XSPassTokens tokens, two groups a pass where the call has them.
template <bool kVnni>
void gemm_iq4_xs_any(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                     float* out, int64_t out_stride, const uint8_t* far) {
  const int64_t nb = n / kQK_K;
  const size_t group_bytes = static_cast<size_t>(nb) * kIQ4XSRecordBytes;
  for (int t0 = 0; t0 < n_tok; t0 += kIQ4XSPassTokens) {
    const uint8_t* f = t0 == 0 ? far : nullptr;
    with_token_count<kIQ4XSPassTokens>(std::min(kIQ4XSPassTokens, n_tok - t0), [&]<int T>() {
      if (n_groups == 2) {
        gemm_iq4_xs_fixed<kVnni, 2, T>(nb, group, group_bytes, acts + t0, out + t0 * out_stride, out_stride, f);
      } else {
        gemm_iq4_xs_fixed<kVnni, 1, T>(nb, group, group_bytes, acts + t0, out + t0 * out_stride, out_stride, f);
      }
    });
  }
}

}  // namespace
}  // namespace kvserve
