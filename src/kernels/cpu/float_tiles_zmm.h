#pragma once
// The float tiles (F32 weights, and F16 / BF16 weights against widened activations) with each output's four
// accumulator sets in two 512-bit registers, up to 3 weight rows x 4 tokens a call
// (float_tiles_zmm_avx512vnni.cpp). Each output gets the same FMAs on the same lanes in the same order as in
// avx2::dot_tile_f32 / dot_tile_f16_wide / dot_tile_bf16_wide, and its sets are summed the same way: the same
// bits. What changes is the instructions: a one-row tile loads one activation value per multiply-add, and
// prefill of F16 weights was bound by streaming them from L2; here each load serves 3 rows.
// Only after cpu_has_avx512_vnni() (the file's flags); matmul takes them where cpu_prefers_zmm().
#include <cstdint>

namespace kvserve::avx512zmm {

inline constexpr int kMaxFloatTileRows = 3;
inline constexpr int kMaxFloatTileTokens = 4;

// out[r * n_tok + t] = dot(w[r], a[t]) for r < n_rows (1..kMaxFloatTileRows), t < n_tok
// (1..kMaxFloatTileTokens); `w` holds n_rows weight rows, `a` n_tok float rows.
void dot_tiles_f32(int64_t n, const void* const* w, int n_rows, const void* const* a, int n_tok, float* out);
void dot_tiles_f16_wide(int64_t n, const void* const* w, int n_rows, const void* const* a, int n_tok, float* out);
void dot_tiles_bf16_wide(int64_t n, const void* const* w, int n_rows, const void* const* a, int n_tok, float* out);

}  // namespace kvserve::avx512zmm
