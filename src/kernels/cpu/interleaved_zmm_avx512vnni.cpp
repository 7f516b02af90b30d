// Two interleaved 8-row groups in one 512-bit register: the Q4_0 / Q4_1 / Q8_0 kernels of
// interleaved_rows.h (avx512zmm namespace) for calls that take a pair of groups and several tokens, i.e.
// batched decode and prefill, where the kernels are bound by instructions rather than by memory.
//
// Why: on a core with full-width AVX-512 (Zen 5, bench_cpu_peak Peak/*: vpdpbusd on zmm issues at the
// same instructions per cycle as on ymm) a zmm vpdpbusd does twice the multiply-adds, and the per-block
// float work (convert, scale, FMA) is done once for 16 rows. A zmm holds group 0's 8 rows in its low
// half and group 1's in its high half, so the records stay as they are (one load and one 256-bit insert
// per quant vector, shared by every token), and each token's broadcast activation is one vpbroadcastd
// for both groups.
//
// Each lane is one row and gets exactly the operations the 8-row VNNI kernel gives it (the same exact
// int32 block sums, then the same float multiply, convert and FMA in the same order), so results are
// bit-identical to avx512vnni:: and avx2:: (test: ZmmKernelsAreBitIdenticalToAvx2).
//
// Compiled with the *_avx512vnni.cpp flags; only called after cpu_has_avx512_vnni().
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics (_mm512_cvtph_ps, _mm512_cvtepi32_ps, _mm512_castsi256_si512, ...) pass an
// _mm512_undefined_*() value that is initialized from itself, which -Wmaybe-uninitialized reports once
// they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/interleaved_q32_kernels.h"
#include "kernels/cpu/interleaved_rows.h"

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

// Q4_0 / Q4_1 (kQ4_1), P pairs of groups times T tokens: gemm_fixed<kVnni = true> of
// interleaved_q32_kernels.h with both groups of a pair in one register.
template <bool kQ4_1, int P, int T>
void gemm_pair_q4(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, float* out,
                  int64_t stride, const uint8_t* far) {
  constexpr size_t kScaleBytes = kQ4_1 ? 32 : 16;
  constexpr size_t kRecordBytes = kQ4RecordBytes<kQ4_1>;
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
  __m512 acc[P][T];
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[2 * P];
    block_records<kRecordBytes, 2 * P>(group, group_bytes, i, rec, far);
    __m512i sum[P][T];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i q[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const __m512i packed = load_pair(rec[2 * p], rec[2 * p + 1], kScaleBytes + 32 * (g % 4));
        q[p] = _mm512_and_si512(g < 4 ? packed : _mm512_srli_epi16(packed, 4), low_mask);
      }
      const int elem = g < 4 ? 4 * g : 16 + 4 * (g - 4);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i y = broadcast4(acts[t].qs + 32 * i + elem);
        const __m512i start = kQ4_1 ? _mm512_setzero_si512() : _mm512_set1_epi32(-acts[t].q4_offset[i]);
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) sum[p][t] = _mm512_dpbusd_epi32(g == 0 ? start : sum[p][t], q[p], y);
      }
    }
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) {
      const __m512 dw = load_pair_ph(rec[2 * p], rec[2 * p + 1], 0);
      [[maybe_unused]] __m512 mw;
      if constexpr (kQ4_1) mw = load_pair_ph(rec[2 * p], rec[2 * p + 1], 16);
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

// Q8_0, a pair of groups times T tokens: gemm_q8_0_fixed<kVnni = true> with both groups in one register
// (w + 128 unsigned, 128 * sum(y) taken off from the start of each block's sum).
template <int P, int T>
void gemm_pair_q8_0(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, float* out,
                    int64_t stride, const uint8_t* far) {
  const __m512i sign_flip = _mm512_set1_epi8(-128);
  __m512 acc[P][T];
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[2 * P];
    block_records<kQ8_0RecordBytes, 2 * P>(group, group_bytes, i, rec, far);
    __m512i sum[P][T];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i w[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) w[p] = _mm512_xor_si512(load_pair(rec[2 * p], rec[2 * p + 1], 16 + 32 * g), sign_flip);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512i y = broadcast4(acts[t].qs + 32 * i + 4 * g);
        const __m512i start = _mm512_set1_epi32(-16 * acts[t].q4_offset[i]);
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) sum[p][t] = _mm512_dpbusd_epi32(g == 0 ? start : sum[p][t], w[p], y);
      }
    }
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) {
      const __m512 dw = load_pair_ph(rec[2 * p], rec[2 * p + 1], 0);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512 dy = _mm512_set1_ps(acts[t].d[i]);
        acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dy), _mm512_cvtepi32_ps(sum[p][t]), acc[p][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(out + t * stride + 16 * p, acc[p][t]);
}

// A lone group (a chunk's odd one, a range edge) through the ymm kernel, in passes of at most its
// kMaxInterleavedTokens tokens.
template <typename Fn>
void lone_group(Fn ymm_gemm, int64_t n, const uint8_t* group, const PackedActs32* acts, int n_tok, float* out,
                int64_t out_stride, const uint8_t* prefetch) {
  constexpr int kPass = avx2::kMaxInterleavedTokens;
  for (int t0 = 0; t0 < n_tok; t0 += kPass)
    ymm_gemm(n, group, 1, acts + t0, std::min(kPass, n_tok - t0), out + t0 * out_stride, out_stride,
             t0 == 0 ? prefetch : nullptr);
}

// n_groups (1..kMaxZmmGroups) groups from `group`: four as two pairs in one kernel, else a pair, and an
// odd group left over through the ymm kernel. pair_kernel.operator()<P, T>() runs P pairs x T tokens.
template <typename PairKernel, typename Fn>
void zmm_groups(const PairKernel& pair_kernel, Fn ymm_gemm, int64_t n, const uint8_t* group, size_t group_bytes,
                int n_groups, const PackedActs32* acts, int n_tok, float* out, int64_t out_stride,
                const uint8_t* prefetch) {
  int done = 0;
  if (n_groups >= 4) {
    with_token_count<avx512zmm::kMaxZmmTokens>(n_tok, [&]<int T>() { pair_kernel.template operator()<2, T>(); });
    done = 4;
  } else if (n_groups >= 2) {
    with_token_count<avx512zmm::kMaxZmmTokens>(n_tok, [&]<int T>() { pair_kernel.template operator()<1, T>(); });
    done = 2;
  }
  if (done < n_groups)
    lone_group(ymm_gemm, n, group + done * group_bytes, acts, n_tok, out + done * kInterleaveRows, out_stride,
               done == 0 ? prefetch : nullptr);
}

}  // namespace

namespace avx512zmm {

void gemm_interleaved_q4_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  const int64_t nb = n / 32;
  const size_t group_bytes = nb * kQ4RecordBytes<false>;
  const auto pair = [&]<int P, int T>() {
    gemm_pair_q4<false, P, T>(nb, group, group_bytes, acts, out, out_stride, prefetch);
  };
  zmm_groups(pair, avx512vnni::gemm_interleaved_q4_0, n, group, group_bytes, n_groups, acts, n_tok, out, out_stride,
             prefetch);
}

void gemm_interleaved_q4_1(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  const int64_t nb = n / 32;
  const size_t group_bytes = nb * kQ4RecordBytes<true>;
  const auto pair = [&]<int P, int T>() {
    gemm_pair_q4<true, P, T>(nb, group, group_bytes, acts, out, out_stride, prefetch);
  };
  zmm_groups(pair, avx512vnni::gemm_interleaved_q4_1, n, group, group_bytes, n_groups, acts, n_tok, out, out_stride,
             prefetch);
}

void gemm_interleaved_q8_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  const int64_t nb = n / 32;
  const size_t group_bytes = nb * kQ8_0RecordBytes;
  const auto pair = [&]<int P, int T>() {
    gemm_pair_q8_0<P, T>(nb, group, group_bytes, acts, out, out_stride, prefetch);
  };
  zmm_groups(pair, avx512vnni::gemm_interleaved_q8_0, n, group, group_bytes, n_groups, acts, n_tok, out, out_stride,
             prefetch);
}

}  // namespace avx512zmm
}  // namespace kvserve
