#pragma once
// Random weight rows for kernel tests: random quant bits with fp16 scales in a sane range, written
// straight into the GGUF block layouts.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu/iquants.h"
#include "kernels/cpu/quants.h"

namespace kvserve::testing {

inline uint16_t random_half(std::mt19937& rng, float lo, float hi, bool random_sign) {
  float v = std::uniform_real_distribution<float>(lo, hi)(rng);
  if (random_sign && (rng() & 1)) v = -v;
  return fp32_to_fp16(v);
}

// n_rows rows of n_cols elements of `type` (n_cols a multiple of its block size).
inline std::vector<uint8_t> random_weights(DType type, int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
  const size_t bytes = row_bytes(type, n_cols) * static_cast<size_t>(n_rows);
  std::vector<uint8_t> data(bytes);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const int64_t n_elems = n_rows * n_cols;
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto blocks = [&](auto* typed, int block_elems) {
    const int64_t nb = n_elems / block_elems;
    for (int64_t i = 0; i < nb; ++i) typed[i].d = random_half(rng, 0.001f, 0.05f, true);
    return nb;
  };
  switch (type) {
    case DType::F32: {
      auto* f = reinterpret_cast<float*>(data.data());
      for (int64_t i = 0; i < n_elems; ++i) f[i] = unit(rng);
      break;
    }
    case DType::F16: {
      auto* h = reinterpret_cast<uint16_t*>(data.data());
      for (int64_t i = 0; i < n_elems; ++i) h[i] = fp32_to_fp16(unit(rng));
      break;
    }
    case DType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(data.data());
      for (int64_t i = 0; i < n_elems; ++i) h[i] = fp32_to_bf16(unit(rng));
      break;
    }
    case DType::Q8_0: blocks(reinterpret_cast<BlockQ8_0*>(data.data()), kQK8_0); break;
    case DType::Q4_0: blocks(reinterpret_cast<BlockQ4_0*>(data.data()), kQK4_0); break;
    case DType::Q4_1: {
      auto* b = reinterpret_cast<BlockQ4_1*>(data.data());
      const int64_t nb = blocks(b, kQK4_1);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = random_half(rng, 0.001f, 0.05f, false);
        b[i].m = random_half(rng, 0.0f, 0.4f, true);
      }
      break;
    }
    case DType::Q5_0: blocks(reinterpret_cast<BlockQ5_0*>(data.data()), kQK4_0); break;
    case DType::Q5_1: {
      auto* b = reinterpret_cast<BlockQ5_1*>(data.data());
      const int64_t nb = blocks(b, kQK4_1);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = random_half(rng, 0.001f, 0.03f, false);
        b[i].m = random_half(rng, 0.0f, 0.4f, true);
      }
      break;
    }
    case DType::Q2_K: {
      auto* b = reinterpret_cast<BlockQ2_K*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) {
        b[i].d = random_half(rng, 0.001f, 0.01f, false);
        b[i].dmin = random_half(rng, 0.001f, 0.01f, false);
      }
      break;
    }
    case DType::Q3_K: {
      auto* b = reinterpret_cast<BlockQ3_K*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) b[i].d = random_half(rng, 0.0002f, 0.003f, true);
      break;
    }
    case DType::IQ4_NL: blocks(reinterpret_cast<BlockIQ4_NL*>(data.data()), kQK4_0); break;
    case DType::MXFP4: {
      auto* b = reinterpret_cast<BlockMXFP4*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK4_0; ++i) b[i].e = static_cast<uint8_t>(116 + rng() % 8);  // 2^-12..2^-5
      break;
    }
    case DType::IQ4_XS: {
      auto* b = reinterpret_cast<BlockIQ4_XS*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) b[i].d = random_half(rng, 0.00002f, 0.0003f, true);
      break;
    }
    case DType::Q4_K: {
      auto* b = reinterpret_cast<BlockQ4_K*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) {
        b[i].d = random_half(rng, 0.0005f, 0.005f, false);
        b[i].dmin = random_half(rng, 0.0005f, 0.005f, false);
      }
      break;
    }
    case DType::Q5_K: {
      auto* b = reinterpret_cast<BlockQ5_K*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) {
        b[i].d = random_half(rng, 0.0005f, 0.005f, false);
        b[i].dmin = random_half(rng, 0.0005f, 0.005f, false);
      }
      break;
    }
    case DType::Q6_K: {
      auto* b = reinterpret_cast<BlockQ6_K*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) b[i].d = random_half(rng, 0.0001f, 0.002f, true);
      break;
    }
    case DType::IQ2_XXS:
      blocks(reinterpret_cast<BlockIQ2_XXS*>(data.data()), kQK_K);
      break;
    case DType::IQ2_XS:
      blocks(reinterpret_cast<BlockIQ2_XS*>(data.data()), kQK_K);
      break;
    case DType::IQ2_S:
      blocks(reinterpret_cast<BlockIQ2_S*>(data.data()), kQK_K);
      break;
    case DType::IQ3_XXS:
      blocks(reinterpret_cast<BlockIQ3_XXS*>(data.data()), kQK_K);
      break;
    case DType::IQ3_S: {
      auto* b = reinterpret_cast<BlockIQ3_S*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) b[i].d = random_half(rng, 0.0005f, 0.005f, true);
      break;
    }
    case DType::IQ1_S:
      blocks(reinterpret_cast<BlockIQ1_S*>(data.data()), kQK_K);
      break;
    case DType::IQ1_M: {
      // The block's fp16 scale sits in the top nibbles of its four 16-bit scale words.
      auto* b = reinterpret_cast<BlockIQ1_M*>(data.data());
      for (int64_t i = 0; i < n_elems / kQK_K; ++i) {
        const uint16_t d = random_half(rng, 0.001f, 0.05f, true);
        for (int k = 0; k < 4; ++k) {
          uint16_t word;
          std::memcpy(&word, b[i].scales + 2 * k, 2);
          word = static_cast<uint16_t>((word & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12));
          std::memcpy(b[i].scales + 2 * k, &word, 2);
        }
      }
      break;
    }
    default: break;
  }
  return data;
}

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace kvserve::testing
