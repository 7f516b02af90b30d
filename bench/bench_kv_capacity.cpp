// What a KV memory budget holds for sliding-window models with the hybrid cache (KVCacheManager's groups)
// against a cache that keeps every layer's every position: requests of a given context in flight at once,
// from the real pool sizing (PagedKVCache) and the real allocator (KVCacheManager), prompts computed in
// chunks of 512 as the scheduler computes them, then one decode step each, blocks released as windows move.
// No weights are needed and nothing is computed: the attention shapes below are the published configs'.
// Prints the ratio hybrid / full per model and context.
//
//   ./bench_kv_capacity [--budget 8G] [--chunk 512]
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/paged_kv_cache.h"
#include "kv/kv_layout.h"

using namespace kvserve;

namespace {

struct Shape {
  const char* name;
  int layers, kv_heads, head_dim, window, global_every;  // global_every: every n-th layer is global
  int64_t context;
};

ModelConfig config_of(const Shape& s) {
  ModelConfig c;
  c.n_layers = s.layers;
  c.n_kv_heads = s.kv_heads;
  c.n_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.sliding_window = s.window;
  for (int l = 0; l < s.layers; ++l) c.swa_layers.push_back((l + 1) % s.global_every != 0);
  c.n_ctx_train = static_cast<int>(s.context);
  return c;
}

// Requests of `tokens` positions that fit at once: each prompt in chunks, then one decoded token.
int64_t requests_that_fit(const ModelConfig& c, uint64_t budget, int64_t tokens, int64_t chunk, bool hybrid) {
  PagedKVCacheOptions o;
  o.kv_cache_memory = static_cast<double>(budget);
  o.kv_dtype = KVCacheDType::F16;
  o.max_model_len = tokens + 1;
  o.max_num_seqs = 1 << 20;  // the budget, not a sequence count, is the limit
  o.enable_prefix_caching = false;
  o.max_chunk_tokens = chunk;
  o.hybrid = hybrid;
  PagedKVCache cache(c, o);
  KVCacheManager& m = *cache.manager;
  for (SeqId seq = 0;; ++seq) {
    for (int64_t done = 0; done < tokens;) {
      const int64_t n = std::min(chunk, tokens - done);
      if (!m.allocate_slots(seq, n)) return seq;
      done += n;
    }
    if (!m.allocate_slots(seq, 1)) return seq;
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t budget = 8ull << 30;
  int64_t chunk = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--budget") budget = parse_byte_size(argv[i + 1]);
    else if (flag == "--chunk") chunk = std::stoll(argv[i + 1]);
  }
  // Gemma 2: local and global layers alternate, window 4096. Gemma 3: 5 local per global, window 512 (1B)
  // or 1024.
  const std::vector<Shape> shapes = {
      {"Gemma-2-2B", 26, 4, 256, 4096, 2, 8192},     {"Gemma-2-9B", 42, 8, 256, 4096, 2, 8192},
      {"Gemma-3-1B", 26, 1, 256, 512, 6, 32768},      {"Gemma-3-4B", 34, 4, 256, 1024, 6, 131072},
      {"Gemma-3-12B", 48, 8, 256, 1024, 6, 131072},   {"Gemma-3-27B", 62, 16, 128, 1024, 6, 131072},
  };
  fmt::print("KV budget {:.1f} GiB f16, prompts in chunks of {}; requests of each context in flight at once\n",
             static_cast<double>(budget) / (1 << 30), chunk);
  fmt::print("{:<12} {:>8} {:>10} {:>10} {:>8}\n", "model", "context", "full", "hybrid", "ratio");
  for (const Shape& s : shapes) {
    const ModelConfig c = config_of(s);
    for (int64_t ctx : {int64_t{4096}, int64_t{8192}, int64_t{32768}, int64_t{131072}}) {
      if (ctx > s.context) continue;
      const int64_t full = requests_that_fit(c, budget, ctx, chunk, false);
      const int64_t hybrid = requests_that_fit(c, budget, ctx, chunk, true);
      fmt::print("{:<12} {:>8} {:>10} {:>10} {:>8}\n", s.name, ctx, full, hybrid,
                 full > 0 ? fmt::format("{:.2f}x", static_cast<double>(hybrid) / static_cast<double>(full))
                          : std::string(hybrid > 0 ? "inf" : "-"));
    }
  }
  return 0;
}
