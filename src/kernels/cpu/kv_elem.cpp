#include "kernels/cpu/kv_elem.h"

#include <cstring>

#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

static_assert(sizeof(BlockQ8_0) == kKVQ8BlockBytes && kQK8_0 == kKVQuantGroup);
static_assert(sizeof(BlockQ4_0) == kKVQ4BlockBytes && kQK4_0 == kKVQuantGroup);

const char* kv_elem_name(KVElemType type) {
  switch (type) {
    case KVElemType::F32:
      return "f32";
    case KVElemType::F16:
      return "f16";
    case KVElemType::BF16:
      return "bf16";
    case KVElemType::FP8_E4M3:
      return "fp8_e4m3";
    case KVElemType::FP8_E5M2:
      return "fp8_e5m2";
    case KVElemType::Q8_0:
      return "int8 (q8_0)";
    case KVElemType::Q4_0:
      return "int4 (q4_0)";
  }
  return "?";
}

KVRotation kv_rotation(KVElemType type, int head_dim) {
  KVRotation r;
  if (type == KVElemType::F32 || type == KVElemType::F16 || type == KVElemType::BF16 || head_dim <= 0 ||
      head_dim % 64 != 0)
    return r;
  r.k_block = 64;
  while (head_dim % (2 * r.k_block) == 0) r.k_block *= 2;
  r.v_block = 64;
  return r;
}

void encode_kv_row(KVElemType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case KVElemType::F32:
      std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
      return;
    case KVElemType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case KVElemType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case KVElemType::FP8_E4M3: {
      auto* b = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) b[i] = fp32_to_fp8_e4m3(src[i]);
      return;
    }
    case KVElemType::FP8_E5M2: {
      auto* b = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) b[i] = fp32_to_fp8_e5m2(src[i]);
      return;
    }
    case KVElemType::Q8_0:
      // ggml's scalar quantize_row_q8_0 (round half away from zero).
      quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case KVElemType::Q4_0:
      // ggml's quantize_row_q4_0_ref: the scale is the value of largest magnitude / -8.
      quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
      return;
  }
}

void decode_kv_row(KVElemType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case KVElemType::F32:
      std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
      return;
    case KVElemType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case KVElemType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case KVElemType::FP8_E4M3: {
      const auto* b = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_fp32(b[i]);
      return;
    }
    case KVElemType::FP8_E5M2: {
      const auto* b = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_to_fp32(b[i]);
      return;
    }
    case KVElemType::Q8_0:
    case KVElemType::Q4_0: {
      // Written out rather than through the weight dequantizers, so the attention reference does not
      // lean on the code paths the weights' tests cover.
      const auto* blk = static_cast<const unsigned char*>(src);
      const size_t block_bytes = kv_bytes(type, kKVQuantGroup);
      for (int64_t b = 0; b < n / kKVQuantGroup; ++b, blk += block_bytes) {
        uint16_t d16;
        std::memcpy(&d16, blk, 2);
        const float d = fp16_to_fp32(d16);
        float* y = dst + b * kKVQuantGroup;
        if (type == KVElemType::Q8_0) {
          const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
          for (int j = 0; j < kKVQuantGroup; ++j) y[j] = static_cast<float>(qs[j]) * d;
        } else {
          const unsigned char* qs = blk + 2;
          for (int j = 0; j < kKVQuantGroup / 2; ++j) {
            y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
            y[j + kKVQuantGroup / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
          }
        }
      }
      return;
    }
  }
}

}  // namespace kvserve
