#pragma once
// A read-only view of a weight tensor in model memory (mmap'd file or owned buffer). Dimensions are in
// GGUF/ggml order: ne[0] is the contiguous row length, ne[1] the number of rows.
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "core/dtype.h"

namespace kvserve {

struct Tensor {
  std::string name;
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  int n_dims = 0;
  const void* data = nullptr;
  // Rows [0, rows / 8 * 8) repacked 8 at a time for the AVX2 kernels (kernels/cpu/interleaved_rows.h), or
  // nullptr. `data` stays the source of truth for every other use.
  const void* interleaved = nullptr;
  // `interleaved` holds Q4_0 / Q4_1 / Q8_0 groups in pairs (the pair layout of interleaved_rows.h).
  bool interleaved_pairs = false;

  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  size_t row_size() const { return row_bytes(type, ne[0]); }
  size_t bytes() const { return row_size() * static_cast<size_t>(rows()); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_size(); }
  bool valid() const { return data != nullptr; }
};

// Rows [first, first + n) of a 2-D weight as a tensor of its own (rows are contiguous): how a fused
// projection (Phi-3's q/k/v, its gate-and-up) becomes the separate ones without a copy.
inline Tensor row_range(const Tensor& t, int64_t first, int64_t n, std::string name) {
  Tensor out = t;
  out.name = std::move(name);
  out.data = t.row(first);
  out.ne = {t.ne[0], n, 1, 1};
  out.n_dims = 2;
  out.interleaved = nullptr;
  return out;
}

}  // namespace kvserve
