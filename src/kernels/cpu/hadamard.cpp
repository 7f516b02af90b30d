#include "kernels/cpu/hadamard.h"

#include <bit>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace kvserve {

namespace {

void check(int64_t n, int block) {
  if (block <= 0 || !std::has_single_bit(static_cast<unsigned>(block)) || n % block != 0)
    fail("hadamard_rotate: block {} is not a power of two dividing {}", block, n);
}

}  // namespace

void hadamard_rotate(float* x, int64_t n, int block) {
  check(n, block);
  const float scale = 1.0f / std::sqrt(static_cast<float>(block));
  for (int64_t b = 0; b < n; b += block) {
    float* y = x + b;
    for (int h = 1; h < block; h *= 2) {
      for (int i = 0; i < block; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const float u = y[j], v = y[j + h];
          y[j] = u + v;
          y[j + h] = u - v;
        }
      }
    }
    for (int i = 0; i < block; ++i) y[i] *= scale;
  }
}

void hadamard_rotate_ref(float* x, int64_t n, int block) {
  check(n, block);
  const double scale = 1.0 / std::sqrt(static_cast<double>(block));
  std::vector<double> out(static_cast<size_t>(block));
  for (int64_t b = 0; b < n; b += block) {
    for (int i = 0; i < block; ++i) {
      double s = 0;
      for (int j = 0; j < block; ++j)
        s += (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * static_cast<double>(x[b + j]);
      out[static_cast<size_t>(i)] = s * scale;
    }
    for (int i = 0; i < block; ++i) x[b + i] = static_cast<float>(out[static_cast<size_t>(i)]);
  }
}

}  // namespace kvserve
