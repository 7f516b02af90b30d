// KV layout figures, memory budgets and KVStorage's block layout.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/quants.h"
#include "kv/kv_layout.h"
#include "kv/kv_storage.h"

using namespace kvserve;

TEST(KVLayout, BytesPerTokenFollowTheFormulas) {
  // MHA 128 heads x 128, f16: 2 * 128 * 128 * 2 = 65,536 B per token per layer.
  EXPECT_EQ(KVLayout::mha(1, 128, 128, KVCacheDType::F16).bytes_per_token_layer(0), 65536u);
  // GQA Llama-3-8B: 32 layers * 2 * 8 * 128 * 2 = 131,072 B per token.
  EXPECT_EQ(KVLayout::mha(32, 8, 128, KVCacheDType::BF16).bytes_per_token(), 131072u);
  // MQA: one KV head.
  EXPECT_EQ(KVLayout::mha(1, 1, 64, KVCacheDType::F32).bytes_per_token(), 512u);
  // MLA DeepSeek-V2: (512 + 64) * 2 = 1,152 B.
  const KVLayout mla = KVLayout::mla(60, 512, 64, KVCacheDType::F16);
  EXPECT_EQ(mla.bytes_per_token_layer(0), 1152u);
  EXPECT_EQ(mla.bytes_per_token(), 60u * 1152u);
  // Quantized payloads: int8/fp8 1 byte, int4 half a byte.
  EXPECT_EQ(KVLayout::mha(1, 8, 128, KVCacheDType::INT8).bytes_per_token(), 2048u);
  EXPECT_EQ(KVLayout::mha(1, 8, 128, KVCacheDType::FP8_E4M3).bytes_per_token(), 2048u);
  EXPECT_EQ(KVLayout::mha(1, 8, 128, KVCacheDType::INT4).bytes_per_token(), 1024u);
  // Stored: int8 as q8_0 adds an f16 scale per 32 values (128 + 4 * 2 bytes a row of 128, 16 rows a token);
  // the other dtypes store exactly the values.
  EXPECT_EQ(KVLayout::mha(1, 8, 128, KVCacheDType::INT8).stored_bytes_per_token(), 16u * 136u);
  EXPECT_EQ(KVLayout::mha(2, 8, 128, KVCacheDType::F16).stored_bytes_per_token(), 2u * 4096u);
  EXPECT_EQ(KVLayout::mla(1, 512, 64, KVCacheDType::INT8).stored_bytes_per_token(), 576u + 36u);
  EXPECT_EQ(kv_dtype_row_bytes(KVCacheDType::INT8, 64), 68u);
  EXPECT_EQ(kv_dtype_row_bytes(KVCacheDType::INT8, 8), 10u);  // one (partial) group: one scale
  EXPECT_EQ(kv_dtype_row_bytes(KVCacheDType::BF16, 64), 128u);
}

TEST(KVLayout, PerLayerDtypesAndBlocks) {
  KVLayout l = KVLayout::mha(4, 2, 8, KVCacheDType::INT8, 16);
  l.layer_dtypes.front() = KVCacheDType::F32;  // keep first and last layers high precision
  l.layer_dtypes.back() = KVCacheDType::F16;
  EXPECT_EQ(l.bytes_per_token_layer(0), 128u);
  EXPECT_EQ(l.bytes_per_token_layer(1), 32u);
  EXPECT_EQ(l.bytes_per_token_layer(3), 64u);
  EXPECT_EQ(l.bytes_per_token(), 128u + 32u + 32u + 64u);
  EXPECT_EQ(l.bytes_per_block(), 16u * 256u);
  // Stored, the int8 layers' 4 rows of 8 values a token take a scale each: 40 bytes instead of 32.
  EXPECT_EQ(l.stored_bytes_per_token(), 128u + 40u + 40u + 64u);
  EXPECT_EQ(l.stored_bytes_per_block(), 16u * 272u);
  EXPECT_EQ(blocks_for_budget(l, 16 * 272 * 10 + 5), 10);
  EXPECT_EQ(blocks_for_budget(l, 16 * 272 * 10 - 1), 9);
  l.layer_dtypes.pop_back();
  EXPECT_THROW(l.validate(), Error);
  EXPECT_THROW(KVLayout::mha(0, 8, 128, KVCacheDType::F16), Error);
  EXPECT_THROW(KVLayout::mla(2, 0, 64, KVCacheDType::F16), Error);
}

TEST(KVLayout, ParsesDtypesAndSizes) {
  EXPECT_EQ(parse_kv_dtype("f16"), KVCacheDType::F16);
  EXPECT_EQ(parse_kv_dtype("BF16"), KVCacheDType::BF16);
  EXPECT_EQ(parse_kv_dtype("fp8"), KVCacheDType::FP8_E4M3);
  EXPECT_EQ(parse_kv_dtype("int4"), KVCacheDType::INT4);
  EXPECT_THROW(parse_kv_dtype("f12"), Error);
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("512K"), 512u * 1024);
  EXPECT_EQ(parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("1.5G"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("3GB"), 3000000000ull);
  EXPECT_EQ(parse_byte_size("80 GiB"), 80ull << 30);
  EXPECT_THROW(parse_byte_size("lots"), Error);
  EXPECT_THROW(parse_byte_size("12X"), Error);
  EXPECT_THROW(parse_byte_size(""), Error);
  EXPECT_GT(total_ram_bytes(), 0u);
  EXPECT_EQ(resolve_kv_memory_budget("1GiB"), 1ull << 30);
  EXPECT_NEAR(static_cast<double>(resolve_kv_memory_budget("0.5")), 0.5 * static_cast<double>(total_ram_bytes()), 2);
  EXPECT_NEAR(static_cast<double>(resolve_kv_memory_budget("25%")), 0.25 * static_cast<double>(total_ram_bytes()), 2);
  EXPECT_THROW(resolve_kv_memory_budget("1.5"), Error);
}

TEST(KVStorage, WritesIntoPagedLayoutAndCopiesBlocks) {
  const KVLayout l = KVLayout::mha(2, 2, 3, KVCacheDType::F32, 4);
  KVStorage st(l, 5);
  EXPECT_EQ(st.block_stride(), 2 * 4 * 3);
  EXPECT_EQ(st.bytes(), 2u * 2u * 5u * 24u * sizeof(float));
  const float k[6] = {1, 2, 3, 4, 5, 6}, v[6] = {-1, -2, -3, -4, -5, -6};
  st.write(1, 3, 2, k, v);
  // [kv_head][slot][dim]: head 1, slot 2 of block 3 starts at 3 * stride + (1 * 4 + 2) * 3.
  const float* k1 = static_cast<const float*>(st.k_layer(1));
  const float* v1 = static_cast<const float*>(st.v_layer(1));
  EXPECT_EQ(k1[3 * 24 + (0 * 4 + 2) * 3 + 0], 1);
  EXPECT_EQ(k1[3 * 24 + (1 * 4 + 2) * 3 + 2], 6);
  EXPECT_EQ(v1[3 * 24 + (1 * 4 + 2) * 3 + 0], -4);
  EXPECT_EQ(static_cast<const float*>(st.k_layer(0))[3 * 24 + (0 * 4 + 2) * 3], 0);  // other layer untouched
  st.copy_block(3, 0);
  float rk[6], rv[6];
  st.read(1, 0, 2, rk, rv);
  EXPECT_EQ(std::vector<float>(rk, rk + 6), std::vector<float>(k, k + 6));
  EXPECT_EQ(std::vector<float>(rv, rv + 6), std::vector<float>(v, v + 6));
  EXPECT_ANY_THROW(st.write(2, 0, 0, k, v));
  EXPECT_ANY_THROW(st.write(0, 5, 0, k, v));
  EXPECT_ANY_THROW(st.write(0, 0, 4, k, v));
  EXPECT_ANY_THROW(st.write(0, 0, 0, k, nullptr));
}

TEST(KVStorage, PrefaultedPoolIsResidentWhenCreatedAndStillZero) {
  // 2 layers x K/V x 64 blocks x 16 slots x 8 heads x 64 dims x f16 = 4 MiB: a mapped (huge-page)
  // buffer, not the heap. Every page must be in memory before any write, so decode steps never fault.
  const KVLayout l = KVLayout::mha(2, 8, 64, KVCacheDType::F16, 16);
  KVStorage st(l, 64, /*prefault=*/true);
  ASSERT_EQ(st.bytes(), size_t{4} << 20);
  const long page = ::sysconf(_SC_PAGESIZE);
  const auto* base = static_cast<const uint8_t*>(st.k_layer(0));
  ASSERT_EQ(reinterpret_cast<uintptr_t>(base) % static_cast<uintptr_t>(page), 0u);
  std::vector<unsigned char> resident(st.bytes() / static_cast<size_t>(page));
  ASSERT_EQ(::mincore(const_cast<uint8_t*>(base), st.bytes(), resident.data()), 0);
  size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) == 0;
  EXPECT_EQ(missing, 0u) << "of " << resident.size() << " pages";
  size_t nonzero = 0;
  for (size_t i = 0; i < st.bytes(); i += 997) nonzero += base[i] != 0;
  EXPECT_EQ(nonzero, 0u);
}

// The lazily committed pool: commit_ahead makes the pages of blocks [0, end) resident, at most max_bytes a
// call with the arrays in turn, leaves the values as they were, and says when nothing is left to commit.
TEST(KVStorage, CommitAheadMakesTheNextBlocksResidentAPieceAtATime) {
  // 2 layers x K/V arrays of 64 blocks x 16 KiB (16 slots x 8 heads x 64 dims x f16): 4 MiB, mapped.
  const KVLayout l = KVLayout::mha(2, 8, 64, KVCacheDType::F16, 16);
  KVStorage st(l, 64);
  ASSERT_EQ(st.bytes(), size_t{4} << 20);
  EXPECT_EQ(st.blocks_per_huge_page(), 128);  // 2 MiB of 16 KiB blocks
  const long page = ::sysconf(_SC_PAGESIZE);
  // Pages of blocks [0, end) of an array not in memory.
  const auto missing = [&](const void* array, int end) {
    std::vector<unsigned char> resident(static_cast<size_t>(end) * 16384 / static_cast<size_t>(page));
    EXPECT_EQ(::mincore(const_cast<void*>(array), static_cast<size_t>(end) * 16384, resident.data()), 0);
    size_t n = 0;
    for (unsigned char r : resident) n += (r & 1) == 0;
    return n;
  };
  std::vector<float> k(8 * 64), v(8 * 64), got_k(8 * 64), got_v(8 * 64);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.25f * static_cast<float>(i % 37);
    v[i] = -0.5f * static_cast<float>(i % 11);
  }
  st.write(1, 3, 5, k.data(), v.data());
  // Blocks [0, 16) are 256 KiB in each of the 4 arrays: 16 calls of 64 KiB, then nothing left.
  int calls = 0;
  while (st.commit_ahead(16, 64 << 10)) ++calls;
  EXPECT_EQ(calls, 16);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(missing(st.k_layer(layer), 16), 0u) << "layer " << layer << " K";
    EXPECT_EQ(missing(st.v_layer(layer), 16), 0u) << "layer " << layer << " V";
  }
  st.read(1, 3, 5, got_k.data(), got_v.data());
  EXPECT_EQ(got_k, k);
  EXPECT_EQ(got_v, v);
  // Past the pool's end it commits the rest, once.
  EXPECT_TRUE(st.commit_ahead(1000, size_t{8} << 20));
  EXPECT_FALSE(st.commit_ahead(1000, size_t{8} << 20));
  EXPECT_EQ(missing(st.v_layer(1), 64), 0u);
  // A prefaulted pool has nothing to commit.
  KVStorage pre(l, 64, /*prefault=*/true);
  EXPECT_FALSE(pre.commit_ahead(64, size_t{8} << 20));
}

// int8 layers hold each row as q8_0 blocks (an f16 scale per 32 values): a row reads back as ggml's
// dequantized q8_0 of it, within half a step (amax / 254) of each value; rows of other heads and slots are
// untouched; copy_block moves the bytes; a row that is not whole blocks is refused.
TEST(KVStorage, Int8LayersStoreQ8_0Rows) {
  KVLayout l = KVLayout::mha(2, 2, 64, KVCacheDType::INT8, 4);
  l.layer_dtypes[1] = KVCacheDType::F16;
  KVStorage st(l, 3);
  EXPECT_EQ(st.bytes(), 3u * l.stored_bytes_per_block());
  EXPECT_EQ(l.stored_bytes_per_block(), 4u * (4u * 68u + 4u * 128u));  // 4 slots: 4 int8 rows, 4 f16 rows
  std::vector<float> k(128), v(128);
  for (int i = 0; i < 128; ++i) {
    k[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * (i < 32 ? 0.01f : 3.0f);
    v[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i)) - 0.5f;
  }
  st.write(0, 1, 2, k.data(), v.data());
  std::vector<float> rk(128), rv(128);
  st.read(0, 1, 2, rk.data(), rv.data());
  for (int h = 0; h < 2; ++h) {
    std::vector<BlockQ8_0> q(2);
    std::vector<float> want(64);
    quantize_row_q8_0(k.data() + h * 64, q.data(), 64);
    dequantize_row_q8_0(q.data(), want.data(), 64);
    for (int i = 0; i < 64; ++i) {
      const size_t j = static_cast<size_t>(h * 64 + i);
      EXPECT_EQ(rk[j], want[static_cast<size_t>(i)]) << h << " " << i;
      const float amax = i < 32 && h == 0 ? 0.01f : 3.0f;
      EXPECT_NEAR(rk[j], k[j], amax / 254.0f * 1.01f) << h << " " << i;
    }
  }
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(rv[static_cast<size_t>(i)], v[static_cast<size_t>(i)], 1.5f / 254.0f * 1.01f);
  // The small first group keeps its own scale: 0.01-sized values are not rounded to zero.
  EXPECT_NE(rk[5], 0.0f);
  std::vector<float> other(128, -1.0f), other_v(128, -1.0f);
  st.read(0, 1, 1, other.data(), other_v.data());
  EXPECT_EQ(other, std::vector<float>(128, 0.0f));  // never written: zeroed memory reads as 0
  st.copy_block(1, 0);
  std::vector<float> ck(128), cv(128);
  st.read(0, 0, 2, ck.data(), cv.data());
  EXPECT_EQ(ck, rk);
  EXPECT_EQ(cv, rv);
  EXPECT_THROW(KVStorage(KVLayout::mha(1, 2, 48, KVCacheDType::INT8, 4), 2), Error);
}

TEST(KVStorage, HalfPrecisionLayersRoundToNearestAndHalveTheBytes) {
  KVLayout l = KVLayout::mha(3, 1, 4, KVCacheDType::F16, 2);
  l.layer_dtypes[1] = KVCacheDType::BF16;
  l.layer_dtypes[2] = KVCacheDType::F32;  // per layer, e.g. the last one kept at full precision
  KVStorage st(l, 3);
  EXPECT_EQ(st.bytes(), 2u * 3u * 8u * (2u + 2u + 4u));
  EXPECT_EQ(st.bytes(), 3u * l.bytes_per_block());
  EXPECT_EQ(st.dtype(1), KVCacheDType::BF16);
  const float k[4] = {1.0f, 0.1f, -3.14159f, 65504.0f}, v[4] = {1e-3f, -2.5f, 1.0f / 3.0f, 7.0f};
  for (int layer = 0; layer < 3; ++layer) {
    st.write(layer, 2, 1, k, v);
    float rk[4], rv[4];
    st.read(layer, 2, 1, rk, rv);
    for (int i = 0; i < 4; ++i) {
      const float ek = layer == 0 ? fp16_to_fp32(fp32_to_fp16(k[i])) : layer == 1 ? bf16_to_fp32(fp32_to_bf16(k[i])) : k[i];
      const float ev = layer == 0 ? fp16_to_fp32(fp32_to_fp16(v[i])) : layer == 1 ? bf16_to_fp32(fp32_to_bf16(v[i])) : v[i];
      EXPECT_EQ(rk[i], ek) << layer << " " << i;
      EXPECT_EQ(rv[i], ev) << layer << " " << i;
    }
  }
  // f16 keeps 0.1 to ~1e-4 relative, bf16 to ~4e-3: rounded, not truncated.
  float rk[4], rv[4];
  st.read(0, 2, 1, rk, rv);
  EXPECT_NEAR(rk[1], 0.1f, 0.1f * 5e-4f);
  st.read(1, 2, 1, rk, rv);
  EXPECT_NEAR(rk[1], 0.1f, 0.1f * 4e-3f);
  st.copy_block(2, 0);
  float ck[4], cv[4];
  st.read(1, 0, 1, ck, cv);
  EXPECT_EQ(std::vector<float>(ck, ck + 4), std::vector<float>(rk, rk + 4));
}

TEST(KVStorage, RefusesRowsThatAreNotWholeScaleBlocks) {
  for (KVCacheDType t : {KVCacheDType::INT8, KVCacheDType::INT4}) {
    try {
      KVStorage st(KVLayout::mha(2, 1, 4, t, 2), 2);
      FAIL() << kv_dtype_name(t) << " storage of 4-value rows accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kv_dtype_name(t)), std::string::npos) << e.what();
    }
  }
}

TEST(KVStorage, MlaKeepsOnlyTheLatent) {
  const KVLayout l = KVLayout::mla(1, 6, 2, KVCacheDType::F32, 2);
  KVStorage st(l, 2);
  EXPECT_FALSE(st.has_v());
  EXPECT_EQ(st.head_dim(), 8);
  EXPECT_EQ(st.v_layer(0), nullptr);
  std::vector<float> latent(8, 1.5f);
  st.write(0, 1, 1, latent.data(), nullptr);
  EXPECT_EQ(static_cast<const float*>(st.k_layer(0))[16 + 8 + 7], 1.5f);
}
