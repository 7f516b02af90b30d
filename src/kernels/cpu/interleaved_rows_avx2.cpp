// AVX2 kernels of interleaved_rows.h (the kernel bodies are in interleaved_q32_kernels.h and
// interleaved_kquant_kernels.h). Compiled with -mavx2 -mfma -mf16c; only called after cpu_has_avx2().
#include "kernels/cpu/interleaved_kquant_kernels.h"
#include "kernels/cpu/interleaved_q32_kernels.h"
#include "kernels/cpu/interleaved_rows.h"

namespace kvserve::avx2 {

void gemm_interleaved_q8_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_signed8_any<false, Q8_0Vectors>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q5_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_unsigned_any<false, Q5_0Steps>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_iq4_nl(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                             float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_signed8_any<false, IQ4_NLVectors>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_mxfp4(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                            float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_unsigned_any<false, MXFP4Steps>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_any<false, false>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_1(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_any<false, true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q4_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_k_scale_min<false, false>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q5_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_k_scale_min<false, true>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q6_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q6_K_any<false>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void unpack_q5_K_groups(int64_t n, const uint8_t* group, int n_groups, uint8_t* dst) {
  q5_K_unpack(n / kQK_K, group, n_groups, dst);
}

void gemm_interleaved_q5_K_unpacked(int64_t n, const uint8_t* group, int n_groups, const uint8_t* unpacked,
                                    const BlockQ8_K* const* acts, int n_tok, float* out, int64_t out_stride,
                                    const uint8_t* prefetch) {
  unpacked_k_passes<kQ5KRecordBytes, 1>(n, group, n_groups, unpacked, acts, n_tok, out, out_stride, prefetch,
                                        gemm_q4_K_tokens<false, true, 1, true>);
}

void unpack_q6_K_groups(int64_t n, const uint8_t* group, int n_groups, uint8_t* dst) {
  q6_K_unpack(n / kQK_K, group, n_groups, dst);
}

void gemm_interleaved_q6_K_unpacked(int64_t n, const uint8_t* group, int n_groups, const uint8_t* unpacked,
                                    const BlockQ8_K* const* acts, int n_tok, float* out, int64_t out_stride,
                                    const uint8_t* prefetch) {
  unpacked_k_passes<kQ6KRecordBytes, 1>(n, group, n_groups, unpacked, acts, n_tok, out, out_stride, prefetch,
                                        gemm_q6_K_tokens<false, 1, kUnpackedKPassTokens, true>);
}

void gemm_interleaved_iq4_xs(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                             float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_iq4_xs_any<false>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q3_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q6_K_any<false, Q3KLayout>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

void gemm_interleaved_q2_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch) {
  gemm_q6_K_any<false, Q2KLayout>(n, group, n_groups, acts, n_tok, out, out_stride, prefetch);
}

}  // namespace kvserve::avx2
