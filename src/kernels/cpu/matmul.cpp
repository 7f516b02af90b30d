// Weight x activation products. Activations are converted once per call to the weight type's dot type
// (llama.cpp CPU numerics), then output rows are split across the pool; inside a thread's range a chunk
// of weight rows is multiplied with every group of up to 4 tokens while it is still in cache. Kernels, by
// preference: the 8-row interleaved copy (Q4_0/Q4_1/Q5_0/IQ4_NL/MXFP4/Q8_0/Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS,
// interleaved_rows.h), multi-row tiles over packed activations (same types, rows past the last 8; block32_tiles.h),
// one-row tiles (other types, quants.h), scalar dots (no AVX2).
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/grow_only.h"
#include "kernels/cpu/bf16_dot_tiles_zmm.h"
#include "kernels/cpu/bf16_gemm_amx.h"
#include "kernels/cpu/block32_tiles.h"
#include "kernels/cpu/float_tiles_zmm.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/iquants.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

namespace {

using ConvertFn = void (*)(const float* x, void* dst, int64_t n);
using ScalarDotFn = float (*)(int64_t n, const void* w, const void* a);
using TileFn = void (*)(int64_t n, const void* w, const void* const* a, int n_tok, float* out);

struct DotKind {
  DType act_type;          // dot type of the activations; F32 means x is used as it is
  ConvertFn convert;       // nullptr for F32
  ScalarDotFn scalar_dot;
  TileFn avx2_tile;        // nullptr for the types with block32 tiles
};

template <typename W, typename A, float (*Dot)(int64_t, const W*, const A*)>
float scalar_dot_erased(int64_t n, const void* w, const void* a) {
  return Dot(n, static_cast<const W*>(w), static_cast<const A*>(a));
}

template <DType kType>
float scalar_dot_iq(int64_t n, const void* w, const void* a) {
  return vec_dot_iq_q8_K(kType, n, w, static_cast<const BlockQ8_K*>(a));
}

template <typename A, void (*Quantize)(const float*, A*, int64_t)>
void convert_erased(const float* x, void* dst, int64_t n) {
  Quantize(x, static_cast<A*>(dst), n);
}

// F16 / BF16 weights against widened activations (round_row_*_wide), as vec_dot_f16_f16 sums them.
float half_of(uint16_t v) { return fp16_to_fp32(v); }
float bfloat_of(uint16_t v) { return bf16_to_fp32(v); }
template <float (*ToFloat)(uint16_t)>
float dot_wide(int64_t n, const void* w, const void* a) {
  const auto* wv = static_cast<const uint16_t*>(w);
  const auto* av = static_cast<const float*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(ToFloat(wv[i]) * av[i]);
  return static_cast<float>(sum);
}

// The i-quants below 4 bits: Q8_K activations, as ggml's.
template <DType kType>
DotKind iq_kind(bool simd, TileFn tile) {
  return {DType::Q8_K,
          simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
          scalar_dot_iq<kType>, tile};
}

DotKind dot_kind(DType weight_type, bool simd) {
  switch (weight_type) {
    case DType::F32:
      return {DType::F32, nullptr, scalar_dot_erased<float, float, vec_dot_f32_f32>, avx2::dot_tile_f32};
    // With the tiles, the activations rounded to F16 / BF16 are kept as the floats they are (F32 rows): the
    // same values and bits, converted once per call instead of once per weight row.
    case DType::F16:
      if (simd)
        return {DType::F32, convert_erased<float, avx2::round_row_f16_wide>, dot_wide<half_of>,
                avx2::dot_tile_f16_wide};
      return {DType::F16, convert_erased<uint16_t, quantize_row_f16>,
              scalar_dot_erased<uint16_t, uint16_t, vec_dot_f16_f16>, avx2::dot_tile_f16};
    case DType::BF16:
      if (simd)
        return {DType::F32, convert_erased<float, avx2::round_row_bf16_wide>, dot_wide<bfloat_of>,
                avx2::dot_tile_bf16_wide};
      return {DType::BF16, convert_erased<uint16_t, quantize_row_bf16>,
              scalar_dot_erased<uint16_t, uint16_t, vec_dot_bf16_bf16>, avx2::dot_tile_bf16};
    case DType::Q8_0:
      return {DType::Q8_0, simd ? convert_erased<BlockQ8_0, avx2::quantize_row_q8_0> : convert_erased<BlockQ8_0, quantize_row_q8_0>,
              scalar_dot_erased<BlockQ8_0, BlockQ8_0, vec_dot_q8_0_q8_0>, nullptr};
    case DType::Q4_0:
      return {DType::Q8_0, simd ? convert_erased<BlockQ8_0, avx2::quantize_row_q8_0> : convert_erased<BlockQ8_0, quantize_row_q8_0>,
              scalar_dot_erased<BlockQ4_0, BlockQ8_0, vec_dot_q4_0_q8_0>, nullptr};
    case DType::Q4_1:
      return {DType::Q8_1, simd ? convert_erased<BlockQ8_1, avx2::quantize_row_q8_1> : convert_erased<BlockQ8_1, quantize_row_q8_1>,
              scalar_dot_erased<BlockQ4_1, BlockQ8_1, vec_dot_q4_1_q8_1>, nullptr};
    case DType::Q5_0:
      return {DType::Q8_0, simd ? convert_erased<BlockQ8_0, avx2::quantize_row_q8_0> : convert_erased<BlockQ8_0, quantize_row_q8_0>,
              scalar_dot_erased<BlockQ5_0, BlockQ8_0, vec_dot_q5_0_q8_0>, nullptr};
    case DType::Q5_1:
      return {DType::Q8_1, simd ? convert_erased<BlockQ8_1, avx2::quantize_row_q8_1> : convert_erased<BlockQ8_1, quantize_row_q8_1>,
              scalar_dot_erased<BlockQ5_1, BlockQ8_1, vec_dot_q5_1_q8_1>, nullptr};
    case DType::Q2_K:
      return {DType::Q8_K, simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
              scalar_dot_erased<BlockQ2_K, BlockQ8_K, vec_dot_q2_K_q8_K>, avx2::dot_tile_q2_K};
    case DType::Q3_K:
      return {DType::Q8_K, simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
              scalar_dot_erased<BlockQ3_K, BlockQ8_K, vec_dot_q3_K_q8_K>, avx2::dot_tile_q3_K};
    case DType::IQ4_NL:
      return {DType::Q8_0, simd ? convert_erased<BlockQ8_0, avx2::quantize_row_q8_0> : convert_erased<BlockQ8_0, quantize_row_q8_0>,
              scalar_dot_erased<BlockIQ4_NL, BlockQ8_0, vec_dot_iq4_nl_q8_0>, nullptr};
    case DType::MXFP4:
      return {DType::Q8_0,
              simd ? convert_erased<BlockQ8_0, avx2::quantize_row_q8_0> : convert_erased<BlockQ8_0, quantize_row_q8_0>,
              scalar_dot_erased<BlockMXFP4, BlockQ8_0, vec_dot_mxfp4_q8_0>, nullptr};
    case DType::IQ4_XS:
      return {DType::Q8_K, simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
              scalar_dot_erased<BlockIQ4_XS, BlockQ8_K, vec_dot_iq4_xs_q8_K>, avx2::dot_tile_iq4_xs};
    case DType::Q4_K:
      return {DType::Q8_K, simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
              scalar_dot_erased<BlockQ4_K, BlockQ8_K, vec_dot_q4_K_q8_K>, avx2::dot_tile_q4_K};
    case DType::Q5_K:
      return {DType::Q8_K, simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
              scalar_dot_erased<BlockQ5_K, BlockQ8_K, vec_dot_q5_K_q8_K>, avx2::dot_tile_q5_K};
    case DType::Q6_K:
      return {DType::Q8_K, simd ? convert_erased<BlockQ8_K, avx2::quantize_row_q8_K> : convert_erased<BlockQ8_K, quantize_row_q8_K>,
              scalar_dot_erased<BlockQ6_K, BlockQ8_K, vec_dot_q6_K_q8_K>, avx2::dot_tile_q6_K};
    case DType::IQ2_XXS:
      return iq_kind<DType::IQ2_XXS>(simd, avx2::dot_tile_iq2_xxs);
    case DType::IQ2_XS:
      return iq_kind<DType::IQ2_XS>(simd, avx2::dot_tile_iq2_xs);
    case DType::IQ2_S:
      return iq_kind<DType::IQ2_S>(simd, avx2::dot_tile_iq2_s);
    case DType::IQ3_XXS:
      return iq_kind<DType::IQ3_XXS>(simd, avx2::dot_tile_iq3_xxs);
    case DType::IQ3_S:
      return iq_kind<DType::IQ3_S>(simd, avx2::dot_tile_iq3_s);
    case DType::IQ1_S:
      return iq_kind<DType::IQ1_S>(simd, avx2::dot_tile_iq1_s);
    case DType::IQ1_M:
      return iq_kind<DType::IQ1_M>(simd, avx2::dot_tile_iq1_m);
    default:
      fail("matmul: weight type {} is not supported", dtype_name(weight_type));
  }
}

void check_matmul_args(const Tensor& w, const float* x, int64_t n_tokens, const float* y) {
  if (!w.valid()) fail("matmul: weight tensor '{}' has no data", w.name);
  if (n_tokens < 0) fail("matmul: negative token count {}", n_tokens);
  if (n_tokens > 0 && (x == nullptr || y == nullptr)) fail("matmul: null activation or output buffer");
  const int block = dtype_info(w.type).block_elems;
  if (w.cols() <= 0 || w.cols() % block != 0)
    fail("matmul: tensor '{}' row length {} is not a positive multiple of the {} block size {}", w.name, w.cols(),
         dtype_name(w.type), block);
}

bool hardware_has_avx2() { return cpu_has_avx2_fma_f16c(); }

bool simd_allowed_by_env() {
  const char* v = std::getenv("KVSERVE_NO_SIMD");
  return v == nullptr || v[0] == '\0' || std::strcmp(v, "0") == 0;
}

std::atomic<bool> g_simd_enabled{true};
std::atomic<bool> g_fly_pairs_enabled{true};

// Tokens from which a K-quant call pairs its chunks on the fly (multiply_groups): where the pair kernels'
// gain pays for the pairing copy. Zen 4, 1B-shaped, alternating runs: when this was set (2026-11-28) Q4_K
// and Q6_K lost at 16 tokens (0.92x, 0.87x) and paired from 64 / 128. The pair kernels have since gained
// (Q4_K's vpdpwssd scales, spread block prefetches), and on 2026-12-02 pairing at 16 against 64 / 128
// measured batched decode of 16 sequences Q4_K ~1.2x (6 rounds, 1.15-1.56), Q6_K ~1.3x (4 rounds,
// 1.19-1.57), Q6_K prefill in chunks of 32 ~1.2x (3 rounds); Q4_K at 8 tokens (8 sequences) still lost
// (0.69-0.91x, 4 rounds). Q5_K (against its unpacked kernels) paired from 16 since 2026-11-28.
constexpr int64_t kFlyPairsMinTokens = 16;

bool fly_pairs_enabled() {
  static const bool env_off = env_switch("KVSERVE_FLY_PAIRS") == 0;  // for A/B runs
  return !env_off && g_fly_pairs_enabled.load(std::memory_order_relaxed);
}

std::atomic<bool> g_amx_enabled{true};

bool amx_enabled() { return cpu_has_amx_int8() && g_amx_enabled.load(std::memory_order_relaxed); }

// BF16 weights on the tile unit (bf16_gemm_amx.h), for every token count so that a token's bits do not
// depend on its batch.
bool amx_bf16_enabled() {
  return cpu_has_avx2() && cpu_has_amx_bf16() && g_amx_enabled.load(std::memory_order_relaxed);
}

std::atomic<int> g_bf16_dot{-1};  // -1: the host's default (set_bf16_dot)

// BF16 weights by vdpbf16ps (bf16_dot_tiles_zmm.h) where there is no tile unit for them, for every token
// count as on the tile unit. By default on AMD's cores (Zen 4, Zen 5), not on Intel's: on the Xeon VM (AMX
// turned off) one vdpbf16ps took about two cycles, and the 4 x 6 tiles ran ~0.8x the float tiles (1B-shaped
// BF16, one thread: 2048 x 2048 at 16 and 128 tokens 39-41 against 48-53 G MAC/s; 512-token prefill 68-71
// against 76-96 tok/s). On Zen 4 the other choice is the 256-bit float tiles, which widen each weight and
// take twice the instructions; not measured on an AMD core. KVSERVE_BF16_DOT=0/1 for A/B runs (the sums
// differ).
bool bf16_dot_enabled() {
  static const bool host_default = [] {
    const int forced = env_switch("KVSERVE_BF16_DOT");
    if (forced >= 0) return forced == 1;
    return cpu_amd_family() != 0 && cpu_uses_zmm_path(-1, /*pays_on_split_zmm=*/true);
  }();
  const int set = g_bf16_dot.load(std::memory_order_relaxed);
  const bool on = set >= 0 ? set == 1 : host_default;
  return on && cpu_has_avx512_bf16() && cpu_has_avx2() && !amx_bf16_enabled();
}

// Calls of at least this many tokens take the AMX pair kernels (where amx_enabled()): prefill and large
// mixed steps, in passes of 16 tokens over each L2 chunk. Xeon VM with AMX (2026-12-05), 1B-shaped,
// 512-token prefill, 4 alternating runs against KVSERVE_NO_AMX=1: Q8_0 1.22x, Q4_0 1.14x (1.07x before its
// chunks' quants were unpacked once for all passes: amx_unpacked below), SmolLM2-135M Q4_1 ~1.03x (6 runs,
// noise level). Batched decode stays on the zmm kernels: 16 sequences (one pass of 16 over weights streamed
// from memory) Q4_0 0.96x (6 alternating pairs, every one slower; 0.93x with the prefetch stream), Q8_0
// 0.78-0.87x; 32 sequences Q4_0 ~1.01x.
int64_t amx_min_tokens() {
  static const int64_t n = [] {
    const char* env = std::getenv("KVSERVE_AMX_MIN_TOKENS");  // for A/B runs
    return env != nullptr && env[0] != '\0' ? std::max<int64_t>(1, std::atoll(env)) : int64_t{32};
  }();
  return n;
}

// Weight rows of one thread-local chunk are reused for every token group, so keep a chunk within a
// comfortable share of L2.
constexpr size_t kChunkBytes = 256 * 1024;
constexpr int64_t kMaxChunkRows = 64;
// Output rows per scheduling unit: balancing chunks are multiples of this. Four 8-row groups, the most a
// zmm kernel call takes (two pairs): with two (16 rows), every odd-sized piece of a guided split ended in a
// one-pair call, and one-pair calls were ~13% of batched Q4_0 kernel time at ~0.93x the two-pair rate.
constexpr int64_t kRowGrain = 32;
// Rows are handed to threads in chunks of about this many weight bytes (parallel_for_balanced): small
// enough that the thread the host slows down leaves a short tail, large enough that a claim (one
// compare-and-swap) is noise next to streaming the chunk.
constexpr size_t kBalanceChunkBytes = 32 * 1024;
// A single token's chunks: see balance_chunk_rows.
constexpr size_t kDecodeBalanceChunkBytes = 8 * 1024;
constexpr int64_t kDecodeRowGrain = 2 * kInterleaveRows;
// Below this many activation elements, converting on one thread beats waking the pool.
constexpr int64_t kParallelConvertElems = 1 << 15;

// Rows per tile for a token group: with few tokens more rows keep several FMA chains and weight streams
// going; with 3-4 tokens 2 rows keep the 8 accumulators and unpacked blocks in the 16 registers.
int block32_tile_rows(int n_tok) { return n_tok <= 2 ? avx2::kMaxTileRows : 2; }

// The activations of one call, converted once to the weights' dot type.
struct ConvertedActs {
  DotKind kind;
  bool block32 = false;          // the AVX2 block32 tiles read `pack`; everything else reads `rows`
  bool amx_bf16 = false;         // `rows` is the BF16 tile kernel's packed activations (bf16_gemm_amx.h)
  bool bf16_dot = false;         // `rows` are BF16 rows for the vdpbf16ps tiles (bf16_dot_tiles_zmm.h)
  const uint8_t* rows = nullptr;  // n_tokens rows of row_bytes (x itself for F32)
  size_t row_bytes = 0;
  const ActPack32* pack = nullptr;
  int64_t n_tokens = 0;
};

bool use_block32(DType weight_type) { return cpu_has_avx2() && has_block32_tile(weight_type); }

// Sizes `pack` / `scratch` (which must outlive the result) for n_tokens rows of x converted for weights of
// weight_type; convert_token then fills them row by row, in any order and from any thread.
ConvertedActs prepare_activations(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens, ActPack32& pack,
                                  std::vector<uint8_t>& scratch) {
  ConvertedActs a;
  a.kind = dot_kind(weight_type, cpu_has_avx2());
  a.block32 = use_block32(weight_type);
  a.row_bytes = row_bytes(a.kind.act_type, n_in);
  a.rows = reinterpret_cast<const uint8_t*>(x);
  a.n_tokens = n_tokens;
  if (a.kind.convert == nullptr) return a;
  if (weight_type == DType::BF16 && amx_bf16_enabled()) {
    a.amx_bf16 = true;
    grow_to(scratch, amx::bf16_packed_bytes(n_in, n_tokens));
    a.rows = scratch.data();
    return a;
  }
  if (weight_type == DType::BF16 && bf16_dot_enabled()) {
    a.bf16_dot = true;
    a.kind = {DType::BF16, convert_erased<uint16_t, quantize_row_bf16>,
              scalar_dot_erased<uint16_t, uint16_t, vec_dot_bf16_bf16>, nullptr};
    a.row_bytes = row_bytes(DType::BF16, n_in);
  }
  if (a.block32) {
    // Only the pack is read (the interleaved kernels and the block32 tiles): quantize straight into it.
    pack.reset(a.kind.act_type, n_in, n_tokens);
    a.rows = nullptr;
    a.pack = &pack;
    return a;
  }
  grow_to(scratch, static_cast<int64_t>(a.row_bytes) * n_tokens);
  a.rows = scratch.data();
  return a;
}

// Token t's row of x (n_in floats) into a (prepared by prepare_activations with `pack` and `scratch`).
void convert_token(const ConvertedActs& a, ActPack32& pack, std::vector<uint8_t>& scratch, int64_t t,
                   const float* x_row, int64_t n_in) {
  if (a.kind.convert == nullptr) return;  // the kernels read x itself
  if (a.amx_bf16) {
    amx::pack_bf16_token(x_row, n_in, a.n_tokens, t, scratch.data());
  } else if (a.block32) {
    pack.quantize_avx2(t, x_row);
  } else {
    a.kind.convert(x_row, scratch.data() + t * a.row_bytes, n_in);
  }
}

// Converts into `pack` / `scratch`, which must outlive the result. With a pool, many tokens are
// converted in parallel; without (nullptr), on this thread.
ConvertedActs convert_activations_into(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens,
                                       ThreadPool* pool, ActPack32& pack, std::vector<uint8_t>& scratch) {
  const ConvertedActs a = prepare_activations(weight_type, x, n_in, n_tokens, pack, scratch);
  if (a.kind.convert == nullptr) return a;
  auto convert_tokens = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) convert_token(a, pack, scratch, t, x + t * n_in, n_in);
  };
  if (pool != nullptr && n_tokens > 1 && n_tokens * n_in >= kParallelConvertElems) {
    pool->parallel_for(n_tokens, convert_tokens);
  } else {
    convert_tokens(0, n_tokens);
  }
  return a;
}

// Reuses thread-local buffers so decode does not allocate; matmuls are issued from one thread at a time.
ConvertedActs convert_activations(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens,
                                  ThreadPool& pool) {
  thread_local std::vector<uint8_t> scratch;
  thread_local ActPack32 pack;
  return convert_activations_into(weight_type, x, n_in, n_tokens, &pool, pack, scratch);
}

// Interleaved rows [row_begin, row_end) (within the grouped rows). A group inside the range stores
// straight into y; a group cut by the range edge is computed whole into a scratch tile and only the
// range's rows are copied.
void multiply_groups(const Tensor& w, const ConvertedActs& a, float* y, int64_t row_begin, int64_t row_end) {
  const int64_t n_in = w.cols();
  const int64_t n_out = w.rows();
  const size_t group_bytes = interleaved_group_bytes(w.type, n_in);
  constexpr int kTok = std::max({avx2::kMaxInterleavedTokens, avx512zmm::kMaxZmmTokens, amx::kMaxAmxTokens});
  const bool vnni = cpu_has_avx512_vnni();
  // The 8-row kernels with vpdpbusd: AVX-512's (EVEX, 32 registers) where the core has them, else AVX-VNNI's
  // (VEX, 16), else the AVX2 ones.
  const bool avx_vnni = !vnni && cpu_has_avx_vnni();
  const bool dp = vnni || avx_vnni;
  const auto pick = [&](auto avx512, auto avx, auto avx2_fn) { return vnni ? avx512 : avx_vnni ? avx : avx2_fn; };
  const bool k_quant = w.type == DType::Q4_K || w.type == DType::Q5_K || w.type == DType::Q6_K;
  const bool iq4_xs = w.type == DType::IQ4_XS;
  // Q2_K and Q3_K: Q6_K's kernels over their own records (in the pair layout where the K-quants take it;
  // never paired on the fly).
  const bool k16 = w.type == DType::Q2_K || w.type == DType::Q3_K;
  // The kernels' activation operands for tokens [t0, t0 + n_tok), made once per pass over a chunk (made
  // per call, ActPack32::token's by-value copies cost ~3% of batched decode in store-forwarding stalls).
  struct PassActs {
    PackedActs32 packed[kTok];
    const BlockQ8_K* q8_k[kTok];
  };
  const auto pass_acts = [&](int64_t t0, int n_tok, PassActs& p) {
    for (int t = 0; t < n_tok; ++t) {
      if (k_quant || iq4_xs || k16) {
        p.q8_k[t] = reinterpret_cast<const BlockQ8_K*>(a.rows + (t0 + t) * a.row_bytes);
      } else {
        p.packed[t] = a.pack->token(t0 + t);
      }
    }
  };
  // Groups [0, paired_end) are in pairs (interleaved_rows.h): the 512-bit pair kernels take them, a pair at
  // least per call; a last odd group keeps the group layout. (Weights are paired where the core runs
  // 512-bit registers at full width: bench_cpu_peak KernelZmm against KernelVnni, Zen 5: Q4_0 ~370
  // against ~205 G MAC/s, Q5_K ~305 against ~146.)
  const bool pairs = w.interleaved_pairs;
  if (pairs && !vnni) fail("matmul: tensor '{}' is repacked in pairs, which needs AVX512-VNNI", w.name);
  // The 32-element block types' pairs with their integer products on the AMX tile unit, for calls of
  // several tokens (interleaved_pairs_amx.cpp; the same bits as the zmm kernels).
  const bool amx = pairs && a.n_tokens >= amx_min_tokens() && amx_enabled() &&
                   (w.type == DType::Q4_0 || w.type == DType::Q4_1 || w.type == DType::Q5_0 ||
                    w.type == DType::IQ4_NL || w.type == DType::MXFP4 || w.type == DType::Q8_0);
  const int64_t paired_end = pairs ? interleaved_paired_groups(n_out) : 0;
  // Q5_K and Q6_K over several tokens: each chunk's quants are unpacked to bytes once (k_unpacked, groups
  // from k_first on) and every pass reads them from there. With vpdpbusd the packed kernels take 6 tokens
  // a pass, so the unpacking pays only where a chunk gets many passes, and only Q5_K's (its bit planes):
  // 1B-shaped, alternating KVSERVE_NO_K_UNPACK, Q5_K prefill 1.33x at 512-token chunks, 1.08x at 48,
  // ~1.02x at 24, batched decode of 16 sequences ~0.93x; Q6_K 0.8x at 24, 0.88x at 48, ~1.0-1.05x at
  // 128-512.
  // AVX-VNNI's packed Q6_K kernel takes only 3 tokens a pass (kQ6KPassTokens), so there Q6_K unpacks past
  // 3 tokens as on AVX2, into the AVX2 unpacked kernel (6 tokens a pass): Xeon, KVSERVE_NO_AVX512=1,
  // 1B-shaped Q6_K, alternating runs: 512-token prefill ~1.13x (4 pairs, 1.06-1.25x), 16 x 128-token prefill
  // ~1.2x (5 pairs), batched decode of 16 sequences unchanged, of 32 ~1.06x (3 of 4 pairs faster). A vpdpbusd
  // twin of the unpacked kernel ran slower than it at passes of 2, 3, 4 or 6 tokens (16 registers).
  static const bool no_k_unpack = std::getenv("KVSERVE_NO_K_UNPACK") != nullptr;  // for A/B runs
  const bool q5 = w.type == DType::Q5_K;
  // K-quant weights kept in the group layout (where the one-token pair kernels decode slower: Zen 4), in
  // a call of many tokens: each chunk's groups are paired into a scratch copy once and every pass runs the
  // 512-bit pair kernels on it (bit-identical to the group kernels). The copy costs about one read and
  // write of the chunk, against 64 passes of 8 tokens in a 512-token prefill.
  const bool fly = !pairs && vnni && k_quant && a.n_tokens >= kFlyPairsMinTokens && fly_pairs_enabled();
  const bool k_unpack = !pairs && !fly && !no_k_unpack &&
                        (q5 ? a.n_tokens > (dp ? 16 : 3) : w.type == DType::Q6_K && !vnni && a.n_tokens > 3);
  thread_local std::vector<uint8_t> k_unpacked;
  int64_t k_first = 0;
  const size_t k_group_unpacked = static_cast<size_t>(n_in / kQK_K) * kUnpackedKBlockBytes;
  thread_local std::vector<uint8_t> fly_pairs;  // groups [fly_first, fly_end) of the chunk, paired
  // The AMX kernels over many passes of a chunk (prefill): its pairs' quants put in B's layout once
  // (amx::unpack_pairs) and every pass reads them from there; Q8_0's records are B already. 1B-shaped Q4_0
  // 512-token prefill 1.066x (4 alternating runs against KVSERVE_AMX_UNPACK=0, every pair 1.06-1.07x).
  thread_local std::vector<int8_t> amx_unpacked_storage;
  const int8_t* amx_unpacked = nullptr;  // groups [amx_first, amx_end) of the chunk, 64-byte aligned
  static const bool amx_unpack = env_switch("KVSERVE_AMX_UNPACK") != 0;  // for A/B runs
  int64_t amx_first = 0, amx_end = 0;
  int64_t fly_first = 0, fly_end = 0;
  // One kernel call: n_groups groups from `group` times the pass's n_tok tokens (whole pairs when `paired`).
  const auto gemm = [&](const uint8_t* group, int n_groups, bool paired, const PassActs& p, int n_tok, float* out,
                        int64_t stride, const uint8_t* far) {
    // The call's first group, for the per-chunk copies (on-the-fly pairs, unpacked K quants).
    const int64_t g = (group - static_cast<const uint8_t*>(w.interleaved)) / static_cast<int64_t>(group_bytes);
    if (fly && n_groups == 2) {
      if (g >= fly_first && g + 2 <= fly_end && (g - fly_first) % 2 == 0) {
        const auto fn = w.type == DType::Q4_K   ? avx512zmm::gemm_pairs_q4_K
                        : w.type == DType::Q5_K ? avx512zmm::gemm_pairs_q5_K
                                                : avx512zmm::gemm_pairs_q6_K;
        fn(n_in, fly_pairs.data() + static_cast<size_t>(g - fly_first) * group_bytes, 1, p.q8_k, n_tok, out, stride, far);
        return;
      }
    }
    if (k_unpack) {
      const uint8_t* unpacked = k_unpacked.data() + static_cast<size_t>(g - k_first) * k_group_unpacked;
      const auto fn = q5 ? pick(avx512vnni::gemm_interleaved_q5_K_unpacked, avxvnni::gemm_interleaved_q5_K_unpacked,
                                avx2::gemm_interleaved_q5_K_unpacked)
                         : avx2::gemm_interleaved_q6_K_unpacked;
      fn(n_in, group, n_groups, unpacked, p.q8_k, n_tok, out, stride, far);
      return;
    }
    if (paired) {
      if (k_quant) {
        const auto fn = w.type == DType::Q4_K   ? avx512zmm::gemm_pairs_q4_K
                        : w.type == DType::Q5_K ? avx512zmm::gemm_pairs_q5_K
                                                : avx512zmm::gemm_pairs_q6_K;
        fn(n_in, group, n_groups / 2, p.q8_k, n_tok, out, stride, far);
      } else if (k16 || iq4_xs) {
        const auto fn = w.type == DType::Q3_K   ? avx512zmm::gemm_pairs_q3_K
                        : w.type == DType::Q2_K ? avx512zmm::gemm_pairs_q2_K
                                                : avx512zmm::gemm_pairs_iq4_xs;
        fn(n_in, group, n_groups / 2, p.q8_k, n_tok, out, stride, far);
      } else if (amx) {
        const auto fn = w.type == DType::Q4_0     ? amx::gemm_pairs_q4_0
                        : w.type == DType::Q4_1   ? amx::gemm_pairs_q4_1
                        : w.type == DType::Q5_0   ? amx::gemm_pairs_q5_0
                        : w.type == DType::IQ4_NL ? amx::gemm_pairs_iq4_nl
                        : w.type == DType::MXFP4  ? amx::gemm_pairs_mxfp4
                                                  : amx::gemm_pairs_q8_0;
        const int8_t* unpacked =
            amx_unpacked != nullptr && g >= amx_first && g + n_groups <= amx_end
                ? amx_unpacked + (g - amx_first) / 2 * (n_in / 32) * static_cast<int64_t>(amx::kUnpackedBlockBytes)
                : nullptr;
        fn(n_in, group, n_groups / 2, p.packed, n_tok, out, stride, far, unpacked);
      } else {
        const auto fn = w.type == DType::Q4_0     ? avx512zmm::gemm_pairs_q4_0
                        : w.type == DType::Q4_1   ? avx512zmm::gemm_pairs_q4_1
                        : w.type == DType::Q5_0   ? avx512zmm::gemm_pairs_q5_0
                        : w.type == DType::IQ4_NL ? avx512zmm::gemm_pairs_iq4_nl
                        : w.type == DType::MXFP4  ? avx512zmm::gemm_pairs_mxfp4
                                                  : avx512zmm::gemm_pairs_q8_0;
        fn(n_in, group, n_groups / 2, p.packed, n_tok, out, stride, far);
      }
      return;
    }
    // The 8-row kernels take up to kMaxInterleavedTokens: the pair layout's last odd group comes here in
    // passes of the pair kernels' tokens.
    constexpr int kGroupTokens = avx2::kMaxInterleavedTokens;
    for (int t0 = 0; t0 < n_tok; t0 += kGroupTokens) {
      const int n = std::min(kGroupTokens, n_tok - t0);
      const uint8_t* f = t0 == 0 ? far : nullptr;
      if (iq4_xs || k16) {
        const auto fn =
            iq4_xs ? pick(avx512vnni::gemm_interleaved_iq4_xs, avxvnni::gemm_interleaved_iq4_xs,
                          avx2::gemm_interleaved_iq4_xs)
            : w.type == DType::Q3_K
                ? pick(avx512vnni::gemm_interleaved_q3_K, avxvnni::gemm_interleaved_q3_K, avx2::gemm_interleaved_q3_K)
                : pick(avx512vnni::gemm_interleaved_q2_K, avxvnni::gemm_interleaved_q2_K, avx2::gemm_interleaved_q2_K);
        fn(n_in, group, n_groups, p.q8_k + t0, n, out + t0 * stride, stride, f);
      } else if (k_quant) {
        const auto fn =
            w.type == DType::Q4_K
                ? pick(avx512vnni::gemm_interleaved_q4_K, avxvnni::gemm_interleaved_q4_K, avx2::gemm_interleaved_q4_K)
            : w.type == DType::Q5_K
                ? pick(avx512vnni::gemm_interleaved_q5_K, avxvnni::gemm_interleaved_q5_K, avx2::gemm_interleaved_q5_K)
                : pick(avx512vnni::gemm_interleaved_q6_K, avxvnni::gemm_interleaved_q6_K, avx2::gemm_interleaved_q6_K);
        fn(n_in, group, n_groups, p.q8_k + t0, n, out + t0 * stride, stride, f);
      } else {
        const auto fn =
            w.type == DType::Q4_0
                ? pick(avx512vnni::gemm_interleaved_q4_0, avxvnni::gemm_interleaved_q4_0, avx2::gemm_interleaved_q4_0)
            : w.type == DType::Q4_1
                ? pick(avx512vnni::gemm_interleaved_q4_1, avxvnni::gemm_interleaved_q4_1, avx2::gemm_interleaved_q4_1)
            : w.type == DType::Q5_0
                ? pick(avx512vnni::gemm_interleaved_q5_0, avxvnni::gemm_interleaved_q5_0, avx2::gemm_interleaved_q5_0)
            : w.type == DType::IQ4_NL ? pick(avx512vnni::gemm_interleaved_iq4_nl, avxvnni::gemm_interleaved_iq4_nl,
                                             avx2::gemm_interleaved_iq4_nl)
            : w.type == DType::MXFP4
                ? pick(avx512vnni::gemm_interleaved_mxfp4, avxvnni::gemm_interleaved_mxfp4,
                       avx2::gemm_interleaved_mxfp4)
                : pick(avx512vnni::gemm_interleaved_q8_0, avxvnni::gemm_interleaved_q8_0, avx2::gemm_interleaved_q8_0);
        fn(n_in, group, n_groups, p.packed + t0, n, out + t0 * stride, stride, f);
      }
    }
  };
  // Whole calls per chunk (when more than one group fits), so batched passes give every call its most
  // groups: down-projection rows of 8192 columns fit 7 per chunk, and the odd one ran alone at ~0.85x the
  // rate (ymm); with the zmm kernels' 4 groups a call the chunk rounds to the nearest multiple of 4 (8
  // there, 12% over kChunkBytes), else 6 made a two-pair and a one-pair call.
  // The pair kernels take 4 groups a call, the 8-row ones 2.
  const int64_t call_groups = pairs ? avx512zmm::kMaxZmmGroups : avx2::kMaxInterleavedGroups;
  constexpr int64_t kPair = avx2::kMaxInterleavedGroups;
  const auto fit = static_cast<int64_t>(kChunkBytes / group_bytes);
  // Chunks start on a pair (and so are whole pairs) in the pair layout.
  const int64_t chunk_groups = fit >= call_groups     ? (fit + call_groups / 2) / call_groups * call_groups
                               : fit >= kPair || pairs ? std::max(fit / kPair, int64_t{1}) * kPair
                                                       : 1;
  int64_t g_begin = row_begin / kInterleaveRows;
  if (g_begin < paired_end) g_begin -= g_begin % 2;
  const int64_t g_end = (row_end + kInterleaveRows - 1) / kInterleaveRows;
  // Tokens per pass over a chunk: Q4's 6-token kernel does ~1.1x the work per ns of its 4-token one (the
  // group's loads and nibble unpacking are shared by more tokens); Q8_0's gains nothing past 4 (its
  // per-token sign fix-ups fill the registers: bench_cpu_peak Kernel/*).
  // (With vpdpbusd, Q8_0 at 4 tokens is still ~1.05x its 6: KernelVnni/Q8_0/g2.)
  // The pair kernels take 8 tokens per pass for every type (Q4_0 t8 ~ t6, Q8_0 t8 1.16x t4; 16 sequences
  // are then two even passes) and up to two pairs per call, which share each broadcast activation
  // (bench_matmul Q4_0 16 tokens 1.05x over one pair; KernelZmm Q8_0 g4/t8 376 against 310 G MAC/s at g2).
  // Except Q4_0 in the pair layout, at 6: its 2 pairs x 6 tokens of sums and accumulators fit in the
  // registers (at 8 GCC kept 12 of the 16 accumulators on the stack). 1B-shaped, 5 alternating pairs:
  // batched decode (16 sequences, passes of 6, 6, 4) 1.024x, prefill 1.06x. Q8_0 and SmolLM2's Q4_1 did
  // worse at 6 (batched decode 0.93-0.96x): their chunks' third pass from L2 costs more than it saves.
  const int64_t max_groups_per_call = call_groups;
  const int64_t pass_tokens = amx                              ? amx::kMaxAmxTokens
                              : k_unpack                       ? kUnpackedKPassTokens
                              : pairs && w.type == DType::Q4_0 ? 6
                              : iq4_xs && !pairs               ? kIQ4XSPassTokens
                              : pairs && w.type == DType::Q2_K ? 6  // its pair kernel's passes
                              : pairs || fly                   ? avx512zmm::kMaxZmmTokens
                              : w.type == DType::Q8_0          ? 4
                                                               : avx2::kMaxInterleavedTokens;
  const auto* base = static_cast<const uint8_t*>(w.interleaved);
  // With more than one pass, the first pass over a chunk would read it from memory at the kernel's full
  // rate (both cores together at about the triad bandwidth) and the later ones not at all: instead every
  // call asks for its share of the next chunk into L2, so the reads are spread over all the passes
  // (1B-shaped, 16 sequences: batched decode 1.09x at Q4_0, 1.20x at Q8_0, 1.10x at Q4_K, 1.16x at Q5_K;
  // prefill unchanged). Each call's share is sized by the type (far_prefetch_bytes) so that the two passes
  // of 16 sequences cover the whole next chunk.
  // The AMX kernels stream for every pair of a call (a call's share is two pairs' worth): the tile unit
  // waits for each weight load it issues, and a Q8_0 pair's quants are loaded straight from the weights
  // (1B-shaped 512-token prefill against the zmm kernels: Q8_0 1.13x with one share a call, 1.25x with two).
  const bool spread = a.n_tokens > pass_tokens;
  const size_t far_per_call =
      static_cast<size_t>(n_in / 32) * far_prefetch_bytes(w.type) * (amx ? avx512zmm::kMaxZmmPairs : 1);
  // At that rate the pair kernels (4 groups a call) cover a chunk in two passes, the 8-row kernels (2 groups)
  // in one, and prefill makes many passes: only as many calls as the chunk needs carry the stream, spread
  // evenly over all its calls. (AVX2 Q8_0 had read the whole next chunk during the first of its four passes
  // of 16 sequences: Zen 3, 2 threads, in-process alternation over 8 cold copies, 40 pairs: 8192 x 2048
  // 1.01-1.03x, 2048 x 8192 1.04-1.06x (medians); Q4_0 (three passes) 1.00x; batched decode 1.02 +- 0.03x.)
  const int64_t n_passes = (a.n_tokens + pass_tokens - 1) / pass_tokens;
  for (int64_t chunk = g_begin; chunk < g_end; chunk += chunk_groups) {
    const int64_t chunk_end = std::min(g_end, chunk + chunk_groups);
    // The next chunk's groups, within the weights (the rows past row_end are most likely this thread's
    // next range).
    const int64_t next_end = std::min(n_out / kInterleaveRows, chunk_end + chunk_groups);
    const size_t far_bytes = static_cast<size_t>(std::max<int64_t>(0, next_end - chunk_end)) * group_bytes;
    if (k_unpack) {
      k_first = chunk;
      grow_to(k_unpacked, (chunk_end - chunk) * static_cast<int64_t>(k_group_unpacked));
      (q5 ? avx2::unpack_q5_K_groups : avx2::unpack_q6_K_groups)(n_in, base + chunk * group_bytes,
                                                                 static_cast<int>(chunk_end - chunk), k_unpacked.data());
    }
    if (amx && n_passes > 1 && w.type != DType::Q8_0 && chunk < paired_end && amx_unpack) {
      amx_first = chunk;
      amx_end = std::min(chunk_end, paired_end);
      const auto bytes = static_cast<size_t>((amx_end - amx_first) / 2 * (n_in / 32)) * amx::kUnpackedBlockBytes;
      grow_to(amx_unpacked_storage, static_cast<int64_t>(bytes + 64));
      auto* aligned =
          reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(amx_unpacked_storage.data()) + 63) & ~uintptr_t{63});
      amx::unpack_pairs(w.type, n_in, base + chunk * group_bytes, static_cast<int>((amx_end - amx_first) / 2), aligned);
      amx_unpacked = aligned;
    } else {
      amx_unpacked = nullptr;
    }
    if (fly) {
      fly_first = chunk;
      fly_end = chunk + (chunk_end - chunk) / 2 * 2;
      grow_to(fly_pairs, (fly_end - fly_first) * static_cast<int64_t>(group_bytes));
      for (int64_t g = fly_first; g < fly_end; g += 2)
        pair_two_groups(w.type, n_in, base + g * group_bytes, fly_pairs.data() + (g - fly_first) * group_bytes);
    }
    size_t far_done = 0;
    // This chunk's calls so far, about how many it makes in all, and how many must carry the stream: those
    // are spread evenly over all of them.
    int64_t call_index = 0;
    const int64_t total_calls = n_passes * ((chunk_end - chunk + max_groups_per_call - 1) / max_groups_per_call);
    const auto needed_calls = static_cast<int64_t>((far_bytes + far_per_call - 1) / std::max<size_t>(1, far_per_call));
    const auto far = [&]() -> const uint8_t* {
      const int64_t c = call_index++;
      if (!spread || far_done >= far_bytes) return nullptr;
      if ((c + 1) * needed_calls / total_calls == c * needed_calls / total_calls) return nullptr;
      const uint8_t* p = base + chunk_end * group_bytes + far_done;
      far_done += far_per_call;
      return p;
    };
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += pass_tokens) {
      const int n_tok = static_cast<int>(std::min(pass_tokens, a.n_tokens - t0));
      PassActs pass;
      pass_acts(t0, n_tok, pass);
      for (int64_t g = chunk; g < chunk_end;) {
        const int64_t r0 = g * kInterleaveRows;
        const bool paired = g < paired_end;
        const int64_t unit = paired ? 2 : 1;  // groups the smallest call takes here
        if (r0 >= row_begin && r0 + unit * kInterleaveRows <= row_end) {
          // Several groups per call when they lie inside the range: they share each broadcast activation.
          // Decode (one token) keeps one group (or pair) per call: it waits on memory, not on the kernel,
          // and one stream through memory did better than two (1B Q4_0 batch-1 decode, one pair a call:
          // ~1.1x two pairs).
          int64_t n_groups =
              n_tok == 1 ? unit : std::min({max_groups_per_call, chunk_end - g, (row_end - r0) / kInterleaveRows});
          if (paired) n_groups = std::min(n_groups, paired_end - g) / 2 * 2;
          gemm(base + g * group_bytes, static_cast<int>(n_groups), paired, pass, n_tok, y + t0 * n_out + r0, n_out,
               far());
          g += n_groups;
          continue;
        }
        // A group (or pair) cut by the range's edge: whole into a scratch tile, then the range's rows.
        constexpr int kMaxUnitRows = 2 * kInterleaveRows;
        const int unit_rows = static_cast<int>(unit) * kInterleaveRows;
        float out[kMaxUnitRows * kTok];
        gemm(base + g * group_bytes, static_cast<int>(unit), paired, pass, n_tok, out, unit_rows, nullptr);
        const int i_begin = static_cast<int>(std::max<int64_t>(0, row_begin - r0));
        const int i_end = static_cast<int>(std::min<int64_t>(unit_rows, row_end - r0));
        for (int t = 0; t < n_tok; ++t)
          for (int i = i_begin; i < i_end; ++i) y[(t0 + t) * n_out + r0 + i] = out[t * unit_rows + i];
        g += unit;
      }
    }
  }
}

// The i-quants below 4 bits over more tokens than one tile takes: their grid lookups cost several times a
// token's dot, so each chunk of rows is decoded once (iquants.h) and every group of tokens then multiplies
// the decoded rows. The arithmetic per token is the tiles', so results do not depend on the batch.
void multiply_rows_decoded(const Tensor& w, const ConvertedActs& a, float* y, int64_t row_begin, int64_t row_end,
                           int64_t chunk_rows) {
  const int64_t n_in = w.cols();
  const int64_t n_out = w.rows();
  const int64_t nb = n_in / kQK_K;
  const IQDecodeFn decode = avx2::iq_decoder(w.type);
  const auto block_bytes = static_cast<size_t>(dtype_info(w.type).block_bytes);
  thread_local std::vector<DecodedIQBlock> decoded;
  grow_to(decoded, chunk_rows * nb);
  for (int64_t chunk = row_begin; chunk < row_end; chunk += chunk_rows) {
    const int64_t chunk_end = std::min(row_end, chunk + chunk_rows);
    for (int64_t r = chunk; r < chunk_end; ++r) {
      const auto* row = static_cast<const uint8_t*>(w.row(r));
      for (int64_t i = 0; i < nb; ++i)
        decode(row + static_cast<size_t>(i) * block_bytes, decoded[static_cast<size_t>((r - chunk) * nb + i)]);
    }
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += avx2::kMaxTileTokens) {
      const int n_tok = static_cast<int>(std::min<int64_t>(avx2::kMaxTileTokens, a.n_tokens - t0));
      const void* act_rows[avx2::kMaxTileTokens];
      for (int t = 0; t < n_tok; ++t) act_rows[t] = a.rows + (t0 + t) * a.row_bytes;
      for (int64_t r = chunk; r < chunk_end; ++r) {
        float out[avx2::kMaxTileTokens];
        avx2::dot_tile_iq_decoded(n_in, &decoded[static_cast<size_t>((r - chunk) * nb)], act_rows, n_tok, out);
        for (int t = 0; t < n_tok; ++t) y[(t0 + t) * n_out + r] = out[t];
      }
    }
  }
}

// The same types over more tokens than one tile takes where vpdpbusd is there (iquants_gemm_*.cpp): each chunk
// of rows decoded once (up to kCodedChunkBytes of CodedIQBlock), the tokens put in the lanes once per group
// (once per call where that is all of them), then 4 x lanes products a vpdpbusd. AVX512-VNNI puts 16 tokens
// in the lanes of a zmm, or 8 in a ymm for batches of 5 to 8; AVX-VNNI (no AVX-512) 8. Their float step per
// block is the tiles' (iq_accumulate), so a token's result does not depend on its batch. 1B-shaped IQ3_XXS
// prefill of 512 tokens ran 2x an int16 vpdpwssd kernel over the same decoded rows (Xeon VM, 2 threads,
// 2026-12-06).
constexpr size_t kCodedChunkBytes = 512 * 1024;

struct IQLaneKernel {
  int lanes;
  void (*decode)(DType, const void*, int64_t, CodedIQBlock*);
  void (*to_lanes)(const uint8_t*, size_t, int, int64_t, IQTokenLanes&);
  void (*gemm)(DType, int64_t, const CodedIQBlock*, int, const IQTokenLanes&, float*);
};

// The lanes kernel for a call of n_tokens (> kMaxTileTokens), or none (lanes 0) without vpdpbusd.
IQLaneKernel iq_lane_kernel(int64_t n_tokens) {
  if (cpu_has_avx512_vnni())
    return n_tokens > 8
               ? IQLaneKernel{16, avx512vnni::decode_iq_coded, avx512vnni::tokens_to_lanes, avx512vnni::gemm_iq_coded}
               : IQLaneKernel{8, avx512vnni::decode_iq_coded, avx512vnni::tokens_to_lanes8, avx512vnni::gemm_iq_coded8};
  if (cpu_has_avx_vnni()) return {8, avxvnni::decode_iq_coded, avxvnni::tokens_to_lanes8, avxvnni::gemm_iq_coded8};
  return {0, nullptr, nullptr, nullptr};
}

void multiply_rows_iq_lanes(const IQLaneKernel& k, const Tensor& w, const ConvertedActs& a, float* y, int64_t row_begin,
                            int64_t row_end) {
  constexpr int kMaxLanes = 16;
  const int64_t n_in = w.cols();
  const int64_t n_out = w.rows();
  const int64_t nb = n_in / kQK_K;
  const int64_t chunk_rows = std::clamp<int64_t>(
      static_cast<int64_t>(kCodedChunkBytes / (static_cast<size_t>(nb) * sizeof(CodedIQBlock))), 1, kMaxChunkRows);
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  thread_local std::vector<CodedIQBlock> coded;
  thread_local std::vector<Line> lanes_q, lanes_bias, lanes_d;
  grow_to(coded, chunk_rows * nb);
  grow_to(lanes_q, n_in * kMaxLanes / 64);
  grow_to(lanes_bias, n_in / 16);  // up to 16 int32 a sub-block
  grow_to(lanes_d, nb);            // up to 16 floats a block
  IQTokenLanes lanes{reinterpret_cast<int8_t*>(lanes_q.data()), reinterpret_cast<int32_t*>(lanes_bias.data()),
                     reinterpret_cast<float*>(lanes_d.data())};
  auto to_lanes = [&](int64_t t0) {
    const int n_tok = static_cast<int>(std::min<int64_t>(k.lanes, a.n_tokens - t0));
    k.to_lanes(a.rows + t0 * a.row_bytes, a.row_bytes, n_tok, n_in, lanes);
  };
  const bool one_group = a.n_tokens <= k.lanes;
  if (one_group) to_lanes(0);
  float out[kMaxChunkRows * kMaxLanes];
  for (int64_t chunk = row_begin; chunk < row_end; chunk += chunk_rows) {
    const int64_t chunk_end = std::min(row_end, chunk + chunk_rows);
    const int n_rows = static_cast<int>(chunk_end - chunk);
    for (int64_t r = chunk; r < chunk_end; ++r)
      k.decode(w.type, w.row(r), n_in, &coded[static_cast<size_t>((r - chunk) * nb)]);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += k.lanes) {
      if (!one_group) to_lanes(t0);
      k.gemm(w.type, n_in, coded.data(), n_rows, lanes, out);
      const int n_tok = static_cast<int>(std::min<int64_t>(k.lanes, a.n_tokens - t0));
      for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < n_rows; ++r) y[(t0 + t) * n_out + chunk + r] = out[r * k.lanes + t];
    }
  }
}

using FloatTilesFn = void (*)(int64_t k_begin, int64_t k_end, const void* const* w, int n_rows, const void* const* a,
                              int n_tok, float* lanes, float* out);

// The 512-bit float tiles for a kind whose 256-bit tile is one of the float tiles, where the core runs
// 512-bit registers at full width (KVSERVE_ZMM_FLOAT=0/1 overrides, for A/B runs: the sums differ); else
// nullptr.
FloatTilesFn zmm_float_tiles(const DotKind& kind) {
  static const bool zmm = cpu_uses_zmm_path(env_switch("KVSERVE_ZMM_FLOAT"), /*pays_on_split_zmm=*/false);
  if (!zmm) return nullptr;
  if (kind.avx2_tile == avx2::dot_tile_f32) return avx512zmm::accumulate_float_tiles_f32;
  if (kind.avx2_tile == avx2::dot_tile_f16_wide) return avx512zmm::accumulate_float_tiles_f16_wide;
  if (kind.avx2_tile == avx2::dot_tile_bf16_wide) return avx512zmm::accumulate_float_tiles_bf16_wide;
  return nullptr;
}

// A kind of 4 x 6 tiles of 16 lane sums per output: the float tiles (16 values a step, float activations)
// or the BF16 dot tiles (32 values a step, BF16 activations).
struct ZmmTiles {
  FloatTilesFn accumulate;
  int64_t k_step;     // ranges of a row start at multiples of it
  int64_t act_bytes;  // bytes of one activation value
};

// Activation bytes of one group of tokens that a pass over a chunk's rows keeps in L1: past them the row
// is taken in ranges, each range over all the chunk's rows before the next.
constexpr int64_t kFloatTileActBytes = 24 * 1024;

// The float tiles' L2 chunk in calls of many tokens: 32-64 rows of an 8192-column F16 / F32 weight, whose
// ranges each serve 8-16 tiles before the next range (1B-shaped F16, 128 tokens, 2048 x 8192: 38 ms with
// 256 KiB chunks, 32 with 1 MiB; F32 51 and 39; 512-token prefill ~1.05x). At 16 tokens (3 passes of a chunk)
// 256 KiB did better (F16 3.8 against 4.5 ms).
constexpr size_t kFloatTileLongChunkBytes = 1024 * 1024;
constexpr int64_t kFloatTileLongChunkMinTokens = 32;

// Rows [row_begin, row_end) through 512-bit tiles (the float tiles or the BF16 dot tiles): kMaxFloatTileRows rows x
// kMaxFloatTileTokens tokens a call over each L2 chunk. Each output's 16 lane sums wait in `lanes` between ranges, so
// the ranges leave its bits as they are; the last range sums them into the output.
void multiply_rows_zmm_tiles(const ZmmTiles& tiles, const Tensor& w, const ConvertedActs& a, float* y,
                             int64_t row_begin, int64_t row_end) {
  constexpr int kRows = avx512zmm::kMaxFloatTileRows, kTok = avx512zmm::kMaxFloatTileTokens;
  constexpr int kLanes = avx512zmm::kFloatTileLanes;
  const int64_t n_in = w.cols(), n_out = w.rows(), n_tokens = a.n_tokens;
  const size_t chunk_bytes = n_tokens > kFloatTileLongChunkMinTokens ? kFloatTileLongChunkBytes : kChunkBytes;
  const int64_t chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(chunk_bytes / w.row_size()), 1, kMaxChunkRows);
  thread_local std::vector<float> lanes;
  grow_to(lanes, static_cast<size_t>(kMaxChunkRows * kTok * kLanes));
  for (int64_t chunk = row_begin; chunk < row_end; chunk += chunk_rows) {
    const int64_t chunk_end = std::min(row_end, chunk + chunk_rows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTok) {
      const int n_tok = static_cast<int>(std::min<int64_t>(kTok, n_tokens - t0));
      const void* act_rows[kTok];
      for (int t = 0; t < n_tok; ++t) act_rows[t] = a.rows + (t0 + t) * a.row_bytes;
      // One token streams each row whole: ranges would turn the rows' streams into short jumps. Else the
      // fewest ranges of about one length whose activations fit kFloatTileActBytes (1B-shaped F16 at 128
      // tokens on the Xeon VM, 2048 x 2048: 8.6 ms whole, 7.9 in two ranges, 8.4 in three).
      const int64_t n_ranges =
          n_tok == 1 ? 1 : (n_tok * n_in * tiles.act_bytes + kFloatTileActBytes - 1) / kFloatTileActBytes;
      const int64_t range = ((n_in + n_ranges - 1) / n_ranges + tiles.k_step - 1) / tiles.k_step * tiles.k_step;
      for (int64_t k0 = 0; k0 < n_in; k0 += range) {
        const int64_t k1 = std::min(n_in, k0 + range);
        for (int64_t r = chunk; r < chunk_end; r += kRows) {
          const int n_rows = static_cast<int>(std::min<int64_t>(kRows, chunk_end - r));
          const void* w_rows[kRows];
          for (int i = 0; i < n_rows; ++i) w_rows[i] = w.row(r + i);
          float out[kRows * kTok];
          tiles.accumulate(k0, k1, w_rows, n_rows, act_rows, n_tok, lanes.data() + (r - chunk) * n_tok * kLanes,
                           k1 == n_in ? out : nullptr);
          if (k1 < n_in) continue;
          for (int i = 0; i < n_rows; ++i)
            for (int t = 0; t < n_tok; ++t) y[(t0 + t) * n_out + r + i] = out[i * n_tok + t];
        }
      }
    }
  }
}

// y rows [row_begin, row_end) for every token. A chunk of weight rows that fits in L2 is multiplied with
// every group of tokens before moving on, so each weight byte comes from memory once per call.
void multiply_rows(const Tensor& w, const ConvertedActs& a, float* y, int64_t row_begin, int64_t row_end) {
  if (a.amx_bf16) {
    amx::gemm_bf16(w.row(0), w.row_size(), w.cols(), w.rows(), a.rows, a.n_tokens, y, row_begin, row_end);
    return;
  }
  if (a.bf16_dot) {
    multiply_rows_zmm_tiles({avx512zmm::accumulate_bf16_dot_tiles, avx512zmm::kBf16DotStep, 2}, w, a, y, row_begin,
                            row_end);
    return;
  }
  const int64_t n_in = w.cols();
  const int64_t n_out = w.rows();
  const int64_t n_tokens = a.n_tokens;
  const size_t w_row_bytes = w.row_size();
  const int64_t chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(kChunkBytes / w_row_bytes), 1, kMaxChunkRows);
  // The K-quant interleaved kernels read the Q8_K rows themselves; the others the block32 pack.
  const bool interleaved = w.interleaved != nullptr && (a.block32 || (a.kind.act_type == DType::Q8_K && cpu_has_avx2()));
  if (interleaved) {
    // Rows below the last multiple of 8 always go through the interleaved kernel (a row's numerics must
    // not depend on how rows were split across threads); the rest through the one-row tiles below.
    const int64_t n_grouped = n_out / kInterleaveRows * kInterleaveRows;
    if (row_begin < std::min(row_end, n_grouped)) multiply_groups(w, a, y, row_begin, std::min(row_end, n_grouped));
    row_begin = std::max(row_begin, n_grouped);
    if (row_begin >= row_end) return;
  }
  if (a.block32) {
    const avx2::Block32TileFn tile = avx2::block32_tile(w.type);
    constexpr int kTok = avx2::kMaxBlock32Tokens;
    for (int64_t chunk = row_begin; chunk < row_end; chunk += chunk_rows) {
      const int64_t chunk_end = std::min(row_end, chunk + chunk_rows);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTok) {
        const int n_tok = static_cast<int>(std::min<int64_t>(kTok, n_tokens - t0));
        PackedActs32 acts[kTok];
        for (int t = 0; t < n_tok; ++t) acts[t] = a.pack->token(t0 + t);
        // One token over a type without an interleaved layout (Q5_1): one row a call. The rows then stream
        // one after another; 4 or 2 rows a call read them as that many streams, and cold 8192 x 2048 Q5_0 /
        // IQ4_NL took ~2x as long before they had their layouts (1030-1160 against 544 us; 925 against 427).
        const int tile_rows = n_tok == 1 && !has_interleaved_layout(w.type) ? 1 : block32_tile_rows(n_tok);
        for (int64_t r = chunk; r < chunk_end; r += tile_rows) {
          const int n_rows = static_cast<int>(std::min<int64_t>(tile_rows, chunk_end - r));
          float out[avx2::kMaxTileRows * kTok];
          tile(n_in, w.row(r), w_row_bytes, n_rows, acts, n_tok, out);
          for (int i = 0; i < n_rows; ++i)
            for (int t = 0; t < n_tok; ++t) y[(t0 + t) * n_out + r + i] = out[i * n_tok + t];
        }
      }
    }
    return;
  }
  const TileFn tile = cpu_has_avx2() ? a.kind.avx2_tile : nullptr;
  if (tile != nullptr && n_tokens > avx2::kMaxTileTokens && is_low_bit_iquant(w.type)) {
    const IQLaneKernel lanes = iq_lane_kernel(n_tokens);
    if (lanes.lanes > 0)
      multiply_rows_iq_lanes(lanes, w, a, y, row_begin, row_end);
    else
      multiply_rows_decoded(w, a, y, row_begin, row_end, chunk_rows);
    return;
  }
  // The float tiles in 512-bit registers, several rows a call: each output the bits of the scalar lane
  // model whatever its batch (float_tiles_zmm.h).
  if (const FloatTilesFn zmm = tile != nullptr ? zmm_float_tiles(a.kind) : nullptr) {
    multiply_rows_zmm_tiles({zmm, avx512zmm::kFloatTileLanes, sizeof(float)}, w, a, y, row_begin, row_end);
    return;
  }
  for (int64_t chunk = row_begin; chunk < row_end; chunk += chunk_rows) {
    const int64_t chunk_end = std::min(row_end, chunk + chunk_rows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += avx2::kMaxTileTokens) {
      const int n_tok = static_cast<int>(std::min<int64_t>(avx2::kMaxTileTokens, n_tokens - t0));
      const void* act_rows[avx2::kMaxTileTokens];
      for (int t = 0; t < n_tok; ++t) act_rows[t] = a.rows + (t0 + t) * a.row_bytes;
      for (int64_t r = chunk; r < chunk_end; ++r) {
        const void* w_row = w.row(r);
        float out[avx2::kMaxTileTokens];
        if (tile != nullptr) {
          tile(n_in, w_row, act_rows, n_tok, out);
        } else {
          for (int t = 0; t < n_tok; ++t) out[t] = a.kind.scalar_dot(n_in, w_row, act_rows[t]);
        }
        for (int t = 0; t < n_tok; ++t) y[(t0 + t) * n_out + r] = out[t];
      }
    }
  }
}

// Rows per balancing chunk for weights of w_row_bytes: a multiple of kRowGrain. A single token's pass
// calls the kernel a pair of groups at a time (multiply_groups), so its chunks need only be whole pairs,
// and smaller ones shorten the tail where one thread waits for the other's last chunk.
int64_t balance_chunk_rows(size_t w_row_bytes, int64_t n_tokens) {
  const size_t bytes = n_tokens == 1 ? kDecodeBalanceChunkBytes : kBalanceChunkBytes;
  const int64_t grain = n_tokens == 1 ? kDecodeRowGrain : kRowGrain;
  const auto rows = static_cast<int64_t>(bytes / std::max<size_t>(1, w_row_bytes));
  return std::max<int64_t>(grain, rows / grain * grain);
}

// Rows [begin, end) of the outputs' weights stacked in order: each weight gets its overlap, with the
// activations acts_of(weight) gives it.
template <typename ActsOf>
void multiply_stacked_rows(std::span<const MatmulOutput> outputs, ActsOf&& acts_of, int64_t begin, int64_t end) {
  int64_t offset = 0;
  for (const MatmulOutput& o : outputs) {
    const int64_t rows = o.w->rows();
    const int64_t b = std::max(begin, offset), e = std::min(end, offset + rows);
    if (b < e) multiply_rows(*o.w, acts_of(*o.w), o.y, b - offset, e - offset);
    offset += rows;
  }
}

// The chunk for rows of several weights stacked: the widest row's, so no chunk holds more bytes than
// matmul() gives one weight's chunk.
int64_t stacked_chunk_rows(std::span<const MatmulOutput> outputs, int64_t n_tokens) {
  size_t widest = 0;
  for (const MatmulOutput& o : outputs) widest = std::max(widest, o.w->row_size());
  return balance_chunk_rows(widest, n_tokens);
}

// y += w x over the pool (matmul_add): each thread adds the rows it computed.
void add_rows_over_pool(const Tensor& w, const ConvertedActs& acts, float* y, float* scratch, ThreadPool& pool) {
  const int64_t n_out = w.rows();
  const int64_t n_tokens = acts.n_tokens;
  pool.parallel_for_balanced(
      n_out,
      [&](int64_t begin, int64_t end) {
        multiply_rows(w, acts, scratch, begin, end);
        for (int64_t t = 0; t < n_tokens; ++t)
          add_inplace(y + t * n_out + begin, scratch + t * n_out + begin, end - begin);
      },
      balance_chunk_rows(w.row_size(), n_tokens));
}

}  // namespace

bool cpu_has_avx2() {
  static const bool available = hardware_has_avx2() && simd_allowed_by_env();
  return available && g_simd_enabled.load(std::memory_order_relaxed);
}

void set_simd_enabled(bool enabled) { g_simd_enabled.store(enabled, std::memory_order_relaxed); }

void set_fly_pairs_enabled(bool enabled) { g_fly_pairs_enabled.store(enabled, std::memory_order_relaxed); }

void set_amx_enabled(bool enabled) { g_amx_enabled.store(enabled, std::memory_order_relaxed); }

void set_bf16_dot(int on) { g_bf16_dot.store(on < 0 ? -1 : on != 0 ? 1 : 0, std::memory_order_relaxed); }

bool bf16_dot_in_use() { return bf16_dot_enabled(); }

namespace {
std::atomic<int> g_decode_l2_ahead{-1};  // -1: the host's default
}  // namespace

bool decode_l2_ahead_enabled() {
  static const bool host_default = [] {
    const int forced = env_switch("KVSERVE_DECODE_L2_AHEAD");
    return forced >= 0 ? forced == 1 : cpu_is_intel();
  }();
  const int set = g_decode_l2_ahead.load(std::memory_order_relaxed);
  return set >= 0 ? set == 1 : host_default;
}

void set_decode_l2_ahead(int on) { g_decode_l2_ahead.store(on < 0 ? -1 : on != 0 ? 1 : 0, std::memory_order_relaxed); }

void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  check_matmul_args(w, x, n_tokens, y);
  if (n_tokens == 0) return;
  const ConvertedActs acts = convert_activations(w.type, x, w.cols(), n_tokens, pool);
  pool.parallel_for_balanced(
      w.rows(), [&](int64_t begin, int64_t end) { multiply_rows(w, acts, y, begin, end); },
      balance_chunk_rows(w.row_size(), n_tokens));
}

void matmul_add(const Tensor& w, const float* x, int64_t n_tokens, float* y, float* scratch, ThreadPool& pool) {
  check_matmul_args(w, x, n_tokens, y);
  if (scratch == nullptr) fail("matmul_add: null scratch");
  if (n_tokens == 0) return;
  add_rows_over_pool(w, convert_activations(w.type, x, w.cols(), n_tokens, pool), y, scratch, pool);
}

void matmul_shared_input(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens, ThreadPool& pool) {
  if (outputs.empty()) return;
  int64_t total_rows = 0;
  for (const MatmulOutput& o : outputs) {
    if (o.w == nullptr) fail("matmul_shared_input: null weight");
    check_matmul_args(*o.w, x, n_tokens, o.y);
    total_rows += o.w->rows();
  }
  if (n_tokens == 0) return;
  const Tensor& first = *outputs[0].w;
  if (!matmul_inputs_shareable(outputs)) {
    for (const MatmulOutput& o : outputs) matmul(*o.w, x, n_tokens, o.y, pool);
    return;
  }
  const ConvertedActs acts = convert_activations(first.type, x, first.cols(), n_tokens, pool);
  const auto acts_of = [&](const Tensor&) -> const ConvertedActs& { return acts; };
  pool.parallel_for_balanced(
      total_rows, [&](int64_t begin, int64_t end) { multiply_stacked_rows(outputs, acts_of, begin, end); },
      balance_chunk_rows(first.row_size(), n_tokens));
}

struct MatmulActs::Storage {
  // One per weight type the rows were converted for (several when stacked weights differ: a Q4_K_M
  // file's Q/K/V are Q4_K, Q4_K and Q6_K in some layers), each kept with its buffers across calls.
  struct Conversion {
    ActPack32 pack;
    std::vector<uint8_t> scratch;
    ConvertedActs acts;
    DType weight_type = DType::F32;
  };
  static constexpr size_t kMaxConversions = 3;  // Q, K and V
  std::array<Conversion, kMaxConversions> conversions;
  size_t n_conversions = 0;
  int64_t n_in = 0;
  const float* x = nullptr;  // the rows convert() or prepare() was given

  // Sizes one conversion per distinct type of `types` (in order) and, with convert_now, fills them.
  void set_up(std::span<const DType> types, const float* rows, int64_t cols, int64_t n_tokens, bool convert_now) {
    n_conversions = 0;
    for (DType type : types) {
      bool seen = false;
      for (size_t i = 0; i < n_conversions; ++i) seen = seen || conversions[i].weight_type == type;
      if (seen) continue;
      if (n_conversions == kMaxConversions)
        fail("MatmulActs: more than {} weight types share one input", kMaxConversions);
      Conversion& c = conversions[n_conversions++];
      c.weight_type = type;
      c.acts = convert_now ? convert_activations_into(type, rows, cols, n_tokens, nullptr, c.pack, c.scratch)
                           : prepare_activations(type, rows, cols, n_tokens, c.pack, c.scratch);
    }
    n_in = cols;
    x = rows;
  }
};

namespace {
// The weight types of stacked outputs, which must share their row length.
std::array<DType, MatmulActs::Storage::kMaxConversions> stacked_types(std::span<const MatmulOutput> outputs,
                                                                      size_t& n) {
  if (outputs.empty() || outputs.size() > MatmulActs::Storage::kMaxConversions)
    fail("MatmulActs: {} stacked weights (1 to {})", outputs.size(), MatmulActs::Storage::kMaxConversions);
  if (!matmul_inputs_stackable(outputs)) fail("MatmulActs: stacked weights missing or of different row lengths");
  std::array<DType, MatmulActs::Storage::kMaxConversions> types{};
  n = outputs.size();
  for (size_t i = 0; i < n; ++i) types[i] = outputs[i].w->type;
  return types;
}
}  // namespace

MatmulActs::MatmulActs() : storage_(std::make_unique<Storage>()) {}
MatmulActs::~MatmulActs() = default;
MatmulActs::MatmulActs(MatmulActs&&) noexcept = default;
MatmulActs& MatmulActs::operator=(MatmulActs&&) noexcept = default;

void MatmulActs::convert(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens) {
  storage_->set_up({&weight_type, 1}, x, n_in, n_tokens, /*convert_now=*/true);
}

void MatmulActs::prepare(DType weight_type, const float* x, int64_t n_in, int64_t n_tokens) {
  storage_->set_up({&weight_type, 1}, x, n_in, n_tokens, /*convert_now=*/false);
}

void MatmulActs::convert(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens) {
  size_t n = 0;
  const auto types = stacked_types(outputs, n);
  storage_->set_up({types.data(), n}, x, outputs[0].w->cols(), n_tokens, /*convert_now=*/true);
}

void MatmulActs::prepare(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens) {
  size_t n = 0;
  const auto types = stacked_types(outputs, n);
  storage_->set_up({types.data(), n}, x, outputs[0].w->cols(), n_tokens, /*convert_now=*/false);
}

void MatmulActs::convert_token(int64_t t) {
  Storage& st = *storage_;
  const int64_t n_tokens = st.n_conversions == 0 ? 0 : st.conversions[0].acts.n_tokens;
  if (t < 0 || t >= n_tokens) fail("MatmulActs: token {} outside the {} prepared", t, n_tokens);
  for (size_t i = 0; i < st.n_conversions; ++i) {
    Storage::Conversion& c = st.conversions[i];
    kvserve::convert_token(c.acts, c.pack, c.scratch, t, st.x + t * st.n_in, st.n_in);
  }
}

namespace {
const ConvertedActs& converted_for(const MatmulActs::Storage& st, const Tensor& w) {
  for (size_t i = 0; i < st.n_conversions && st.n_in == w.cols(); ++i)
    if (st.conversions[i].weight_type == w.type) return st.conversions[i].acts;
  fail("matmul_rows: activations converted for {} x {} columns, tensor '{}' is {} x {}",
       st.n_conversions == 0 ? "nothing" : dtype_name(st.conversions[0].weight_type), st.n_in, w.name,
       dtype_name(w.type), w.cols());
}
}  // namespace

void matmul_rows(const Tensor& w, const MatmulActs& acts, float* y, int64_t row_begin, int64_t row_end) {
  multiply_rows(w, converted_for(*acts.storage_, w), y, row_begin, row_end);
}

void matmul_rows_stacked(std::span<const MatmulOutput> outputs, const MatmulActs& acts, int64_t begin, int64_t end) {
  const auto acts_of = [&](const Tensor& w) -> const ConvertedActs& { return converted_for(*acts.storage_, w); };
  multiply_stacked_rows(outputs, acts_of, begin, end);
}

void matmul_converted(std::span<const MatmulOutput> outputs, const MatmulActs& acts, ThreadPool& pool) {
  if (outputs.empty()) return;
  int64_t total_rows = 0, n_tokens = 0;
  for (const MatmulOutput& o : outputs) {
    if (o.w == nullptr) fail("matmul_converted: null weight");
    n_tokens = converted_for(*acts.storage_, *o.w).n_tokens;
    check_matmul_args(*o.w, acts.storage_->x, n_tokens, o.y);
    total_rows += o.w->rows();
  }
  if (n_tokens == 0) return;
  const auto acts_of = [&](const Tensor& w) -> const ConvertedActs& { return converted_for(*acts.storage_, w); };
  pool.parallel_for_balanced(
      total_rows, [&](int64_t begin, int64_t end) { multiply_stacked_rows(outputs, acts_of, begin, end); },
      stacked_chunk_rows(outputs, n_tokens));
}

void matmul_add_converted(const Tensor& w, const MatmulActs& acts, float* y, float* scratch, ThreadPool& pool) {
  const ConvertedActs& a = converted_for(*acts.storage_, w);
  check_matmul_args(w, acts.storage_->x, a.n_tokens, y);
  if (scratch == nullptr) fail("matmul_add: null scratch");
  if (a.n_tokens == 0) return;
  add_rows_over_pool(w, a, y, scratch, pool);
}

namespace {
bool weights_share_row_length(std::span<const MatmulOutput> outputs) {
  for (const MatmulOutput& o : outputs)
    if (o.w == nullptr || !o.w->valid() || o.w->cols() != outputs[0].w->cols()) return false;
  return true;
}
}  // namespace

bool matmul_inputs_shareable(std::span<const MatmulOutput> outputs) {
  if (!weights_share_row_length(outputs)) return false;
  for (const MatmulOutput& o : outputs)
    if (o.w->type != outputs[0].w->type) return false;
  return true;
}

bool matmul_inputs_stackable(std::span<const MatmulOutput> outputs) {
  return !outputs.empty() && outputs.size() <= MatmulActs::Storage::kMaxConversions &&
         weights_share_row_length(outputs);
}

int64_t matmul_balance_chunk_rows(const Tensor& w, int64_t n_tokens) { return balance_chunk_rows(w.row_size(), n_tokens); }

int64_t matmul_balance_chunk_rows(std::span<const MatmulOutput> outputs, int64_t n_tokens) {
  return stacked_chunk_rows(outputs, n_tokens);
}

namespace {

// A Q4_1 / Q5_1 row dequantized with its offsets left out (into w_row), and the offsets' share of the dot
// as ggml takes it: sum over blocks of m * s.
template <typename Block, DType kType>
double offset_free_row_of(const void* row, const BlockQ8_1* act, int64_t n_in, float* w_row) {
  const auto* blocks = static_cast<const Block*>(row);
  std::vector<Block> no_offset(blocks, blocks + n_in / 32);
  double offsets = 0.0;
  for (int64_t b = 0; b < n_in / 32; ++b) {
    no_offset[b].m = 0;
    offsets += static_cast<double>(fp16_to_fp32(blocks[b].m)) * fp16_to_fp32(act[b].s);
  }
  dequantize_row(kType, no_offset.data(), w_row, n_in);
  return offsets;
}

double offset_free_row(DType type, const void* row, const BlockQ8_1* act, int64_t n_in, float* w_row) {
  return type == DType::Q4_1 ? offset_free_row_of<BlockQ4_1, DType::Q4_1>(row, act, n_in, w_row)
                             : offset_free_row_of<BlockQ5_1, DType::Q5_1>(row, act, n_in, w_row);
}

}  // namespace

void matmul_ref(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  check_matmul_args(w, x, n_tokens, y);
  const DotKind kind = dot_kind(w.type, /*simd=*/false);
  const int64_t n_in = w.cols();
  const int64_t n_out = w.rows();
  // Independent of the integer dot kernels: round the activations exactly as matmul does, dequantize both
  // sides to float and sum in double.
  std::vector<uint8_t> act_converted(row_bytes(kind.act_type, n_in));
  std::vector<float> act(n_in), w_row(n_in);
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (kind.convert != nullptr) {
      kind.convert(x + t * n_in, act_converted.data(), n_in);
      dequantize_row(kind.act_type, act_converted.data(), act.data(), n_in);
    } else {
      std::memcpy(act.data(), x + t * n_in, n_in * sizeof(float));
    }
    for (int64_t r = 0; r < n_out; ++r) {
      double sum = 0.0;
      if (w.type == DType::Q4_1 || w.type == DType::Q5_1) {
        // ggml's Q4_1 / Q5_1 x Q8_1 dots take the offset term from the fp16 block sum s, not from the
        // activation values, so do the same: sum_j d q_j a_j + m * s per block.
        sum += offset_free_row(w.type, w.row(r), reinterpret_cast<const BlockQ8_1*>(act_converted.data()), n_in,
                               w_row.data());
      } else {
        dequantize_row(w.type, w.row(r), w_row.data(), n_in);
      }
      for (int64_t k = 0; k < n_in; ++k) sum += static_cast<double>(w_row[k]) * act[k];
      y[t * n_out + r] = static_cast<float>(sum);
    }
  }
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const int block = dtype_info(type).block_elems;
  if (n < 0 || n % block != 0) fail("dequantize_row: {} elements is not a multiple of the {} block size {}", n,
                                    dtype_name(type), block);
  if (is_low_bit_iquant(type)) return dequantize_row_iq(type, src, dst, n);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::F16: dequantize_row_f16(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::BF16: dequantize_row_bf16(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::Q8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); return;
    case DType::Q8_1: dequantize_row_q8_1(static_cast<const BlockQ8_1*>(src), dst, n); return;
    case DType::Q8_K: dequantize_row_q8_K(static_cast<const BlockQ8_K*>(src), dst, n); return;
    case DType::Q4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); return;
    case DType::Q4_1: dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); return;
    case DType::Q5_0: dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); return;
    case DType::Q5_1: dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); return;
    case DType::Q2_K: dequantize_row_q2_K(static_cast<const BlockQ2_K*>(src), dst, n); return;
    case DType::Q3_K: dequantize_row_q3_K(static_cast<const BlockQ3_K*>(src), dst, n); return;
    case DType::IQ4_NL: dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); return;
    case DType::MXFP4:
      dequantize_row_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n);
      return;
    case DType::IQ4_XS: dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); return;
    case DType::Q4_K: dequantize_row_q4_K(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case DType::Q5_K: dequantize_row_q5_K(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case DType::Q6_K: dequantize_row_q6_K(static_cast<const BlockQ6_K*>(src), dst, n); return;
    default: fail("dequantize_row: type {} is not supported", dtype_name(type));
  }
}

}  // namespace kvserve
