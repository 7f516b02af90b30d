#pragma once
// Checks several test files share: a Generator's cache left with every block free or cached, a one-thread
// pool for tiny models, and a GGUF image that must fail to load with a message naming the problem.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "model/gguf.h"
#include "model/loaders.h"

namespace kvserve::test {

// Between calls no sequence is left and every block is free or cached (ref count 0, in the free queue).
inline void expect_all_blocks_free_or_cached(const Generator& g) {
  const KVCacheManager& kv = g.kv_cache_manager();
  EXPECT_TRUE(kv.sequences().empty());
  const BlockPool& pool = kv.pool();
  EXPECT_EQ(pool.num_free_blocks(), pool.num_blocks());
  for (int32_t b = 0; b < pool.num_blocks(); ++b) EXPECT_EQ(pool.block(b).ref_count, 0) << "block " << b;
}

// One thread: stories260K is far too small to gain from more, and a busy machine makes the shared pool's
// hand-offs dominate (hundreds of tiny jobs a token).
inline ThreadPool& one_thread() {
  static ThreadPool pool(1);
  return pool;
}

inline void expect_gguf_load_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    load_gguf_model(std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), "variant.gguf"), {});
    ADD_FAILURE() << "no error, expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace kvserve::test
