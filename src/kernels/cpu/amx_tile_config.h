#pragma once
// The AMX tile configuration (palette 1) as ldtilecfg reads it, and its loading, shared by every AMX kernel
// (interleaved_pairs_amx.cpp, bf16_gemm_amx.cpp). A thread's configuration survives context switches (the
// kernel saves it with the tile data), so each thread loads one only when it differs from its last: the
// kernels of different shapes share that one record, so none takes a configuration another left for its own.
// Include only from *_amx.cpp files.
#include <cstdint>
#include <cstring>

namespace kvserve::amx {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline void load_tile_config(const TileConfig& c) {
  thread_local TileConfig current;
  thread_local bool loaded = false;
  if (loaded && std::memcmp(&current, &c, sizeof c) == 0) return;
  // Not _tile_loadconfig: GCC 12's names only the first 8 bytes of the configuration as the instruction's
  // operand, so the stores of the rest could be dropped as dead (the tiles were then unconfigured: SIGILL).
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
  current = c;
  loaded = true;
}

}  // namespace kvserve::amx
