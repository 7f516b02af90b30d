#pragma once
// Weight x activation products for every supported weight dtype, with llama.cpp's CPU numerics:
// activations are converted to the weight type's "dot type" first (F16 for F16 weights, BF16 for BF16,
// Q8_0 for Q8_0/Q4_0, Q8_1 for Q4_1, Q8_K for K-quants, plain F32 for F32) and products use integer or
// mixed dots. See ../shared/golden/gguf/README.md, "Numerics".
#include <cstdint>
#include <memory>
#include <span>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace kvserve {

// y[t * n_out + r] = sum_k W[r][k] * x[t * n_in + k] for t in [0, n_tokens), r in [0, n_out),
// where n_in = w.cols(), n_out = w.rows(). Each weight block is read once for all tokens of the call
// (tiled over tokens and, for the 32-element block types, over rows), rows are split across the pool's
// threads. Each (row, token) result is the same whatever the batch or split (batch invariance).
void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool = ThreadPool::global());
// y += w x (y laid out as matmul's; the residual add after an output projection): each thread adds the
// rows it just computed into y, where a separate add_inplace after matmul would run on one thread while
// the others wait. The same bits as matmul into scratch (n_tokens * w.rows() floats) then add_inplace.
void matmul_add(const Tensor& w, const float* x, int64_t n_tokens, float* y, float* scratch, ThreadPool& pool);

// Several weights applied to the same activations (Q/K/V, gate/up): when they share a type and row length
// the activations are converted once and all their rows are split across the pool in one pass; results
// are bit-identical to separate matmul calls.
struct MatmulOutput {
  const Tensor* w;
  float* y;  // n_tokens x w->rows()
};
void matmul_shared_input(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens,
                         ThreadPool& pool = ThreadPool::global());

// For one matmul inside ThreadPool::run (several steps of a decode in one parallel region): every thread
// converts the activations into its own MatmulActs, then computes the rows it is given
// (ThreadPool::balanced_share over w.rows() in chunks of matmul_balance_chunk_rows(w, n_tokens)). Results are
// bit-identical to matmul() and matmul_shared_input().
class MatmulActs {
 public:
  MatmulActs();
  ~MatmulActs();
  MatmulActs(MatmulActs&&) noexcept;
  MatmulActs& operator=(MatmulActs&&) noexcept;
  // n_tokens rows of n_in floats, converted (on this thread) for weights of type weight_type.
  void convert(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens);
  // The same for stacked weights (Q/K/V, gate/up; up to three, of one row length): converted once for each
  // of their types, and each weight reads its own type's (a Q4_K_M file's V is Q6_K or Q8_0 in some
  // layers, beside Q4_K or Q5_0 Q and K). The bits of separate matmuls.
  void convert(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens);
  // The same token by token, for rows computed by several threads (each converts the rows it just wrote,
  // while they are in its cache): prepare sizes the storage for x's n_tokens rows (not read yet), then
  // convert_token(t) converts row t. Distinct rows may be converted on different threads at once; the
  // bits are convert()'s.
  void prepare(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens);
  void prepare(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens);
  void convert_token(int64_t t);

  struct Storage;

 private:
  friend void matmul_rows(const Tensor&, const MatmulActs&, float*, int64_t, int64_t);
  friend void matmul_rows_stacked(std::span<const MatmulOutput>, const MatmulActs&, int64_t, int64_t);
  friend void matmul_converted(std::span<const MatmulOutput>, const MatmulActs&, ThreadPool&);
  friend void matmul_add_converted(const Tensor&, const MatmulActs&, float*, float*, ThreadPool&);
  std::unique_ptr<Storage> storage_;
};
// y rows [row_begin, row_end) of every token (y laid out as matmul's); acts converted for w's type and
// row length.
void matmul_rows(const Tensor& w, const MatmulActs& acts, float* y, int64_t row_begin, int64_t row_end);
// matmul_shared_input and matmul_add over the pool, with every token of `acts` converted already
// (MatmulActs::prepare / convert_token, for each weight's type). The same bits.
void matmul_converted(std::span<const MatmulOutput> outputs, const MatmulActs& acts, ThreadPool& pool);
void matmul_add_converted(const Tensor& w, const MatmulActs& acts, float* y, float* scratch, ThreadPool& pool);
// Rows [begin, end) of the outputs' weights stacked in order (as matmul_shared_input splits them).
void matmul_rows_stacked(std::span<const MatmulOutput> outputs, const MatmulActs& acts, int64_t begin, int64_t end);
// True when the weights share a type and row length (one conversion serves all).
bool matmul_inputs_shareable(std::span<const MatmulOutput> outputs);
// True when one to three weights are present and share a row length: one MatmulActs::convert(outputs, ...)
// serves them, stacked (matmul_rows_stacked, matmul_converted), whatever their types.
bool matmul_inputs_stackable(std::span<const MatmulOutput> outputs);
// Rows per balancing chunk for w and n_tokens: what matmul() gives parallel_for_balanced.
int64_t matmul_balance_chunk_rows(const Tensor& w, int64_t n_tokens);
// The same for the outputs' rows stacked: the widest row's chunk.
int64_t matmul_balance_chunk_rows(std::span<const MatmulOutput> outputs, int64_t n_tokens);

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

// Turns off (false) or back on the pairing of K-quant group-layout chunks for the 512-bit pair kernels in
// many-token calls (matmul.cpp), e.g. so tests can compare both paths. Not while a matmul is running.
void set_fly_pairs_enabled(bool enabled);

// Turns off (false) or back on (true, still only where cpu_has_amx_int8()) the AMX pair kernels of the
// 32-element block types in calls of several tokens, e.g. so tests can compare both paths (the same bits).
// Not while a matmul is running.
void set_amx_enabled(bool enabled);

// Whether BF16 weights take the vdpbf16ps tiles (bf16_dot_tiles_zmm.h): on a core with AVX512-BF16 and no
// AMX-BF16 in use, by default on AMD's cores, or as KVSERVE_BF16_DOT=0/1 says. set_bf16_dot(0 or 1) forces
// them off or on (on still only with AVX512-BF16, and with AMX-BF16 turned off by set_amx_enabled(false)
// where the core has it) and -1 restores the default, e.g. so tests can run them. Not while a matmul runs.
bool bf16_dot_in_use();
void set_bf16_dot(int on);

// Whether one-token calls of the 512-bit pair kernels also ask 8 KiB ahead into L2 (with 2 KiB into L1;
// interleaved_zmm_avx512vnni.cpp): by default on Intel cores, or as KVSERVE_DECODE_L2_AHEAD=0/1 says.
// set_decode_l2_ahead(0 or 1) forces it off or on and -1 restores the default, e.g. so tests can run both
// (the bits are the same: only prefetches differ). Not while a matmul is running.
bool decode_l2_ahead_enabled();
void set_decode_l2_ahead(int on);

}  // namespace kvserve
