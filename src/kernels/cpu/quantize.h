#pragma once
// Weight quantizers from float (what llama.cpp's quantize tool does for a tensor without an importance
// matrix), for writing GGUF files: ggml's *_ref routines, scalar. Q8_0 is quantize_row_q8_0 in quants.h
// (ggml uses the same routine for weights and activations); the types here had only dequantizers.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

// ggml's quantize_row_q4_0_ref: per block of 32, d = (signed value of largest magnitude) / -8,
// q = min(15, (int)(x/d + 8.5)).
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
// ggml's quantize_row_q4_1_ref: per block of 32, d = (max - min) / 15, m = min.
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
// ggml's quantize_row_q5_0_ref: Q4_0's with 5 bits, d = (signed value of largest magnitude) / -16,
// q = min(31, (int)(x/d + 16.5)).
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
// ggml's quantize_row_q5_1_ref: Q4_1's with 5 bits, d = (max - min) / 31, m = min.
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n);
// ggml's quantize_row_q4_K_ref: per 32-element sub-block a weighted least-squares scale/min search
// (make_qkx2_quants), scales and mins stored as 6 bits against fp16 super-block scales.
void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n);
// ggml's quantize_row_q5_K_ref: Q4_K's search with 5-bit quants (nmax 31, a narrower search range).
void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n);
// ggml's quantize_row_q6_K_ref: per 16-element sub-block a symmetric x^2-weighted scale search
// (make_qx_quants), scales as int8 against an fp16 super-block scale, quants -32..31.
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n);
// What llama.cpp's quantize tool writes without an importance matrix (ggml's quantize_iq4_nl /
// quantize_iq4_xs, 7 tries): per 32-element sub-block the x^2-weighted best scale for the 16 non-uniform
// levels kIQ4Values; IQ4_XS stores the 8 sub-block scales as 6-bit integers against an fp16 super-block scale.
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);
// ggml's quantize_row_mxfp4_ref: per block of 32, e = floor(log2(max |x|)) - 2 + 127 and each value the
// nearest of kMXFP4Values * 2^(e - 128).
void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n);

// Quantizes one row of n elements (a multiple of the type's block size) of `type` into dst
// (row_bytes(type, n) bytes). Supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS and MXFP4; throws Error otherwise.
void quantize_row(DType type, const float* x, void* dst, int64_t n);
// True when quantize_row supports `type`.
bool can_quantize(DType type);

}  // namespace kvserve
