#include "engine/kv_row_store.h"

#include <algorithm>

#include "core/fp16.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

void store_kv_row(KVElemType type, const float* src, int64_t n, void* base, int64_t elem_off) {
  switch (type) {
    case KVElemType::F32:
      std::copy_n(src, n, static_cast<float*>(base) + elem_off);
      break;
    case KVElemType::F16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + elem_off;
      if (cpu_has_avx2()) {
        avx2::quantize_row_f16(src, dst, n);
      } else {
        quantize_row_f16(src, dst, n);
      }
      break;
    }
    case KVElemType::BF16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + elem_off;
      for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
      break;
    }
    case KVElemType::Q8_0:
      // ggml's scalar quantize_row_q8_0 (round half away from zero), whatever the CPU: the stored
      // bits, and so every later step's logits, do not depend on the machine.
      quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(static_cast<char*>(base) + kv_bytes(type, elem_off)), n);
      break;
  }
}

size_t kv_row_bytes(KVElemType type, int64_t n) { return kv_bytes(type, n); }

void* kv_row_address(KVElemType type, void* base, int64_t elem_off) {
  return static_cast<char*>(base) + kv_row_bytes(type, elem_off);
}

}  // namespace kvserve
