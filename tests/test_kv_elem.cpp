// The cache element conversions (kernels/cpu/kv_elem.h, core/fp8.h) against definitions written out
// here: fp8 decoding from the format's fields, encoding as the nearest finite value (ties to the even
// code, saturating), q8_0 / q4_0 rows as ggml's dequantizers read them, and KVStorage rows of each
// dtype reading back what the conversions give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/kv_elem.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"
#include "kv/kv_storage.h"

using namespace kvserve;

namespace {

struct Fp8Format {
  const char* name;
  int man_bits, bias;
  float max_finite;
  uint8_t (*encode)(float);
  float (*decode)(uint8_t);
  bool (*is_special)(uint8_t);  // NaN or infinity codes
};

const Fp8Format kFormats[] = {
    {"e4m3", 3, 7, 448.0f, fp32_to_fp8_e4m3, fp8_e4m3_to_fp32, [](uint8_t c) { return (c & 0x7f) == 0x7f; }},
    {"e5m2", 2, 15, 57344.0f, fp32_to_fp8_e5m2, fp8_e5m2_to_fp32, [](uint8_t c) { return (c & 0x7c) == 0x7c; }},
};

// The value of a finite code from its fields, in double.
double field_value(const Fp8Format& f, uint8_t c) {
  const int e = (c & 0x7f) >> f.man_bits;
  const int m = c & ((1 << f.man_bits) - 1);
  const double mag =
      e == 0 ? std::ldexp(m, 1 - f.bias - f.man_bits) : std::ldexp((1 << f.man_bits) + m, e - f.bias - f.man_bits);
  return (c & 0x80) ? -mag : mag;
}

// The code encode must give: the nearest finite code (beyond the largest, the largest), a tie to the
// code with an even mantissa.
uint8_t nearest_code(const Fp8Format& f, float x) {
  double best_err = std::numeric_limits<double>::infinity();
  int best = -1;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::min<double>(std::fabs(x), f.max_finite);
  for (int c = 0; c < 128; ++c) {
    if (f.is_special(static_cast<uint8_t>(c))) continue;
    const double err = std::fabs(field_value(f, static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best_err = err;
      best = c;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

}  // namespace

TEST(Fp8, DecodesEveryCodeFromItsFieldsAndEncodesItBack) {
  for (const Fp8Format& f : kFormats) {
    int finite = 0;
    for (int i = 0; i < 256; ++i) {
      const auto c = static_cast<uint8_t>(i);
      const float v = f.decode(c);
      if (f.is_special(c)) {
        EXPECT_FALSE(std::isfinite(v)) << f.name << " code " << i;
        continue;
      }
      ++finite;
      EXPECT_EQ(static_cast<double>(v), field_value(f, c)) << f.name << " code " << i;
      EXPECT_EQ(f.encode(v), c) << f.name << " code " << i;
    }
    EXPECT_EQ(finite, f.man_bits == 3 ? 254 : 248) << f.name;
  }
}

TEST(Fp8, EncodesToTheNearestCodeTiesToEvenAndSaturates) {
  std::mt19937 rng(7);
  for (const Fp8Format& f : kFormats) {
    std::vector<float> xs = {0.0f,
                             -0.0f,
                             1.0f,
                             -1.0f,
                             f.max_finite,
                             -f.max_finite,
                             f.max_finite * 1.01f,
                             -f.max_finite * 4.0f,
                             1e30f,
                             -1e30f,
                             std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::denorm_min(),
                             1e-30f};
    // Every midpoint between neighbouring finite codes, and just either side of it.
    for (int c = 0; c + 1 < 128; ++c) {
      if (f.is_special(static_cast<uint8_t>(c + 1))) break;
      const double mid = (field_value(f, static_cast<uint8_t>(c)) + field_value(f, static_cast<uint8_t>(c + 1))) / 2;
      const auto m = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(m), mid);  // midpoints are exact in f32
      xs.insert(xs.end(), {m, -m, std::nextafter(m, 0.0f), std::nextafter(m, 1e9f)});
    }
    std::uniform_real_distribution<float> expo(-20.0f, 18.0f);
    for (int i = 0; i < 20000; ++i) xs.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(expo(rng)));
    for (float x : xs) ASSERT_EQ(f.encode(x), nearest_code(f, x)) << f.name << " x=" << x;
    EXPECT_EQ(f.encode(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f) << f.name;
  }
  // Anchors from the formats' definitions.
  EXPECT_EQ(fp32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(fp32_to_fp8_e4m3(1.0f), 0x38);
  EXPECT_EQ(fp32_to_fp8_e4m3(std::ldexp(1.0f, -9)), 0x01);   // the smallest subnormal
  EXPECT_EQ(fp32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half of it: a tie, to the even zero
  EXPECT_EQ(fp32_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(fp32_to_fp8_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(fp32_to_fp8_e5m2(1.0f), 0x3c);
  EXPECT_EQ(fp32_to_fp8_e5m2(std::numeric_limits<float>::infinity()), 0x7b);
  EXPECT_EQ(fp8_e4m3_to_fp32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e5m2_to_fp32(0x01), std::ldexp(1.0f, -16));
}

// The block types decode as ggml's dequantizers read the same bytes; encoding is ggml's quantizers.
TEST(KVElem, BlockRowsReadAsGgmlDequantizesThem) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> x(128);
  for (float& v : x) v = g(rng);
  x[40] = -9.5f;  // the block's largest magnitude negative: its scale's sign
  for (KVElemType type : {KVElemType::Q8_0, KVElemType::Q4_0}) {
    std::vector<unsigned char> bytes(kv_bytes(type, 128));
    encode_kv_row(type, x.data(), 128, bytes.data());
    std::vector<float> got(128), want(128);
    decode_kv_row(type, bytes.data(), 128, got.data());
    if (type == KVElemType::Q8_0) {
      std::vector<BlockQ8_0> q(4);
      quantize_row_q8_0(x.data(), q.data(), 128);
      ASSERT_EQ(std::memcmp(q.data(), bytes.data(), bytes.size()), 0);
      dequantize_row_q8_0(q.data(), want.data(), 128);
    } else {
      std::vector<BlockQ4_0> q(4);
      quantize_row_q4_0(x.data(), q.data(), 128);
      ASSERT_EQ(std::memcmp(q.data(), bytes.data(), bytes.size()), 0);
      dequantize_row_q4_0(q.data(), want.data(), 128);
    }
    EXPECT_EQ(got, want) << kv_elem_name(type);
    // q8_0: within half a step (amax / 127 / 2) of each value, the f16 rounding of the scale aside
    // (up to 127 * 2^-11 steps more). q4_0: within amax / 8, the clamp of a value opposite in sign to
    // the block's largest (its 8 * scale is not a level: 15 is the top nibble).
    for (int b = 0; b < 4; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + j)]));
      const float tol = type == KVElemType::Q8_0 ? amax / 254.0f * 1.13f : amax / 8.0f * 1.01f;
      for (int j = 0; j < 32; ++j)
        EXPECT_NEAR(got[static_cast<size_t>(b * 32 + j)], x[static_cast<size_t>(b * 32 + j)], tol)
            << kv_elem_name(type) << " " << b * 32 + j;
    }
  }
  EXPECT_EQ(kv_bytes(KVElemType::Q4_0, 64), 36u);
  EXPECT_EQ(kv_bytes(KVElemType::FP8_E4M3, 12), 12u);
}

// KVStorage layers of fp8 and int4 read back the conversions' values, take the bytes the layout says
// (fp8 exactly the textbook figure; int4 half a byte a value plus an f16 scale per 32), and refuse int4
// rows that are not whole blocks.
TEST(KVStorage, Fp8AndInt4LayersStoreTheirRows) {
  KVLayout l = KVLayout::mha(3, 2, 64, KVCacheDType::FP8_E4M3, 4);
  l.layer_dtypes[1] = KVCacheDType::FP8_E5M2;
  l.layer_dtypes[2] = KVCacheDType::INT4;
  EXPECT_EQ(l.stored_bytes_per_token_layer(0), l.bytes_per_token_layer(0));
  EXPECT_EQ(l.stored_bytes_per_token_layer(0), 256u);
  EXPECT_EQ(l.bytes_per_token_layer(2), 128u);
  EXPECT_EQ(l.stored_bytes_per_token_layer(2), 4u * 36u);  // 4 rows of 64: 32 bytes + 2 scales each
  EXPECT_EQ(kv_dtype_row_bytes(KVCacheDType::INT4, 128), 72u);
  KVStorage st(l, 3);
  EXPECT_EQ(st.bytes(), 3u * l.stored_bytes_per_block());
  std::vector<float> k(128), v(128);
  for (int i = 0; i < 128; ++i) {
    k[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * (i < 32 ? 0.01f : 30.0f);
    v[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i)) - 0.5f;
  }
  for (int layer = 0; layer < 3; ++layer) {
    const KVElemType type = kv_elem_type(l.layer_dtypes[static_cast<size_t>(layer)]);
    st.write(layer, 2, 1, k.data(), v.data());
    std::vector<float> rk(128), rv(128), wk(128), wv(128);
    st.read(layer, 2, 1, rk.data(), rv.data());
    for (int h = 0; h < 2; ++h) {
      std::vector<unsigned char> bytes(kv_bytes(type, 64));
      encode_kv_row(type, k.data() + h * 64, 64, bytes.data());
      decode_kv_row(type, bytes.data(), 64, wk.data() + h * 64);
      encode_kv_row(type, v.data() + h * 64, 64, bytes.data());
      decode_kv_row(type, bytes.data(), 64, wv.data() + h * 64);
    }
    EXPECT_EQ(rk, wk) << kv_elem_name(type);
    EXPECT_EQ(rv, wv) << kv_elem_name(type);
    // fp8 keeps 3 (E4M3) or 2 (E5M2) mantissa bits: within 1/16 or 1/8 of each value, or below the
    // normal range within half the subnormal step (2^-10, 2^-17): E4M3 without a scale keeps values
    // under 2^-6 coarsely.
    if (type == KVElemType::Q4_0) continue;
    for (int i = 0; i < 128; ++i)
      EXPECT_NEAR(rk[static_cast<size_t>(i)], k[static_cast<size_t>(i)],
                  type == KVElemType::FP8_E4M3 ? std::max(std::fabs(k[static_cast<size_t>(i)]) * 0.0625f, 0x1p-10f)
                                               : std::max(std::fabs(k[static_cast<size_t>(i)]) * 0.125f, 0x1p-17f))
          << kv_elem_name(type) << " " << i;
  }
  EXPECT_THROW(KVStorage(KVLayout::mha(1, 2, 48, KVCacheDType::INT4, 4), 2), Error);
  EXPECT_NO_THROW(KVStorage(KVLayout::mha(1, 2, 12, KVCacheDType::FP8_E4M3, 4), 2));
}

// The fast transform against the dense Sylvester matrix, per block; its own inverse; lengths kept; a
// block that is not a power of two dividing the row refused.
TEST(Hadamard, FastTransformIsTheDenseMatrixAndItsOwnInverse) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int block : {1, 2, 8, 64, 128, 256}) {
    std::vector<float> x(static_cast<size_t>(block) * 3);
    for (float& v : x) v = g(rng);
    x[std::min<size_t>(3, x.size() - 1)] = 40.0f;  // an outlier: spread over its block
    std::vector<float> fast = x, ref = x;
    hadamard_rotate(fast.data(), static_cast<int64_t>(x.size()), block);
    hadamard_rotate_ref(ref.data(), static_cast<int64_t>(x.size()), block);
    double n0 = 0, n1 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(fast[i], ref[i], 1e-5f * 40.0f) << block << " " << i;
      n0 += double(x[i]) * x[i];
      n1 += double(fast[i]) * fast[i];
    }
    EXPECT_NEAR(n1, n0, 1e-5 * n0) << block;
    if (block >= 64) {
      float first_max = 0;
      for (int i = 0; i < block; ++i) first_max = std::max(first_max, std::fabs(fast[static_cast<size_t>(i)]));
      EXPECT_LT(first_max, 10.0f) << block;  // the outlier's 40 is spread: 40 / sqrt(block) and the rest
    }
    hadamard_rotate(fast.data(), static_cast<int64_t>(x.size()), block);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(fast[i], x[i], 1e-5f * 40.0f) << block << " " << i;
  }
  std::vector<float> x(96);
  EXPECT_THROW(hadamard_rotate(x.data(), 96, 64), Error);
  EXPECT_THROW(hadamard_rotate(x.data(), 96, 48), Error);
}

// Which caches are rotated, and how: fp8, int8 and int4 with heads of a multiple of 64 (K in the largest
// power of two dividing the head, V in 64s); never the half-precision ones or other head sizes.
TEST(Hadamard, KVRotationFollowsTheCacheTypeAndHeadSize) {
  for (KVElemType t : {KVElemType::FP8_E4M3, KVElemType::FP8_E5M2, KVElemType::Q8_0, KVElemType::Q4_0}) {
    EXPECT_EQ(kv_rotation(t, 64).k_block, 64);
    EXPECT_EQ(kv_rotation(t, 128).k_block, 128);
    EXPECT_EQ(kv_rotation(t, 192).k_block, 64);
    EXPECT_EQ(kv_rotation(t, 256).v_block, 64);
    EXPECT_FALSE(kv_rotation(t, 96).any());
    EXPECT_FALSE(kv_rotation(t, 8).any());
  }
  for (KVElemType t : {KVElemType::F32, KVElemType::F16, KVElemType::BF16}) EXPECT_FALSE(kv_rotation(t, 128).any());
}

// The scheme the runners follow is exact: attention over K and V rotated as stored, with q rotated as K,
// then the output rotated back, is attention over the originals (an f32 cache, to rounding).
TEST(Hadamard, RotatedAttentionIsTheSameAttention) {
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int H = 4, KVH = 2, D = 128, n_pos = 37, bs = 16;
  const KVRotation rot = kv_rotation(KVElemType::Q4_0, D);
  ASSERT_EQ(rot.k_block, 128);
  const int n_blocks = (n_pos + bs - 1) / bs;
  std::vector<float> q(static_cast<size_t>(H) * D), k(static_cast<size_t>(n_blocks) * KVH * bs * D), v(k.size());
  for (float& x : q) x = g(rng);
  for (float& x : k) x = g(rng);
  for (float& x : v) x = g(rng);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = b;
  auto attend = [&](const std::vector<float>& qq, const std::vector<float>& kk, const std::vector<float>& vv) {
    std::vector<float> out(qq.size());
    PagedAttentionArgs a;
    a.q = qq.data();
    a.out = out.data();
    a.n_tokens = 1;
    a.n_heads = H;
    a.n_kv_heads = KVH;
    a.head_dim = D;
    a.block_table = table.data();
    a.block_size = bs;
    a.pos0 = n_pos - 1;
    a.k_cache = kk.data();
    a.v_cache = vv.data();
    a.block_stride = int64_t{KVH} * bs * D;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    paged_attention_ref(a);
    return out;
  };
  const std::vector<float> want = attend(q, k, v);
  std::vector<float> rq = q, rk = k, rv = v;
  hadamard_rotate(rq.data(), static_cast<int64_t>(rq.size()), rot.k_block);
  hadamard_rotate(rk.data(), static_cast<int64_t>(rk.size()), rot.k_block);
  hadamard_rotate(rv.data(), static_cast<int64_t>(rv.size()), rot.v_block);
  std::vector<float> got = attend(rq, rk, rv);
  hadamard_rotate(got.data(), static_cast<int64_t>(got.size()), rot.v_block);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << i;
  // Without the rotation back, the output is not the attention (the test can fail).
  std::vector<float> unrotated = attend(rq, rk, rv);
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(unrotated[i] - want[i]));
  EXPECT_GT(worst, 0.05f);
}
