#pragma once
// Multi-row x multi-token AVX2 tiles for the weight types with 32-element blocks whose activations are
// Q8_0 / Q8_1 (Q8_0, Q4_0, Q4_1 weights: the types of most GGUF files people serve on CPUs; and Q5_0, Q5_1
// and IQ4_NL, which Q4_K_M / IQ4_XS files hold where a row's length is not a multiple of 256; MXFP4,
// gpt-oss's experts).
//
// A tile multiplies R consecutive weight rows with T tokens' activations. Each weight block is unpacked
// once for the T tokens and each activation block is loaded once for the R rows, so a batch of 16
// sequences does a quarter of the weight unpacking and activation loads of a one-row tile.
//
// Activations are first packed once per matmul: int8 quants contiguous (aligned loads, no 34-byte block
// stride), block scales and Q8_1 sums already widened to float, so the inner loop does no fp16
// conversions per (row, token, block).
//
// Batch invariance: every (row, token) result is one 8-lane accumulator summed over the blocks in order
// and reduced the same way, whatever R and T are. A request's logits are therefore bit-identical alone,
// batched, or with its prefix from the cache. Single-token decode still has R independent FMA chains.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace kvserve {

// One token's activations converted to Q8_0 or Q8_1 and unpacked. Pointers into an ActPack32.
struct PackedActs32 {
  const int8_t* qs;  // n quants, 32-byte aligned
  const float* d;    // n / 32 block scales
  const float* s;    // n / 32 block sums d * sum(qs) as stored by Q8_1 (fp16-rounded), or nullptr for Q8_0
  const int32_t* q4_offset;  // n / 32 values 8 * sum(qs) (Q8_0 only: Q4_0's exact -8 offset), or nullptr
};

// Owns the packed activations of n_tokens rows of n elements.
class ActPack32 {
 public:
  // Sizes the buffers; act_type is Q8_0 or Q8_1.
  void reset(DType act_type, int64_t n, int64_t n_tokens);
  // Unpacks token t from its converted block row (BlockQ8_0 or BlockQ8_1 layout).
  void pack(int64_t t, const void* blocks);
  // Quantizes token t's n floats straight into the pack with avx2::quantize_row_q8_0/1_packed (only after
  // cpu_has_avx2()): the same bits as pack() of the AVX2 quantizers' block row.
  void quantize_avx2(int64_t t, const float* x);
  // Inline: a call per token per pass, and an out-of-line call returned the struct through memory that
  // the caller then copied again (a store-forwarding stall, ~1% of batched decode).
  PackedActs32 token(int64_t t) const {
    const int64_t nb = n_ / 32;
    return {qs_ + t * qs_stride_, d_.data() + t * nb, act_type_ == DType::Q8_1 ? s_.data() + t * nb : nullptr,
            act_type_ == DType::Q8_0 ? q4_offset_.data() + t * nb : nullptr};
  }

 private:
  DType act_type_ = DType::Q8_0;
  int64_t n_ = 0;
  int64_t qs_stride_ = 0;  // bytes per token, a multiple of 32
  std::vector<int8_t> qs_storage_;
  int8_t* qs_ = nullptr;  // 32-byte aligned start inside qs_storage_
  std::vector<float> d_;
  std::vector<float> s_;
  std::vector<int32_t> q4_offset_;
};

// True for the weight types handled here.
bool has_block32_tile(DType weight_type);

namespace avx2 {

inline constexpr int kMaxTileRows = 4;
inline constexpr int kMaxBlock32Tokens = 4;

// out[r * n_tok + t] = dot(row r, acts[t]) for r < n_rows (1..kMaxTileRows), t < n_tok
// (1..kMaxBlock32Tokens). Row r starts at w + r * row_stride; n is the row length in elements.
using Block32TileFn = void (*)(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts,
                               int n_tok, float* out);
void tile_q8_0(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out);
void tile_q4_0(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out);
void tile_q4_1(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out);
void tile_q5_0(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out);
void tile_q5_1(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
               float* out);
void tile_iq4_nl(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
                 float* out);
void tile_mxfp4(int64_t n, const uint8_t* w, size_t row_stride, int n_rows, const PackedActs32* acts, int n_tok,
                float* out);

Block32TileFn block32_tile(DType weight_type);

}  // namespace avx2
}  // namespace kvserve
