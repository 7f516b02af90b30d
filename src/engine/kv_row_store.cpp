#include "engine/kv_row_store.h"

#include <algorithm>

#include "core/fp16.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

void store_kv_row(KVElemType type, const float* src, int64_t n, void* base, int64_t elem_off) {
  void* dst = kv_row_address(type, base, elem_off);
  switch (type) {
    case KVElemType::F32:
      std::copy_n(src, n, static_cast<float*>(dst));
      break;
    case KVElemType::F16:
      // The AVX2 conversion rounds as the scalar one does (tested), at a fraction of its cost.
      if (cpu_has_avx2()) {
        avx2::quantize_row_f16(src, static_cast<uint16_t*>(dst), n);
      } else {
        quantize_row_f16(src, static_cast<uint16_t*>(dst), n);
      }
      break;
    default:
      // The scalar conversions, whatever the CPU: the stored bits, and so every later step's logits, do
      // not depend on the machine.
      encode_kv_row(type, src, n, dst);
      break;
  }
}

size_t kv_row_bytes(KVElemType type, int64_t n) { return kv_bytes(type, n); }

void* kv_row_address(KVElemType type, void* base, int64_t elem_off) {
  return static_cast<char*>(base) + kv_row_bytes(type, elem_off);
}

}  // namespace kvserve
