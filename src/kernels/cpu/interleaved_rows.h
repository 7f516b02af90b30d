#pragma once
// Q4_0 / Q4_1 / Q5_0 / IQ4_NL / MXFP4 / Q8_0 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS weights repacked 8 rows at a
// time for the AVX2 "x8" kernels.
//
// Why: on the CPUs we run on, a one-row dot spends most of its instructions per 32-element block on
// work that is not multiplying (sign fix-ups, madd, int->float, scale, FMA, and a horizontal sum at the
// end). With 8 rows interleaved, one 256-bit register holds 4 quants of each of 8 rows, the activation
// side is a 4-byte broadcast, int16 partial sums of a whole block stay exact, and the float work (one
// convert, one scale, one FMA) is done once per block for 8 rows. Each output lane is one row, so no
// horizontal sums either.
//
// Layout, for each group of 8 rows and each block index i (groups, then blocks, contiguous):
//   8 x fp16 d              (16 bytes, row order)
//   8 x fp16 m              (16 bytes, Q4_1 only)
//   4 x 32 bytes of quants: vector h, row r holds that row's qs[4h .. 4h+3], i.e. elements 4h..4h+3 in
//                           the low nibbles and 16+4h..16+4h+3 in the high nibbles (Q4_0 / Q4_1);
//   8 x 32 bytes of quants: vector h, row r holds elements 4h..4h+3 (Q8_0).
// Q5_0, per group and block, 176 bytes (the rows' own 8 x 22): Q4_0's record (its nibbles, unsigned 0..15),
//   then one 32-byte vector of the 5th bits: row r's byte 4r + k holds in bit g that of the element nibble
//   step g of the kernel takes from byte k (g < 4: the low nibbles of vector g, element 4g + k; g >= 4:
//   the high nibbles of vector g - 4, element 16 + 4(g - 4) + k). Pair layout pieces: d, each vector
//   (the 4 nibble vectors and the bit vector).
// IQ4_NL, per group and block, 144 bytes: Q4_0's record, its nibbles indices into kIQ4Values. Pair layout
//   pieces: Q4_0's.
// MXFP4, per group and block, 136 bytes (the rows' own 8 x 17): 8 scale exponents e (row order), then
//   Q4_0's quant vectors, their nibbles indices into kMXFP4Values. Pair layout pieces: the 8 exponents,
//   each quant vector.
// Q4_K (256-element blocks), per group and block, 1184 bytes (the rows' own 8 x 144 plus 32):
//   8 x fp16 d, 8 x fp16 dmin (row order), 64 bytes of sub-block scales (byte 8s + r: row r's scale of
//   sub-block s, 6 bits unpacked), 64 bytes of sub-block mins (same order), then 32 x 32 bytes of
//   quants: vector h, row r holds that row's qs[4h .. 4h+3] (low nibbles: sub-block 2 (h / 8), high
//   nibbles: sub-block 2 (h / 8) + 1, elements 4 (h % 8) .. +3 of each).
// Q5_K, per group and block, 1440 bytes (the rows' own 8 x 176 plus 32): Q4_K's record with the quants'
//   low 4 bits as its nibbles, then 8 x 32 bytes of their 5th bits: vector g, row r, byte k holds in
//   bit 2j + e that of nibble vector 8j + g's byte k, low nibble (e = 0) or high (e = 1).
// Q6_K, per group and block, 1680 bytes (the rows' own 8 x 210): 8 x fp16 d, 128 bytes of int8
//   sub-block scales (byte 8s + r: row r's scale of 16-element sub-block s), 32 x 32 bytes of the
//   quants' (q + 32, 0..63) low 4 bits laid out as Q4_K's nibbles, then 16 x 32 bytes of their top 2
//   bits: vector m, row r, byte k holds those of nibble vector 2m's byte k in bits 0-1 (low nibble's
//   element) and 2-3 (high nibble's), and of nibble vector 2m + 1's in bits 4-5 and 6-7.
// IQ4_XS (256-element blocks), per group and block, 1104 bytes (the rows' own 8 x 136 plus 16): 8 x fp16 d,
//   64 bytes of sub-block scales (byte 8s + r: row r's scale of sub-block s, -32..31 as a signed byte), then
//   for each sub-block s of 32 elements 128 bytes laid out as IQ4_NL's quants (vector h, row r holds that
//   row's qs[16s + 4h .. 16s + 4h + 3]: elements 32s + 4h.. in the low nibbles, 32s + 16 + 4h.. in the
//   high ones), indices into kIQ4Values. Pair layout pieces: d, each sub-block's scales, each vector.
// Q3_K, per group and block, 912 bytes (the rows' own 8 x 110 plus 32): 8 x fp16 d, 128 bytes of sub-block
//   scales (byte 8s + r: row r's scale of 16-element sub-block s, -32..31), 16 x 32 bytes of the quants'
//   low 2 bits (vector v, row r holds that row's qs[4v .. 4v + 3]), then 8 x 32 bytes of their top bits
//   (vector u, row r holds hmask[4u .. 4u + 3]). Pair layout pieces: d, each sub-block's scales, each vector.
// Q2_K, per group and block, 736 bytes (the rows' own 8 x 84 plus 64): 8 x fp16 d, 8 x fp16 dmin, 128 bytes
//   of sub-block scales (as Q3_K's, 0..15), 64 bytes of mins (byte 8m + r: row r's min of sub-block 2m in
//   its low nibble, of 2m + 1 in its high one), then Q3_K's 16 vectors of low bits. Pair layout pieces: d,
//   dmin, each sub-block's scales, each pair of sub-blocks' mins (8 bytes), each vector.
// Pair layout (where interleaved_pairs_preferred(): cores that run the 512-bit kernels below): groups 2j
// and 2j + 1 share each block's record of twice the bytes, every piece of group 2j's record followed by
// the same piece of group 2j + 1's. The pieces are what a 512-bit kernel loads for one group: Q4_0 /
// Q4_1 / Q8_0's 16 bytes of d (and of m) and each 32-byte quant vector; the K-quants' 16 bytes of d (and
// dmin), each sub-block's 8 bytes of scales, Q4_K / Q5_K's mins of two sub-blocks (16 bytes) and each
// 32-byte vector (quants, Q5_K's 5th bits, Q6_K's top bits). A 512-bit kernel then loads a piece of both
// groups with one load instead of two halves and an insert. A last odd group keeps the group layout at
// its place; the whole copy has the same size and group 2j starts at the same offset in both layouts.
// Q4_0 keeps its quants unsigned (0..15); the -8 offset is applied exactly through the activation block
// sums. Q8_0's signed quants still need the sign trick per product, but the scale, convert and FMA are
// shared by 8 rows. Rows past the last multiple of 8 stay in the original tensor.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "kernels/cpu/block32_tiles.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

inline constexpr int kInterleaveRows = 8;

inline constexpr size_t kQ4KRecordBytes = 16 + 16 + 64 + 64 + 1024;
inline constexpr size_t kQ5KRecordBytes = kQ4KRecordBytes + 256;
inline constexpr size_t kQ6KRecordBytes = 16 + 128 + 1024 + 512;
inline constexpr size_t kIQ4XSRecordBytes = 16 + 64 + 1024;
inline constexpr size_t kQ3KRecordBytes = 16 + 128 + 512 + 256;
inline constexpr size_t kQ2KRecordBytes = 16 + 16 + 128 + 64 + 512;
// Tokens per call of the IQ4_XS kernels. With vpdpbusd each token keeps a sub-block sum and a block sum
// per group, 24 at 2 groups x 6 tokens, within AVX-512VL's 32 registers: bench_matmul IQ4_XS 16 tokens
// (Zen 5, 2 threads, 2 alternating runs) ~1.08x passes of 4. The AVX2 kernel measured the same at 4 and 6.
inline constexpr int kIQ4XSPassTokens = 6;
// A Q5_K or Q6_K group's block with its quants unpacked to bytes (0..31, or Q6_K's q + 32): 8 rows x 256
// (avx2::unpack_q5_K_groups, unpack_q6_K_groups).
inline constexpr size_t kUnpackedKBlockBytes = 8 * 256;
// Tokens per call of the AVX2 Q5_K / Q6_K kernels over unpacked quants, against 4 and 3 while unpacking
// (1B-shaped Q6_K prefill 73-83 tok/s at 6, 58-61 at 4, 55 before the unpacking).
inline constexpr int kUnpackedKPassTokens = 6;

// True for the types that have an interleaved layout.
bool has_interleaved_layout(DType type);
// True for those whose interleaved groups can also be paired (two groups' records side by side, the zmm kernels'
// layout): all of them.
bool has_pair_layout(DType type);

// Bytes of one (group, block) record.
size_t interleaved_block_bytes(DType type);

// Bytes of one group of 8 rows of n_cols columns.
size_t interleaved_group_bytes(DType type, int64_t n_cols);

// The far prefetch stream's bytes per 32 columns for the type's kernels (far_prefetch_bytes_per_32 below).
size_t far_prefetch_bytes(DType type);

// Bytes of the repacked rows [0, rows / 8 * 8) of w (either layout).
size_t interleaved_bytes(const Tensor& w);

// True where the weights of `type` (one with an interleaved layout) should be repacked in the pair layout:
// on a core that runs the 512-bit pair kernels (cpu_prefers_zmm()).
bool interleaved_pairs_preferred(DType type);

// Groups of 8 rows in pairs (the pair layout) of a tensor with `rows` rows: rows / 16 * 2.
inline int64_t interleaved_paired_groups(int64_t rows) { return rows / 16 * 2; }

// Two consecutive groups of n_cols columns in the group layout (src, 2 * interleaved_group_bytes bytes)
// into one pair of the pair layout at dst (as many bytes; not overlapping src). For the types with a pair
// layout (every interleaved type).
void pair_two_groups(DType type, int64_t n_cols, const uint8_t* src, uint8_t* dst);

// Repacks rows [0, rows / 8 * 8) of a Q4_0, Q4_1, Q8_0, Q4_K, Q5_K or Q6_K tensor into
// dst[0, interleaved_bytes(w)): in the pair layout when `pairs`.
void interleave_rows_into(const Tensor& w, uint8_t* dst, bool pairs = false);

// The same into a buffer of its own.
std::shared_ptr<uint8_t[]> interleave_rows(const Tensor& w, bool pairs = false);

namespace avx2 {
// Tokens one interleaved kernel call multiplies: every token past the first shares the groups' loads and
// nibble unpacking; 6 tokens x 2 groups of running int16 block sums plus the unpacked quants, a
// broadcast and a product fill the 16 ymm registers.
inline constexpr int kMaxInterleavedTokens = 6;

// Groups of 8 rows one kernel call takes: 2 groups share each broadcast activation (see the .cpp).
inline constexpr int kMaxInterleavedGroups = 2;

// Bytes of the far prefetch stream (below) asked for per 32 columns, for a type whose 8-row group
// record takes record_bytes_per_32 bytes per 32 columns: twice that, in whole cache lines. A batched
// call takes two pairs of groups (4 records) and 16 sequences make two passes over a chunk, so at this
// rate the stream covers the next chunk by the end of the current one. At a fixed two lines per block
// (128 bytes) it covered only 44% of a Q4_0 chunk and 24% of a Q8_0 one, and the rest came from memory
// on demand (1B-shaped, 16 sequences, alternating builds: 1.06x batched decode at Q4_0, 1.12x at Q8_0).
constexpr size_t far_prefetch_bytes_per_32(size_t record_bytes_per_32) {
  return (2 * record_bytes_per_32 + 63) / 64 * 64;
}

// For n_groups (1..kMaxInterleavedGroups) consecutive groups of 8 rows (group = the first group's first
// block record; the next group follows it) and n_tok (1..kMaxInterleavedTokens) tokens:
// out[t * out_stride + 8 * g + r] = row r of group g . token t, stored as one 8-float vector per group
// and token. Each (row, token) value is one lane summed over the blocks in order, so it depends on
// neither n_tok nor n_groups.
// prefetch (may be null): a far stream asked into L2 while the kernel runs, far_prefetch_bytes(type) per
// 32 columns (n / 32 * far_prefetch_bytes(type) bytes from prefetch on). The caller passes its next
// weights, so that a call repeated over the same weights for more tokens spreads the next weights' memory
// reads over all its repeats. Only a hint: any address, never dereferenced.
void gemm_interleaved_q4_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_q4_1(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_q8_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_q5_0(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_iq4_nl(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                             float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_mxfp4(int64_t n, const uint8_t* group, int n_groups, const PackedActs32* acts, int n_tok,
                            float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
// Q4_K, Q5_K and Q6_K against Q8_K activation rows (acts[t], n / 256 blocks each), same contract (the far
// stream is n / 32 * far_prefetch_bytes(type) bytes).
void gemm_interleaved_q4_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_q5_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_q6_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
// IQ4_XS, the same contract (n_tok up to kMaxInterleavedTokens; matmul passes kIQ4XSPassTokens).
void gemm_interleaved_iq4_xs(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                             float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
// Q3_K and Q2_K, the same contract (Q6_K's kernel over their records).
void gemm_interleaved_q3_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_interleaved_q2_K(int64_t n, const uint8_t* group, int n_groups, const BlockQ8_K* const* acts, int n_tok,
                           float* out, int64_t out_stride, const uint8_t* prefetch = nullptr);
// Q5_K and Q6_K for many tokens: the quants of n_groups groups unpacked once into dst (n / 256 * n_groups
// * kUnpackedKBlockBytes bytes), then gemm_interleaved_q*_K_unpacked takes them from there instead of
// rebuilding them from their bits in every pass (up to n_tok tokens a call, as gemm_interleaved_q*_K,
// and the same bits: the same integers in the same order).
void unpack_q5_K_groups(int64_t n, const uint8_t* group, int n_groups, uint8_t* dst);
void gemm_interleaved_q5_K_unpacked(int64_t n, const uint8_t* group, int n_groups, const uint8_t* unpacked,
                                    const BlockQ8_K* const* acts, int n_tok, float* out, int64_t out_stride,
                                    const uint8_t* prefetch = nullptr);
void unpack_q6_K_groups(int64_t n, const uint8_t* group, int n_groups, uint8_t* dst);
void gemm_interleaved_q6_K_unpacked(int64_t n, const uint8_t* group, int n_groups, const uint8_t* unpacked,
                                    const BlockQ8_K* const* acts, int n_tok, float* out, int64_t out_stride,
                                    const uint8_t* prefetch = nullptr);
}  // namespace avx2

// The Q4_0 / Q4_1 / Q8_0 / Q5_0 / IQ4_NL / Q4_K / Q5_K / Q6_K / IQ4_XS / Q3_K / Q2_K kernels above with vpdpbusd,
// bit-identical to them: EVEX-encoded with AVX-512VL's 32 registers (avx512vnni::, only after
// cpu_has_avx512_vnni()), or VEX-encoded with AVX2's 16 (avxvnni::, only after cpu_has_avx_vnni()).
namespace avx512vnni {
#include "kernels/cpu/interleaved_rows_vnni_decls.inc"
}  // namespace avx512vnni
namespace avxvnni {
#include "kernels/cpu/interleaved_rows_vnni_decls.inc"
}  // namespace avxvnni

// The kernels above with each pair of groups in 512-bit registers (interleaved_zmm_avx512vnni.cpp),
// n_tok 1..kMaxZmmTokens, bit-identical to them. Only after cpu_has_avx512_vnni(); matmul takes them where
// cpu_prefers_zmm().
namespace avx512zmm {
inline constexpr int kMaxZmmTokens = 8;
inline constexpr int kMaxZmmGroups = 4;
inline constexpr int kMaxZmmPairs = kMaxZmmGroups / 2;
// Q4_0 / Q4_1 / Q5_0 / IQ4_NL / MXFP4 / Q8_0 in the pair layout: n_pairs (1..kMaxZmmPairs) consecutive pairs of groups
// from `pairs` (the first pair's first block record), out[t * out_stride + 16 * p + 8 * h + r] = row r of group h of
// pair p . token t; the far stream as in avx2:: (n / 32 * far_prefetch_bytes(type) bytes).
void gemm_pairs_q4_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q4_1(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q5_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_iq4_nl(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_mxfp4(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                      int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q8_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
// Q4_K / Q5_K / Q6_K in the pair layout against Q8_K activation rows, the same contract; the pairs run one
// after another.
void gemm_pairs_q4_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q5_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q6_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q3_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_iq4_xs(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* prefetch = nullptr);
void gemm_pairs_q2_K(int64_t n, const uint8_t* pairs, int n_pairs, const BlockQ8_K* const* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr);
}  // namespace avx512zmm

// The Q4_0 / Q4_1 / Q5_0 / IQ4_NL / MXFP4 / Q8_0 pair kernels above with each block's integer products on the AMX
// tile unit (interleaved_pairs_amx.cpp): the same contract and bits as avx512zmm::gemm_pairs_*, for
// 1..kMaxAmxTokens tokens (more are cut to that). Only after cpu_has_amx_int8().
namespace amx {
inline constexpr int kMaxAmxTokens = 16;
// A pair's block with its quants in the layout of AMX's B operand (8 rows of 64 bytes).
inline constexpr size_t kUnpackedBlockBytes = 512;
// unpacked (may be null; not for Q8_0, whose records are B already): the pairs' quants from unpack_pairs,
// read from there instead of unpacked in the call (prefill makes many passes over one chunk of pairs).
void gemm_pairs_q4_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr, const int8_t* unpacked = nullptr);
void gemm_pairs_q4_1(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr, const int8_t* unpacked = nullptr);
void gemm_pairs_q5_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr, const int8_t* unpacked = nullptr);
void gemm_pairs_iq4_nl(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                       int64_t out_stride, const uint8_t* prefetch = nullptr, const int8_t* unpacked = nullptr);
void gemm_pairs_mxfp4(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                      int64_t out_stride, const uint8_t* prefetch = nullptr, const int8_t* unpacked = nullptr);
void gemm_pairs_q8_0(int64_t n, const uint8_t* pairs, int n_pairs, const PackedActs32* acts, int n_tok, float* out,
                     int64_t out_stride, const uint8_t* prefetch = nullptr, const int8_t* unpacked = nullptr);
// The quants of n_pairs consecutive pairs (n columns) of a Q4_0 / Q4_1 / Q5_0 / IQ4_NL / MXFP4 tensor in the pair
// layout, in B's layout: n / 32 * n_pairs blocks of kUnpackedBlockBytes, pair after pair, at dst (64-byte
// aligned). Nothing for other types.
void unpack_pairs(DType type, int64_t n, const uint8_t* pairs, int n_pairs, int8_t* dst);
}  // namespace amx

}  // namespace kvserve
