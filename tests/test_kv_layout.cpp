// KV layout figures, memory budgets and KVStorage's block layout.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
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
  EXPECT_EQ(blocks_for_budget(l, 16 * 256 * 10 + 5), 10);
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
  EXPECT_TRUE(kv_dtype_supported(KVCacheDType::F32));
  EXPECT_FALSE(kv_dtype_supported(KVCacheDType::INT8));
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
  // [kv_head][slot][dim]: head 1, slot 2 starts at (1 * 4 + 2) * 3.
  EXPECT_EQ(st.k_block(1, 3)[(0 * 4 + 2) * 3 + 0], 1);
  EXPECT_EQ(st.k_block(1, 3)[(1 * 4 + 2) * 3 + 2], 6);
  EXPECT_EQ(st.v_block(1, 3)[(1 * 4 + 2) * 3 + 0], -4);
  EXPECT_EQ(st.k_layer(1) + 3 * st.block_stride(), st.k_block(1, 3));
  EXPECT_EQ(st.k_block(0, 3)[(0 * 4 + 2) * 3], 0);  // other layer untouched
  st.copy_block(3, 0);
  EXPECT_EQ(st.k_block(1, 0)[(1 * 4 + 2) * 3 + 2], 6);
  EXPECT_EQ(st.v_block(1, 0)[(1 * 4 + 2) * 3 + 0], -4);
  EXPECT_THROW(st.write(0, 5, 0, k, v), Error);
  EXPECT_THROW(st.write(0, 0, 4, k, v), Error);
  EXPECT_THROW(st.write(0, 0, 0, k, nullptr), Error);
}

TEST(KVStorage, MlaKeepsOnlyTheLatent) {
  const KVLayout l = KVLayout::mla(1, 6, 2, KVCacheDType::F32, 2);
  KVStorage st(l, 2);
  EXPECT_FALSE(st.has_v());
  EXPECT_EQ(st.head_dim(), 8);
  EXPECT_EQ(st.v_layer(0), nullptr);
  std::vector<float> latent(8, 1.5f);
  st.write(0, 1, 1, latent.data(), nullptr);
  EXPECT_EQ(st.k_block(0, 1)[8 + 7], 1.5f);
}
