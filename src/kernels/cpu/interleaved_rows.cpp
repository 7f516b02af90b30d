#include "kernels/cpu/interleaved_rows.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/large_buffer.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

bool has_interleaved_layout(DType type) {
  return type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q8_0;
}

size_t interleaved_block_bytes(DType type) {
  switch (type) {
    case DType::Q4_0: return kInterleaveRows * sizeof(BlockQ4_0);
    case DType::Q4_1: return kInterleaveRows * sizeof(BlockQ4_1);
    case DType::Q8_0: return kInterleaveRows * sizeof(BlockQ8_0);
    default: fail("interleaved layout: type {} has none", dtype_name(type));
  }
}

namespace {
template <typename Block>
void interleave(const Tensor& w, uint8_t* dst) {
  const int64_t nb = w.cols() / 32;
  const int64_t groups = w.rows() / kInterleaveRows;
  constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1>;
  constexpr int kVectors = sizeof(Block::qs) / 4;  // 4 quant bytes per row per vector: 4 (Q4) or 8 (Q8_0)
  for (int64_t g = 0; g < groups; ++g) {
    const Block* rows[kInterleaveRows];
    for (int r = 0; r < kInterleaveRows; ++r)
      rows[r] = reinterpret_cast<const Block*>(w.row(g * kInterleaveRows + r));
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* p = dst;
      for (int r = 0; r < kInterleaveRows; ++r) std::memcpy(p + 2 * r, &rows[r][i].d, 2);
      p += 2 * kInterleaveRows;
      if constexpr (kHasMin) {
        for (int r = 0; r < kInterleaveRows; ++r) std::memcpy(p + 2 * r, &rows[r][i].m, 2);
        p += 2 * kInterleaveRows;
      }
      for (int h = 0; h < kVectors; ++h)
        for (int r = 0; r < kInterleaveRows; ++r) std::memcpy(p + 32 * h + 4 * r, rows[r][i].qs + 4 * h, 4);
      dst += kInterleaveRows * sizeof(Block);
    }
  }
}
}  // namespace

std::shared_ptr<uint8_t[]> interleave_rows(const Tensor& w) {
  if (!has_interleaved_layout(w.type)) fail("interleave_rows: tensor '{}' is {}", w.name, dtype_name(w.type));
  if (!w.valid() || w.cols() % 32 != 0) fail("interleave_rows: tensor '{}' has no data or a bad row length", w.name);
  const int64_t groups = w.rows() / kInterleaveRows;
  const size_t bytes = static_cast<size_t>(groups) * static_cast<size_t>(w.cols() / 32) * interleaved_block_bytes(w.type);
  std::shared_ptr<uint8_t[]> out = allocate_large_buffer(bytes);
  switch (w.type) {
    case DType::Q4_0: interleave<BlockQ4_0>(w, out.get()); break;
    case DType::Q4_1: interleave<BlockQ4_1>(w, out.get()); break;
    default: interleave<BlockQ8_0>(w, out.get()); break;
  }
  return out;
}

}  // namespace kvserve
