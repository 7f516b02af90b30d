#pragma once
// The element types a KV cache array holds, their sizes, and the scalar conversions every other path
// (the SIMD attention workers, the row stores) is tested against.
//
// Half-precision and fp8 elements are widened to f32 as a slot is read; all arithmetic stays f32.
// - FP8_E4M3 / FP8_E5M2: one byte a value, no scale (core/fp8.h: round to nearest even, saturating).
// - Q8_0 (the cache's int8) is ggml's q8_0: each 32 consecutive elements of a row one block of an f16
//   scale and 32 int8 (34 bytes), read as int8 * scale.
// - Q4_0 (the cache's int4) is ggml's q4_0: each 32 elements one block of an f16 scale and 16 bytes,
//   element j in the low nibble of byte j and element j + 16 in the high one, read as (nibble - 8) * scale.
// Rows of the block types (head_dim elements) must be whole blocks, so element offsets are multiples of
// 32 wherever a row starts.
#include <cstddef>
#include <cstdint>

namespace kvserve {

enum class KVElemType { F32, F16, BF16, FP8_E4M3, FP8_E5M2, Q8_0, Q4_0 };

// Elements per scale block of the block types (Q8_0, Q4_0), and their block bytes.
constexpr int kKVQuantGroup = 32;
constexpr int kKVQ8BlockBytes = 34;
constexpr int kKVQ4BlockBytes = 18;

inline bool kv_elem_is_block_type(KVElemType type) { return type == KVElemType::Q8_0 || type == KVElemType::Q4_0; }

// Bytes of n elements of `type` (n a multiple of kKVQuantGroup for the block types): also the byte
// offset of element n.
inline size_t kv_bytes(KVElemType type, int64_t n) {
  const auto u = static_cast<size_t>(n);
  switch (type) {
    case KVElemType::F32:
      return u * 4;
    case KVElemType::F16:
    case KVElemType::BF16:
      return u * 2;
    case KVElemType::FP8_E4M3:
    case KVElemType::FP8_E5M2:
      return u;
    case KVElemType::Q8_0:
      return u / kKVQuantGroup * kKVQ8BlockBytes;
    case KVElemType::Q4_0:
      return u / kKVQuantGroup * kKVQ4BlockBytes;
  }
  return 0;
}

const char* kv_elem_name(KVElemType type);

// The Walsh-Hadamard blocks (kernels/cpu/hadamard.h) a layer's K and V rows are stored under (0: none):
// for fp8, int8 and int4 with heads of a multiple of 64, K in the largest power-of-two block dividing the
// head and V in blocks of 64, as llama.cpp 0.3.36 rotates its quantized caches (it has no fp8 on CPU).
// SmolLM2-135M, 16 chunks of 512 tokens, perplexity against f32's 53.23: int4 61.64 -> 55.52, fp8 E4M3
// 53.94 -> 53.28, E5M2 55.22 -> 54.17, int8 53.28 -> 53.21. Half precision gains nothing (bf16: 53.23).
struct KVRotation {
  int k_block = 0;
  int v_block = 0;
  bool any() const { return k_block > 0 || v_block > 0; }
};
KVRotation kv_rotation(KVElemType type, int head_dim);

// n values of src rounded to `type` at dst (kv_bytes(type, n) bytes), as every cache write stores them
// (the scalar conversions: the stored bits do not depend on the CPU).
void encode_kv_row(KVElemType type, const float* src, int64_t n, void* dst);
// n stored elements at src as f32.
void decode_kv_row(KVElemType type, const void* src, int64_t n, float* dst);

}  // namespace kvserve
