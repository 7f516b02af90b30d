#pragma once
// Checks and fixtures several test files share: EXPECT_ERROR_CONTAINS, a next-token log-probability, a Generator's cache left with every block free or cached, a
// one-thread pool for tiny models, greedy parameters and llama2.c's greedy goldens for stories260K, an edited
// copy of a GGUF file, and a GGUF image that must fail to load with a message naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/loaders.h"

// The statement throws Error, and its message holds `text`.
#define EXPECT_ERROR_CONTAINS(statement, text)                                    \
  do {                                                                            \
    try {                                                                         \
      statement;                                                                  \
      ADD_FAILURE() << #statement " did not throw";                               \
    } catch (const kvserve::Error& e) {                                           \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what(); \
    }                                                                             \
  } while (0)

namespace kvserve::test {

// log softmax(z)[id] over n logits, in double (a reference's next-token log-probability).
inline double log_softmax_at(const float* z, int n, int id) {
  double mx = *std::max_element(z, z + n), sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(z[i]) - mx);
  return double(z[id]) - mx - std::log(sum);
}

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

inline SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// ../shared/golden/stories260K/greedy.jsonl, one object per prompt.
inline std::vector<nlohmann::json> stories_greedy_goldens() {
  std::ifstream f(std::string(KVSERVE_SHARED_DIR) + "/golden/stories260K/greedy.jsonl");
  EXPECT_TRUE(f.good());
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// What changes in a copy of a GGUF file: metadata keys left out or set (u32), a tensor left out, and a tensor
// added (F32 zeros of shape add_ne).
struct GgufEdit {
  std::vector<std::string> drop_keys;
  std::vector<std::pair<std::string, uint32_t>> set_u32;
  std::string drop_tensor;
  std::string add_tensor;
  std::vector<int64_t> add_ne;
};

inline std::vector<uint8_t> edited_gguf(const std::string& path, const GgufEdit& e) {
  const GGUFFile src(path);
  GGUFWriter w;
  const auto edited = [&](const std::string& key) {
    for (const std::string& k : e.drop_keys)
      if (k == key) return true;
    for (const auto& [k, v] : e.set_u32)
      if (k == key) return true;
    return key == "general.alignment";
  };
  for (const auto& [key, value] : src.metadata())
    if (!edited(key)) w.add_value(key, value);
  for (const auto& [k, v] : e.set_u32) w.add_u32(k, v);
  for (const GGUFTensorInfo& t : src.tensors())
    if (t.name != e.drop_tensor)
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                   std::vector<uint8_t>(t.data, t.data + t.bytes));
  if (!e.add_tensor.empty()) {
    int64_t n = 1;
    for (int64_t d : e.add_ne) n *= d;
    w.add_tensor(e.add_tensor, DType::F32, e.add_ne, std::vector<uint8_t>(static_cast<size_t>(n) * 4, 0));
  }
  return w.to_bytes();
}

inline void expect_gguf_load_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    load_gguf_model(std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), "variant.gguf"), {});
    ADD_FAILURE() << "no error, expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The line of /proc/self/maps whose range holds `p`, or "" when none does.
inline std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    const size_t dash = line.find('-'), space = line.find(' ');
    if (dash == std::string::npos || space == std::string::npos) continue;
    const uintptr_t lo = std::stoull(line.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
    if (a >= lo && a < hi) return line;
  }
  return "";
}

}  // namespace kvserve::test
