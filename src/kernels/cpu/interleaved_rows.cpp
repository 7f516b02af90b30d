#include "kernels/cpu/interleaved_rows.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/large_buffer.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

bool has_interleaved_layout(DType type) {
  return type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q5_0 || type == DType::IQ4_NL ||
         type == DType::MXFP4 || type == DType::Q8_0 || type == DType::Q4_K || type == DType::Q5_K ||
         type == DType::Q6_K || type == DType::IQ4_XS || type == DType::Q2_K || type == DType::Q3_K;
}

bool has_pair_layout(DType type) { return has_interleaved_layout(type); }

size_t interleaved_block_bytes(DType type) {
  switch (type) {
    case DType::Q4_0: return kInterleaveRows * sizeof(BlockQ4_0);
    case DType::Q4_1: return kInterleaveRows * sizeof(BlockQ4_1);
    case DType::Q5_0: return kInterleaveRows * sizeof(BlockQ5_0);
    case DType::IQ4_NL: return kInterleaveRows * sizeof(BlockIQ4_NL);
    case DType::MXFP4:
      return kInterleaveRows * sizeof(BlockMXFP4);
    case DType::Q8_0: return kInterleaveRows * sizeof(BlockQ8_0);
    case DType::Q4_K: return kQ4KRecordBytes;
    case DType::Q5_K: return kQ5KRecordBytes;
    case DType::Q6_K: return kQ6KRecordBytes;
    case DType::IQ4_XS: return kIQ4XSRecordBytes;
    case DType::Q3_K: return kQ3KRecordBytes;
    case DType::Q2_K: return kQ2KRecordBytes;
    default: fail("interleaved layout: type {} has none", dtype_name(type));
  }
}

size_t interleaved_group_bytes(DType type, int64_t n_cols) {
  return static_cast<size_t>(n_cols / dtype_info(type).block_elems) * interleaved_block_bytes(type);
}

size_t far_prefetch_bytes(DType type) {
  const auto block_cols = static_cast<size_t>(dtype_info(type).block_elems);
  return avx2::far_prefetch_bytes_per_32(interleaved_block_bytes(type) * 32 / block_cols);
}

// Where the core splits zmm ops in two halves (Zen 4) the pair kernels still pay for some types in batched
// decode and prefill: one 64-byte load per quant vector of 16 rows, one broadcast per token for both groups,
// fewer instructions to issue around the vpdpbusd (1B-shaped, alternating runs: Q4_0 16-sequence decode
// 1.08x, prefill 1.07x; Q8_0 1.21x and 1.14x) with one-token decode within noise. Not Q4_1 (SmolLM2-135M's
// 576-column rows: 0.82-0.89x everywhere) nor the K-quants, whose one-token pair kernels decode at
// 0.45-0.7x there (nor Q5_0 and IQ4_NL, whose pair kernels came later and were not measured there). KVSERVE_PAIRS=0|1 overrides, for A/B runs, and KVSERVE_ZMM=0|1 sets this with every
// other 512-bit path (cpu_uses_zmm_path).
bool interleaved_pairs_preferred(DType type) {
  if (!has_pair_layout(type)) return false;
  static const int forced = env_switch("KVSERVE_PAIRS");
  return cpu_uses_zmm_path(forced, type == DType::Q4_0 || type == DType::Q8_0);
}

namespace {
template <typename Block>
void interleave(const Tensor& w, uint8_t* dst) {
  const int64_t nb = w.cols() / 32;
  const int64_t groups = w.rows() / kInterleaveRows;
  constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1>;
  constexpr int kVectors = sizeof(Block::qs) / 4;  // 4 quant bytes per row per vector: 4 (Q4) or 8 (Q8_0)
  for (int64_t g = 0; g < groups; ++g) {
    const Block* rows[kInterleaveRows];
    for (int r = 0; r < kInterleaveRows; ++r)
      rows[r] = reinterpret_cast<const Block*>(w.row(g * kInterleaveRows + r));
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* p = dst;
      for (int r = 0; r < kInterleaveRows; ++r) std::memcpy(p + 2 * r, &rows[r][i].d, 2);
      p += 2 * kInterleaveRows;
      if constexpr (kHasMin) {
        for (int r = 0; r < kInterleaveRows; ++r) std::memcpy(p + 2 * r, &rows[r][i].m, 2);
        p += 2 * kInterleaveRows;
      }
      for (int h = 0; h < kVectors; ++h)
        for (int r = 0; r < kInterleaveRows; ++r) std::memcpy(p + 32 * h + 4 * r, rows[r][i].qs + 4 * h, 4);
      dst += kInterleaveRows * sizeof(Block);
    }
  }
}
// Q5_0: Q4_0's record, then the 5th bits in the order the kernel's nibble steps take them.
void interleave_q5_0(const Tensor& w, uint8_t* dst) {
  const int64_t nb = w.cols() / 32;
  const int64_t groups = w.rows() / kInterleaveRows;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* bits = dst + 16 + 128;
      std::memset(bits, 0, 32);
      for (int r = 0; r < kInterleaveRows; ++r) {
        const BlockQ5_0& b = reinterpret_cast<const BlockQ5_0*>(w.row(g * kInterleaveRows + r))[i];
        std::memcpy(dst + 2 * r, &b.d, 2);
        for (int h = 0; h < 4; ++h) std::memcpy(dst + 16 + 32 * h + 4 * r, b.qs + 4 * h, 4);
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        for (int k = 0; k < 4; ++k)
          for (int step = 0; step < 8; ++step) {
            const int element = step < 4 ? 4 * step + k : 16 + 4 * (step - 4) + k;
            bits[4 * r + k] |= static_cast<uint8_t>(((qh >> element) & 1) << step);
          }
      }
      dst += kInterleaveRows * sizeof(BlockQ5_0);
    }
  }
}
// MXFP4: the rows' scale bytes, then their quants as IQ4_NL's.
void interleave_mxfp4(const Tensor& w, uint8_t* dst) {
  const int64_t nb = w.cols() / 32;
  const int64_t groups = w.rows() / kInterleaveRows;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < nb; ++i) {
      for (int r = 0; r < kInterleaveRows; ++r) {
        const BlockMXFP4& b = reinterpret_cast<const BlockMXFP4*>(w.row(g * kInterleaveRows + r))[i];
        dst[r] = b.e;
        for (int h = 0; h < 4; ++h) std::memcpy(dst + kInterleaveRows + 32 * h + 4 * r, b.qs + 4 * h, 4);
      }
      dst += kInterleaveRows * sizeof(BlockMXFP4);
    }
}
// Q4_K and Q5_K: the 6-bit scales and mins unpacked to one byte each (scales[s * 8 + r], mins[s * 8 +
// r]), so the kernel gets a sub-block's 8 row scales with one shuffle instead of per-row bit surgery.
// Q5_K's 5th bits follow in bit planes (interleaved_rows.h).
template <typename Block>
void interleave_k_scale_min(const Tensor& w, uint8_t* dst) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  constexpr size_t kRecordBytes = kQ5 ? kQ5KRecordBytes : kQ4KRecordBytes;
  const int64_t nb = w.cols() / kQK_K;
  const int64_t groups = w.rows() / kInterleaveRows;
  for (int64_t g = 0; g < groups; ++g) {
    const Block* rows[kInterleaveRows];
    for (int r = 0; r < kInterleaveRows; ++r) rows[r] = reinterpret_cast<const Block*>(w.row(g * kInterleaveRows + r));
    for (int64_t i = 0; i < nb; ++i) {
      if constexpr (kQ5) std::memset(dst + kQ4KRecordBytes, 0, 256);
      for (int r = 0; r < kInterleaveRows; ++r) {
        const Block& b = rows[r][i];
        std::memcpy(dst + 2 * r, &b.d, 2);
        std::memcpy(dst + 16 + 2 * r, &b.dmin, 2);
        for (int s = 0; s < 8; ++s) {
          uint8_t scale, min;
          k_scale_min(s, b.scales, &scale, &min);
          dst[32 + 8 * s + r] = scale;
          dst[96 + 8 * s + r] = min;
        }
        // Q5_K's qs hold the low 4 bits in Q4_K's order: nibble vector h = 8j + v, byte k of row r holds
        // elements 64j + 4v + k (low nibble) and 64j + 32 + 4v + k (high nibble).
        for (int h = 0; h < kQK_K / 8; ++h) std::memcpy(dst + 160 + 32 * h + 4 * r, b.qs + 4 * h, 4);
        if constexpr (kQ5) {
          uint8_t q[kQK_K];
          unpack_q5_K(b, q);
          for (int h = 0; h < kQK_K / 8; ++h)
            for (int k = 0; k < 4; ++k)
              for (int e = 0; e < 2; ++e) {
                const int element = 64 * (h / 8) + 32 * e + 4 * (h % 8) + k;
                dst[kQ4KRecordBytes + 32 * (h % 8) + 4 * r + k] |= static_cast<uint8_t>((q[element] >> 4) << (2 * (h / 8) + e));
              }
        }
      }
      dst += kRecordBytes;
    }
  }
}
// Q6_K: quants as unsigned 6-bit values (q + 32), low 4 bits in nibble vectors laid out as Q4_K's and
// the top 2 bits of two nibble vectors in one byte vector (interleaved_rows.h).
void interleave_q6_K(const Tensor& w, uint8_t* dst) {
  const int64_t nb = w.cols() / kQK_K;
  const int64_t groups = w.rows() / kInterleaveRows;
  // Element of nibble vector h, byte i: low nibble (e = 0) or high nibble (e = 1).
  const auto element = [](int h, int i, int e) { return 64 * (h / 8) + 32 * e + 4 * (h % 8) + i; };
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < nb; ++i) {
      for (int r = 0; r < kInterleaveRows; ++r) {
        const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(w.row(g * kInterleaveRows + r))[i];
        int8_t q[kQK_K];
        unpack_q6_K(b, q);
        std::memcpy(dst + 2 * r, &b.d, 2);
        for (int s = 0; s < kQK_K / 16; ++s) std::memcpy(dst + 16 + 8 * s + r, &b.scales[s], 1);
        for (int h = 0; h < kQK_K / 8; ++h)
          for (int k = 0; k < 4; ++k) {
            const int lo = q[element(h, k, 0)] + 32, hi = q[element(h, k, 1)] + 32;
            dst[144 + 32 * h + 4 * r + k] = static_cast<uint8_t>((lo & 0xF) | (hi & 0xF) << 4);
            uint8_t& top = dst[144 + 1024 + 32 * (h / 2) + 4 * r + k];
            if (h % 2 == 0) top = 0;
            top = static_cast<uint8_t>(top | ((lo >> 4) | (hi >> 4) << 2) << (4 * (h % 2)));
          }
      }
      dst += kQ6KRecordBytes;
    }
  }
}
// IQ4_XS: the super-block's d, its 8 sub-block scales as signed bytes (the kernels take a sub-block's 8
// row scales with one load), then each sub-block's quants as IQ4_NL's record lays out a block's.
void interleave_iq4_xs(const Tensor& w, uint8_t* dst) {
  const int64_t nb = w.cols() / kQK_K;
  const int64_t groups = w.rows() / kInterleaveRows;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < nb; ++i) {
      for (int r = 0; r < kInterleaveRows; ++r) {
        const BlockIQ4_XS& b = reinterpret_cast<const BlockIQ4_XS*>(w.row(g * kInterleaveRows + r))[i];
        std::memcpy(dst + 2 * r, &b.d, 2);
        for (int s = 0; s < 8; ++s) {
          dst[16 + 8 * s + r] = static_cast<uint8_t>(static_cast<int8_t>(iq4_xs_scale(b, s)));
          for (int h = 0; h < 4; ++h) std::memcpy(dst + 80 + 128 * s + 32 * h + 4 * r, b.qs + 16 * s + 4 * h, 4);
        }
      }
      dst += kIQ4XSRecordBytes;
    }
  }
}
// Q3_K and Q2_K: the d row (and Q2_K's dmin row), the 16 sub-block scales as signed bytes (and Q2_K's mins,
// two to a byte), then the quants' low-bit vectors (and Q3_K's hmask vectors), 4 bytes of each row a
// vector.
template <typename Block>
void interleave_k16(const Tensor& w, uint8_t* dst) {
  constexpr bool kQ2 = std::is_same_v<Block, BlockQ2_K>;
  constexpr size_t kRecordBytes = kQ2 ? kQ2KRecordBytes : kQ3KRecordBytes;
  constexpr size_t kScales = kQ2 ? 32 : 16, kLow = kQ2 ? 32 + 128 + 64 : 16 + 128;
  const int64_t nb = w.cols() / kQK_K;
  const int64_t groups = w.rows() / kInterleaveRows;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < nb; ++i) {
      for (int r = 0; r < kInterleaveRows; ++r) {
        const Block& b = reinterpret_cast<const Block*>(w.row(g * kInterleaveRows + r))[i];
        std::memcpy(dst + 2 * r, &b.d, 2);
        int8_t scales[16];
        if constexpr (kQ2) {
          std::memcpy(dst + 16 + 2 * r, &b.dmin, 2);
          for (int sb = 0; sb < 16; ++sb) scales[sb] = static_cast<int8_t>(b.scales[sb] & 0xF);
          for (int m = 0; m < 8; ++m)
            dst[kScales + 128 + 8 * m + r] = static_cast<uint8_t>((b.scales[2 * m] >> 4) | (b.scales[2 * m + 1] & 0xF0));
        } else {
          unpack_q3_K_scales(b.scales, scales);
          for (int u = 0; u < 8; ++u) std::memcpy(dst + kLow + 512 + 32 * u + 4 * r, b.hmask + 4 * u, 4);
        }
        for (int sb = 0; sb < 16; ++sb) dst[kScales + 8 * sb + r] = static_cast<uint8_t>(scales[sb]);
        for (int v = 0; v < 16; ++v) std::memcpy(dst + kLow + 32 * v + 4 * r, b.qs + 4 * v, 4);
      }
      dst += kRecordBytes;
    }
  }
}
// The pieces of a group's block record that the pair layout interleaves, front to back: (bytes, count).
// A piece is what one 512-bit kernel load takes for one group (a d row, a quant vector, a sub-block's
// scales), so both groups' copies of it are adjacent.
struct Pieces {
  size_t bytes;
  int count;
};
constexpr Pieces kQ4_0Pieces[] = {{16, 1}, {32, 4}};
constexpr Pieces kQ4_1Pieces[] = {{16, 2}, {32, 4}};
constexpr Pieces kQ5_0Pieces[] = {{16, 1}, {32, 5}};
constexpr Pieces kQ8_0Pieces[] = {{16, 1}, {32, 8}};
// The 8 rows' scale exponents; Q4_0's 4 quant vectors.
constexpr Pieces kMXFP4Pieces[] = {{8, 1}, {32, 4}};
// d, dmin; 8 sub-blocks' scales; mins of sub-blocks 2k and 2k + 1 together; 32 quant vectors (Q5_K: then 8
// vectors of 5th bits).
constexpr Pieces kQ4_KPieces[] = {{16, 2}, {8, 8}, {16, 4}, {32, 32}};
constexpr Pieces kQ5_KPieces[] = {{16, 2}, {8, 8}, {16, 4}, {32, 40}};
// d; 16 sub-blocks' scales; 32 nibble vectors and 16 vectors of top bits.
constexpr Pieces kQ6_KPieces[] = {{16, 1}, {8, 16}, {32, 48}};
// d; 16 sub-blocks' scales; 16 vectors of low bits and 8 of top bits.
constexpr Pieces kQ3_KPieces[] = {{16, 1}, {8, 16}, {32, 24}};
// d, dmin; 16 sub-blocks' scales; mins of sub-blocks 2m and 2m + 1 (8 bytes); 16 vectors of low bits.
constexpr Pieces kQ2_KPieces[] = {{16, 2}, {8, 16}, {8, 8}, {32, 16}};
// d; 8 sub-blocks' scales; 4 quant vectors of each sub-block.
constexpr Pieces kIQ4_XSPieces[] = {{16, 1}, {8, 8}, {32, 32}};

// Every type's pieces cover its block record exactly.
template <const auto& kPieces>
constexpr size_t pieces_bytes() {
  size_t n = 0;
  for (const Pieces& p : kPieces) n += p.bytes * static_cast<size_t>(p.count);
  return n;
}
static_assert(pieces_bytes<kQ4_0Pieces>() == kInterleaveRows * sizeof(BlockQ4_0));
static_assert(pieces_bytes<kQ4_1Pieces>() == kInterleaveRows * sizeof(BlockQ4_1));
static_assert(pieces_bytes<kQ5_0Pieces>() == kInterleaveRows * sizeof(BlockQ5_0));
static_assert(pieces_bytes<kQ8_0Pieces>() == kInterleaveRows * sizeof(BlockQ8_0));
static_assert(pieces_bytes<kMXFP4Pieces>() == kInterleaveRows * sizeof(BlockMXFP4));
static_assert(pieces_bytes<kQ4_KPieces>() == kQ4KRecordBytes);
static_assert(pieces_bytes<kQ5_KPieces>() == kQ5KRecordBytes);
static_assert(pieces_bytes<kQ6_KPieces>() == kQ6KRecordBytes);
static_assert(pieces_bytes<kQ3_KPieces>() == kQ3KRecordBytes);
static_assert(pieces_bytes<kQ2_KPieces>() == kQ2KRecordBytes);
static_assert(pieces_bytes<kIQ4_XSPieces>() == kIQ4XSRecordBytes);

// Pairs nb blocks of two groups (src, src + group_bytes) into out, with the pieces known at compile time:
// every copy is of a constant size and the loops unroll. Matmul pairs each L2 chunk of K-quant weights
// on the fly (many-token calls on Zen 4), where the copy competes with the kernel's passes: against a
// run-time piece list (a switch per 8-32 byte copy), bench_matmul Q5_K 16 tokens 1.04-1.15x (4 alternating
// runs of both shapes). (The same copies with AVX2 moves measured within noise of these.)
template <const auto& kPieces>
void pair_groups_fixed(size_t record, size_t group_bytes, int64_t nb, const uint8_t* src, uint8_t* out) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* s = src + static_cast<size_t>(i) * record;
    size_t off = 0;  // within a group's record
#pragma GCC unroll 4
    for (const Pieces& p : kPieces) {
#pragma GCC unroll 48
      for (int k = 0; k < p.count; ++k, off += p.bytes) {
        std::memcpy(out, s + off, p.bytes);
        std::memcpy(out + p.bytes, s + group_bytes + off, p.bytes);
        out += 2 * p.bytes;
      }
    }
  }
}

void pair_groups_with(DType type, size_t record, size_t group_bytes, int64_t nb, const uint8_t* src, uint8_t* out) {
  switch (type) {
    case DType::Q4_0: return pair_groups_fixed<kQ4_0Pieces>(record, group_bytes, nb, src, out);
    case DType::Q4_1: return pair_groups_fixed<kQ4_1Pieces>(record, group_bytes, nb, src, out);
    case DType::Q5_0: return pair_groups_fixed<kQ5_0Pieces>(record, group_bytes, nb, src, out);
    case DType::IQ4_NL: return pair_groups_fixed<kQ4_0Pieces>(record, group_bytes, nb, src, out);
    case DType::Q8_0: return pair_groups_fixed<kQ8_0Pieces>(record, group_bytes, nb, src, out);
    case DType::MXFP4:
      return pair_groups_fixed<kMXFP4Pieces>(record, group_bytes, nb, src, out);
    case DType::Q4_K: return pair_groups_fixed<kQ4_KPieces>(record, group_bytes, nb, src, out);
    case DType::Q5_K: return pair_groups_fixed<kQ5_KPieces>(record, group_bytes, nb, src, out);
    case DType::Q6_K: return pair_groups_fixed<kQ6_KPieces>(record, group_bytes, nb, src, out);
    case DType::Q3_K: return pair_groups_fixed<kQ3_KPieces>(record, group_bytes, nb, src, out);
    case DType::Q2_K: return pair_groups_fixed<kQ2_KPieces>(record, group_bytes, nb, src, out);
    case DType::IQ4_XS: return pair_groups_fixed<kIQ4_XSPieces>(record, group_bytes, nb, src, out);
    default: fail("interleave_rows: {} has no pair layout", dtype_name(type));
  }
}

// Groups [0, interleaved_paired_groups(rows)) of a group-layout copy, in place, into the pair layout.
void pair_groups(const Tensor& w, uint8_t* dst) {
  const size_t group_bytes = interleaved_group_bytes(w.type, w.cols());
  const int64_t nb = w.cols() / dtype_info(w.type).block_elems;
  std::vector<uint8_t> pair(2 * group_bytes);
  for (int64_t g = 0; g < interleaved_paired_groups(w.rows()); g += 2) {
    uint8_t* base = dst + static_cast<size_t>(g) * group_bytes;
    std::memcpy(pair.data(), base, 2 * group_bytes);
    pair_groups_with(w.type, interleaved_block_bytes(w.type), group_bytes, nb, pair.data(), base);
  }
}
}  // namespace

void pair_two_groups(DType type, int64_t n_cols, const uint8_t* src, uint8_t* dst) {
  pair_groups_with(type, interleaved_block_bytes(type), interleaved_group_bytes(type, n_cols),
                   n_cols / dtype_info(type).block_elems, src, dst);
}

size_t interleaved_bytes(const Tensor& w) {
  return static_cast<size_t>(w.rows() / kInterleaveRows) * interleaved_group_bytes(w.type, w.cols());
}

void interleave_rows_into(const Tensor& w, uint8_t* dst, bool pairs) {
  if (!has_interleaved_layout(w.type)) fail("interleave_rows: tensor '{}' is {}", w.name, dtype_name(w.type));
  if (!w.valid() || w.cols() % dtype_info(w.type).block_elems != 0)
    fail("interleave_rows: tensor '{}' has no data or a bad row length", w.name);
  switch (w.type) {
    case DType::Q4_0: interleave<BlockQ4_0>(w, dst); break;
    case DType::Q4_1: interleave<BlockQ4_1>(w, dst); break;
    case DType::Q5_0: interleave_q5_0(w, dst); break;
    case DType::IQ4_NL: interleave<BlockIQ4_NL>(w, dst); break;
    case DType::MXFP4:
      interleave_mxfp4(w, dst);
      break;
    case DType::Q4_K: interleave_k_scale_min<BlockQ4_K>(w, dst); break;
    case DType::Q5_K: interleave_k_scale_min<BlockQ5_K>(w, dst); break;
    case DType::Q6_K: interleave_q6_K(w, dst); break;
    case DType::IQ4_XS: interleave_iq4_xs(w, dst); break;
    case DType::Q3_K: interleave_k16<BlockQ3_K>(w, dst); break;
    case DType::Q2_K: interleave_k16<BlockQ2_K>(w, dst); break;
    default: interleave<BlockQ8_0>(w, dst); break;
  }
  if (pairs && !has_pair_layout(w.type)) fail("interleave_rows: {} has no pair layout", dtype_name(w.type));
  if (pairs) pair_groups(w, dst);
}

std::shared_ptr<uint8_t[]> interleave_rows(const Tensor& w, bool pairs) {
  std::shared_ptr<uint8_t[]> out = allocate_large_buffer(interleaved_bytes(w));
  interleave_rows_into(w, out.get(), pairs);
  return out;
}

}  // namespace kvserve
