// The Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K interleaved kernels with vpdpbusd (AVX512-VNNI on 256-bit registers, EVEX
// encoded). Compiled with -mavx512f -mavx512vl -mavx512bw -mavx512vnni on top of the AVX2 flags; only
// called after cpu_has_avx512_vnni(). Bit-identical to the AVX2 versions (interleaved_q32_kernels.h,
// interleaved_kquant_kernels.h).
#include "kernels/cpu/interleaved_kquant_kernels.h"
#include "kernels/cpu/interleaved_q32_kernels.h"

namespace kvserve::avx512vnni {

void gemm_interleaved_q8_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_signed8_any<true, Q8_0Vectors>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q5_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q5_0_any<true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_iq4_nl(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                             float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_signed8_any<true, IQ4_NLVectors>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_any<true, false>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_1(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_any<true, true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_k_scale_min<true, false>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q5_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_k_scale_min<true, true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q6_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q6_K_any<true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q5_K_unpacked(int64_t n, const uint8_t* group, int n_groups, const uint8_t* unpacked,
                                    const BlockQ8_K* const* acts, int n_tok, float* out, int64_t out_stride,
                                    const uint8_t* prefetch) {
  // Two groups a pass where the call has them: with AVX-512VL's 32 registers the 2 x 6 int32 sums fit
  // (1B-shaped prefill 1.09x over one group a pass: ~222 against ~202 tok/s, 3 alternating runs).
  if (n_groups == 2) {
    unpacked_k_passes<kQ5KRecordBytes, 2>(n, group, n_groups, unpacked, acts, n_tok, out, out_stride, prefetch,
                                          gemm_q4_K_tokens<true, true, 2, true>);
  } else {
    unpacked_k_passes<kQ5KRecordBytes, 1>(n, group, n_groups, unpacked, acts, n_tok, out, out_stride, prefetch,
                                          gemm_q4_K_tokens<true, true, 1, true>);
  }
}

void gemm_interleaved_iq4_xs(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                             float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_iq4_xs_any<true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q3_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q6_K_any<true, Q3KLayout>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q2_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q6_K_any<true, Q2KLayout>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

}  // namespace kvserve::avx512vnni
