// The 512-bit pair kernels for the 32-element block types (Q4_0, Q4_1, Q5_0, IQ4_NL, MXFP4, Q8_0;
// interleaved_rows.h)
// with each block's integer products on Intel's AMX tile unit (tdpbssd / tdpbsud) instead of vpdpbusd.
//
// Why: a pair's block for T tokens is T x 16 x 32 multiply-adds. The zmm kernel issues 8 vpdpbusd a token
// for them, most of its time at 8 or more tokens. One tdp instruction does all T x 16 x 32 in the tile
// unit; what is left on the vector ports is the unpacking of the block's quants (shared by every token)
// and the per-token float work every kernel does (convert, scale, FMA). The pair layout already holds each
// 4-element run of the 16 rows side by side, which is the row format of AMX's B operand: vector h's low
// nibbles are B row h (elements 4h..4h+3 of every row), its high nibbles B row 4 + h; Q8_0's 8 vectors are
// B's 8 rows as they lie in memory.
//
// What it costs (Xeon VM with AMX, 2026-12-05): every block needs its own int32 sums (each row and token
// has its own scale per 32 elements), so each tdp is followed by a tile store of the sums, and a tile store
// took ~4.2 ns whatever its rows (1 or 16), a tdp at K = 32 ~2.5-4.4 ns (as at K = 64), and the vector
// work did not run beside them (tile products then float work measured the sum of both alone). So the
// tile path pays only where many tokens share each block: bench_cpu_peak KernelAmx against KernelZmm (two
// passes of 8), 16 tokens, weights in L2: Q8_0 ~1.3-1.4x, Q4_0 ~1.2x, Q4_1 ~1.05x; at 1-4 tokens it loses
// (~3x slower at one). matmul takes it for calls of 32 tokens and more (amx_min_tokens in matmul.cpp).
//
// Exactness: the tile unit's int32 sums are the exact integers the vpdpbusd kernels form (every quant
// times every activation byte, no saturation), here with the quants signed (Q4_0's q - 8, Q5_0's q - 16,
// IQ4_NL's and MXFP4's level, Q8_0's byte) where the vpdpbusd kernels take them unsigned and subtract the offset
// through the activation sums; Q4_1's unsigned nibbles with tdpbsud. Then each (row, token) gets the same
// float multiply, convert and FMA per block in the same order, so results are bit-identical to the zmm
// kernels and to avx2:: (test: InterleavedKernels.AmxKernelsAreBitIdenticalToTheZmmOnes).
//
// Compiled with the *_avx512vnni.cpp flags plus AMX-TILE and AMX-INT8; only called after cpu_has_amx_int8().
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/interleaved_pairs_zmm.h"
#include "kernels/cpu/interleaved_q32_kernels.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/quants.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see interleaved_q32_kernels.h

// Tiles 0 and 1: the int32 sums C (T tokens x 16 rows) of even and odd blocks; 2 and 3: their activations
// A (T tokens x 32 bytes); 4 and 5: their quants B (8 rows of 16 x 4 bytes). Two sets, so that a block's
// products need not wait for the previous block's sums to be stored.
void configure_tiles(int n_tok) {
  amx::TileConfig c;
  for (int k : {0, 1}) {
    c.rows[k] = static_cast<uint8_t>(n_tok);
    c.colsb[k] = 64;
    c.rows[2 + k] = static_cast<uint8_t>(n_tok);
    c.colsb[2 + k] = 32;
    c.rows[4 + k] = 8;
    c.colsb[4 + k] = 64;
  }
  amx::load_tile_config(c);
}

// Block i's quants of one pair as B (8 rows of 64 bytes) in `b`: the signed values the tdpbssd takes, or
// Q4_1's unsigned nibbles for tdpbsud. Q8_0 needs none (its record is B).
template <Q32 kType>
[[gnu::always_inline]] inline void unpack_b(const uint8_t* rec, int8_t* b) {
  constexpr bool kQ4_1 = kType == Q32::kQ4_1, kQ5 = kType == Q32::kQ5_0, kNL = kType == Q32::kIQ4_NL;
  constexpr bool kMX = kType == Q32::kMXFP4;
  constexpr size_t kScaleBytes = kQ4_1 ? 64 : kMX ? 16 : 32;
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  [[maybe_unused]] const __m512i offset = _mm512_set1_epi8(kQ5 ? 16 : 8);
  [[maybe_unused]] const __m512i bit4 = _mm512_set1_epi8(0x10);
  [[maybe_unused]] const __m512i nl_table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kNL ? kIQ4Values : kMXFP4Values)));
  [[maybe_unused]] __m512i bits;
  if constexpr (kQ5) bits = load64(rec, kScaleBytes + 4 * 64);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const __m512i packed = load64(rec, kScaleBytes + 64 * (g % 4));
    __m512i q = _mm512_and_si512(g < 4 ? packed : _mm512_srli_epi16(packed, 4), low_mask);
    if constexpr (kQ5) {
      const __m512i fifth = g < 4 ? _mm512_slli_epi16(bits, 4 - g) : _mm512_srli_epi16(bits, g - 4);
      q = _mm512_ternarylogic_epi32(q, fifth, bit4, 0xF8);  // q | (fifth & bit4)
    }
    if constexpr (kNL || kMX) {
      q = _mm512_shuffle_epi8(nl_table, q);
    } else if constexpr (!kQ4_1) {
      q = _mm512_sub_epi8(q, offset);
    }
    _mm512_store_si512(reinterpret_cast<__m512i*>(b + 64 * g), q);
  }
}

// The tile instructions name their tiles by number in the instruction itself, so each of the two tile sets
// is spelled out.
#define KVSERVE_AMX_PRODUCTS(kC, kA, kB, a_ptr, a_stride, b_ptr, c_ptr) \
  do {                                                                  \
    _tile_loadd(kA, a_ptr, a_stride);                                   \
    _tile_loadd(kB, b_ptr, 64);                                         \
    _tile_zero(kC);                                                     \
    if constexpr (kType == Q32::kQ4_1) {                                \
      _tile_dpbsud(kC, kA, kB);                                         \
    } else {                                                            \
      _tile_dpbssd(kC, kA, kB);                                         \
    }                                                                   \
    _tile_stored(kC, c_ptr, 64);                                        \
  } while (0)

// Blocks per stage of the pipeline below.
constexpr int kStageBlocks = 8;

// One pair of groups (pair layout) times T tokens, whose quants lie act_stride bytes apart (one ActPack32).
//
// The blocks go through three stages, kStageBlocks at a time: the quants unpacked into B's layout (vector
// ports), the products (tile unit: the sums stored to memory), and the float work on the stored sums
// (vector ports). A tile instruction waits for what it reads, and a vector load for what a tile store
// wrote: in one block after another each stage waited on the last (bench_cpu_peak KernelAmx, 16 tokens,
// one block at a time: Q4_0 below the zmm kernel). So stage s + 1's products are issued before stage s's
// float work, and stage s + 2's quants unpacked after it, each into a buffer of its own: the tile unit and
// the vector ports work on different stages at once, and the tile loads read quants stored a stage earlier.
// `unpacked` (all but Q8_0; may be null): the pair's quants already in B's layout, nb
// blocks of 512 bytes (unpack_pairs), read from there instead of unpacked here.
template <Q32 kType, int T>
void gemm_pair_amx(int64_t nb, const uint8_t* pair, const PackedActs32* acts, size_t act_stride, float* out,
                   int64_t stride, const uint8_t* far, const int8_t* unpacked) {
  constexpr bool kQ8 = kType == Q32::kQ8_0, kQ4_1 = kType == Q32::kQ4_1, kMX = kType == Q32::kMXFP4;
  constexpr size_t kScaleBytes = kQ4_1 ? 64 : kMX ? 16 : 32;
  constexpr size_t kRecordBytes = q32_record_bytes(kType);
  constexpr size_t kPairRecordBytes = 2 * kRecordBytes;
  constexpr size_t kBBytes = 8 * 64;
  alignas(64) int8_t b_buf[3][kStageBlocks * kBBytes];
  alignas(64) int32_t c_buf[2][kStageBlocks * T * 16];
  __m512 acc[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const int8_t* a_base = acts[0].qs;
  const int64_t n_stages = (nb + kStageBlocks - 1) / kStageBlocks;
  const auto blocks_of = [&](int64_t j) {
    return static_cast<int>(std::min<int64_t>(kStageBlocks, nb - j * kStageBlocks));
  };
  // Stage j's quants into b_buf[j % 3] (and its share of the prefetches).
  const auto unpack = [&](int64_t j) {
    const int n = blocks_of(j);
    for (int s = 0; s < n; ++s) {
      const int64_t i = j * kStageBlocks + s;
      const uint8_t* rec = pair + i * kPairRecordBytes;
      prefetch_ahead<kPairRecordBytes>(rec);
      far_stream<kRecordBytes>(far, i);
      if constexpr (!kQ8) {
        if (unpacked == nullptr) unpack_b<kType>(rec, b_buf[j % 3] + s * kBBytes);
      }
    }
  };
  const auto b_of = [&](int64_t j, int s) -> const void* {
    if constexpr (kQ8) {
      return pair + (j * kStageBlocks + s) * kPairRecordBytes + kScaleBytes;
    } else {
      return unpacked != nullptr ? unpacked + (j * kStageBlocks + s) * kBBytes : b_buf[j % 3] + s * kBBytes;
    }
  };
  // Stage j's products into c_buf[j % 2].
  const auto products = [&](int64_t j) {
    const int n = blocks_of(j);
    const int8_t* a = a_base + 32 * j * kStageBlocks;
    int32_t* c = c_buf[j % 2];
    int s = 0;
    for (; s + 2 <= n; s += 2) {
      KVSERVE_AMX_PRODUCTS(0, 2, 4, a + 32 * s, act_stride, b_of(j, s), c + s * T * 16);
      KVSERVE_AMX_PRODUCTS(1, 3, 5, a + 32 * (s + 1), act_stride, b_of(j, s + 1), c + (s + 1) * T * 16);
    }
    if (s < n) KVSERVE_AMX_PRODUCTS(0, 2, 4, a + 32 * s, act_stride, b_of(j, s), c + s * T * 16);
  };
  // Stage j's float work on its stored sums.
  const auto finish = [&](int64_t j) {
    const int n = blocks_of(j);
    for (int s = 0; s < n; ++s) {
      const int64_t i = j * kStageBlocks + s;
      const uint8_t* rec = pair + i * kPairRecordBytes;
      const int32_t* c = c_buf[j % 2] + s * T * 16;
      const __m512 dw = kMX ? mxfp4_scales16(rec) : load_ph16(rec, 0);
      [[maybe_unused]] __m512 mw;
      if constexpr (kQ4_1) mw = load_ph16(rec, 32);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const __m512 dy = _mm512_set1_ps(acts[t].d[i]);
        const __m512i isum = _mm512_load_si512(reinterpret_cast<const __m512i*>(c + 16 * t));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dy), _mm512_cvtepi32_ps(isum), acc[t]);
        if constexpr (kQ4_1) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(acts[t].s[i]), acc[t]);
      }
    }
  };
  unpack(0);
  if (n_stages > 1) unpack(1);
  products(0);
  for (int64_t j = 0; j < n_stages; ++j) {
    if (j + 1 < n_stages) products(j + 1);
    finish(j);
    if (j + 2 < n_stages) unpack(j + 2);
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * stride, acc[t]);
}

#undef KVSERVE_AMX_PRODUCTS

template <Q32 kType>
void gemm_pairs(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                int64_t out_stride, const uint8_t* prefetch, const int8_t* unpacked) {
  const int64_t nb = n / 32;
  const size_t pair_bytes = 2 * static_cast<size_t>(nb) * q32_record_bytes(kType);
  // Each pair carries its own share of the far stream: a call's stream is n_pairs shares long.
  const size_t far_bytes = static_cast<size_t>(nb) * far_bytes_per_block<q32_record_bytes(kType)>();
  n_tok = std::min(n_tok, amx::kMaxAmxTokens);
  // The tokens' quants are A's rows, which lie at one stride: consecutive tokens of one ActPack32 do (what
  // matmul passes); others are copied to one.
  auto act_stride = static_cast<std::ptrdiff_t>(n_tok > 1 ? acts[1].qs - acts[0].qs : 64);
  bool one_stride = act_stride > 0;
  for (int t = 2; t < n_tok; ++t) one_stride = one_stride && acts[t].qs - acts[t - 1].qs == act_stride;
  PackedActs32 gathered[amx::kMaxAmxTokens];
  if (!one_stride) {
    thread_local std::vector<int8_t> copy;
    copy.resize(static_cast<size_t>(n_tok) * static_cast<size_t>(n));
    for (int t = 0; t < n_tok; ++t) {
      std::memcpy(copy.data() + t * n, acts[t].qs, static_cast<size_t>(n));
      gathered[t] = acts[t];
      gathered[t].qs = copy.data() + t * n;
    }
    acts = gathered;
    act_stride = n;
  }
  configure_tiles(n_tok);
  with_token_count<amx::kMaxAmxTokens>(n_tok, [&]<int T>() {
    for (int p = 0; p < n_pairs; ++p)
      gemm_pair_amx<kType, T>(nb, pairs + p * pair_bytes, acts, static_cast<size_t>(act_stride), out + 16 * p,
                              out_stride, prefetch == nullptr ? nullptr : prefetch + p * far_bytes,
                              unpacked == nullptr ? nullptr : unpacked + p * nb * amx::kUnpackedBlockBytes);
  });
}

}  // namespace

namespace amx {

void gemm_pairs_q4_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch, const int8_t* unpacked) {
  gemm_pairs<Q32::kQ4_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch, unpacked);
}
void gemm_pairs_q4_1(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch, const int8_t* unpacked) {
  gemm_pairs<Q32::kQ4_1>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch, unpacked);
}
void gemm_pairs_q5_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch, const int8_t* unpacked) {
  gemm_pairs<Q32::kQ5_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch, unpacked);
}
void gemm_pairs_iq4_nl(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* prefetch, const int8_t* unpacked) {
  gemm_pairs<Q32::kIQ4_NL>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch, unpacked);
}
void gemm_pairs_mxfp4(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                      int64_t out_stride, const uint8_t* prefetch, const int8_t* unpacked) {
  gemm_pairs<Q32::kMXFP4>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch, unpacked);
}
void gemm_pairs_q8_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch, const int8_t* /*unpacked: its records are B*/) {
  gemm_pairs<Q32::kQ8_0>(n, pairs, n_pairs, acts, n_tok, out, out_stride, prefetch, nullptr);
}

void unpack_pairs(DType type, int64_t n, const uint8_t* pairs, int n_pairs, int8_t* dst) {
  const int64_t nb = n / 32;
  const auto run = [&]<Q32 kType>() {
    const size_t pair_record = 2 * q32_record_bytes(kType);
    for (int64_t k = 0; k < n_pairs * nb; ++k) unpack_b<kType>(pairs + k * pair_record, dst + k * kUnpackedBlockBytes);
  };
  switch (type) {
    case DType::Q4_0:
      run.operator()<Q32::kQ4_0>();
      break;
    case DType::Q4_1:
      run.operator()<Q32::kQ4_1>();
      break;
    case DType::Q5_0:
      run.operator()<Q32::kQ5_0>();
      break;
    case DType::IQ4_NL:
      run.operator()<Q32::kIQ4_NL>();
      break;
    case DType::MXFP4:
      run.operator()<Q32::kMXFP4>();
      break;
    default:
      break;  // Q8_0's records are B already
  }
}

}  // namespace amx
}  // namespace kvserve
