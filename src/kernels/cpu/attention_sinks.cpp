#include "kernels/cpu/attention_sinks.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/paged_attention_impl.h"

namespace kvserve {

void fold_attention_sinks(const PagedAttentionArgs& a, const float* q_sink, int64_t sinks, int64_t t, int kvh) {
  // Sink positions the window does not already cover.
  const int64_t n_sink = std::min(sinks, a.pos0 + t - a.window + 1);
  if (n_sink <= 0) return;
  const int group = a.n_heads / a.n_kv_heads;
  const int hd = a.head_dim;
  const int bs = a.block_size;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(n_sink) + 3 * static_cast<size_t>(hd));
  float* scores = scratch.data();
  float* key = scores + n_sink;
  float* val = key + hd;
  float* acc = val + hd;
  const auto row_of = [&](int64_t pos) {
    return (a.block_table[pos / bs] * a.block_stride + int64_t{kvh} * bs * hd) / hd + pos % bs;
  };
  for (int g = 0; g < group; ++g) {
    const int64_t head = t * a.n_heads + int64_t{kvh} * group + g;
    const float* q = q_sink + head * hd;
    float max = a.lse[head];
    for (int64_t i = 0; i < n_sink; ++i) {
      decode_kv_row(a.kv_type, static_cast<const char*>(a.k_cache) + kv_bytes(a.kv_type, row_of(i) * hd), hd, key);
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += q[d] * key[d];
      const float s = a.softcap > 0 ? detail::soft_cap(dot * a.scale, a.softcap) : dot * a.scale;
      scores[i] = s;
      max = std::max(max, s);
    }
    // The window's rows are normalized: weight them by their softmax sum, exp(lse - max).
    float* o = a.out + head * hd;
    float sum = std::exp(a.lse[head] - max);
    for (int d = 0; d < hd; ++d) acc[d] = o[d] * sum;
    for (int64_t i = 0; i < n_sink; ++i) {
      const float e = std::exp(scores[i] - max);
      decode_kv_row(a.kv_type, static_cast<const char*>(a.v_cache) + kv_bytes(a.kv_type, row_of(i) * hd), hd, val);
      for (int d = 0; d < hd; ++d) acc[d] += e * val[d];
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    a.lse[head] = max + std::log(sum);
  }
}

void merge_attention_sinks(const PagedAttentionArgs& a, const float* q_sink, int64_t sinks, ThreadPool& pool) {
  if (sinks <= 0 || a.n_tokens == 0) return;
  if (a.window <= 0) fail("attention sinks: need a sliding window (window {})", a.window);
  if (a.lse == nullptr || q_sink == nullptr) fail("attention sinks: need the window's lse and the sink queries");
  pool.parallel_for(int64_t{a.n_tokens} * a.n_kv_heads, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item)
      fold_attention_sinks(a, q_sink, sinks, item / a.n_kv_heads, static_cast<int>(item % a.n_kv_heads));
  });
}

}  // namespace kvserve
