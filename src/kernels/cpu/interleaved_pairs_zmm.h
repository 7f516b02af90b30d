#pragma once
// What the 512-bit pair kernels of the 32-element block types share (interleaved_zmm_avx512vnni.cpp, and
// interleaved_pairs_amx.cpp, which runs their products on the tile unit): the type tag, a group's record
// size, and the loads of a pair's record. Included only by files compiled with the AVX-512 flags, with
// interleaved_q32_kernels.h (included here); internal linkage, as there.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/interleaved_q32_kernels.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see interleaved_q32_kernels.h

enum class Q32 { kQ4_0, kQ4_1, kQ5_0, kIQ4_NL, kMXFP4, kQ8_0 };

// One group's record in the group layout (a pair's is twice this).
constexpr size_t q32_record_bytes(Q32 type) {
  return type == Q32::kQ8_0    ? kQ8_0RecordBytes
         : type == Q32::kQ5_0  ? kQ5_0RecordBytes
         : type == Q32::kMXFP4 ? kMXFP4RecordBytes
         : type == Q32::kQ4_1  ? kQ4RecordBytes<true>
                               : kQ4RecordBytes<false>;
}

// The 64 bytes at offset `off` of a pair's record: a piece of group 0 then the same piece of group 1.
inline __m512i load64(const uint8_t* rec, size_t off) {
  return _mm512_loadu_si512(reinterpret_cast<const __m512i*>(rec + off));
}

// The 16 fp16 values at offset `off` of a pair's record (group 0's 8 rows, then group 1's), as floats.
inline __m512 load_ph16(const uint8_t* rec, size_t off) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + off)));
}

// Both groups' 16 rows' MXFP4 scales 2^(e - 128) from their exponent bytes: MXFP4Steps::scales' integer steps
// (subnormal for e < 2), 16 lanes.
inline __m512 mxfp4_scales16(const uint8_t* rec) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 is_normal = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_normal, subnormal, normal));
}

}  // namespace
}  // namespace kvserve
