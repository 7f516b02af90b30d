#pragma once
// Block layouts of the GGUF quantized types (byte-exact with ggml's block_* structs), exact scalar
// dequantizers, the activation quantizers used by llama.cpp's CPU backend (Q8_0, Q8_1, Q8_K), and
// scalar reference dot products for every (weight type, activation dot type) pair.
//
// The scalar functions here are the reference: quants_avx2.cpp has AVX2 versions that must agree with
// them to float rounding (the integer parts are exact, only float summation order differs).
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvserve {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;     // K-quant super-block
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales + mins of Q4_K / Q5_K

// fp16 fields are raw IEEE half bits (see core/fp16.h).
struct BlockQ4_0 {
  uint16_t d;                  // scale
  uint8_t qs[kQK4_0 / 2];      // element j in low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ4_1 {
  uint16_t d;                  // scale
  uint16_t m;                  // min (offset added after scaling)
  uint8_t qs[kQK4_1 / 2];
};
struct BlockQ5_0 {
  uint16_t d;                  // scale
  uint8_t qh[4];               // 5th bit of element j in bit j (little-endian uint32)
  uint8_t qs[kQK4_0 / 2];      // low 4 bits, nibbles as Q4_0's
};
struct BlockQ5_1 {
  uint16_t d;                  // scale
  uint16_t m;                  // min (offset added after scaling)
  uint8_t qh[4];
  uint8_t qs[kQK4_1 / 2];
};
struct BlockIQ4_NL {
  uint16_t d;                  // scale
  uint8_t qs[kQK4_0 / 2];      // indices into kIQ4Values, nibbles as Q4_0's
};
// OCP microscaling FP4 (gpt-oss's experts): a power-of-two scale 2^(e - 127) (E8M0) and 32 E2M1 values,
// nibbles as Q4_0's. As ggml, the values are kMXFP4Values (twice E2M1's) times 2^(e - 128).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK4_0 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ8_1 {
  uint16_t d;                  // scale
  uint16_t s;                  // d * sum(qs), for Q4_1's offset term
  int8_t qs[kQK8_1];
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per 16 elements: 4-bit scale (low nibble), 4-bit min (high nibble)
  uint8_t qs[kQK_K / 4];       // 2-bit quants, see unpack_q2_K
  uint16_t d;                  // super-block scale of the scales
  uint16_t dmin;               // super-block scale of the mins
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];    // high bit of each quant (set: +0, clear: -4)
  uint8_t qs[kQK_K / 4];       // low 2 bits
  uint8_t scales[kKScaleSize]; // 16 signed 6-bit scales (stored + 32), packed
  uint16_t d;                  // super-block scale
};
struct BlockQ4_K {
  uint16_t d;                  // super-block scale of the 6-bit sub-block scales
  uint16_t dmin;               // super-block scale of the 6-bit sub-block mins
  uint8_t scales[kKScaleSize]; // 8 scales + 8 mins, 6 bits each, packed
  uint8_t qs[kQK_K / 2];       // 4-bit quants
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];       // 5th bit of each quant
  uint8_t qs[kQK_K / 2];       // low 4 bits
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];       // low 4 bits
  uint8_t qh[kQK_K / 4];       // high 2 bits
  int8_t scales[kQK_K / 16];   // 8-bit signed scale per 16 elements
  uint16_t d;                  // super-block scale
};
struct BlockIQ4_XS {
  uint16_t d;                  // super-block scale
  uint16_t scales_h;           // high 2 bits of the 8 sub-block scales
  uint8_t scales_l[kQK_K / 64];  // low 4 bits of the 8 sub-block scales (stored + 32)
  uint8_t qs[kQK_K / 2];       // indices into kIQ4Values, 16 bytes per 32 elements as IQ4_NL's
};
struct BlockQ8_K {
  float d;                     // f32, not f16
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];   // sum of qs per 16 elements (used for mins / offsets)
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ8_K) == 292);

// The 16 non-uniform levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// E2M1's 16 values times two, so that they are integers (ggml's kvalues_mxfp4).
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// An MXFP4 block's scale as its values take it: 2^(e - 128), exactly (subnormal floats below 2^-126), built
// from its bits as ggml's e8m0_to_fp32_half (the kernels' vector form is the same).
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}
// IQ4_XS sub-block ib's (0..7) scale, -32..31.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
  return (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

// Quant values of the 32-element 5-bit blocks in element order: Q5_0's -16..15, Q5_1's 0..31.
void unpack_q5_0(const BlockQ5_0& b, int8_t* q);
void unpack_q5_1(const BlockQ5_1& b, uint8_t* q);
// Quant values of one Q2_K block (0..3) and of one Q3_K block (-4..3) in element order; element e
// takes sub-block e / 16's scale.
void unpack_q2_K(const BlockQ2_K& b, uint8_t* q);
void unpack_q3_K(const BlockQ3_K& b, int8_t* q);
// Q3_K's 16 sub-block scales, -32..31.
void unpack_q3_K_scales(const uint8_t* packed, int8_t* scales);
// Quant values 0..31 of one Q5_K block in element order.
void unpack_q5_K(const BlockQ5_K& b, uint8_t* q);
// Signed quant values -32..31 of one Q6_K block in element order.
void unpack_q6_K(const BlockQ6_K& b, int8_t* q);

// Unpacks sub-block j's (0..7) 6-bit scale and min from a Q4_K/Q5_K scales[12] array.
inline void k_scale_min(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// ---- dequantization (n = elements, a multiple of the block size) ----
void dequantize_row_f16(const uint16_t* x, float* y, int64_t n);
void dequantize_row_bf16(const uint16_t* x, float* y, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n);
// Activation types, for reference paths and tests.
void dequantize_row_q8_1(const BlockQ8_1* x, float* y, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n);

// ---- activation conversion to the dot types (ggml reference semantics) ----
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n);
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

// ggml's nearest_int: round half to even via the 1.5*2^23 trick (valid for |x| < 2^22).
inline int nearest_int(float x) {
  float biased = x + 12582912.f;
  uint32_t bits;
  std::memcpy(&bits, &biased, 4);
  return static_cast<int>(bits & 0x007fffff) - 0x00400000;
}

// ---- scalar reference dot products: n elements of weight row w with converted activations a ----
float vec_dot_f32_f32(int64_t n, const float* w, const float* a);
float vec_dot_f16_f16(int64_t n, const uint16_t* w, const uint16_t* a);
float vec_dot_bf16_bf16(int64_t n, const uint16_t* w, const uint16_t* a);
float vec_dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a);
float vec_dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a);
float vec_dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a);
float vec_dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a);
float vec_dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a);
float vec_dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
float vec_dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
float vec_dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a);
// ggml's MXFP4 x Q8_0: per block 2^(e - 128) * d_a * sum(kMXFP4Values[q] * a).
float vec_dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* a);
float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
float vec_dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
float vec_dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
float vec_dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);

// ---- AVX2 versions (quants_avx2.cpp; the Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4 ones in block32_tiles.cpp run
// the block32 tiles); call only when cpu_has_avx2() ----
namespace avx2 {
float vec_dot_f32_f32(int64_t n, const float* w, const float* a);
float vec_dot_f16_f16(int64_t n, const uint16_t* w, const uint16_t* a);
float vec_dot_bf16_bf16(int64_t n, const uint16_t* w, const uint16_t* a);
float vec_dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a);
float vec_dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a);
float vec_dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a);
float vec_dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a);
float vec_dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a);
float vec_dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* a);
float vec_dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* a);
float vec_dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a);
float vec_dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* a);
float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* a);
float vec_dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* a);
float vec_dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* a);
float vec_dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* a);

// Activation quantizers bit-identical to the scalar ones above (same scale, roundf rounding).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
// The same quantizers writing ActPack32's layout directly (quants, fp16-rounded scales as floats, and
// Q8_0's 8 * quant sums or Q8_1's fp16-rounded d * sums): the same bits as quantizing then packing.
void quantize_row_q8_0_packed(const float* x, int8_t* qs, float* d, int32_t* q4_offset, int64_t n);
void quantize_row_q8_1_packed(const float* x, int8_t* qs, float* d, float* s, int64_t n);
// Bit-identical to the scalar quantize_row_q8_K for every input (nearest_int's add-and-mask rounding,
// the first element of largest magnitude sets the scale, int8 wrap-around as the scalar cast).
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);
// F16C rounding (nearest, ties to even): the same bits as quantize_row_f16 for every non-NaN input;
// a NaN stays a NaN of the same sign (its payload may differ).
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);
// Activations for F16 / BF16 weights rounded to that type (as quantize_row_f16 / quantize_row_bf16) and
// widened back to floats (exact), for the *_wide tiles.
void round_row_f16_wide(const float* x, float* y, int64_t n);
void round_row_bf16_wide(const float* x, float* y, int64_t n);

// Multi-token tiles (the 32-element block types have multi-row tiles in block32_tiles.h): out[t] = dot(w, a[t]) for t < n_tok (1..kMaxTileTokens), each weight block loaded
// once and used for every token. `a` holds n_tok pointers to converted activation rows.
inline constexpr int kMaxTileTokens = 4;
void dot_tile_f32(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_f16(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_bf16(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
// F16 / BF16 weights against rows of round_row_*_wide: the bits of dot_tile_f16 / dot_tile_bf16 on the
// rounded rows, without converting each token's block again for every weight row.
void dot_tile_f16_wide(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_bf16_wide(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_q2_K(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_q3_K(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_iq4_xs(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_q4_K(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_q5_K(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
void dot_tile_q6_K(int64_t n, const void* w, const void* const* a, int n_tok, float* out);
}  // namespace avx2

}  // namespace kvserve
