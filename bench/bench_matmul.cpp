// Matmul throughput per weight dtype, as bytes of weights read per second, next to a STREAM-like
// triad and a plain read on the same thread pool: batch-1 decode should read weights at close to the
// triad bandwidth. Each matmul also reports `of_triad`: its bytes/s over the triad's best, measured once
// before the benchmarks start (in the context lines as triad_gb_s, 1e9 bytes/s; Google Benchmark's
// bytes_per_second counts 2^30). This host's bandwidth moves from run to run: compare within one run.
//
//   ./bench_matmul --benchmark_min_time=0.2
//   ./bench_matmul --threads=1 --benchmark_filter='Q4_0/.*tokens:16'   (pool size; default: every core)
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/triad.h"
#include "core/cpu_caches.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/large_buffer.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"
#include "pool_size_flag.h"

namespace {

using namespace kvserve;

double g_triad_bytes_per_s = 0;  // set in main before any benchmark runs

// Random bytes with every fp16 scale / float element overwritten by a small sane value, so the timings
// never see NaN/Inf or denormal arithmetic.
std::vector<uint8_t> make_weights(DType type, int64_t rows, int64_t cols) {
  std::mt19937 rng(42);
  std::vector<uint8_t> data(row_bytes(type, cols) * rows);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const int64_t n = rows * cols;
  const uint16_t small_half = fp32_to_fp16(0.01f);
  auto set_half = [&](size_t offset) { std::memcpy(data.data() + offset, &small_half, 2); };
  const size_t block_bytes = static_cast<size_t>(dtype_info(type).block_bytes);
  const int64_t n_blocks = n / dtype_info(type).block_elems;
  switch (type) {
    case DType::F32: {
      auto* f = reinterpret_cast<float*>(data.data());
      for (int64_t i = 0; i < n; ++i) f[i] = 0.01f * static_cast<float>(i % 17);
      break;
    }
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) set_half(2 * i);
      break;
    case DType::BF16: {
      const uint16_t v = fp32_to_bf16(0.01f);
      for (int64_t i = 0; i < n; ++i) std::memcpy(data.data() + 2 * i, &v, 2);
      break;
    }
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      for (int64_t b = 0; b < n_blocks; ++b) set_half(b * block_bytes);
      break;
    case DType::Q2_K:
      for (int64_t b = 0; b < n_blocks; ++b) {
        set_half(b * block_bytes + offsetof(BlockQ2_K, d));
        set_half(b * block_bytes + offsetof(BlockQ2_K, dmin));
      }
      break;
    case DType::Q3_K:
      for (int64_t b = 0; b < n_blocks; ++b) set_half(b * block_bytes + offsetof(BlockQ3_K, d));
      break;
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      for (int64_t b = 0; b < n_blocks; ++b) {
        set_half(b * block_bytes);
        set_half(b * block_bytes + 2);
      }
      break;
    case DType::Q6_K:
      for (int64_t b = 0; b < n_blocks; ++b) set_half(b * block_bytes + offsetof(BlockQ6_K, d));
      break;
    case DType::MXFP4:  // 2^-7, as 0.01 is near
      for (int64_t b = 0; b < n_blocks; ++b) data[static_cast<size_t>(b) * block_bytes] = 121;
      break;
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
      for (int64_t b = 0; b < n_blocks; ++b) set_half(b * block_bytes);
      break;
    case DType::IQ1_M:  // its fp16 scale is spread over the top nibbles of the last 8 bytes
      for (int64_t b = 0; b < n_blocks; ++b)
        for (int k = 0; k < 4; ++k) {
          uint8_t* hi = data.data() + b * block_bytes + block_bytes - 8 + 2 * k + 1;
          *hi = static_cast<uint8_t>((*hi & 0x0F) | (((small_half >> (4 * k)) & 0xF) << 4));
        }
      break;
    default: break;
  }
  return data;
}

// copies > 1: that many separate copies of the weights, multiplied in turn, so that (at 128 MiB and more
// in all, and four times the last-level caches) every call reads its weights from memory as a model's
// layers do, not from the L3 cache.
void BM_Matmul(benchmark::State& state, DType type, int64_t rows, int64_t cols, int64_t n_tokens, int copies) {
  const auto data = make_weights(type, rows, cols);
  std::vector<Tensor> ws(copies);
  std::vector<std::shared_ptr<uint8_t[]>> interleaved(copies);
  std::vector<std::vector<uint8_t>> plain(copies);
  for (int c = 0; c < copies; ++c) {
    Tensor& w = ws[c];
    w.type = type;
    w.ne = {cols, rows, 1, 1};
    w.n_dims = 2;
    plain[c] = data;
    w.data = plain[c].data();
    // As load_model does: the types with an 8-row interleaved layout run on that copy.
    if (has_interleaved_layout(type) && cpu_has_avx2()) {
      w.interleaved_pairs = interleaved_pairs_preferred(type);
      interleaved[c] = interleave_rows(w, w.interleaved_pairs);
      w.interleaved = interleaved[c].get();
    }
  }
  std::vector<float> x(n_tokens * cols), y(n_tokens * rows);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (auto& v : x) v = dist(rng);
  int next = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    matmul(ws[next], x.data(), n_tokens, y.data());
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(ws[0].bytes());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  // The loop's own wall time: a kIsRate counter would print its ratio with a "/s".
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (g_triad_bytes_per_s > 0 && seconds > 0) state.counters["of_triad"] = bytes / seconds / g_triad_bytes_per_s;
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n_tokens), benchmark::Counter::kIsRate);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens * rows * cols),
                                               benchmark::Counter::kIsRate);
}

// a = b + s * c over arrays far larger than the caches, split across the pool like matmul's rows.
void BM_Triad(benchmark::State& state) {
  const int64_t n = bench::triad_floats_beyond_caches(int64_t{32} << 20);  // 128 MiB per array and more
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  ThreadPool& pool = ThreadPool::global();
  for (auto _ : state) {
    pool.parallel_for(
        n, [&](int64_t begin, int64_t end) { bench::triad_range(a.data(), b.data(), c.data(), begin, end); }, 4096);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * n * static_cast<int64_t>(sizeof(float)));
}

// Reads only (what a matvec does with its weights): a sum over one array (256 MiB, or four times the
// last-level caches where that is more) split across the pool.
// Integer sums, so the compiler vectorizes them; the loop is far faster than memory on any AVX2 core.
void BM_Read(benchmark::State& state) {
  const int64_t n = beyond_caches_bytes(int64_t{256} << 20) / static_cast<int64_t>(sizeof(uint32_t));
  std::vector<uint32_t> a(n, 1);
  ThreadPool& pool = ThreadPool::global();
  std::vector<uint32_t> sums(static_cast<size_t>(pool.size()) * 16);
  for (auto _ : state) {
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          uint32_t s = 0;
          for (int64_t i = begin; i < end; ++i) s += a[i];
          sums[static_cast<size_t>(begin * pool.size() / n) * 16] += s;
        },
        4096);
    benchmark::DoNotOptimize(sums.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * static_cast<int64_t>(sizeof(uint32_t)));
}

// Short cold reads: `bytes` (a SmolLM2 matrix is 69-553 KiB) split over the pool, rotating through
// copies far larger than the caches, as a decode step's matmuls do. Against one thread (--threads=1)
// this shows what a fork/join and a stream's first misses cost. On this host (2 vCPUs) a throwaway
// version with the kernels' 8 KiB prefetch read 64 KiB on two threads in ~1.8 us at times and in
// 2.1-3.5 us at others (one thread: ~1.7 us), when an empty fork/join cost ~0.6 us instead of ~0.05
// and two threads read large arrays at ~80 GB/s instead of ~47: the vCPUs seem to move between
// sharing one L3 and sitting on two.
void BM_ShortRead(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t copies = static_cast<size_t>(beyond_caches_bytes(int64_t{256} << 20)) / bytes;
  const auto buf = allocate_large_buffer(copies * bytes);
  for (size_t i = 0; i < copies * bytes; i += 64) buf[i] = 1;
  ThreadPool& pool = ThreadPool::global();
  // One relaxed add a piece: a piece may run on either thread (balanced), so no per-thread slot.
  std::atomic<uint32_t> sum{0};
  size_t copy = 0;
  for (auto _ : state) {
    const uint8_t* base = buf.get() + copy * bytes;
    copy = (copy + 1) % copies;
    pool.parallel_for_balanced(
        static_cast<int64_t>(bytes / 64),
        [&](int64_t begin, int64_t end) {
          uint32_t s = 0;
          for (int64_t line = begin; line < end; ++line) s += base[line * 64];
          sum.fetch_add(s, std::memory_order_relaxed);
        },
        512);
    benchmark::DoNotOptimize(sum.load(std::memory_order_relaxed));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("Triad", BM_Triad)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("Read", BM_Read)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("ShortRead", BM_ShortRead)
      ->Arg(64 << 10)
      ->Arg(207 << 10)
      ->Arg(553 << 10)
      ->Arg(2 << 20)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  const DType types[] = {DType::F32,    DType::F16,     DType::BF16,  DType::Q8_0,  DType::Q4_0,    DType::Q4_1,
                         DType::Q5_0,   DType::Q5_1,    DType::Q2_K,  DType::Q3_K,  DType::IQ4_NL,  DType::MXFP4,
                         DType::IQ4_XS, DType::Q4_K,    DType::Q5_K,  DType::Q6_K,  DType::IQ2_XXS, DType::IQ2_XS,
                         DType::IQ2_S,  DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M};
  const int64_t shapes[][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};  // rows x cols
  for (DType type : types) {
    for (const auto& shape : shapes) {
      // Prefill-sized batches for the float types: their tiles' shape and the ranges a row is taken in are
      // tuned against them.
      const bool float_type = type == DType::F32 || type == DType::F16 || type == DType::BF16;
      for (int64_t n_tokens : {int64_t{1}, int64_t{16}, int64_t{float_type ? 128 : 0}}) {
        if (n_tokens == 0) continue;
        const std::string name = "Matmul/" + std::string(dtype_name(type)) + "/" + std::to_string(shape[0]) + "x" +
                                 std::to_string(shape[1]) + "/tokens:" + std::to_string(n_tokens);
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, type, shape[0], shape[1], n_tokens, 1)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        const auto bytes = static_cast<int64_t>(row_bytes(type, shape[1])) * shape[0];
        const int copies = static_cast<int>(beyond_caches_bytes(int64_t{128} << 20) / bytes + 1);
        benchmark::RegisterBenchmark((name + "/cold").c_str(), BM_Matmul, type, shape[0], shape[1], n_tokens, copies)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  // Llama-3.2-1B's output head (128256 x 2048): a fifth of the MACs of a batched decode step, and far larger
  // than any cache, so there is no hot variant.
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    for (int64_t n_tokens : {1, 16}) {
      const std::string name =
          "Matmul/" + std::string(dtype_name(type)) + "/128256x2048/tokens:" + std::to_string(n_tokens);
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, type, int64_t{128256}, int64_t{2048}, n_tokens, 1)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  // SmolLM2-135M's shapes (the default model, Q4_1): per-call costs that do not scale with the weights
  // (waking the pool, the first misses of a call) weigh more on these small matrices.
  const int64_t small_shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}};
  for (DType type : {DType::Q4_1, DType::Q8_0}) {
    for (const auto& shape : small_shapes) {
      const std::string name = "Matmul/" + std::string(dtype_name(type)) + "/" + std::to_string(shape[0]) + "x" +
                               std::to_string(shape[1]) + "/tokens:1";
      const auto bytes = static_cast<int64_t>(row_bytes(type, shape[1])) * shape[0];
      const int copies = static_cast<int>(beyond_caches_bytes(int64_t{128} << 20) / bytes + 1);
      // Hot (in L2): what a call costs besides its memory reads.
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, type, shape[0], shape[1], 1, 1)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark((name + "/cold").c_str(), BM_Matmul, type, shape[0], shape[1], 1, copies)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  if (!bench::take_pool_size_flag(argc, argv, "bench_matmul")) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("threads", std::to_string(ThreadPool::global().size()));
  const bench::TriadResult triad = bench::measure_triad(ThreadPool::global());
  g_triad_bytes_per_s = triad.best_gb_s * 1e9;
  benchmark::AddCustomContext("triad_gb_s", std::to_string(triad.best_gb_s));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
