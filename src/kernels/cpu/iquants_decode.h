#pragma once
// The i-quant decoders (iquants.h's DecodedIQBlock form), one per type. Included by iquants.cpp (the scalar
// reference and dequantizers) and iquants_avx2.cpp (inlined into its tiles and compiled with AVX2): the
// functions are static, so each file gets its own copy built with its own instruction set.
#include <array>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/iq_grids.h"
#include "kernels/cpu/iquants.h"

namespace kvserve::iq_decode {

// Bytes 0xFF where the sign bit of that element is set, for IQ2 and IQ3_XXS's 7 stored sign bits: the eighth
// makes the count even (ggml's ksigns_iq2xs).
inline constexpr std::array<uint64_t, 128> kSevenBitSignMasks = [] {
  std::array<uint64_t, 128> t{};
  for (int s = 0; s < 128; ++s) {
    int bits = s, ones = 0;
    for (int j = 0; j < 7; ++j) ones += (s >> j) & 1;
    if (ones % 2 != 0) bits |= 0x80;
    for (int j = 0; j < 8; ++j)
      if ((bits >> j) & 1) t[static_cast<size_t>(s)] |= uint64_t{0xFF} << (8 * j);
  }
  return t;
}();

// The same for 8 stored sign bits (IQ2_S, IQ3_S).
inline constexpr std::array<uint64_t, 256> kSignMasks = [] {
  std::array<uint64_t, 256> t{};
  for (int s = 0; s < 256; ++s)
    for (int j = 0; j < 8; ++j)
      if ((s >> j) & 1) t[static_cast<size_t>(s)] |= uint64_t{0xFF} << (8 * j);
  return t;
}();

// Eight magnitudes (one a byte, none zero) negated where `mask` has 0xFF: per byte, -x = (x ^ 0xFF) + 1, and
// for x != 0 that never carries into the next byte.
static inline void put_signed8(uint64_t magnitudes, uint64_t mask, int8_t* q) {
  const uint64_t v = (magnitudes ^ mask) + (mask & 0x0101010101010101ull);
  std::memcpy(q, &v, 8);
}

static inline uint64_t join4x2(uint32_t low, uint32_t high) {
  return static_cast<uint64_t>(low) | static_cast<uint64_t>(high) << 32;
}

static inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// IQ1: q = 8 * grid value + delta (the grid's -1, 0, 1 and delta's +-1/8, in eighths).
static inline void put_iq1(uint64_t grid, int delta, int8_t* q) {
  int8_t g[8];
  std::memcpy(g, &grid, 8);
  for (int j = 0; j < 8; ++j) q[j] = static_cast<int8_t>(8 * g[j] + delta);
}

// The fields the scalar and the AVX2 decoders fill alike: d and the type's units, and the scales.
static inline void set_block_fields(DecodedIQBlock& out, float d, float scale_unit, float q_unit) {
  out.d = d;
  out.scale_unit = scale_unit;
  out.q_unit = q_unit;
}

// Both 16-element halves of sub-block ib take 2 * field + 1.
static inline void set_scale32(DecodedIQBlock& out, int ib, uint32_t field) {
  out.scale[2 * ib] = out.scale[2 * ib + 1] = static_cast<int16_t>(2 * field + 1);
}

// The halves of sub-block ib take the low and the high nibble of `byte` (IQ2_XS, IQ2_S).
static inline void set_nibble_scales(DecodedIQBlock& out, int ib, uint8_t byte) {
  out.scale[2 * ib] = static_cast<int16_t>(2 * (byte & 0xF) + 1);
  out.scale[2 * ib + 1] = static_cast<int16_t>(2 * (byte >> 4) + 1);
}

// IQ3_S: sub-block ib's 4-bit field.
static inline uint32_t iq3_s_scale_field(const BlockIQ3_S& b, int ib) {
  return (b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
}

// IQ1_M: its four 16-bit scale words, which hold 3-bit scales and, in their top nibbles, d's fp16 bits.
static inline uint16_t iq1_m_scale_words(const BlockIQ1_M& b, uint16_t sc[4]) {
  std::memcpy(sc, b.scales, 8);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

// IQ1_M: sub-block ib's two 3-bit scales.
static inline void set_iq1_m_scales(DecodedIQBlock& out, int ib, const uint16_t sc[4]) {
  const int shift = 6 * (ib % 2);
  out.scale[2 * ib] = static_cast<int16_t>(2 * ((sc[ib / 2] >> shift) & 7) + 1);
  out.scale[2 * ib + 1] = static_cast<int16_t>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1);
}

static inline void iq2_xxs(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ2_XXS*>(block);
  set_block_fields(out, fp16_to_fp32(b.d), 0.125f, 1.0f);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t indices = load_u32(b.qs + 4 * ib);
    const uint32_t rest = load_u32(b.qs + 4 * ib + 2);
    set_scale32(out, ib, rest >> 28);
    for (int l = 0; l < 4; ++l)
      put_signed8(kIQ2XXSGrid[(indices >> (8 * l)) & 0xFF], kSevenBitSignMasks[(rest >> (7 * l)) & 127],
                  out.q + 32 * ib + 8 * l);
  }
}

static inline void iq2_xs(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ2_XS*>(block);
  set_block_fields(out, fp16_to_fp32(b.d), 0.125f, 1.0f);
  for (int ib = 0; ib < 8; ++ib) {
    set_nibble_scales(out, ib, b.scales[ib]);
    for (int l = 0; l < 4; ++l) {
      const uint16_t v = b.qs[4 * ib + l];
      put_signed8(kIQ2XSGrid[v & 511], kSevenBitSignMasks[v >> 9], out.q + 32 * ib + 8 * l);
    }
  }
}

static inline void iq2_s(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ2_S*>(block);
  set_block_fields(out, fp16_to_fp32(b.d), 0.125f, 1.0f);
  const uint8_t* signs = b.qs + kQK_K / 8;
  for (int ib = 0; ib < 8; ++ib) {
    set_nibble_scales(out, ib, b.scales[ib]);
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300);
      put_signed8(kIQ2SGrid[index], kSignMasks[signs[4 * ib + l]], out.q + 32 * ib + 8 * l);
    }
  }
}

static inline void iq3_xxs(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ3_XXS*>(block);
  set_block_fields(out, fp16_to_fp32(b.d), 0.25f, 1.0f);
  const uint8_t* scales_and_signs = b.qs + kQK_K / 4;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load_u32(scales_and_signs + 4 * ib);
    set_scale32(out, ib, aux >> 28);
    const uint8_t* qs = b.qs + 8 * ib;
    for (int l = 0; l < 4; ++l)
      put_signed8(join4x2(kIQ3XXSGrid[qs[2 * l]], kIQ3XXSGrid[qs[2 * l + 1]]),
                  kSevenBitSignMasks[(aux >> (7 * l)) & 127], out.q + 32 * ib + 8 * l);
  }
}

static inline void iq3_s(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ3_S*>(block);
  set_block_fields(out, fp16_to_fp32(b.d), 1.0f, 1.0f);
  for (int ib = 0; ib < 8; ++ib) {
    set_scale32(out, ib, iq3_s_scale_field(b, ib));
    const uint8_t* qs = b.qs + 8 * ib;
    const int qh = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      const int i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
      const int i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
      put_signed8(join4x2(kIQ3SGrid[i1], kIQ3SGrid[i2]), kSignMasks[b.signs[4 * ib + l]], out.q + 32 * ib + 8 * l);
    }
  }
}

static inline void iq1_s(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ1_S*>(block);
  set_block_fields(out, fp16_to_fp32(b.d), 1.0f, 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t qh = b.qh[ib];
    set_scale32(out, ib, (qh >> 12) & 7u);
    const int delta = (qh & 0x8000) != 0 ? -1 : 1;
    for (int l = 0; l < 4; ++l)
      put_iq1(kIQ1SGrid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], delta, out.q + 32 * ib + 8 * l);
  }
}

static inline void iq1_m(const void* block, DecodedIQBlock& out) {
  const auto& b = *static_cast<const BlockIQ1_M*>(block);
  uint16_t sc[4];
  set_block_fields(out, fp16_to_fp32(iq1_m_scale_words(b, sc)), 1.0f, 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    set_iq1_m_scales(out, ib, sc);
    const uint8_t* qs = b.qs + 4 * ib;
    const uint8_t* qh = b.qh + 2 * ib;
    for (int l = 0; l < 4; ++l) {
      const int h = qh[l / 2] >> (4 * (l % 2));  // 3 index bits, then the delta's sign
      put_iq1(kIQ1SGrid[qs[l] | ((h & 7) << 8)], (h & 8) != 0 ? -1 : 1, out.q + 32 * ib + 8 * l);
    }
  }
}

}  // namespace kvserve::iq_decode
