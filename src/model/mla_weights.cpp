#include "model/mla_weights.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/matmul.h"

namespace kvserve {

void split_kv_b(const Tensor& kv_b, const ModelConfig& c, const std::string& where, const std::string& name,
                LayerWeights& L, std::vector<std::shared_ptr<const void>>& owned) {
  const int64_t nope = c.qk_nope_dim(), r = c.kv_lora_rank, vd = c.head_dim_v;
  if (kv_b.n_dims != 2 || kv_b.ne[0] != r || kv_b.ne[1] != c.n_heads * (nope + vd))
    fail("{}: tensor '{}' has shape [{}, {}], expected [{}, {}] (kv_lora_rank, heads x (nope + v))", where, name, kv_b.ne[0],
         kv_b.ne[1], r, c.n_heads * (nope + vd));
  auto k_b = std::shared_ptr<float[]>(new float[static_cast<size_t>(c.n_heads * r * nope)]);
  std::vector<float> row(static_cast<size_t>(r));
  L.wk_b.clear();
  L.wv_b.clear();
  for (int h = 0; h < c.n_heads; ++h) {
    for (int64_t j = 0; j < nope; ++j) {
      dequantize_row(kv_b.type, kv_b.row(h * (nope + vd) + j), row.data(), r);
      for (int64_t i = 0; i < r; ++i) k_b[static_cast<size_t>((h * r + i) * nope + j)] = row[static_cast<size_t>(i)];
    }
    L.wv_b.push_back(row_range(kv_b, h * (nope + vd) + nope, vd, name + "[v " + std::to_string(h) + "]"));
    Tensor t;
    t.name = name + "[k " + std::to_string(h) + "]";
    t.type = DType::F32;
    t.ne = {nope, r, 1, 1};
    t.n_dims = 2;
    t.data = k_b.get() + h * r * nope;
    L.wk_b.push_back(t);
  }
  owned.push_back(std::move(k_b));
}

float deepseek2_attn_scale(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  float mscale = 1.0f;
  if (s.type == RopeScaling::Type::Yarn) {
    const float log_scale = std::log(1.0f / (1.0f / s.factor));
    const float attn_factor_org = s.attn_factor * (1.0f + 0.1f * log_scale);
    mscale = attn_factor_org * (1.0f + 0.1f * s.yarn_log_mul * log_scale);
  }
  return 1.0f * mscale * mscale / std::sqrt(static_cast<float>(c.head_dim));
}

}  // namespace kvserve
