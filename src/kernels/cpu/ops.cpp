#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/matmul.h"

namespace kvserve {

void rmsnorm(const float* x, const float* w, float* out, int n, float eps) {
  // Sum in double: llama.cpp's ggml_vec_norm accumulates the sum of squares in ggml_float (double).
  // Eight running sums: one chain of dependent double adds cost ~4 cycles per element, and this runs on
  // one thread between matmuls (the order changes the double sum by ~1e-16, far below float rounding).
  double part[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (; i < n; ++i) part[0] += static_cast<double>(x[i]) * x[i];
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float mean = static_cast<float>(ss / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
  } else {
    for (int i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

void rmsnorm_heads(float* x, const float* w, int n_heads, int head_dim, float eps) {
  for (int h = 0; h < n_heads; ++h)
    rmsnorm(x + static_cast<int64_t>(h) * head_dim, w, x + static_cast<int64_t>(h) * head_dim, head_dim, eps);
}

float gelu_tanh(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

void gelu_exact_mul_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    // -2u in the AVX2 kernel's order of operations, so that the two differ only by their exp.
    const float x = (kGeluMinus2Sqrt2OverPi * g) * std::fma(kGeluCoefA, g * g, 1.0f);
    out[i] = g / (1.0f + std::exp(x)) * up[i];
  }
}

void gelu_exact_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (cpu_has_avx2()) {
    avx2::gelu_exact_mul(gate, up, out, n);
  } else {
    gelu_exact_mul_ref(gate, up, out, n);
  }
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65536);
    for (size_t i = 0; i < t.size(); ++i) t[i] = fp32_to_fp16(gelu_tanh(fp16_to_fp32(static_cast<uint16_t>(i))));
    return t;
  }();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      out[i] = 0.0f;
    } else if (x >= 10.0f) {
      out[i] = x * up[i];
    } else {
      out[i] = fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
    }
  }
}

void prefetch_for_read(const void* p, size_t bytes) {
  if (p == nullptr) return;
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(static_cast<const char*>(p) + off, 0, 3);
}

void prefetch_for_write(void* p, size_t bytes) {
  if (p == nullptr) return;
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(static_cast<char*>(p) + off, 1, 3);
}

Rope::Rope(int head_dim, int n_rot, float base, RopeStyle style, const RopeScaling& scaling, bool long_factors)
    : head_dim_(head_dim), n_rot_(n_rot > 0 ? n_rot : head_dim), style_(style) {
  const int half = n_rot_ / 2;
  if (scaling.type == RopeScaling::Type::LongRope) {
    // As ggml's rope with freq_factors: the angle theta / factor, cos and sin times the attention factor.
    freq_div_ = long_factors ? scaling.long_factors : scaling.short_factors;
    if (static_cast<int>(freq_div_.size()) != half)
      fail("rope: {} LongRoPE factors for {} rotated pairs", freq_div_.size(), half);
    mscale_ = scaling.attn_factor;
  }
  // Per-pair factors given as they are: Llama 4 Scout's llama3 scaling, Gemma 4's "proportional" RoPE (factors of
  // 1e30 hold the pairs past its rotating quarter still).
  if (scaling.type != RopeScaling::Type::LongRope && !scaling.freq_factors.empty()) {
    freq_div_ = scaling.freq_factors;
    if (static_cast<int>(freq_div_.size()) != half)
      fail("rope: {} frequency factors for {} rotated pairs", freq_div_.size(), half);
  }
  if (scaling.type == RopeScaling::Type::Yarn) {
    // As ggml_rope_yarn_corr_dims and rope_yarn, in float.
    yarn_ = true;
    yarn_freq_scale_ = 1.0f / scaling.factor;
    const float orig = static_cast<float>(scaling.original_context);
    const auto corr_dim = [&](float n_rotations) {
      return static_cast<float>(n_rot_) * std::log(orig / (n_rotations * 2.0f * static_cast<float>(M_PI))) /
             (2.0f * std::log(base));
    };
    const float low = corr_dim(scaling.yarn_beta_fast), high = corr_dim(scaling.yarn_beta_slow);
    yarn_low_ = std::max(0.0f, scaling.yarn_truncate ? std::floor(low) : low);
    yarn_high_ = std::min(static_cast<float>(n_rot_ - 1), scaling.yarn_truncate ? std::ceil(high) : high);
    mscale_ = scaling.attn_factor * (1.0f + 0.1f * std::log(1.0f / yarn_freq_scale_));
  }
  // llama.cpp forms theta_i = pos * theta_scale^i by repeated float multiplication; doing the same keeps
  // our logits within float rounding of its goldens.
  theta_scale_ = std::pow(base, -2.0f / static_cast<float>(n_rot_));
  freq_mul_.assign(half, 1.0f);
  for (int i = 0; i < half; ++i) {
    if (scaling.type == RopeScaling::Type::Linear) {
      freq_mul_[i] = 1.0f / scaling.factor;
    } else if (scaling.type == RopeScaling::Type::Llama3) {
      // Llama 3.1 frequency-dependent scaling (Meta's reference, HF's _compute_llama3_parameters).
      const float f = std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot_));
      const float low_wavelen = scaling.original_context / scaling.low_freq_factor;
      const float high_wavelen = scaling.original_context / scaling.high_freq_factor;
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      if (wavelen > low_wavelen) {
        freq_mul_[i] = 1.0f / scaling.factor;
      } else if (wavelen >= high_wavelen && scaling.high_freq_factor > scaling.low_freq_factor) {
        const float smooth = (scaling.original_context / wavelen - scaling.low_freq_factor) /
                             (scaling.high_freq_factor - scaling.low_freq_factor);
        freq_mul_[i] = (1.0f - smooth) / scaling.factor + smooth;
      }
    }
  }
}

void Rope::angles(int64_t pos, float* cos_sin) const {
  const int half = n_rot_ / 2;
  float theta = static_cast<float>(pos);
  if (!freq_div_.empty()) {
    for (int i = 0; i < half; ++i, theta *= theta_scale_) {
      const float t = theta / freq_div_[i];
      cos_sin[2 * i] = std::cos(t) * mscale_;
      cos_sin[2 * i + 1] = std::sin(t) * mscale_;
    }
    return;
  }
  if (yarn_) {
    for (int i = 0; i < half; ++i, theta *= theta_scale_) {
      const float interp = yarn_freq_scale_ * theta;
      const float y = (static_cast<float>(i) - yarn_low_) / std::max(0.001f, yarn_high_ - yarn_low_);
      const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));
      const float t = interp * (1.0f - ramp) + theta * ramp;
      cos_sin[2 * i] = std::cos(t) * mscale_;
      cos_sin[2 * i + 1] = std::sin(t) * mscale_;
    }
    return;
  }
  for (int i = 0; i < half; ++i, theta *= theta_scale_) {
    const float t = theta * freq_mul_[i];
    cos_sin[2 * i] = std::cos(t);
    cos_sin[2 * i + 1] = std::sin(t);
  }
}

void Rope::rotate(float* x, int n_heads, const float* cos_sin) const {
  const int half = n_rot_ / 2;
  // Head by head, pair index innermost: contiguous loads the compiler vectorizes (each element's two
  // products and one add are the same whatever the loop order).
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim_;
    if (style_ == RopeStyle::Interleaved) {
      for (int i = 0; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

void silu_mul_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_oai_mul(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  if (cpu_has_avx2()) {
    avx2::swiglu_oai_mul(gate, up, out, n, alpha, limit);
  } else {
    swiglu_oai_mul_ref(gate, up, out, n, alpha, limit);
  }
}

void swiglu_oai_mul_ref(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(alpha * -g)) * (u + 1.0f);
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  if (cpu_has_avx2()) {
    avx2::silu_mul(gate, up, out, n);
  } else {
    silu_mul_ref(gate, up, out, n);
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

int64_t argmax_ref(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

int64_t argmax(const float* x, int64_t n) { return cpu_has_avx2() ? avx2::argmax(x, n) : argmax_ref(x, n); }

double exp_weights_ref(const float* x, int64_t n, float max, float inv_t, float* w) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::isnan(x[i]) ? 0.0f : std::exp((x[i] - max) * inv_t);
    sum += w[i];
  }
  return sum;
}

double exp_weights(const float* x, int64_t n, float max, float inv_t, float* w) {
  return cpu_has_avx2() ? avx2::exp_weights(x, n, max, inv_t, w) : exp_weights_ref(x, n, max, inv_t, w);
}

}  // namespace kvserve
