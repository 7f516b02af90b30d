#pragma once
// The float tiles on hosts that run 512-bit registers at full width (F32 weights, and F16 / BF16 weights
// against widened activations): up to 4 weight rows x 6 tokens a call, each output's sum in one register of
// 16 lanes (float_tiles_zmm_avx512vnni.cpp). Value k of a row goes to lane k % 16 by one FMA, in order of k,
// and an output is its lanes summed in one fixed order: the bits of
// float_tile_reference, whatever the tile shape, the output's place in it, and how the row was cut into
// ranges. One register per output is what makes the tile 4 x 6: 24 accumulators, 4 weight registers and an
// activation of 32; each weight conversion serves 6 tokens and each activation load 4 rows.
// Only after cpu_has_avx512_vnni() (the file's flags); matmul takes them where cpu_prefers_zmm(). The sums
// differ from the 256-bit tiles' (avx2::dot_tile_*), which hosts without them use for every batch.
#include <cmath>
#include <cstdint>

namespace kvserve::avx512zmm {

inline constexpr int kMaxFloatTileRows = 4;
inline constexpr int kMaxFloatTileTokens = 6;
inline constexpr int kFloatTileLanes = 16;

// lanes[(r * n_tok + t) * 16 + l] += w[r][k] * a[t][k] (one FMA each) for k in [k_begin, k_end), k % 16 == l,
// in order of k; r < n_rows (1..kMaxFloatTileRows), t < n_tok (1..kMaxFloatTileTokens). `w` holds row starts
// (index 0 is value 0), `a` the activations' float rows likewise. k_begin is a multiple of 16.
// At k_begin 0 the lanes start from zero rather than from `lanes`. With `out` not null, instead of storing
// the lanes, out[r * n_tok + t] gets their sum in float_tile_reference's order (a row's last range), and
// `lanes` may be null where k_begin is 0 (the row in one range).
void accumulate_float_tiles_f32(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows, const void* const* a,
                                int n_tok, float* lanes, float* out);
void accumulate_float_tiles_f16_wide(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows,
                                     const void* const* a, int n_tok, float* lanes, float* out);
void accumulate_float_tiles_bf16_wide(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows,
                                      const void* const* a, int n_tok, float* lanes, float* out);

// The same sum in scalar code: 16 lanes of std::fma in order of k, then lanes i and i + 8 added, then i and
// i + 4, i and i + 2, and the last two. `w_value(k)` is weight value k as a float, `a` the activations.
template <typename WeightValue>
float float_tile_reference(int64_t n, WeightValue w_value, const float* a) {
  float lane[kFloatTileLanes] = {};
  for (int64_t k = 0; k < n; ++k) lane[k % kFloatTileLanes] = std::fma(w_value(k), a[k], lane[k % kFloatTileLanes]);
  for (int width = kFloatTileLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lane[i] = lane[i] + lane[i + width];
  return lane[0];
}

}  // namespace kvserve::avx512zmm
