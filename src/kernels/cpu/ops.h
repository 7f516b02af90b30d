#pragma once
// Elementwise and normalisation kernels of the forward pass, all f32. They are a small share of a
// step next to the matmuls; written so the compiler vectorises the inner loops.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace kvserve {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (w may be null: no gain)
void rmsnorm(const float* x, const float* w, float* out, int n, float eps);
// rmsnorm of each of n_heads rows of head_dim in place, all with the same weights (Qwen3's q/k norm).
void rmsnorm_heads(float* x, const float* w, int n_heads, int head_dim, float eps);

// Asks for the cache lines of [p, p + bytes) ahead of a read (into L1) or a write (owned, so the store
// needs no read-for-ownership later). Hints only: any address, nothing is read or written; null p asks
// for nothing.
void prefetch_for_read(const void* p, size_t bytes);
void prefetch_for_write(void* p, size_t bytes);

// Rotates n_heads heads of head_dim floats in place for token position `pos`. Rotates the first n_rot
// dims of each head; pair layout and frequencies follow the model's RoPE style and scaling.
class Rope {
 public:
  // long_factors: LongRoPE's long factors rather than its short ones (which a sequence takes is the engine's
  // choice: LongRopeFactors in engine/model_runner.h).
  Rope(int head_dim, int n_rot, float base, RopeStyle style, const RopeScaling& scaling, bool long_factors = false);
  // In two steps, so a forward pass computes a position's cos/sin once for all layers and for q and k:
  // angles() fills n_rot() floats (cos, sin of each rotated pair), rotate() applies them to n_heads heads.
  void angles(int64_t pos, float* cos_sin) const;
  void rotate(float* x, int n_heads, const float* cos_sin) const;
  int n_rot() const { return n_rot_; }

 private:
  int head_dim_;
  int n_rot_;
  RopeStyle style_;
  float theta_scale_ = 1.0f;
  std::vector<float> freq_mul_;  // per rotated pair: 1, or the context-scaling factor
  std::vector<float> freq_div_;  // LongRoPE: per rotated pair, the factor its angle is divided by
  float mscale_ = 1.0f;          // LongRoPE's attention factor on cos and sin, or YaRN's magnitude
  bool yarn_ = false;            // YaRN: angles blended per pair (RopeScaling::Type::Yarn)
  float yarn_freq_scale_ = 1.0f;
  float yarn_low_ = 0.0f, yarn_high_ = 0.0f;  // the ramp's correction dimensions
};

// out[i] = silu(gate[i]) * up[i]; out may be gate. The AVX2 path approximates exp (as llama.cpp's
// ggml_v_silu does); its results are within 4 ulp of the scalar formula (tested).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
// The scalar reference (std::exp), used where AVX2 is off and by the tests.
void silu_mul_ref(const float* gate, const float* up, float* out, int64_t n);
namespace avx2 {
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
}

// out[i] = gelu(gate[i]) * up[i], GELU's tanh approximation as llama.cpp's CPU backend computes it
// (ggml_vec_geglu_f32 under GGML_GELU_FP16): 0 for gate <= -10, gate * up for gate >= 10, else the gate
// rounded to f16 and looked up in a table of f16 GELU values. The table keeps its logits within float
// rounding of llama.cpp's (exact GELU differs by up to ~1e-3 relative). out may be gate.
void gelu_mul(const float* gate, const float* up, float* out, int64_t n);
// GELU's tanh approximation's constants: 0.044715 and -2 sqrt(2/pi).
inline constexpr float kGeluCoefA = 0.044715f;
inline constexpr float kGeluMinus2Sqrt2OverPi = -1.5957691216057307f;
// 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) in float, ggml_gelu_f32: the table's entries.
float gelu_tanh(float x);
// out[i] = gelu(gate[i]) * up[i] with GELU's tanh approximation computed for each value, as transformers'
// gelu_pytorch_tanh computes it in float32 (not from a table): 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)),
// u = sqrt(2/pi) g (1 + 0.044715 g^2). The AVX2 path takes exp as silu_mul's does (within 4 ulp of the reference,
// tested). out may be gate.
void gelu_exact_mul(const float* gate, const float* up, float* out, int64_t n);
// The scalar reference (std::exp), used where AVX2 is off and by the tests.
void gelu_exact_mul_ref(const float* gate, const float* up, float* out, int64_t n);
namespace avx2 {
void gelu_exact_mul(const float* gate, const float* up, float* out, int64_t n);
}

// out[i] = g * sigmoid(alpha g) * (u + 1), g = min(gate[i], limit), u = clamp(up[i], -limit, limit): gpt-oss's
// SwiGLU. out may be gate. The AVX2 path approximates exp as silu_mul's does (within 4 ulp of the scalar formula,
// tested); the scalar reference is ggml_swiglu_oai's loop (expf, in float).
void swiglu_oai_mul(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
void swiglu_oai_mul_ref(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
namespace avx2 {
void swiglu_oai_mul(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);
}

// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t n);
// x[i] *= s
void scale_inplace(float* x, int64_t n, float s);

// The index a scalar `if (x[i] > x[best]) best = i` loop from best = 0 returns (n >= 1): the first
// maximum, NaNs never chosen (but 0 when x[0] is NaN). Greedy sampling of every sequence's logits.
int64_t argmax(const float* x, int64_t n);
int64_t argmax_ref(const float* x, int64_t n);
namespace avx2 {
int64_t argmax(const float* x, int64_t n);
}

// w[i] = exp((x[i] - max) * inv_t) for a row whose largest non-NaN element is `max` (inv_t > 0), and
// returns the sum of the w[i] in double. NaN elements get weight 0. Temperature sampling over a whole
// vocabulary (128k exps per sequence per step): the AVX2 path uses silu's exp (within 4 ulp of std::exp;
// arguments below -87, a weight under 1.7e-38 of the largest, become 0).
double exp_weights(const float* x, int64_t n, float max, float inv_t, float* w);
double exp_weights_ref(const float* x, int64_t n, float max, float inv_t, float* w);
namespace avx2 {
double exp_weights(const float* x, int64_t n, float max, float inv_t, float* w);
}

}  // namespace kvserve
