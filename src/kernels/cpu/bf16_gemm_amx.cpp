#include "kernels/cpu/bf16_gemm_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/amx_tile_config.h"

namespace kvserve::amx {

namespace {

constexpr int kG = kBf16GroupTokens;
constexpr int64_t kChunk = 32;             // values of a row per tdpbf16ps (16 pairs)
constexpr size_t kChunkRowBytes = 64;      // an A tile row: 32 BF16 values
constexpr size_t kGroupChunkBytes = 1024;  // a full group's chunk: 16 pairs x 16 tokens x 4 bytes
constexpr int64_t kHalfRows = 16;          // weight rows per A tile
// Weight rows a token pass runs over before the next pass: about 256 KiB of them, so a chunk read once
// from memory stays in L2 for every pass of 32 tokens.
constexpr size_t kL2ChunkBytes = 256 * 1024;

int64_t n_chunks(int64_t n_in) { return (n_in + kChunk - 1) / kChunk; }

// Tiles 0-3: C (16 weight rows x n tokens, f32) for rows half h and token group g at 2h + g; 4 and 5: A
// (16 rows x 32 BF16) of the two halves; 6 and 7: B (16 pairs x n tokens x 2 BF16) of the two groups.
void configure(int n) {
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.rows[i] = 16;
    c.colsb[i] = static_cast<uint16_t>(i == 4 || i == 5 ? kChunkRowBytes : 4 * n);
  }
  load_tile_config(c);
}

// Where a half's A tiles come from: full chunks at p + 64 c (rows `stride` apart); the chunk past the
// last full one, where n_in is not a multiple of 32, from `tail` (its rows' last values, zero-padded).
struct ASource {
  const uint8_t* p = nullptr;
  size_t stride = 0;
  const uint8_t* tail = nullptr;
  size_t tail_stride = 0;
};

// Tile numbers must be constants in the instructions: H halves of 16 rows and G groups of tokens spelled
// out by the template. C tiles hold the sums over every chunk (no store between chunks).
template <int H, int G>
void products(const ASource* a, const uint8_t* const* b, int n, int64_t full, bool has_tail, float* c_out) {
  const size_t b_stride = 4 * static_cast<size_t>(n);
  const size_t b_chunk = kChunkRowBytes / 4 * b_stride;  // 16 pairs
  _tile_zero(0);
  if constexpr (G == 2) _tile_zero(1);
  if constexpr (H == 2) _tile_zero(2);
  if constexpr (H == 2 && G == 2) _tile_zero(3);
  const auto step = [&](const uint8_t* a0, size_t s0, const uint8_t* a1, size_t s1, int64_t c) {
    _tile_loadd(4, a0, s0);
    _tile_loadd(6, b[0] + c * b_chunk, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (G == 2) {
      _tile_loadd(7, b[1] + c * b_chunk, b_stride);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (H == 2) {
      _tile_loadd(5, a1, s1);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (G == 2) _tile_dpbf16ps(3, 5, 7);
    }
  };
  for (int64_t c = 0; c < full; ++c)
    step(a[0].p + c * kChunkRowBytes, a[0].stride, H == 2 ? a[H - 1].p + c * kChunkRowBytes : nullptr, a[H - 1].stride,
         c);
  if (has_tail) step(a[0].tail, a[0].tail_stride, a[H - 1].tail, a[H - 1].tail_stride, full);
  // Each C tile to its 16 x 16 block of c_out (row m's n sums at m * 16).
  _tile_stored(0, c_out, 64);
  if constexpr (G == 2) _tile_stored(1, c_out + 256, 64);
  if constexpr (H == 2) _tile_stored(2, c_out + 512, 64);
  if constexpr (H == 2 && G == 2) _tile_stored(3, c_out + 768, 64);
}

}  // namespace

int64_t bf16_packed_bytes(int64_t n_in, int64_t n_tokens) {
  return (n_tokens + kG - 1) / kG * n_chunks(n_in) * static_cast<int64_t>(kGroupChunkBytes);
}

void pack_bf16_token(const float* x, int64_t n_in, int64_t n_tokens, int64_t t, uint8_t* packed) {
  const int64_t chunks = n_chunks(n_in);
  const int64_t g = t / kG;
  const int64_t n = std::min<int64_t>(kG, n_tokens - g * kG);
  const int64_t j = t - g * kG;
  uint8_t* base = packed + g * chunks * static_cast<int64_t>(kGroupChunkBytes) + 4 * j;
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t p = 0; p < kChunk / 2; ++p) {
      const int64_t e = c * kChunk + 2 * p;
      const uint16_t pair[2] = {e < n_in ? fp32_to_bf16(x[e]) : uint16_t{0},
                                e + 1 < n_in ? fp32_to_bf16(x[e + 1]) : uint16_t{0}};
      std::memcpy(base + (c * (kChunk / 2) + p) * 4 * n, pair, 4);
    }
  }
}

void gemm_bf16(const uint8_t* w, size_t w_row_bytes, int64_t n_in, int64_t n_out, const uint8_t* packed,
               int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end || n_tokens <= 0) return;
  const int64_t chunks = n_chunks(n_in);
  const int64_t full = n_in / kChunk;
  const bool has_tail = full < chunks;
  const int64_t tail_values = n_in - full * kChunk;
  const int64_t n_groups = (n_tokens + kG - 1) / kG;
  const int64_t l2_rows = std::max<int64_t>(2 * kHalfRows, static_cast<int64_t>(kL2ChunkBytes / w_row_bytes) / 32 * 32);
  // A half of rows past the matrix's end (fewer than 16 left) is copied here, zero-padded, whole chunks;
  // each half's tail chunk (its rows' last n_in % 32 values) into `tails`.
  thread_local std::vector<uint8_t> padded_rows;
  alignas(64) uint8_t tails[2][kHalfRows * kChunkRowBytes];
  alignas(64) float c_out[4 * 256];
  for (int64_t rc = row_begin; rc < row_end; rc += l2_rows) {
    const int64_t rc_end = std::min(row_end, rc + l2_rows);
    for (int64_t g = 0; g < n_groups;) {
      const int n = static_cast<int>(std::min<int64_t>(kG, n_tokens - g * kG));
      // Two groups a pass where both are whole.
      const bool two = n == kG && g + 1 < n_groups && n_tokens - (g + 1) * kG >= kG;
      configure(n);
      const uint8_t* b[2] = {packed + g * chunks * static_cast<int64_t>(kGroupChunkBytes),
                             packed + (g + 1) * chunks * static_cast<int64_t>(kGroupChunkBytes)};
      for (int64_t r = rc; r < rc_end; r += 2 * kHalfRows) {
        const int halves = rc_end - r > kHalfRows ? 2 : 1;
        ASource a[2];
        for (int h = 0; h < halves; ++h) {
          const int64_t r0 = r + h * kHalfRows;
          if (r0 + kHalfRows <= n_out) {
            // Rows past rc_end but inside the matrix are read and their sums dropped.
            a[h].p = w + r0 * w_row_bytes;
            a[h].stride = w_row_bytes;
            if (has_tail) {
              std::memset(tails[h], 0, sizeof tails[h]);
              for (int64_t m = 0; m < kHalfRows; ++m)
                std::memcpy(tails[h] + m * kChunkRowBytes, a[h].p + m * w_row_bytes + full * kChunkRowBytes,
                            static_cast<size_t>(tail_values) * 2);
              a[h].tail = tails[h];
              a[h].tail_stride = kChunkRowBytes;
            }
          } else {
            const size_t padded_stride = static_cast<size_t>(chunks) * kChunkRowBytes;
            padded_rows.assign(kHalfRows * padded_stride, 0);
            for (int64_t m = 0; r0 + m < n_out; ++m)
              std::memcpy(padded_rows.data() + m * padded_stride, w + (r0 + m) * w_row_bytes,
                          static_cast<size_t>(n_in) * 2);
            a[h].p = padded_rows.data();
            a[h].stride = padded_stride;
            a[h].tail = padded_rows.data() + full * kChunkRowBytes;
            a[h].tail_stride = padded_stride;
          }
        }
        if (halves == 2 && two) {
          products<2, 2>(a, b, n, full, has_tail, c_out);
        } else if (halves == 2) {
          products<2, 1>(a, b, n, full, has_tail, c_out);
        } else if (two) {
          products<1, 2>(a, b, n, full, has_tail, c_out);
        } else {
          products<1, 1>(a, b, n, full, has_tail, c_out);
        }
        // Tile (h, q) holds rows r + 16 h, tokens of group g + q.
        for (int h = 0; h < halves; ++h) {
          const int64_t r0 = r + h * kHalfRows;
          const int64_t rows = std::min<int64_t>(kHalfRows, rc_end - r0);
          for (int q = 0; q < (two ? 2 : 1); ++q) {
            const float* tile = c_out + (2 * h + q) * 256;
            const int64_t t0 = (g + q) * kG;
            for (int j = 0; j < n; ++j) {
              float* yt = y + (t0 + j) * n_out + r0;
              for (int64_t m = 0; m < rows; ++m) yt[m] = tile[m * 16 + j];
            }
          }
        }
      }
      g += two ? 2 : 1;
    }
  }
}

}  // namespace kvserve::amx
