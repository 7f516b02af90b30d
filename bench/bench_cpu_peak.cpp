// What one core of this machine can compute, next to what the matmul kernels reach: the ceilings that
// the int8 (vpmaddubsw) and f32 (FMA) inner loops run into once weights are in cache. Single thread,
// operands in registers or L1, so memory never limits.
//
//   Peak/maddubs        vpmaddubsw alone: the int8 multiply ceiling
//   Peak/maddubs+X      8 vpmaddubsw and 8 independent X per step: does X compete with the multiplies for
//                       the same pipes? (add: no; madd, sign, fma: yes, to different degrees)
//   Peak/fma            vfmadd231ps alone: the f32 ceiling (attention, F32/F16 weights)
//   Peak/sign+add       no multiplies: the core's issue rate for plain vector instructions
//   Peak/q8_unit        the Q8_0 kernel's vpsignb + vpmaddubsw + vpmaddwd + vpaddd per 32 MACs: its ceiling
//   Peak/madd+add       the int16 alternative: 2 x (vpmaddwd + vpaddd) per 32 MACs
//   Kernel/<type>/t<T>  the interleaved 8-row kernel (Q4_0/Q4_1/Q8_0) on one L1-resident 8-row group
//   KernelVnni/<type>/g<G>/t<T>  the same with vpdpbusd (AVX512-VNNI on ymm)
//   KernelAvxVnni/<type>/g<G>/t<T>  the same with AVX-VNNI's vpdpbusd (VEX, 16 registers)
//   KernelZmm/<type>/g<G>/t<T>   pairs of groups in 512-bit registers (avx512zmm), up to 8 tokens
//   KernelAmx/<type>/g<G>/t<T>   the same pairs with AMX tile products (amx::), up to 16 tokens
//
// Counters: MAC/s (int8 or f32 multiply-adds) and vec_ops/s (vector instructions issued). On the
// 2-core machine this project runs on (Zen 3 under KVM) vpmaddubsw, vpmaddwd and FMA each issue 2 per
// cycle and share those two pipes; vpaddw or vpsignb issues beside them for free, but not both: the core
// issues too few vector instructions a cycle in all, so Peak/q8_unit runs at ~0.77x the rate its two
// multiplies alone allow (Peak/maddubs+madd). Peak/madd+add, the same four instructions per 32 MACs
// without the sign fix-up, runs at q8_unit's rate (~75 G MAC/s, ~9.4 G instructions/s): the count, not
// the kind, sets it. See README "CPU kernels".
//
//   ./bench_cpu_peak
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu/block32_tiles.h"
#include "kernels/cpu/interleaved_rows.h"

namespace {

using namespace kvserve;

constexpr int64_t kSteps = 1 << 16;  // inner repetitions per benchmark iteration

#if defined(__x86_64__)

// Each step issues 8 instructions of the first kind and, for the pairs, 8 of the second, into distinct
// destination registers from two constant sources: no dependency chains, so the step's time is set by
// how many of each the core can issue per cycle. (Written in asm: with intrinsics GCC kept every case's
// registers live at once and spilled, which made an earlier version of this benchmark report a third
// of the real vpmaddubsw rate.)
#define KV_X8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define KV_X8B(M) M(8) M(9) M(10) M(11) M(12) M(13) M(8) M(9)
#define KV_MADDUBS(i) "vpmaddubsw %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define KV_ADDW(i) "vpaddw %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define KV_FMA(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define KV_MADDWD(i) "vpmaddwd %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define KV_SIGN(i) "vpsignb %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define KV_PEAK_LOOP(name, body)                                                                                      \
  __attribute__((noinline)) void name(int64_t steps) {                                                                \
    asm volatile(                                                                                                     \
        "vpxor %%ymm14, %%ymm14, %%ymm14\n\tvpxor %%ymm15, %%ymm15, %%ymm15\n\t"                                      \
        "1:\n\t" body "dec %0\n\tjnz 1b\n\t"                                                                          \
        : "+r"(steps)                                                                                                 \
        :                                                                                                             \
        : "memory", "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", "ymm10", "ymm11", \
          "ymm12", "ymm13", "ymm14", "ymm15");                                                                        \
  }
KV_PEAK_LOOP(peak_maddubs, KV_X8(KV_MADDUBS))
KV_PEAK_LOOP(peak_maddubs_add, KV_X8(KV_MADDUBS) KV_X8B(KV_ADDW))
KV_PEAK_LOOP(peak_maddubs_madd, KV_X8(KV_MADDUBS) KV_X8B(KV_MADDWD))
KV_PEAK_LOOP(peak_maddubs_sign, KV_X8(KV_MADDUBS) KV_X8B(KV_SIGN))
KV_PEAK_LOOP(peak_maddubs_fma, KV_X8(KV_MADDUBS) KV_X8B(KV_FMA))
KV_PEAK_LOOP(peak_fma, KV_X8(KV_FMA))
// No multiplies: how many plain vector instructions a cycle the core issues.
KV_PEAK_LOOP(peak_sign_add, KV_X8(KV_SIGN) KV_X8B(KV_ADDW))
// The Q8_0 kernel's unit without VNNI, 8 independent copies a step: sign fix-up, vpmaddubsw, vpmaddwd
// against ones, vpaddd into a running sum (accumulators ymm0-7, temporaries ymm8-13 reused by name only).
#define KV_Q8_UNIT(i, t)                                                               \
  "vpsignb %%ymm14, %%ymm15, %%ymm" #t "\n\tvpmaddubsw %%ymm" #t ", %%ymm15, %%ymm" #t \
  "\n\t"                                                                               \
  "vpmaddwd %%ymm15, %%ymm" #t ", %%ymm" #t "\n\tvpaddd %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n\t"
KV_PEAK_LOOP(peak_q8_unit, KV_Q8_UNIT(0, 8) KV_Q8_UNIT(1, 9) KV_Q8_UNIT(2, 10) KV_Q8_UNIT(3, 11) KV_Q8_UNIT(4, 12)
                               KV_Q8_UNIT(5, 13) KV_Q8_UNIT(6, 8) KV_Q8_UNIT(7, 9))
// The int16 route to the same 32 MACs (quants widened to int16 once for all tokens, then vpmaddwd against
// int16 activations, no sign fix-up): two vpmaddwd + vpaddd into running sums, 16 a step over the same 8
// accumulators, so a step is q8_unit's 256 MACs in as many instructions.
#define KV_WIDE_UNIT(i, t) "vpmaddwd %%ymm14, %%ymm15, %%ymm" #t "\n\tvpaddd %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n\t"
KV_PEAK_LOOP(peak_madd_add, KV_WIDE_UNIT(0, 8) KV_WIDE_UNIT(1, 9) KV_WIDE_UNIT(2, 10) KV_WIDE_UNIT(3, 11)
                                KV_WIDE_UNIT(4, 12) KV_WIDE_UNIT(5, 13) KV_WIDE_UNIT(6, 8) KV_WIDE_UNIT(7, 9)
                                    KV_WIDE_UNIT(0, 10) KV_WIDE_UNIT(1, 11) KV_WIDE_UNIT(2, 12) KV_WIDE_UNIT(3, 13)
                                        KV_WIDE_UNIT(4, 8) KV_WIDE_UNIT(5, 9) KV_WIDE_UNIT(6, 10) KV_WIDE_UNIT(7, 11))

// ops: vector instructions per step; macs: multiply-adds per step (int8 or f32).
void BM_Peak(benchmark::State& state, void (*loop)(int64_t), double ops, double macs) {
  if (!cpu_has_avx2_fma_f16c()) {
    state.SkipWithError("needs AVX2/FMA");
    return;
  }
  for (auto _ : state) loop(kSteps);
  const double steps = static_cast<double>(state.iterations()) * kSteps;
  state.counters["MAC/s"] = benchmark::Counter(steps * macs, benchmark::Counter::kIsRate);
  state.counters["vec_ops/s"] = benchmark::Counter(steps * ops, benchmark::Counter::kIsRate);
}

#endif  // __x86_64__

// The K-quant (and IQ4_XS) interleaved kernels against Q8_K rows, as BM_Kernel below. IQ4_XS's bytes after
// its 8 fp16 scales stay random: any signed byte is a sub-block scale the kernels take at the same speed.
// Which build of the 8-row kernels a Kernel* benchmark runs.
enum class KernelIsa { Avx2, Avx512Vnni, AvxVnni };

// isa's build of one kernel: pick(avx512vnni::f, avxvnni::f, avx2::f).
template <typename F>
F pick(KernelIsa isa, F avx512, F avx, F avx2_fn) {
  return isa == KernelIsa::Avx512Vnni ? avx512 : isa == KernelIsa::AvxVnni ? avx : avx2_fn;
}

// unpacked (Q5_K, Q6_K): the kernels over the quants unpacked once (matmul's path for many tokens); the
// unpacking itself is outside the timed loop.
void BM_KernelKQuant(benchmark::State& state, DType type, int n_groups, int n_tok, KernelIsa isa, bool zmm,
                     bool unpacked = false) {
  constexpr int64_t n = 2048;
  const int64_t nb = n / kQK_K;
  const size_t record = interleaved_block_bytes(type);
  std::mt19937 rng(1);
  std::vector<uint8_t> group(static_cast<size_t>(n_groups * nb) * record);
  for (auto& b : group) b = static_cast<uint8_t>(rng());
  // zmm: the pair layout, each record two groups' with the pieces of both side by side, so the scales
  // (and Q4_K / Q5_K's 6-bit sub-block scales and mins) take twice the bytes at the front.
  const int64_t ways = zmm ? 2 : 1;
  for (int64_t i = 0; i < n_groups * nb / ways; ++i) {
    uint8_t* rec = group.data() + i * ways * record;
    auto* scales = reinterpret_cast<uint16_t*>(rec);
    const bool scale_min = type == DType::Q4_K || type == DType::Q5_K;
    for (int j = 0; j < (scale_min ? 16 : 8) * ways; ++j) scales[j] = fp32_to_fp16(0.01f);
    if (scale_min)
      for (int64_t j = 32 * ways; j < 160 * ways; ++j) rec[j] &= 63;
  }
  std::vector<BlockQ8_K> rows(static_cast<size_t>(n_tok * nb));
  for (auto& b : rows) {
    b.d = 0.02f;
    for (auto& q : b.qs) q = static_cast<int8_t>(rng() % 255 - 127);
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += b.qs[16 * j + k];
      b.bsums[j] = static_cast<int16_t>(sum);
    }
  }
  const BlockQ8_K* acts[avx512zmm::kMaxZmmTokens];
  for (int t = 0; t < n_tok; ++t) acts[t] = rows.data() + t * nb;
  float out[kInterleaveRows * avx512zmm::kMaxZmmGroups * avx512zmm::kMaxZmmTokens];
  std::vector<uint8_t> unpacked_quants;
  if (unpacked) {
    unpacked_quants.resize(static_cast<size_t>(n_groups * nb) * kUnpackedKBlockBytes);
    (type == DType::Q5_K ? avx2::unpack_q5_K_groups : avx2::unpack_q6_K_groups)(n, group.data(), n_groups,
                                                                               unpacked_quants.data());
  }
  const auto unpacked_fn =
      type == DType::Q5_K ? pick(isa, avx512vnni::gemm_interleaved_q5_K_unpacked,
                                 avxvnni::gemm_interleaved_q5_K_unpacked, avx2::gemm_interleaved_q5_K_unpacked)
                          : avx2::gemm_interleaved_q6_K_unpacked;
  for (auto _ : state) {
    if (unpacked) {
      unpacked_fn(n, group.data(), n_groups, unpacked_quants.data(), acts, n_tok, out, kInterleaveRows * n_groups,
                  nullptr);
    } else if (zmm) {
      const auto pairs = type == DType::Q4_K   ? avx512zmm::gemm_pairs_q4_K
                         : type == DType::Q5_K ? avx512zmm::gemm_pairs_q5_K
                                               : avx512zmm::gemm_pairs_q6_K;
      pairs(n, group.data(), n_groups / 2, acts, n_tok, out, kInterleaveRows * n_groups, nullptr);
    } else {
      const auto fn = type == DType::Q4_K ? pick(isa, avx512vnni::gemm_interleaved_q4_K, avxvnni::gemm_interleaved_q4_K,
                                                 avx2::gemm_interleaved_q4_K)
                      : type == DType::Q5_K   ? pick(isa, avx512vnni::gemm_interleaved_q5_K,
                                                     avxvnni::gemm_interleaved_q5_K, avx2::gemm_interleaved_q5_K)
                      : type == DType::IQ4_XS ? pick(isa, avx512vnni::gemm_interleaved_iq4_xs,
                                                     avxvnni::gemm_interleaved_iq4_xs, avx2::gemm_interleaved_iq4_xs)
                                              : pick(isa, avx512vnni::gemm_interleaved_q6_K,
                                                     avxvnni::gemm_interleaved_q6_K, avx2::gemm_interleaved_q6_K);
      fn(n, group.data(), n_groups, acts, n_tok, out, kInterleaveRows * n_groups, nullptr);
    }
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.counters["MAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * n * kInterleaveRows * n_groups * n_tok, benchmark::Counter::kIsRate);
}

// n_groups interleaved 8-row groups of `n` columns (random quants, sane scales) times T packed activation
// rows, repeated: the kernel's own speed with everything in L1.
// zmm: the avx512zmm pair kernels (n_groups 2) instead of avx512vnni's.
void BM_KernelQ32(benchmark::State& state, DType type, int n_groups, int n_tok, KernelIsa isa, bool zmm, bool amx) {
  if (!cpu_has_avx2_fma_f16c()) {
    state.SkipWithError("needs AVX2/FMA");
    return;
  }
  if (type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K || type == DType::IQ4_XS) {
    BM_KernelKQuant(state, type, n_groups, n_tok, isa, zmm);
    return;
  }
  constexpr int64_t n = 2048;
  const int64_t nb = n / 32;
  const size_t block_bytes = interleaved_block_bytes(type);
  const size_t scale_bytes = type == DType::Q4_1 ? 32 : 16;
  std::mt19937 rng(1);
  std::vector<uint8_t> group(static_cast<size_t>(n_groups * nb) * block_bytes);
  for (auto& b : group) b = static_cast<uint8_t>(rng());
  // zmm: the pair layout, each record two groups' with their scales (and mins) first.
  const int64_t ways = zmm ? 2 : 1;
  for (int64_t i = 0; i < n_groups * nb / ways; ++i) {
    auto* scales = reinterpret_cast<uint16_t*>(group.data() + i * ways * block_bytes);
    for (size_t j = 0; j < ways * scale_bytes / 2; ++j) scales[j] = fp32_to_fp16(0.01f);
  }
  ActPack32 pack;
  const DType act_type = type == DType::Q4_1 ? DType::Q8_1 : DType::Q8_0;
  pack.reset(act_type, n, n_tok);
  std::vector<uint8_t> blocks(row_bytes(act_type, n));
  for (int t = 0; t < n_tok; ++t) {
    for (auto& b : blocks) b = static_cast<uint8_t>(rng() % 200);
    for (int64_t i = 0; i < nb; ++i) {
      // Every block's scale (and Q8_1 sum) as a sane fp16.
      const size_t stride = blocks.size() / static_cast<size_t>(nb);
      auto* h = reinterpret_cast<uint16_t*>(blocks.data() + static_cast<size_t>(i) * stride);
      h[0] = fp32_to_fp16(0.02f);
      if (act_type == DType::Q8_1) h[1] = fp32_to_fp16(0.5f);
    }
    pack.pack(t, blocks.data());
  }
  PackedActs32 acts[amx::kMaxAmxTokens];
  for (int t = 0; t < n_tok; ++t) acts[t] = pack.token(t);
  const auto amx_fn = type == DType::Q4_0   ? amx::gemm_pairs_q4_0
                      : type == DType::Q4_1 ? amx::gemm_pairs_q4_1
                                            : amx::gemm_pairs_q8_0;
  const auto zmm_fn = type == DType::Q4_0   ? avx512zmm::gemm_pairs_q4_0
                      : type == DType::Q4_1 ? avx512zmm::gemm_pairs_q4_1
                                            : avx512zmm::gemm_pairs_q8_0;
  const auto pairs = [&](int64_t n_cols, const uint8_t* p, int n_pairs, const PackedActs32* a, int nt, float* o,
                         int64_t stride, const uint8_t* far) {
    if (amx) {
      amx_fn(n_cols, p, n_pairs, a, nt, o, stride, far, nullptr);
    } else {
      zmm_fn(n_cols, p, n_pairs, a, nt, o, stride, far);
    }
  };
  const auto gemm =
      type == DType::Q4_0
          ? pick(isa, avx512vnni::gemm_interleaved_q4_0, avxvnni::gemm_interleaved_q4_0, avx2::gemm_interleaved_q4_0)
      : type == DType::Q5_0
          ? pick(isa, avx512vnni::gemm_interleaved_q5_0, avxvnni::gemm_interleaved_q5_0, avx2::gemm_interleaved_q5_0)
      : type == DType::IQ4_NL ? pick(isa, avx512vnni::gemm_interleaved_iq4_nl, avxvnni::gemm_interleaved_iq4_nl,
                                     avx2::gemm_interleaved_iq4_nl)
      : type == DType::Q4_1
          ? pick(isa, avx512vnni::gemm_interleaved_q4_1, avxvnni::gemm_interleaved_q4_1, avx2::gemm_interleaved_q4_1)
          : pick(isa, avx512vnni::gemm_interleaved_q8_0, avxvnni::gemm_interleaved_q8_0, avx2::gemm_interleaved_q8_0);
  float out[kInterleaveRows * avx512zmm::kMaxZmmGroups * amx::kMaxAmxTokens];
  for (auto _ : state) {
    if (zmm || amx) {
      pairs(n, group.data(), n_groups / 2, acts, n_tok, out, kInterleaveRows * n_groups, nullptr);
    } else {
      gemm(n, group.data(), n_groups, acts, n_tok, out, kInterleaveRows * n_groups, nullptr);
    }
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.counters["MAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * n * kInterleaveRows * n_groups * n_tok, benchmark::Counter::kIsRate);
}

void BM_Kernel(benchmark::State& state, DType type, int n_groups, int n_tok, KernelIsa isa, bool zmm = false) {
  BM_KernelQ32(state, type, n_groups, n_tok, isa, zmm, false);
}
void BM_KernelAmx(benchmark::State& state, DType type, int n_groups, int n_tok) {
  if (!cpu_has_amx_int8()) {
    state.SkipWithError("needs AMX-INT8");
    return;
  }
  BM_KernelQ32(state, type, n_groups, n_tok, KernelIsa::Avx512Vnni, false, true);
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__x86_64__)
  benchmark::RegisterBenchmark("Peak/maddubs", BM_Peak, peak_maddubs, 8, 8 * 32);
  benchmark::RegisterBenchmark("Peak/maddubs+add", BM_Peak, peak_maddubs_add, 16, 8 * 32);
  benchmark::RegisterBenchmark("Peak/maddubs+madd", BM_Peak, peak_maddubs_madd, 16, 8 * 32);
  benchmark::RegisterBenchmark("Peak/maddubs+sign", BM_Peak, peak_maddubs_sign, 16, 8 * 32);
  benchmark::RegisterBenchmark("Peak/maddubs+fma", BM_Peak, peak_maddubs_fma, 16, 8 * 32 + 8 * 8);
  benchmark::RegisterBenchmark("Peak/fma", BM_Peak, peak_fma, 8, 8 * 8);
  benchmark::RegisterBenchmark("Peak/sign+add", BM_Peak, peak_sign_add, 16, 0);
  benchmark::RegisterBenchmark("Peak/q8_unit", BM_Peak, peak_q8_unit, 32, 8 * 32);
  benchmark::RegisterBenchmark("Peak/madd+add", BM_Peak, peak_madd_add, 32, 16 * 16);
#endif
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::IQ4_NL, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K, DType::IQ4_XS}) {
    for (int g : {1, 2}) {
      for (int t : {1, 2, 3, 4, 5, 6}) {
        const std::string name =
            "Kernel/" + std::string(dtype_name(type)) + "/g" + std::to_string(g) + "/t" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(), BM_Kernel, type, g, t, KernelIsa::Avx2, false);
        // KernelVnni/*, KernelAvxVnni/*: the vpdpbusd versions, where the CPU has AVX512-VNNI or AVX-VNNI.
        if (cpu_has_avx512_vnni())
          benchmark::RegisterBenchmark(("KernelVnni" + name.substr(6)).c_str(), BM_Kernel, type, g, t,
                                       KernelIsa::Avx512Vnni, false);
        if (cpu_has_avx_vnni())
          benchmark::RegisterBenchmark(("KernelAvxVnni" + name.substr(6)).c_str(), BM_Kernel, type, g, t,
                                       KernelIsa::AvxVnni, false);
      }
    }
  }
  // KernelUnpacked*/*: Q5_K (each build) and Q6_K (AVX2's kernel, which every tier runs) over unpacked quants.
  for (DType type : {DType::Q5_K, DType::Q6_K})
    for (int g : {1, 2})
      for (int t : {4, 6}) {
        const std::string name =
            "/" + std::string(dtype_name(type)) + "/g" + std::to_string(g) + "/t" + std::to_string(t);
        benchmark::RegisterBenchmark(("KernelUnpacked" + name).c_str(), BM_KernelKQuant, type, g, t, KernelIsa::Avx2,
                                     false, true);
        if (type == DType::Q6_K) continue;
        if (cpu_has_avx512_vnni())
          benchmark::RegisterBenchmark(("KernelUnpackedVnni" + name).c_str(), BM_KernelKQuant, type, g, t,
                                       KernelIsa::Avx512Vnni, false, true);
        if (cpu_has_avx_vnni())
          benchmark::RegisterBenchmark(("KernelUnpackedAvxVnni" + name).c_str(), BM_KernelKQuant, type, g, t,
                                       KernelIsa::AvxVnni, false, true);
      }
  // KernelZmm/*: pairs of groups in 512-bit registers, up to kMaxZmmTokens tokens.
  if (cpu_has_avx512_vnni())
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
      for (int g : {2, 4})
        for (int t = 1; t <= avx512zmm::kMaxZmmTokens; ++t)
          benchmark::RegisterBenchmark(
              ("KernelZmm/" + std::string(dtype_name(type)) + "/g" + std::to_string(g) + "/t" + std::to_string(t))
                  .c_str(),
              BM_Kernel, type, g, t, KernelIsa::Avx512Vnni, true);
  // KernelAmx/*: the same pairs with the integer products on the AMX tile unit, up to kMaxAmxTokens tokens.
  if (cpu_has_amx_int8())
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0})
      for (int g : {2, 4})
        for (int t : {1, 2, 4, 8, 12, 16})
          benchmark::RegisterBenchmark(
              ("KernelAmx/" + std::string(dtype_name(type)) + "/g" + std::to_string(g) + "/t" + std::to_string(t))
                  .c_str(),
              BM_KernelAmx, type, g, t);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
