#pragma once
// Scratch vectors that serve calls of different sizes in turn (a layer's 2048-column matmuls, then its
// 8192-column down projection) are grown, never shrunk: std::vector::resize zero-fills whatever it adds,
// so a buffer shrunk for a small call and grown for the next large one is cleared again every time, on
// the calling thread while the pool waits.
#include <cstddef>
#include <cstdint>

namespace kvserve {

// Makes v at least `size` elements (zero-filling only what was never there); never shrinks it.
template <typename Vector>
void grow_to(Vector& v, int64_t size) {
  if (size > 0 && v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
}

}  // namespace kvserve
