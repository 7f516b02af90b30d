#pragma once
// The i-quant weight types of GGUF below 4 bits (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): block
// layouts byte-exact with ggml's block_iq*, exact dequantizers, and their dots with Q8_K activations (ggml's
// vec_dot_type for all of them).
//
// Every one of these blocks of 256 weights is, once its grid indices, signs and scales are unpacked,
//   w[e] = (d * scale[e / 16] * scale_unit) * (q[e] * q_unit)
// with int8 quants q, small odd integer scales and two power-of-two units per type. The decoders
// (iq_decoder, and avx2::iq_decoder byte for byte the same) give that form, DecodedIQBlock; the dequantizers
// and every dot are written on it, so each type's bits are unpacked in one place. The dequantizers round as ggml's do
// (one rounding for d times the scale, one for the product), so they give ggml's floats bit for bit; a dot's integer
// part per block is exact, as ggml's.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

struct BlockIQ2_XXS {
  uint16_t d;
  // Per 32 elements: four 8-bit grid indices (the first two words), then 4 x 7 sign bits and a 4-bit scale.
  uint16_t qs[kQK_K / 8];
};
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];      // per 8 elements: 9-bit grid index, 7 sign bits
  uint8_t scales[kQK_K / 32];  // two 4-bit scales per 32 elements
};
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];   // 32 low bytes of the 10-bit grid indices, then 32 bytes of 8 signs
  uint8_t qh[kQK_K / 32];  // the indices' high 2 bits, four to a byte
  uint8_t scales[kQK_K / 32];
};
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[3 * kQK_K / 8];  // 64 grid indices (4 elements each), then per 32 elements 4 x 7 sign bits + scale
};
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];   // low bytes of the 9-bit grid indices
  uint8_t qh[kQK_K / 32];  // their high bits
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];  // two 4-bit scales per 64 elements
};
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];    // low bytes of the 11-bit grid indices
  uint16_t qh[kQK_K / 32];  // per 32: 4 x 3 high index bits, 3-bit scale, delta sign
};
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];      // per 16: two x (3 high index bits, delta sign)
  uint8_t scales[kQK_K / 32];  // 3-bit scales per 16, and the block's fp16 d in the top nibbles
};
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);

struct DecodedIQBlock {
  alignas(32) int8_t q[kQK_K];            // |q| <= 62
  alignas(32) int16_t scale[kQK_K / 16];  // odd, 1..31
  float d;                                // the block's fp16 scale
  float scale_unit;                       // 1/8, 1/4 or 1
  float q_unit;                           // 1 or 1/8 (IQ1: q = 8 * grid value +- 1)
};

// A block's float factor: d times the type's units (powers of two, so exact).
inline float iq_block_factor(const DecodedIQBlock& b) { return b.d * b.scale_unit * b.q_unit; }
// The one float step per block and token that every kernel of these types takes, in this order, so the
// scalar reference, the AVX2 tiles and the AVX-512 kernels give the same bits whatever the batch:
// acc + (factor * activation d) * (exact integer dot of the block), fused.
inline float iq_accumulate(float acc, float factor_times_d, int32_t block_dot) {
  return __builtin_fmaf(factor_times_d, static_cast<float>(block_dot), acc);
}

// Whether each pair of `type`'s 16-element scales is one scale of 32 elements (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S).
inline bool iq_scale_per_32(DType type) {
  return type == DType::IQ2_XXS || type == DType::IQ3_XXS || type == DType::IQ3_S || type == DType::IQ1_S;
}

// Whether `type` is one of this file's types.
bool is_low_bit_iquant(DType type);

// Unpacks one block.
using IQDecodeFn = void (*)(const void* block, DecodedIQBlock& out);
// The scalar decoder of `type` (one of this file's types; nullptr otherwise).
IQDecodeFn iq_decoder(DType type);

// n elements (a multiple of 256) of a row of `type`.
void dequantize_row_iq(DType type, const void* x, float* y, int64_t n);
// Scalar reference: n elements of a row of `type` with Q8_K activations.
float vec_dot_iq_q8_K(DType type, int64_t n, const void* w, const BlockQ8_K* a);

namespace avx2 {
// One row against up to kMaxTileTokens Q8_K rows (iquants_avx2.cpp): each block decoded once, its integer
// dot per token exact; call only when cpu_has_avx2().
void dot_tile_iq2_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq2_xs(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq2_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq3_xxs(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq3_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq1_s(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq1_m(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
// The decoder of `type` with the grid lookups, index bits and signs of 32 elements at a time in a register:
// the scalar decoder's DecodedIQBlock, byte for byte (nullptr for other types).
IQDecodeFn iq_decoder(DType type);
// The same over a row already decoded (n / 256 blocks): what a call of many tokens uses, decoding each
// weight block once for all of them. The same arithmetic per token, so the same bits.
void dot_tile_iq_decoded(int64_t n, const DecodedIQBlock* w, const void* const* a, int n_tok, float* out);
}  // namespace avx2

// The tokens-in-lanes kernels (iquants_gemm_avx512vnni.cpp: 16 lanes on zmm, and 8 on ymm for batches of 5 to 8
// tokens; iquants_gemm_avxvnni.cpp: 8 lanes for cores with AVX-VNNI but no AVX-512). A block decoded for them:
// the quants plus kCodedOffset (unsigned for vpdpbusd), each 16 elements' scale, d times the type's units.
inline constexpr int kCodedOffset = 64;
struct CodedIQBlock {
  alignas(64) uint8_t u[kQK_K];
  alignas(64) int32_t scale[kQK_K / 16];
  float f;
};
// Up to L tokens' (L = 16 or 8 lanes) Q8_K activations of n elements with the tokens in the lanes: per block,
// per 4 elements k, 4L bytes (token t's four at 4t); per block and 16-element sub-block, the L tokens'
// kCodedOffset * bsum; per block the L tokens' d. Lanes past the tokens are zero.
struct IQTokenLanes {
  int8_t* q;      // n * L bytes, 64-byte aligned
  int32_t* bias;  // n / 16 * L
  float* d;       // n / 256 * L
};

namespace avx512vnni {
// Row `row` of `type` (n elements) decoded into out[0, n / 256).
void decode_iq_coded(DType type, const void* row, int64_t n, CodedIQBlock* out);
// n_tok (1..16) Q8_K rows of n elements, row_bytes apart from `rows`, into out's 16 lanes.
void tokens_to_lanes(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out);
// out[r * 16 + t] for r < n_rows (rows of `type`, n / 256 blocks each, one after another from w) and the 16
// lanes.
void gemm_iq_coded(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out);
// The same with 8 lanes (n_tok 1..8; out[r * 8 + t]).
void tokens_to_lanes8(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out);
void gemm_iq_coded8(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out);
}  // namespace avx512vnni

namespace avxvnni {
// The 8-lane functions with AVX-VNNI (VEX) instead; call only when cpu_has_avx_vnni().
void decode_iq_coded(DType type, const void* row, int64_t n, CodedIQBlock* out);
void tokens_to_lanes8(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out);
void gemm_iq_coded8(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out);
}  // namespace avxvnni

}  // namespace kvserve
