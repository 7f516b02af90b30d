// What one core of this machine can compute, next to what the matmul kernels reach: the ceilings that
// the int8 (vpmaddubsw) and f32 (FMA) inner loops run into once weights are in cache. Single thread,
// operands in registers or L1, so memory never limits.
//
//   Peak/maddubs        vpmaddubsw alone, 8 independent chains: the int8 multiply ceiling
//   Peak/maddubs+add    vpmaddubsw then vpaddw into an accumulator: the Q4 kernels' inner step
//   Peak/fma            vfmadd231ps, 12 independent chains: the f32 ceiling (attention, F32/F16 weights)
//   Peak/fma+add        one FMA and one independent integer add per step: do different ops share a limit?
//   Kernel/<type>/t<T>  the interleaved 8-row kernel (Q4_0/Q4_1/Q8_0) on one L1-resident 8-row group
//
// Counters: MAC/s (int8 or f32 multiply-adds) and vec_ops/s (vector instructions issued). On the
// 2-core CI machine (AMD EPYC under KVM) every 256-bit op, whatever its kind, issues at ~1.2 per ns per
// core, so a kernel's speed is its vector instruction count: see README "CPU kernels".
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

enum class PeakOp { Maddubs, MaddubsAdd, Fma, FmaAdd };

// Returns something derived from every chain so the compiler cannot drop any of them.
__attribute__((target("avx2,fma"))) __attribute__((noinline)) int run_peak(PeakOp op, int64_t steps) {
  __m256i y = _mm256_set1_epi8(3);
  __m256i w[8], acc[8];
  __m256 f[12];
  for (int i = 0; i < 8; ++i) {
    w[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
    acc[i] = _mm256_setzero_si256();
  }
  for (int i = 0; i < 12; ++i) f[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  const __m256i one = _mm256_set1_epi32(1);
  for (int64_t s = 0; s < steps; ++s) {
    switch (op) {
      case PeakOp::Maddubs:
        for (int i = 0; i < 8; ++i) w[i] = _mm256_maddubs_epi16(w[i], y);
        break;
      case PeakOp::MaddubsAdd:
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(w[i], y));
        break;
      case PeakOp::Fma:
        for (int i = 0; i < 12; ++i) f[i] = _mm256_fmadd_ps(f[i], m, c);
        break;
      case PeakOp::FmaAdd:
        for (int i = 0; i < 8; ++i) {
          f[i] = _mm256_fmadd_ps(f[i], m, c);
          acc[i] = _mm256_add_epi32(acc[i], one);
        }
        break;
    }
    // Opaque to the optimizer: the loop body cannot be hoisted or folded.
    asm volatile("" : "+x"(y), "+x"(m));
  }
  __m256i r = _mm256_setzero_si256();
  for (int i = 0; i < 8; ++i) r = _mm256_xor_si256(r, _mm256_xor_si256(w[i], acc[i]));
  __m256 fs = f[0];
  for (int i = 1; i < 12; ++i) fs = _mm256_add_ps(fs, f[i]);
  return _mm256_extract_epi32(r, 0) ^ static_cast<int>(_mm256_cvtss_f32(fs));
}

void BM_Peak(benchmark::State& state, PeakOp op) {
  if (!cpu_has_avx2_fma_f16c()) {
    state.SkipWithError("needs AVX2/FMA");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(run_peak(op, kSteps));
  // Per step of each PeakOp: vector instructions issued and multiply-adds done.
  constexpr struct { double ops, macs; } kPerStep[] = {{8, 8 * 32}, {16, 8 * 32}, {12, 12 * 8}, {16, 8 * 8}};
  const auto [ops, macs] = kPerStep[static_cast<int>(op)];
  const double steps = static_cast<double>(state.iterations()) * kSteps;
  state.counters["MAC/s"] = benchmark::Counter(steps * macs, benchmark::Counter::kIsRate);
  state.counters["vec_ops/s"] = benchmark::Counter(steps * ops, benchmark::Counter::kIsRate);
}

#endif  // __x86_64__

// One 8-row interleaved group of `n` columns (random quants, sane scales) times T packed activation rows,
// repeated: the kernel's own speed with everything in L1.
void BM_Kernel(benchmark::State& state, DType type, int n_tok) {
  if (!cpu_has_avx2_fma_f16c()) {
    state.SkipWithError("needs AVX2/FMA");
    return;
  }
  constexpr int64_t n = 2048;
  const int64_t nb = n / 32;
  const size_t block_bytes = interleaved_block_bytes(type);
  const size_t scale_bytes = type == DType::Q4_1 ? 32 : 16;
  std::mt19937 rng(1);
  std::vector<uint8_t> group(static_cast<size_t>(nb) * block_bytes);
  for (auto& b : group) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < nb; ++i) {
    auto* scales = reinterpret_cast<uint16_t*>(group.data() + i * block_bytes);
    for (size_t j = 0; j < scale_bytes / 2; ++j) scales[j] = fp32_to_fp16(0.01f);
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
  PackedActs32 acts[avx2::kMaxInterleavedTokens];
  for (int t = 0; t < n_tok; ++t) acts[t] = pack.token(t);
  const auto gemm = type == DType::Q4_0   ? avx2::gemm_interleaved_q4_0
                    : type == DType::Q4_1 ? avx2::gemm_interleaved_q4_1
                                          : avx2::gemm_interleaved_q8_0;
  float out[kInterleaveRows * avx2::kMaxInterleavedTokens];
  for (auto _ : state) {
    gemm(n, group.data(), acts, n_tok, out, kInterleaveRows);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * n * kInterleaveRows * n_tok,
                                               benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__x86_64__)
  benchmark::RegisterBenchmark("Peak/maddubs", BM_Peak, PeakOp::Maddubs);
  benchmark::RegisterBenchmark("Peak/maddubs+add", BM_Peak, PeakOp::MaddubsAdd);
  benchmark::RegisterBenchmark("Peak/fma", BM_Peak, PeakOp::Fma);
  benchmark::RegisterBenchmark("Peak/fma+add", BM_Peak, PeakOp::FmaAdd);
#endif
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    for (int t : {1, 4, 5, 6}) {
      const std::string name = "Kernel/" + std::string(dtype_name(type)) + "/t" + std::to_string(t);
      benchmark::RegisterBenchmark(name.c_str(), BM_Kernel, type, t);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
