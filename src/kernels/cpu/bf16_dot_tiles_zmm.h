#pragma once
// BF16 weights times BF16 activations by vdpbf16ps (AVX512-BF16), for cores that have it but no AMX-BF16
// tile unit (Zen 4, Zen 5, Cooper Lake; or the Xeon with KVSERVE_NO_AMX=1): the BF16 matmul there for
// every token count, so a token's bits do not depend on its batch (matmul.cpp). The activations are
// rounded to BF16 as on every other BF16 path (quantize_row_bf16).
//
// Why: one vdpbf16ps takes 32 values of a row and a token (pairs of products into 16 lanes) where the
// float tiles (float_tiles_zmm.h) first widen 16 weights to floats and then take one FMA per 16 values;
// the widening alone costs as much as a third of those FMAs. Each output is its own register of 16 lane
// sums, the tile up to 4 rows x 6 tokens as the float tiles', and the lanes are summed in their order.
//
// The instruction's numerics, as Intel documents them: for lane i it adds the odd product, then the even
// one (values 2i + 1 and 2i of its 32), each as an FMA with denormal inputs read as zero and a denormal
// result flushed to zero, rounding to nearest even whatever MXCSR says. BF16 products are exact in float,
// so bf16_dot_tile_reference below gives the same bits in scalar code (test: Bf16DotTiles.*, on Intel's cores;
// AMD's, where the tiles run by default, are not measured here: the tests hold them to the model within
// rounding and to one result per output whatever the tile, the ranges and the batch).
// Only after cpu_has_avx512_bf16() (the file's flags: *_avx512bf16.cpp).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/float_tiles_zmm.h"

namespace kvserve::avx512zmm {

// Values of a row per vdpbf16ps: ranges of a row start at multiples of it.
inline constexpr int kBf16DotStep = 32;

// lanes[(r * n_tok + t) * 16 + i] gets, for each step of 32 values in [k_begin, k_end) in order, the
// products of values 2i + 1 and then 2i of the step (w[r] against a[t]; values past k_end count as zero).
// r < n_rows (1..kMaxFloatTileRows), t < n_tok (1..kMaxFloatTileTokens); `w` and `a` hold BF16 row starts
// (index 0 is value 0). k_begin is a multiple of kBf16DotStep. At k_begin 0 the lanes start from zero
// rather than from `lanes`; with `out` not null, out[r * n_tok + t] gets their sum in float_tile_reference's
// order instead of the lanes being stored (a row's last range; `lanes` may then be null at k_begin 0).
void accumulate_bf16_dot_tiles(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows, const void* const* a,
                               int n_tok, float* lanes, float* out);

// vdpbf16ps's step in scalar code: acc + x * y with denormal inputs as zero and a denormal result as zero
// (the signs kept).
inline float bf16_dot_fma(float x, float y, float acc) {
  const auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
  return flush(std::fma(flush(x), flush(y), flush(acc)));
}

// One output of accumulate_bf16_dot_tiles in scalar code: n BF16 values of w and a.
inline float bf16_dot_tile_reference(int64_t n, const uint16_t* w, const uint16_t* a) {
  float lane[kFloatTileLanes] = {};
  const auto value = [n](const uint16_t* v, int64_t k) { return k < n ? bf16_to_fp32(v[k]) : 0.0f; };
  for (int64_t k0 = 0; k0 < n; k0 += kBf16DotStep)
    for (int i = 0; i < kFloatTileLanes; ++i) {
      const int64_t odd = k0 + 2 * i + 1, even = k0 + 2 * i;
      lane[i] = bf16_dot_fma(value(w, odd), value(a, odd), lane[i]);
      lane[i] = bf16_dot_fma(value(w, even), value(a, even), lane[i]);
    }
  for (int width = kFloatTileLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lane[i] = lane[i] + lane[i + width];
  return lane[0];
}

}  // namespace kvserve::avx512zmm
