#include "kernels/cpu/iquants.h"

#include "core/error.h"
#include "kernels/cpu/iquants_decode.h"

namespace kvserve {

bool is_low_bit_iquant(DType type) { return iq_decoder(type) != nullptr; }

IQDecodeFn iq_decoder(DType type) {
  switch (type) {
    case DType::IQ2_XXS:
      return iq_decode::iq2_xxs;
    case DType::IQ2_XS:
      return iq_decode::iq2_xs;
    case DType::IQ2_S:
      return iq_decode::iq2_s;
    case DType::IQ3_XXS:
      return iq_decode::iq3_xxs;
    case DType::IQ3_S:
      return iq_decode::iq3_s;
    case DType::IQ1_S:
      return iq_decode::iq1_s;
    case DType::IQ1_M:
      return iq_decode::iq1_m;
    default:
      return nullptr;
  }
}

namespace {
IQDecodeFn checked_decoder(DType type, const char* what) {
  const IQDecodeFn decode = iq_decoder(type);
  if (decode == nullptr) fail("{}: {} is not an i-quant type", what, dtype_name(type));
  return decode;
}
}  // namespace

void dequantize_row_iq(DType type, const void* x, float* y, int64_t n) {
  const IQDecodeFn decode = checked_decoder(type, "dequantize_row_iq");
  const size_t block_bytes = static_cast<size_t>(dtype_info(type).block_bytes);
  DecodedIQBlock blk;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(static_cast<const uint8_t*>(x) + static_cast<size_t>(i) * block_bytes, blk);
    for (int g = 0; g < kQK_K / 16; ++g) {
      const float dl = blk.d * (static_cast<float>(blk.scale[g]) * blk.scale_unit);
      for (int e = 16 * g; e < 16 * g + 16; ++e) y[i * kQK_K + e] = dl * (static_cast<float>(blk.q[e]) * blk.q_unit);
    }
  }
}

float vec_dot_iq_q8_K(DType type, int64_t n, const void* w, const BlockQ8_K* a) {
  const IQDecodeFn decode = checked_decoder(type, "vec_dot_iq_q8_K");
  const size_t block_bytes = static_cast<size_t>(dtype_info(type).block_bytes);
  DecodedIQBlock blk;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode(static_cast<const uint8_t*>(w) + static_cast<size_t>(i) * block_bytes, blk);
    int32_t block_sum = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int32_t s = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) s += blk.q[e] * a[i].qs[e];
      block_sum += s * blk.scale[g];
    }
    sum = iq_accumulate(sum, iq_block_factor(blk) * a[i].d, block_sum);
  }
  return sum;
}

}  // namespace kvserve
