#include "kernels/cpu/block32_tiles.h"

#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "core/grow_only.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

void ActPack32::reset(DType act_type, int64_t n, int64_t n_tokens) {
  if (act_type != DType::Q8_0 && act_type != DType::Q8_1)
    fail("ActPack32: activation type {} is not Q8_0 or Q8_1", dtype_name(act_type));
  if (n < 0 || n % 32 != 0 || n_tokens < 0) fail("ActPack32: bad shape {} x {}", n_tokens, n);
  act_type_ = act_type;
  n_ = n;
  qs_stride_ = (n + 31) / 32 * 32;
  // The buffers only grow (grow_only.h): one pack serves calls of every width in turn, and clearing the
  // part regrown for each down projection took ~1.3% of the caller's time in 1B-shaped batched decode.
  // 31 spare bytes so the first row can start on a 32-byte boundary.
  grow_to(qs_storage_, qs_stride_ * n_tokens + 31);
  const auto addr = reinterpret_cast<uintptr_t>(qs_storage_.data());
  qs_ = qs_storage_.data() + ((32 - addr % 32) % 32);
  const int64_t n_blocks = n / 32 * n_tokens;
  grow_to(d_, n_blocks);
  if (act_type == DType::Q8_1) grow_to(s_, n_blocks);
  if (act_type == DType::Q8_0) grow_to(q4_offset_, n_blocks);
}

void ActPack32::pack(int64_t t, const void* blocks) {
  const int64_t nb = n_ / 32;
  int8_t* qs = qs_ + t * qs_stride_;
  float* d = d_.data() + t * nb;
  if (act_type_ == DType::Q8_0) {
    const auto* b = static_cast<const BlockQ8_0*>(blocks);
    int32_t* q4_offset = q4_offset_.data() + t * nb;
    for (int64_t i = 0; i < nb; ++i) {
      std::memcpy(qs + 32 * i, b[i].qs, 32);
      d[i] = fp16_to_fp32(b[i].d);
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += b[i].qs[j];
      q4_offset[i] = 8 * sum;
    }
  } else {
    const auto* b = static_cast<const BlockQ8_1*>(blocks);
    float* s = s_.data() + t * nb;
    for (int64_t i = 0; i < nb; ++i) {
      std::memcpy(qs + 32 * i, b[i].qs, 32);
      d[i] = fp16_to_fp32(b[i].d);
      s[i] = fp16_to_fp32(b[i].s);
    }
  }
}

void ActPack32::quantize_avx2(int64_t t, const float* x) {
  const int64_t nb = n_ / 32;
  if (act_type_ == DType::Q8_0) {
    avx2::quantize_row_q8_0_packed(x, qs_ + t * qs_stride_, d_.data() + t * nb, q4_offset_.data() + t * nb, n_);
  } else {
    avx2::quantize_row_q8_1_packed(x, qs_ + t * qs_stride_, d_.data() + t * nb, s_.data() + t * nb, n_);
  }
}

bool has_block32_tile(DType weight_type) {
  switch (weight_type) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::MXFP4:
      return true;
    default: return false;
  }
}

namespace avx2 {
namespace {
float single_dot(DType weight_type, DType act_type, int64_t n, const void* w, const void* a) {
  ActPack32 pack;
  pack.reset(act_type, n, 1);
  pack.pack(0, a);
  const PackedActs32 acts = pack.token(0);
  float out = 0.0f;
  block32_tile(weight_type)(n, static_cast<const uint8_t*>(w), 0, 1, &acts, 1, &out);
  return out;
}
}  // namespace

// The one-row, one-token case of the tiles (declared in quants.h with the other AVX2 dots). Defined in
// this portable file because ActPack32's vectors must not be instantiated in an AVX2-compiled one.
float vec_dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* a) {
  return single_dot(DType::Q8_0, DType::Q8_0, n, w, a);
}
float vec_dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* a) {
  return single_dot(DType::Q4_0, DType::Q8_0, n, w, a);
}
float vec_dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* a) {
  return single_dot(DType::Q4_1, DType::Q8_1, n, w, a);
}
float vec_dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* a) {
  return single_dot(DType::Q5_0, DType::Q8_0, n, w, a);
}
float vec_dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* a) {
  return single_dot(DType::Q5_1, DType::Q8_1, n, w, a);
}
float vec_dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* a) {
  return single_dot(DType::IQ4_NL, DType::Q8_0, n, w, a);
}
float vec_dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* a) {
  return single_dot(DType::MXFP4, DType::Q8_0, n, w, a);
}

Block32TileFn block32_tile(DType weight_type) {
  switch (weight_type) {
    case DType::Q8_0: return tile_q8_0;
    case DType::Q4_0: return tile_q4_0;
    case DType::Q4_1: return tile_q4_1;
    case DType::Q5_0: return tile_q5_0;
    case DType::Q5_1: return tile_q5_1;
    case DType::IQ4_NL: return tile_iq4_nl;
    case DType::MXFP4:
      return tile_mxfp4;
    default: fail("block32_tile: weight type {} has no 32-block tile", dtype_name(weight_type));
  }
}
}  // namespace avx2

}  // namespace kvserve
