// Writes tests/data/iquants/ggml_iq_blocks.bin: random blocks of the i-quant types below 4 bits, with what
// ggml itself makes of them (its to_float dequantizer, and its CPU vec_dot against Q8_K activations), for
// tests/test_iquants.cpp. Run once; the output is committed. Built against the llama.cpp that
// llama-cpp-python 0.3.36 vendors (DIR, built with CMake into DIR/build):
//
//   g++ -std=c++17 -O2 -IDIR/ggml/include scripts/make_iq_fixture.cpp -LDIR/build/bin -lggml-base -lggml-cpu \
//       -Wl,-rpath,DIR/build/bin -o /tmp/make_iq_fixture && /tmp/make_iq_fixture tests/data/iquants/ggml_iq_blocks.bin
//
// Layout, little-endian, per type in the order below: uint32 ggml type, uint32 block count B, the B blocks'
// bytes, B * 256 float dequantized weights, B * 256 float activations, float dot (the B blocks as one row).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

void put(std::FILE* f, const void* p, size_t n) {
  if (std::fwrite(p, 1, n, f) != n) std::abort();
}

// Where each type keeps its fp16 block scale: the first two bytes, except IQ1_M's (top nibbles of its scales).
void set_scale(ggml_type type, uint8_t* block, size_t block_bytes, float d) {
  const ggml_fp16_t h = ggml_fp32_to_fp16(d);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  if (type != GGML_TYPE_IQ1_M) {
    std::memcpy(block, &bits, 2);
    return;
  }
  uint8_t* scales = block + block_bytes - 8;
  for (int k = 0; k < 4; ++k) {
    uint16_t word;
    std::memcpy(&word, scales + 2 * k, 2);
    word = static_cast<uint16_t>((word & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12));
    std::memcpy(scales + 2 * k, &word, 2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.bin\n", argv[0]);
    return 2;
  }
  ggml_cpu_init();
  std::FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr) return 1;
  std::mt19937 rng(20261206);
  const ggml_type types[] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS,
                             GGML_TYPE_IQ3_S,   GGML_TYPE_IQ1_S,  GGML_TYPE_IQ1_M};
  const uint32_t n_blocks = 6;
  const int n = static_cast<int>(n_blocks) * 256;
  for (ggml_type type : types) {
    const size_t block_bytes = ggml_type_size(type);
    std::vector<uint8_t> blocks(block_bytes * n_blocks);
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.0005f, 0.02f);
    for (uint32_t i = 0; i < n_blocks; ++i) set_scale(type, blocks.data() + i * block_bytes, block_bytes, scale(rng));
    std::vector<float> w(n), x(n);
    ggml_get_type_traits(type)->to_float(blocks.data(), w.data(), n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    const ggml_type_traits_cpu* cpu = ggml_get_type_traits_cpu(type);
    std::vector<uint8_t> act(ggml_row_size(cpu->vec_dot_type, n));
    ggml_get_type_traits_cpu(cpu->vec_dot_type)->from_float(x.data(), act.data(), n);
    float dot = 0.0f;
    cpu->vec_dot(n, &dot, 0, blocks.data(), 0, act.data(), 0, 1);
    const uint32_t id = static_cast<uint32_t>(type);
    put(f, &id, 4);
    put(f, &n_blocks, 4);
    put(f, blocks.data(), blocks.size());
    put(f, w.data(), w.size() * 4);
    put(f, x.data(), x.size() * 4);
    put(f, &dot, 4);
    std::printf("%s: dot %g\n", ggml_type_name(type), dot);
  }
  std::fclose(f);
  return 0;
}
