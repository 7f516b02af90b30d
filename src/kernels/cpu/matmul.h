#pragma once
// Weight x activation products for every supported weight dtype, with llama.cpp's CPU numerics:
// activations are converted to the weight type's "dot type" first (F16 for F16 weights, BF16 for BF16,
// Q8_0 for Q8_0/Q4_0, Q8_1 for Q4_1, Q8_K for K-quants, plain F32 for F32) and products use integer or
// mixed dots. See ../shared/golden/gguf/README.md, "Numerics".
#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace kvserve {

// y[t * n_out + r] = sum_k W[r][k] * x[t * n_in + k] for t in [0, n_tokens), r in [0, n_out),
// where n_in = w.cols(), n_out = w.rows(). Each weight block is read once for all tokens of the call
// (tiled over tokens and, for the 32-element block types, over rows), rows are split across the pool's
// threads. Each (row, token) result is the same whatever the batch or split (batch invariance).
void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool = ThreadPool::global());

// Several weights applied to the same activations (Q/K/V, gate/up): when they share a type and row length
// the activations are converted once and all their rows are split across the pool in one pass; results
// are bit-identical to separate matmul calls.
struct MatmulOutput {
  const Tensor* w;
  float* y;  // n_tokens x w->rows()
};
void matmul_shared_input(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens,
                         ThreadPool& pool = ThreadPool::global());

// Same result computed by the plain scalar reference path (dequantize + scalar dot, same activation
// rounding), for tests.
void matmul_ref(const Tensor& w, const float* x, int64_t n_tokens, float* y);

// Exact dequantization of n elements (a multiple of the type's block size) of one row.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// True when the AVX2/FMA/F16C paths are in use (CPUID checked once; KVSERVE_NO_SIMD=1 forces scalar).
bool cpu_has_avx2();

// Turns the SIMD paths off (false) or back on (true, still only where the CPU has them), e.g. so tests
// can run both paths in one process. Not for use while a matmul is running.
void set_simd_enabled(bool enabled);

}  // namespace kvserve
