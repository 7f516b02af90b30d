// Per-layer KV dtypes (kv/kv_layer_dtypes.h): the spelling, negative indices and ranges, bad items named;
// and a cache built from them stores each layer in its own dtype (a mixed cache gives the logits of neither
// uniform one, and naming every layer gives exactly the uniform cache).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "kv/kv_layer_dtypes.h"
#include "model/loaders.h"

using namespace kvserve;

namespace {

void expect_error_naming(const std::string& spec, const std::string& word) {
  try {
    resolve_kv_layer_dtypes(parse_kv_layer_dtypes(spec), 4, KVCacheDType::INT8);
    FAIL() << spec << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << spec << ": " << e.what();
  }
}

}  // namespace

TEST(KVLayerDtypes, IndicesRangesAndNegativesResolveAgainstTheModelsDepth) {
  using T = KVCacheDType;
  EXPECT_TRUE(parse_kv_layer_dtypes("").empty());
  EXPECT_EQ(resolve_kv_layer_dtypes(parse_kv_layer_dtypes("0=f16,-1=f16"), 5, T::INT8),
            (std::vector<T>{T::F16, T::INT8, T::INT8, T::INT8, T::F16}));
  EXPECT_EQ(resolve_kv_layer_dtypes(parse_kv_layer_dtypes("1:2=bf16"), 4, T::F16),
            (std::vector<T>{T::F16, T::BF16, T::BF16, T::F16}));
  EXPECT_EQ(resolve_kv_layer_dtypes(parse_kv_layer_dtypes("-2:-1=f32,0:-1=int8,3=f16"), 4, T::F16),
            (std::vector<T>{T::INT8, T::INT8, T::INT8, T::F16}));  // later items win
  expect_error_naming("0", "LAYERS=DTYPE");
  expect_error_naming("x=f16", "'x'");
  expect_error_naming("0=f12", "f12");
  expect_error_naming("4=f16", "outside the model's 4 layers");
  expect_error_naming("-5=f16", "outside");
  expect_error_naming("3:1=f16", "backwards");
  expect_error_naming("0=f16,", "LAYERS=DTYPE");
}

TEST(KVLayerDtypes, GeneratorStoresEachLayerInItsOwnDtype) {
  auto gqa = load_model(std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/tiny-gqa.gguf");
  ASSERT_EQ(gqa->config.n_layers, 2);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(1 + (i * 37) % 500);
  const auto logits = [&](KVCacheDType base, const std::string& spec, uint64_t* block_bytes = nullptr) {
    GeneratorOptions o;
    o.kv_cache_memory = 4.0 * 1024 * 1024;
    o.kv_cache_dtype = base;
    o.kv_layer_dtypes = parse_kv_layer_dtypes(spec);
    o.max_context = 128;
    Generator g(*gqa, o);
    if (block_bytes != nullptr) *block_bytes = g.kv_cache().bytes_per_block;
    return g.teacher_forced_logits(ids, 30);
  };
  uint64_t mixed_bytes = 0, f16_bytes = 0, int8_bytes = 0;
  const auto f16 = logits(KVCacheDType::F16, "", &f16_bytes);
  const auto int8 = logits(KVCacheDType::INT8, "", &int8_bytes);
  const auto mixed = logits(KVCacheDType::INT8, "-1=f16", &mixed_bytes);
  EXPECT_EQ(logits(KVCacheDType::INT8, "0:-1=f16"), f16);
  EXPECT_EQ(logits(KVCacheDType::F16, "0=int8,1=int8"), int8);
  EXPECT_NE(mixed, f16);
  EXPECT_NE(mixed, int8);
  EXPECT_EQ(mixed_bytes * 2, f16_bytes + int8_bytes);
}
