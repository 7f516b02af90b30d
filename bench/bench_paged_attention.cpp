// Paged attention decode: one query token per sequence against contexts of 128 .. 16K tokens read through
// a block table, for GQA shapes of real models. Reports the K/V bytes read per second (the kernel is
// bandwidth-bound at long contexts: compare with bench_matmul's STREAM triad) and context tokens/s.
//
//   ./bench_paged_attention --benchmark_min_time=0.1
//   ./bench_paged_attention --benchmark_filter='Llama3_1B/.*/4096'
//   ./bench_paged_attention --threads=1 --benchmark_filter='SmolLM2.*single_f16'   (pool size)
//
// Variants:
//   <shape>/scattered/<ctx>   blocks at random physical places (a long-running server's pool)
//   <shape>/contiguous/<ctx>  blocks in order (a fresh pool)
//   <shape>/batch16/<ctx>     16 sequences decoding one token each, one call per sequence, scattered
//   <shape>/batch16_f16/<ctx> the same 16 sequences with an f16 cache (the engine's default) in one
//                             paged_attention_batch call, as the model runner makes in a decode step
//   <shape>/batch16_f16_cold/<ctx> batch16_f16 rotating through copies of the cache as single_f16_cold
//                             does: a batched decode step's layers read their K/V from memory
//   <shape>/single_f16/<ctx>  one sequence with an f16 cache, scattered: the engine's batch-1 decode
//   <shape>/single_f16_cold/<ctx>  the same, rotating through copies of the cache (64 MiB and more, and
//                             four times the last-level caches, in all) as a model's layers do, so every
//                             call reads its K/V from memory
//   <shape>/region/<ctx>      region_cold with one copy of the cache, which stays in the caches
//   <shape>/region_cold/<ctx> single_f16_cold the way a batch-1 decode step calls it (ModelRunner::
//                             forward_single_token): the (partition, KV head) units split evenly over the
//                             threads, each thread's run of partitions in one partition_heads call (the
//                             blocks in address order with their heads inside), a barrier, each thread
//                             merging its share of the heads
//   <shape>/region_cold_contiguous/<ctx> region_cold with the blocks in order: one request on a fresh pool
//                             (`kvserve bench -n 1`), where the core's stream prefetcher follows the blocks
//   <shape>/single_<q>/<ctx>, single_<q>_cold/<ctx>, region_cold_<q>/<ctx>  single_f16, single_f16_cold
//                             and region_cold with a quantized cache, <q> one of int8 (q8_0 rows: 34 bytes
//                             per 32 values, 0.53x the f16 bytes), int4 (q4_0: 18 bytes per 32, 0.28x) and
//                             fp8 (E4M3, 0.5x); bytes/s counts the bytes read, scales included
//   <shape>/reference/<ctx>   the scalar reference kernel, single-threaded
//   <shape>/prefill_<t>/<ctx> a prompt chunk: the last 256 tokens of a ctx-token prompt in one call, causal,
//                             the cache warm, <t> one of f32 f16 bf16 fp8 int8 int4 (pairs/s counts query
//                             head x position pairs)
//
// MQA_8x64 (one KV head) is where a single sequence has fewer items than threads: its context
// partitions are spread over the pool (paged_attention.cpp, the split path).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_caches.h"
#include "core/fp16.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kv_elem.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_impl.h"
#include "pool_size_flag.h"

namespace {

using namespace kvserve;

struct Shape {
  const char* name;
  int n_heads, n_kv_heads, head_dim;
};

constexpr Shape kShapes[] = {
    {"Llama3_1B", 32, 8, 64},    // Llama-3.2-1B: 4 query heads per KV head
    {"SmolLM2_135M", 9, 3, 64},  // SmolLM2-135M: 3 query heads per KV head
    {"Llama3_8B", 32, 8, 128},   // Llama-3-8B: 4 per KV head, head_dim 128
    {"MQA_8x64", 8, 1, 64},      // multi-query: one KV head for 8 query heads
    {"MLA_16x576", 16, 1, 576},  // DeepSeek-V2-Lite's absorbed latent attention: a 512 + 64 row, key and value
};

enum class Variant {
  Scattered,
  Contiguous,
  Batch16,
  Batch16F16,
  Batch16F16Cold,
  SingleF16,
  SingleF16Cold,
  Region,
  RegionCold,
  RegionColdContiguous,
  SingleQuant,
  SingleQuantCold,
  RegionColdQuant,
  Reference
};

constexpr int kBlockSize = 16;

// One layer's K/V pool holding `n_seqs` sequences of `ctx` tokens each, and their block tables.
struct Pool {
  std::vector<float> k, v;
  std::vector<uint16_t> k16, v16;  // the same values rounded to f16
  std::vector<unsigned char> kq, vq;  // and as rows of a quantized type (encode_kv_row)
  std::vector<std::vector<int32_t>> tables;
  std::vector<float> q, out;
  int64_t block_stride = 0;
};

Pool make_pool(const Shape& s, int64_t ctx, int n_seqs, bool scattered, KVElemType qtype) {
  Pool p;
  const int64_t blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  const int64_t n_blocks = blocks_per_seq * n_seqs;
  p.block_stride = int64_t{s.n_kv_heads} * kBlockSize * s.head_dim;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  p.k.resize(static_cast<size_t>(n_blocks * p.block_stride));
  p.v.resize(p.k.size());
  for (float& x : p.k) x = uni(rng);
  for (float& x : p.v) x = uni(rng);
  for (float x : p.k) p.k16.push_back(fp32_to_fp16(x));
  for (float x : p.v) p.v16.push_back(fp32_to_fp16(x));
  if (qtype != KVElemType::F32 && (!kv_elem_is_block_type(qtype) || s.head_dim % kKVQuantGroup == 0)) {
    const auto n = static_cast<int64_t>(p.k.size());
    p.kq.resize(kv_bytes(qtype, n));
    p.vq.resize(kv_bytes(qtype, n));
    encode_kv_row(qtype, p.k.data(), n, p.kq.data());
    encode_kv_row(qtype, p.v.data(), n, p.vq.data());
  }
  std::vector<int32_t> phys(static_cast<size_t>(n_blocks));
  std::iota(phys.begin(), phys.end(), 0);
  if (scattered) std::shuffle(phys.begin(), phys.end(), rng);
  for (int i = 0; i < n_seqs; ++i)
    p.tables.emplace_back(phys.begin() + i * blocks_per_seq, phys.begin() + (i + 1) * blocks_per_seq);
  p.q.resize(static_cast<size_t>(n_seqs) * s.n_heads * s.head_dim);
  for (float& x : p.q) x = uni(rng);
  p.out.resize(p.q.size());
  return p;
}

// One token's attention as forward_single_token computes it (its units split evenly rather than by cost:
// the same split when every partition is full).
void attend_as_decode_region(const PagedAttentionArgs& a, ThreadPool& pool) {
  const detail::SimdWorker* worker = detail::simd_worker_in_use();
  if (worker == nullptr) {
    paged_attention(a, pool);
    return;
  }
  const int64_t n_parts = detail::partition_count(a, 0);
  const int64_t kvh = a.n_kv_heads;
  const int64_t n_units = n_parts * kvh;
  const size_t unit_floats = detail::partition_partial_floats(a);
  // Not thread_local: the pool's threads must see this one.
  static std::vector<float> partials;
  partials.resize(static_cast<size_t>(n_units) * unit_floats);
  pool.run([&](int ti, int nt) {
    detail::attend_decode_units(*worker, a, n_units * ti / nt, n_units * (ti + 1) / nt, partials.data());
    pool.barrier(ti);
    for (int64_t h = kvh * ti / nt; h < kvh * (ti + 1) / nt; ++h)
      worker->merge(a, 0, static_cast<int>(h), partials.data() + static_cast<size_t>(h * n_parts) * unit_floats);
  });
}

void BM_PagedDecode(benchmark::State& state, Shape s, Variant variant, KVElemType qtype) {
  const int64_t ctx = state.range(0);
  const bool batch16 =
      variant == Variant::Batch16 || variant == Variant::Batch16F16 || variant == Variant::Batch16F16Cold;
  const int n_seqs = batch16 ? 16 : 1;
  const bool quant =
      variant == Variant::SingleQuant || variant == Variant::SingleQuantCold || variant == Variant::RegionColdQuant;
  Pool p = make_pool(s, ctx, n_seqs, variant != Variant::Contiguous && variant != Variant::RegionColdContiguous,
                     quant ? qtype : KVElemType::F32);
  const bool region = variant == Variant::Region || variant == Variant::RegionCold ||
                      variant == Variant::RegionColdContiguous || variant == Variant::RegionColdQuant;
  const bool cold = variant == Variant::SingleF16Cold || variant == Variant::Batch16F16Cold ||
                    variant == Variant::RegionCold || variant == Variant::RegionColdContiguous ||
                    variant == Variant::SingleQuantCold || variant == Variant::RegionColdQuant;
  if (quant && p.kq.empty()) {
    state.SkipWithError("int8 and int4 need head_dim a multiple of 32");
    return;
  }
  if (cold || region || quant) variant = batch16 ? Variant::Batch16F16 : Variant::SingleF16;
  // Cold: copies of the f16 (quantized) K and V, one pair per "layer", used in turn; in one huge-page buffer
  // like the engine's KV pool (on 4 KiB pages every block would also miss the TLB).
  const void* typed_k = quant ? static_cast<const void*>(p.kq.data()) : p.k16.data();
  const void* typed_v = quant ? static_cast<const void*>(p.vq.data()) : p.v16.data();
  const size_t half_bytes = quant ? p.kq.size() : p.k16.size() * sizeof(uint16_t);
  const int copies =
      cold ? static_cast<int>(static_cast<size_t>(beyond_caches_bytes(int64_t{64} << 20)) / (2 * half_bytes) + 1) : 1;
  std::shared_ptr<uint8_t[]> cold_kv = allocate_large_buffer(cold ? copies * 2 * half_bytes : 1);
  for (int c = 0; cold && c < copies; ++c) {
    std::memcpy(cold_kv.get() + (2 * c) * half_bytes, typed_k, half_bytes);
    std::memcpy(cold_kv.get() + (2 * c + 1) * half_bytes, typed_v, half_bytes);
  }
  ThreadPool& pool = ThreadPool::global();
  PagedAttentionArgs a;
  a.n_tokens = 1;
  a.n_heads = s.n_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.head_dim = s.head_dim;
  a.block_size = kBlockSize;
  a.pos0 = ctx - 1;  // the new token is the ctx-th: it attends to all ctx positions
  a.k_cache = p.k.data();
  a.v_cache = p.v.data();
  a.block_stride = p.block_stride;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const size_t q_stride = static_cast<size_t>(s.n_heads) * s.head_dim;
  std::vector<PagedAttentionArgs> batch;
  if (variant == Variant::Batch16F16 || variant == Variant::SingleF16) {
    a.k_cache = typed_k;
    a.v_cache = typed_v;
    a.kv_type = quant ? qtype : KVElemType::F16;
    for (int i = 0; i < n_seqs; ++i) {
      a.q = p.q.data() + i * q_stride;
      a.out = p.out.data() + i * q_stride;
      a.block_table = p.tables[static_cast<size_t>(i)].data();
      batch.push_back(a);
    }
  }
  int next = 0;
  for (auto _ : state) {
    if (copies > 1) {
      const int c = next;
      next = (next + 1) % copies;
      for (auto& b : batch) {
        b.k_cache = cold_kv.get() + (2 * c) * half_bytes;
        b.v_cache = cold_kv.get() + (2 * c + 1) * half_bytes;
      }
    }
    if (region) {
      attend_as_decode_region(batch[0], pool);
      benchmark::DoNotOptimize(p.out.data());
      benchmark::ClobberMemory();
      continue;
    }
    if (!batch.empty()) {
      paged_attention_batch(batch, pool);
      benchmark::DoNotOptimize(p.out.data());
      benchmark::ClobberMemory();
      continue;
    }
    for (int i = 0; i < n_seqs; ++i) {
      a.q = p.q.data() + i * q_stride;
      a.out = p.out.data() + i * q_stride;
      a.block_table = p.tables[static_cast<size_t>(i)].data();
      if (variant == Variant::Reference)
        paged_attention_ref(a);
      else
        paged_attention(a, pool);
    }
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  const int64_t elem_bytes = variant == Variant::Batch16F16 || variant == Variant::SingleF16 ? 2 : 4;
  const int64_t row_bytes =
      quant ? static_cast<int64_t>(kv_bytes(qtype, s.head_dim)) : s.head_dim * elem_bytes;
  const int64_t kv_bytes = 2 * ctx * s.n_kv_heads * row_bytes * n_seqs;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kv_bytes);
  state.counters["ctx_tokens/s"] =
      benchmark::Counter(static_cast<double>(ctx * n_seqs), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = variant == Variant::Reference ? 1 : pool.size();
}

// A prompt chunk's attention: the last kPrefillChunk tokens of a ctx-token prompt, each attending causally
// to the positions before it, one call on the pool as ModelRunner's prefill makes (cache warm).
constexpr int64_t kPrefillChunk = 256;

void BM_PagedPrefill(benchmark::State& state, Shape s, KVElemType type) {
  const int64_t ctx = state.range(0);
  Pool p = make_pool(s, ctx, 1, true, type == KVElemType::F16 ? KVElemType::F32 : type);
  if (kv_elem_is_block_type(type) && p.kq.empty()) {
    state.SkipWithError("int8 and int4 need head_dim a multiple of 32");
    return;
  }
  PagedAttentionArgs a;
  a.n_tokens = kPrefillChunk;
  a.n_heads = s.n_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.head_dim = s.head_dim;
  a.block_size = kBlockSize;
  a.pos0 = ctx - kPrefillChunk;
  a.block_table = p.tables[0].data();
  a.block_stride = p.block_stride;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.kv_type = type;
  // The pool's copy of K or V in `type`.
  const auto typed = [type](const auto& f32, const auto& f16, const auto& encoded) -> const void* {
    if (type == KVElemType::F32) return f32.data();
    return type == KVElemType::F16 ? static_cast<const void*>(f16.data()) : encoded.data();
  };
  a.k_cache = typed(p.k, p.k16, p.kq);
  a.v_cache = typed(p.v, p.v16, p.vq);
  std::vector<float> q(static_cast<size_t>(kPrefillChunk) * s.n_heads * s.head_dim), out(q.size());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (float& x : q) x = uni(rng);
  a.q = q.data();
  a.out = out.data();
  ThreadPool& pool = ThreadPool::global();
  for (auto _ : state) {
    paged_attention(a, pool);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // Query-key pairs scored: each chunk token attends to every position up to its own.
  const double pairs = static_cast<double>(kPrefillChunk) * static_cast<double>(ctx - kPrefillChunk) +
                       static_cast<double>(kPrefillChunk) * (kPrefillChunk + 1) / 2.0;
  state.counters["pairs/s"] =
      benchmark::Counter(pairs * s.n_heads, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(kPrefillChunk), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  const std::pair<const char*, Variant> variants[] = {{"scattered", Variant::Scattered},
                                                      {"contiguous", Variant::Contiguous},
                                                      {"batch16", Variant::Batch16},
                                                      {"batch16_f16", Variant::Batch16F16},
                                                      {"batch16_f16_cold", Variant::Batch16F16Cold},
                                                      {"single_f16", Variant::SingleF16},
                                                      {"single_f16_cold", Variant::SingleF16Cold},
                                                      {"region", Variant::Region},
                                                      {"region_cold", Variant::RegionCold},
                                                      {"region_cold_contiguous", Variant::RegionColdContiguous},
                                                      {"reference", Variant::Reference}};
  const std::pair<const char*, Variant> quant_variants[] = {{"single_{}", Variant::SingleQuant},
                                                            {"single_{}_cold", Variant::SingleQuantCold},
                                                            {"region_cold_{}", Variant::RegionColdQuant}};
  const std::pair<const char*, KVElemType> quant_types[] = {
      {"int8", KVElemType::Q8_0}, {"int4", KVElemType::Q4_0}, {"fp8", KVElemType::FP8_E4M3}};
  struct Entry {
    std::string name;
    Variant variant;
    KVElemType qtype;
  };
  std::vector<Entry> entries;
  for (const auto& [vname, v] : variants) entries.push_back({vname, v, KVElemType::F32});
  for (const auto& [pattern, v] : quant_variants) {
    for (const auto& [qname, q] : quant_types) {
      std::string name = pattern;
      name.replace(name.find("{}"), 2, qname);
      entries.push_back({name, v, q});
    }
  }
  const std::pair<const char*, KVElemType> prefill_types[] = {
      {"f32", KVElemType::F32},  {"f16", KVElemType::F16},  {"bf16", KVElemType::BF16}, {"fp8", KVElemType::FP8_E4M3},
      {"int8", KVElemType::Q8_0}, {"int4", KVElemType::Q4_0}};
  for (const Shape& s : kShapes) {
    for (const auto& [tname, t] : prefill_types) {
      const std::string name = std::string(s.name) + "/prefill_" + tname;
      benchmark::RegisterBenchmark(name.c_str(), BM_PagedPrefill, s, t)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime()
          ->Arg(512)
          ->Arg(2048);
    }
    for (const Entry& e : entries) {
      const Variant v = e.variant;
      const std::string name = std::string(s.name) + "/" + e.name;
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_PagedDecode, s, v, e.qtype)
                    ->Unit(benchmark::kMicrosecond)
                    ->UseRealTime();
      // Batches of 16 and the scalar reference stop at 4K (16 x 4K tokens of Llama3_8B are 512 MiB of f32 K/V).
      const bool small = v == Variant::Batch16 || v == Variant::Batch16F16 || v == Variant::Batch16F16Cold ||
                         v == Variant::Reference || v == Variant::SingleF16Cold || v == Variant::Region ||
                         v == Variant::RegionCold || v == Variant::RegionColdContiguous ||
                         v == Variant::SingleQuantCold || v == Variant::RegionColdQuant;
      for (int64_t ctx : {128, 512, 2048, 4096, 8192, 16384})
        if (!small || ctx <= 4096) b->Arg(ctx);
    }
  }
  if (!bench::take_pool_size_flag(argc, argv, "bench_paged_attention")) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
