#pragma once
// The 8-row interleaved Q4_0 / Q4_1 / Q8_0 kernels (interleaved_rows.h) and the record helpers every
// interleaved kernel uses. Included by interleaved_rows_avx2.cpp (kVnni = false: vpmaddubsw sums) and
// interleaved_rows_avx512vnni.cpp (kVnni = true: vpdpbusd, which multiplies and adds 4 byte pairs into
// int32 in one instruction). Both compute the same exact integer block sums and then the same float
// operations, so their results are bit-identical.
//
// Everything here has internal linkage on purpose: the two files are compiled for different
// instruction sets, and one shared inline definition would let the linker keep either copy for both.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/block32_tiles.h"
#include "kernels/cpu/interleaved_rows.h"

namespace kvserve {
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp): see above

using avx2_inline::broadcast_4_bytes;

// vpdpbusd on 256-bit registers, for the kVnni kernels: EVEX-encoded in the AVX512-VNNI build
// (interleaved_rows_avx512vnni.cpp), VEX-encoded in the AVX-VNNI one (interleaved_rows_avxvnni.cpp). The AVX2
// build never calls it.
[[gnu::always_inline]] inline __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u8, s8);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#else
  (void)u8;
  (void)s8;
  __builtin_unreachable();
  return acc;
#endif
}

// Vector registers the build has: AVX-512VL's 32 (ymm0-31) or AVX2's 16. The kVnni kernels size their token
// passes by it (an AVX-VNNI core runs them with 16).
#if defined(__AVX512VL__)
constexpr int kVectorRegisters = 32;
#else
constexpr int kVectorRegisters = 16;
#endif

// Whether a kVnni kernel is the AVX-512 build (avx512vnni::) rather than AVX-VNNI's (avxvnni::): they share
// one text, and a few choices measured on AVX-512 hosts hold only there (q32_prefetch_distance).
template <bool kVnni>
constexpr bool kAvx512VnniBuild = kVnni && kVectorRegisters == 32;

// A group's records are read front to back. Batched passes and prefill ask for each record 2 KiB ahead as
// they take it (they multiply a chunk from L2 several times; 1B-shaped Q4_0 decode measured 1.19x and
// Q8_0 ~1.09x with it when it was added).
// Prefetches past the end of the weights are harmless: they never fault.
constexpr size_t kPrefetchAhead = 2048;
// Q5_K's decode distance (interleaved_kquant_kernels.h).
constexpr size_t kQ5KDecodePrefetchAhead = 8192;
// Decode (one token) of Q4_0, Q4_1, Q8_0 with vpdpbusd (and Q4_K) asks for nothing: the
// core's own stream prefetcher keeps more lines in flight than the software prefetches, which take the L1
// miss buffers the prefetcher's lines are waiting to fill. Measured on Zen 4 (2026-11-29), one process
// alternating the two every 4 decode steps: SmolLM2-135M Q4_1 0.978x the step time on two threads (median
// of 12) and ~0.94x on one; 1B-shaped Q4_0 0.92-0.99x, Q8_0 0.93-0.98x, Q4_K 0.80-1.00x; bench_matmul cold one-token
// Q8_0 8192x2048 ~1.2x on one thread. (An earlier host, with a triad of 65-71 GB/s, measured the 8 KiB
// distance 1.05-1.17x over 2 KiB for Q4; Q5_K and Q6_K still lose without theirs: Q6_K ~3x slower.)
// The AVX2 kernels (cores without AVX512-VNNI; Q4_K too) ask 8 KiB ahead for one token instead: Zen 3 host
// (2026-12-02; 2 vCPUs, 32 MiB L3, triad ~20 GB/s) batch-1 decode, alternating binaries against asking for
// nothing: SmolLM2-135M Q4_1 ~1.12x (8 rounds, every one faster; 2 KiB ~1.03x), 1B-shaped Q4_0 1.11 +- 0.03x
// (8 rounds), Q8_0 1.04 +- 0.05x (6 rounds, already ~0.9 of the bound).
// The AVX-VNNI build (16 registers) of the vpdpbusd kernels asks 8 KiB ahead too: Xeon (Emerald Rapids,
// KVSERVE_NO_AVX512=1), 1B-shaped batch-1 decode after 512 tokens, alternating binaries, 3 rounds: Q4_0
// 20.4-21.8 -> 29.7-33.0 tok/s (~1.5x), Q4_K 24.3-24.9 -> 30.6-31.3 (~1.25x), the AVX2 kernels' rate.
constexpr size_t kAvx2DecodePrefetchAhead = 8192;
template <bool kVnni>
constexpr size_t q32_prefetch_distance(int T) {
  return T > 1 ? kPrefetchAhead : kAvx512VnniBuild<kVnni> ? 0 : kAvx2DecodePrefetchAhead;
}

// Whether a VNNI kernel sums each block in two int32 chains (the even and the odd quant vectors, added at
// the block's end) instead of one chain of 8 dependent vpdpbusd. With one token there are only 1-2 such
// chains a block (one per group or pair), each ~8 vpdpbusd latencies long, and the block's float work
// waits on it: the core's scheduler fills with waiting instructions before it reaches far into the next
// blocks. Integer sums are exact, so the bits are the same. Warm one-token calls, one process
// alternating old and new (Zen 4, 576 and 2048 columns): 8-row Q4_0 / Q4_1 groups 0.86-0.90x the time,
// Q8_0 0.95-0.97x, the pair kernels 0.95-0.96x (Q4) and ~1.0x (Q8_0). Batch-1 decode reads its weights from
// memory and was within noise (SmolLM2, in-process A/B: 0.975-1.024x). Many tokens already give many
// independent chains, and doubling their sums would outgrow the registers.
constexpr bool two_vnni_chains(int chains_per_block) { return chains_per_block <= 2; }

// kAhead 0 asks for nothing. always_inline: see far_stream below.
template <size_t kRecordBytes, size_t kAhead = kPrefetchAhead>
[[gnu::always_inline]] inline void prefetch_ahead(const uint8_t* rec) {
  if constexpr (kAhead == 0) return;
  for (size_t off = 0; off < kRecordBytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(rec + kAhead + off), _MM_HINT_T0);
}

// Calls f.template operator()<T>() with T = n_tok as a compile-time constant, 1..kMax (larger counts
// get kMax): every token count has its own fully unrolled kernel.
template <int kMax, typename F>
inline void with_token_count(int n_tok, F&& f) {
  if constexpr (kMax > 1) {
    if (n_tok < kMax) {
      with_token_count<kMax - 1>(n_tok, f);
      return;
    }
  }
  f.template operator()<kMax>();
}

// Hides how a value was computed from the optimizer. Integer adds are associative, so GCC rebalances a
// chain of T x 8 maddubs/add into trees, computes all products first and spills them; an opaque running
// sum keeps each product consumed right after it is made.
template <typename V>
inline void opaque(V& v) {
  asm("" : "+x"(v));
}

// Bytes of one (group, block) record (interleaved_rows.h): fp16 scales (and Q4_1 mins), then quants.
template <bool kQ4_1>
constexpr size_t kQ4RecordBytes = (kQ4_1 ? 32 : 16) + 128;
constexpr size_t kQ8_0RecordBytes = 16 + 256;
constexpr size_t kQ5_0RecordBytes = 16 + 128 + 32;
constexpr size_t kMXFP4RecordBytes = 8 + 128;

// The far stream's bytes per block of kBlockCols columns, for records of kRecordBytes per 8-row group.
template <size_t kRecordBytes, int kBlockCols = 32>
constexpr size_t far_bytes_per_block() {
  return avx2::far_prefetch_bytes_per_32(kRecordBytes * 32 / kBlockCols) * (kBlockCols / 32);
}

// Block i's share of the far stream, into L2 (the caller's next weights, needed only after this call and
// its repeats), for weights of kRecordBytes per 8-row group and block of kBlockCols columns (32, or 256 for
// the K-quants), so the far stream runs at the same bytes per column for every type.
// always_inline: GCC 12's ipa-pure-const takes a function that only prefetches for `const` and deletes
// calls to it that were not inlined early (this one, with its loop, was not: every far prefetch vanished).
template <size_t kRecordBytes, int kBlockCols = 32>
[[gnu::always_inline]] inline void far_stream(const uint8_t* far, int64_t i) {
  if (far == nullptr) return;
  constexpr size_t kFarBytes = far_bytes_per_block<kRecordBytes, kBlockCols>();
  for (size_t off = 0; off < kFarBytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(far + i * kFarBytes + off), _MM_HINT_T1);
}

// The R groups' records of block i (groups group_bytes apart), each prefetched ahead; and block i's share
// of the far stream.
template <size_t kRecordBytes, int R, int kBlockCols = 32, size_t kAhead = kPrefetchAhead>
inline void block_records(const uint8_t* group, size_t group_bytes, int64_t i, const uint8_t* (&rec)[R],
                          const uint8_t* far = nullptr) {
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    rec[r] = group + r * group_bytes + i * kRecordBytes;
    prefetch_ahead<kRecordBytes, kAhead>(rec[r]);
  }
  far_stream<kRecordBytes, kBlockCols>(far, i);
}

// Part `part` of kParts of the cache lines of [p, p + kBytes), asked for with kHint.
template <size_t kBytes, int kParts, auto kHint>  // kHint: _MM_HINT_* (an enum in GCC, an int in clang)
[[gnu::always_inline]] inline void prefetch_part(const uint8_t* p, int part) {
  constexpr size_t kLines = (kBytes + 63) / 64, kPer = (kLines + kParts - 1) / kParts;
  const size_t end = std::min(kLines, (static_cast<size_t>(part) + 1) * kPer);
  for (size_t line = static_cast<size_t>(part) * kPer; line < end; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(p + 64 * line), kHint);
}

// The K-quant kernels (256-column blocks) with more than one token: block i's prefetches, each of its R
// records (kRecordBytes each) kPrefetchAhead into L1 and its share of the far stream (kFarBytes) into L2,
// an eighth per sub-block (part 0..7) rather than all at the block's start as block_records does. There
// the ~40 far (memory) and ~37 ahead (L2) lines at once filled the miss buffers and the prefetches then
// stalled the core (perf, 1B-shaped Q4_K 16 sequences on the Xeon host: 14% of the pair kernel's samples
// on the two prefetch loops; batched decode ~1.15x spread, Q6_K ~1.15x, prefill ~1.17x). Used by the
// pair kernels; the AVX2 8-row K-quant kernels, which take about twice as long per block, measured within
// noise spread (KVSERVE_NO_VNNI=1, the same model: 0.91-1.11x) and keep block_records' prefetches.
template <size_t kRecordBytes, int R, size_t kFarBytes>
[[gnu::always_inline]] inline void spread_block_prefetch(const uint8_t* const (&rec)[R], const uint8_t* far, int64_t i,
                                                         int part) {
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) prefetch_part<kRecordBytes, 8, _MM_HINT_T0>(rec[r] + kPrefetchAhead, part);
  if (far != nullptr) prefetch_part<kFarBytes, 8, _MM_HINT_T1>(far + i * kFarBytes, part);
}

// out[t * stride + 8 * r + lane] = lane of acc[r][t]: each token's 8 * R rows are adjacent in the output.
template <int R, int T>
inline void store_groups(const __m256 (&acc)[R][T], float* out, int64_t stride) {
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + t * stride + r * kInterleaveRows, acc[r][t]);
}

// Quants are 0..15 and activations -127..127, so each maddubs pair sum is within +-3810 and the 8 of
// them that make up a block's int16 partial sums stay within +-30480: exact, no saturation, and the same
// whatever order they are added in.
//
// R groups of 8 rows (consecutive in memory, group_bytes apart) times T tokens: each broadcast
// activation feeds R multiplies and each unpacked quant vector T. At R = 2, T = 6 the 12 running block
// sums, 2 quant vectors, a broadcast and a product fill the 16 ymm registers; the float accumulators
// are touched once per block and GCC keeps them on the stack, which costs nothing measurable. This
// core issues 2 vpmaddubsw per cycle, but with R = 1 the broadcasts, unpacking and per-block float work
// around them held it to ~1 (bench_cpu_peak Kernel/*: R = 2 does ~1.15x the MAC/s of R = 1 at T = 4-6).
// Every (row, token) value is summed over the blocks in order with the same operations whatever R and T
// are, so results are bit-identical across them.
//
// A block is walked as its 4 packed vectors twice (low nibbles, then high nibbles, re-read from L1) with
// every token consuming a quant vector as soon as it is unpacked; unpacking all 8 first made GCC spill
// most of the 8 x T products to the stack.
template <bool kVnni, bool kQ4_1, int R, int T>
void gemm_fixed(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, float* out,
                int64_t stride, const uint8_t* far) {
  constexpr size_t kScaleBytes = kQ4_1 ? 32 : 16;
  constexpr size_t kRecordBytes = kQ4RecordBytes<kQ4_1>;
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[R];
    block_records<kRecordBytes, R, 32, q32_prefetch_distance<kVnni>(T)>(group, group_bytes, i, rec, far);
    __m256i sum16[R][T];
    constexpr bool kTwoChains = kVnni && two_vnni_chains(R * T);
    [[maybe_unused]] __m256i sum_odd[R][T];  // with kTwoChains: the odd vectors' sums
    // Vector h holds elements 4h..4h+3 of each row in its low nibbles, 16+4h..16+4h+3 in its high ones.
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m256i q[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[r] + kScaleBytes) + g % 4);
        q[r] = _mm256_and_si256(g < 4 ? packed : _mm256_srli_epi16(packed, 4), low_mask);
      }
      const int elem = g < 4 ? 4 * g : 16 + 4 * (g - 4);
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const __m256i y = broadcast_4_bytes(acts[t].qs + 32 * i + elem);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          if constexpr (kVnni) {
            // Q4_0's -8 * sum(y) starts the int32 sum, so no subtraction per (group, token) later.
            const __m256i start = kQ4_1 ? _mm256_setzero_si256() : _mm256_set1_epi32(-acts[t].q4_offset[i]);
            if (!kTwoChains || g % 2 == 0) {
              sum16[r][t] = dpbusd(g == 0 ? start : sum16[r][t], q[r], y);
            } else {
              sum_odd[r][t] = dpbusd(g == 1 ? _mm256_setzero_si256() : sum_odd[r][t], q[r], y);
            }
          } else {
            const __m256i p = _mm256_maddubs_epi16(q[r], y);
            sum16[r][t] = g == 0 ? p : _mm256_add_epi16(sum16[r][t], p);
            opaque(sum16[r][t]);
          }
        }
      }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m256 dy = _mm256_broadcast_ss(acts[t].d + i);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r])));
        // Lane j: row j's sum of q * y over the block (vpdpbusd summed it in int32 already).
        __m256i isum = !kVnni       ? _mm256_madd_epi16(sum16[r][t], ones)
                       : kTwoChains ? _mm256_add_epi32(sum16[r][t], sum_odd[r][t])
                                    : sum16[r][t];
        if constexpr (!kQ4_1 && !kVnni) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(acts[t].q4_offset[i]));
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dy), _mm256_cvtepi32_ps(isum), acc[r][t]);
        if constexpr (kQ4_1) {
          const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r] + 16)));
          acc[r][t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(acts[t].s + i), acc[r][t]);
        }
      }
    }
  }
  store_groups<R, T>(acc, out, stride);
}

// The signed 8-bit quant vectors of the two record kinds the kernel below takes: vector g of a block (4 bytes
// of each row) and the activation elements it multiplies.
// Q8_0: the record's 8 quant vectors as stored.
struct Q8_0Vectors {
  static constexpr size_t kRecordBytes = kQ8_0RecordBytes;
  explicit Q8_0Vectors(const int8_t*) {}
  static int elem(int g) { return 4 * g; }
  __m256i vector(const uint8_t* rec, int g) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16) + g);
  }
};

// IQ4_NL: Q4_0's record (low nibbles of its 4 vectors, then the high ones), each nibble an index into the
// 16 signed levels (-127..113).
struct IQ4_NLVectors {
  static constexpr size_t kRecordBytes = 16 + 128;
  __m256i table;
  explicit IQ4_NLVectors(const int8_t* levels) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(levels));
    table = _mm256_set_m128i(t, t);
  }
  static int elem(int g) { return g < 4 ? 4 * g : 16 + 4 * (g - 4); }
  __m256i vector(const uint8_t* rec, int g) const { return levels(rec + 16, g); }
  // Vector g of the 4 packed vectors at `quants` (also IQ4_XS's sub-blocks).
  __m256i levels(const uint8_t* quants, int g) const {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants) + g % 4);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(g < 4 ? packed : _mm256_srli_epi16(packed, 4),
                                                       _mm256_set1_epi8(0x0F)));
  }
};

// Q8_0 and IQ4_NL: quants are signed, so each product is |w| * (y * sign(w)) (pair sums up to 2 * 128 * 127,
// too large to add two in int16: one madd per vector). |w| is taken once per quant vector for all tokens.
// R groups as in the Q4 kernels above.
template <bool kVnni, typename Vectors, int R, int T>
void gemm_signed8_fixed(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, float* out,
                        int64_t stride, const uint8_t* far) {
  constexpr size_t kRecordBytes = Vectors::kRecordBytes;
  const Vectors vectors(kIQ4Values);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[R];
    block_records<kRecordBytes, R, 32, q32_prefetch_distance<kVnni>(T)>(group, group_bytes, i, rec, far);
    __m256i isum[R][T];
    constexpr bool kTwoChains = kVnni && two_vnni_chains(R * T);
    [[maybe_unused]] __m256i isum_odd[R][T];  // with kTwoChains: the odd vectors' sums
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m256i w[R], w_abs[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        w[r] = vectors.vector(rec[r], g);
        // vpdpbusd takes w + 128 (unsigned, the sign bit flipped); the 128 * sum(y) it adds is taken
        // off per block below.
        w_abs[r] = kVnni ? _mm256_xor_si256(w[r], _mm256_set1_epi8(-128)) : _mm256_sign_epi8(w[r], w[r]);
      }
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const __m256i y = broadcast_4_bytes(acts[t].qs + 32 * i + Vectors::elem(g));
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          if constexpr (kVnni) {
            // 128 * sum(y) = 16 * (Q4_0's offset 8 * sum(y)), exact in int32, taken off from the start.
            const __m256i start = _mm256_set1_epi32(-16 * acts[t].q4_offset[i]);
            if (!kTwoChains || g % 2 == 0) {
              isum[r][t] = dpbusd(g == 0 ? start : isum[r][t], w_abs[r], y);
            } else {
              isum_odd[r][t] = dpbusd(g == 1 ? _mm256_setzero_si256() : isum_odd[r][t], w_abs[r], y);
            }
          } else {
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs[r], _mm256_sign_epi8(y, w[r])), ones);
            isum[r][t] = g == 0 ? p : _mm256_add_epi32(isum[r][t], p);
            opaque(isum[r][t]);
          }
        }
      }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m256 dy = _mm256_broadcast_ss(acts[t].d + i);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec[r])));
        const __m256i sum = kTwoChains ? _mm256_add_epi32(isum[r][t], isum_odd[r][t]) : isum[r][t];
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dy), _mm256_cvtepi32_ps(sum), acc[r][t]);
      }
    }
  }
  store_groups<R, T>(acc, out, stride);
}

// The unsigned quant steps of the two record kinds the kernel below takes: step g (0..7: the low nibbles of the
// 4 packed vectors, then the high ones) of a record as unsigned bytes, the offset they carry (offset(q4_offset)
// = that offset times sum(y), taken off per block; Q8_0's q4_offset is 8 * sum(y)), and the rows' block scales.
// Q5_0: each nibble with its 5th bit added from the record's bit vector (bit g of a byte for step g); 0..31,
// offset 16.
struct Q5_0Steps {
  static constexpr size_t kRecordBytes = kQ5_0RecordBytes;
  static int32_t offset(int32_t q4_offset) { return 2 * q4_offset; }
  __m256i step(const uint8_t* rec, int g) const {
    const __m256i low_mask = _mm256_set1_epi8(0x0F);
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16) + g % 4);
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 + 128));
    // Bit g of each byte to bit 4 (16-bit shifts: the mask drops what crossed from the other byte).
    const __m256i fifth =
        g < 4 ? _mm256_sll_epi16(bits, _mm_cvtsi32_si128(4 - g)) : _mm256_srl_epi16(bits, _mm_cvtsi32_si128(g - 4));
    return _mm256_or_si256(_mm256_and_si256(g < 4 ? packed : _mm256_srli_epi16(packed, 4), low_mask),
                           _mm256_and_si256(fifth, _mm256_set1_epi8(0x10)));
  }
  static __m256 scales(const uint8_t* rec) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec)));
  }
};

// MXFP4 (its record: the 8 rows' scale exponents e, then Q4_0's quant vectors, interleaved_rows.h): each
// nibble's level plus 12 (0..24, looked up), offset 12 (1.5 times Q4_0's 8: q4_offset is even).
struct MXFP4Steps {
  static constexpr size_t kRecordBytes = kMXFP4RecordBytes;
  static constexpr int kBias = 12;
  static int32_t offset(int32_t q4_offset) { return q4_offset + q4_offset / 2; }
  __m256i table;
  MXFP4Steps() {
    const __m128i t =
        _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMXFP4Values)), _mm_set1_epi8(kBias));
    table = _mm256_set_m128i(t, t);
  }
  __m256i step(const uint8_t* rec, int g) const {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 8) + g % 4);
    return _mm256_shuffle_epi8(table,
                               _mm256_and_si256(g < 4 ? packed : _mm256_srli_epi16(packed, 4), _mm256_set1_epi8(0x0F)));
  }
  // The rows' 2^(e - 128) from their bits, as mxfp4_half_scale (subnormal for e < 2).
  static __m256 scales(const uint8_t* rec) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i is_normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, is_normal));
  }
};

// Q5_0 and MXFP4 (Steps above): Q4_0's nibble steps over unsigned quants, with offset * sum(y) taken off:
// vpdpbusd starts the int32 sum from it. AVX2's vpmaddubsw pairs stay within 2 * 31 * 127 = 7874 (Q8_0
// activations are -127..127), so 4 steps add up in int16 (31496). The int32 sum of steps 0-3 waits in
// memory past 4 (row group, token) pairs while steps 4-7 add up (as the K-quants' block sums on AVX-VNNI:
// the 12 running int16 sums of 2 groups x 6 tokens fill the registers). A step is vpmaddubsw + vpaddw,
// against the sign trick's vpsignb + vpmaddubsw + vpaddw over quants made signed. The integer sums are the
// same, so the two kernels' results are bit-identical (MXFP4 on the sign trick's kernel, gemm_signed8_fixed,
// took 1.15-1.35x the time in bench_matmul 16-token calls on Zen 3).
template <bool kVnni, typename Steps, int R, int T>
void gemm_unsigned_fixed(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, float* out,
                         int64_t stride, const uint8_t* far) {
  constexpr size_t kRecordBytes = Steps::kRecordBytes;
  const Steps steps;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][T];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* rec[R];
    block_records<kRecordBytes, R, 32, q32_prefetch_distance<kVnni>(T)>(group, group_bytes, i, rec, far);
    __m256i sum[R][T];
    constexpr bool kTwoChains = kVnni && two_vnni_chains(R * T);
    [[maybe_unused]] __m256i sum_odd[R][T];  // with kTwoChains: the odd steps' sums
    [[maybe_unused]] __m256i sum_low[R][T];  // AVX2: steps 0-3 in int32
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m256i q[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) q[r] = steps.step(rec[r], g);
      const int elem = g < 4 ? 4 * g : 16 + 4 * (g - 4);
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const __m256i y = broadcast_4_bytes(acts[t].qs + 32 * i + elem);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          if constexpr (kVnni) {
            const __m256i start = _mm256_set1_epi32(-Steps::offset(acts[t].q4_offset[i]));
            if (!kTwoChains || g % 2 == 0) {
              sum[r][t] = dpbusd(g == 0 ? start : sum[r][t], q[r], y);
            } else {
              sum_odd[r][t] = dpbusd(g == 1 ? _mm256_setzero_si256() : sum_odd[r][t], q[r], y);
            }
          } else {
            const __m256i p = _mm256_maddubs_epi16(q[r], y);
            sum[r][t] = g % 4 == 0 ? p : _mm256_add_epi16(sum[r][t], p);
            opaque(sum[r][t]);
          }
        }
      }
      if (!kVnni && g == 3) {
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
          for (int t = 0; t < T; ++t) {
            sum_low[r][t] = _mm256_madd_epi16(sum[r][t], ones);
            if constexpr (R * T > 4) asm("" : "+m"(sum_low[r][t]));  // keeps GCC from holding it in a register
          }
      }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m256 dy = _mm256_broadcast_ss(acts[t].d + i);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 dw = Steps::scales(rec[r]);
        const __m256i isum = !kVnni
                                 ? _mm256_sub_epi32(_mm256_add_epi32(sum_low[r][t], _mm256_madd_epi16(sum[r][t], ones)),
                                                    _mm256_set1_epi32(Steps::offset(acts[t].q4_offset[i])))
                             : kTwoChains ? _mm256_add_epi32(sum[r][t], sum_odd[r][t])
                                          : sum[r][t];
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dy), _mm256_cvtepi32_ps(isum), acc[r][t]);
      }
    }
  }
  store_groups<R, T>(acc, out, stride);
}

template <bool kVnni, typename Steps>
void gemm_unsigned_any(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* far) {
  const int64_t nb = n / 32;
  const size_t group_bytes = static_cast<size_t>(nb) * Steps::kRecordBytes;
  with_token_count<6>(n_tok, [&]<int T>() {
    if (n_groups == 2) {
      gemm_unsigned_fixed<kVnni, Steps, 2, T>(nb, group, group_bytes, acts, out, out_stride, far);
    } else {
      gemm_unsigned_fixed<kVnni, Steps, 1, T>(nb, group, group_bytes, acts, out, out_stride, far);
    }
  });
}

template <bool kVnni, typename Vectors, int R>
void gemm_signed8_tokens(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, int n_tok,
                         float* out, int64_t stride, const uint8_t* far) {
  with_token_count<6>(n_tok, [&]<int T>() {
    gemm_signed8_fixed<kVnni, Vectors, R, T>(nb, group, group_bytes, acts, out, stride, far);
  });
}

template <bool kVnni, bool kQ4_1, int R>
void gemm_tokens(int64_t nb, const uint8_t* group, size_t group_bytes, const PackedActs32* acts, int n_tok,
                 float* out, int64_t stride, const uint8_t* far) {
  with_token_count<6>(n_tok, [&]<int T>() {
    gemm_fixed<kVnni, kQ4_1, R, T>(nb, group, group_bytes, acts, out, stride, far);
  });
}

template <bool kVnni, bool kQ4_1>
void gemm_any(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok, float* out,
              int64_t stride, const uint8_t* far) {
  const int64_t nb = n / 32;
  const size_t group_bytes = static_cast<size_t>(nb) * kQ4RecordBytes<kQ4_1>;
  if (n_groups == 2) {
    gemm_tokens<kVnni, kQ4_1, 2>(nb, group, group_bytes, acts, n_tok, out, stride, far);
  } else {
    gemm_tokens<kVnni, kQ4_1, 1>(nb, group, group_bytes, acts, n_tok, out, stride, far);
  }
}

// Q8_0 (Vectors = Q8_0Vectors) or IQ4_NL (IQ4_NLVectors) groups.
template <bool kVnni, typename Vectors>
void gemm_signed8_any(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok, float* out,
                      int64_t out_stride, const uint8_t* far) {
  const int64_t nb = n / 32;
  const size_t group_bytes = static_cast<size_t>(nb) * Vectors::kRecordBytes;
  if (n_groups == 2) {
    gemm_signed8_tokens<kVnni, Vectors, 2>(nb, group, group_bytes, acts, n_tok, out, out_stride, far);
  } else {
    gemm_signed8_tokens<kVnni, Vectors, 1>(nb, group, group_bytes, acts, n_tok, out, out_stride, far);
  }
}

}  // namespace
}  // namespace kvserve
