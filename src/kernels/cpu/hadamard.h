#pragma once
// The orthonormal Walsh-Hadamard rotation a quantized KV cache stores K and V under, as llama.cpp's KV
// cache does (llama-kv-cache.cpp, attn_rot_k / attn_rot_v): a row's outliers spread over its block of
// values, so an int8 / int4 block's one scale fits all of them better. Q is rotated as K is, so every
// score is unchanged (H is orthonormal); the attention output, a mix of rotated V rows, is rotated back
// (H is its own inverse).
#include <cstdint>

namespace kvserve {

// Each consecutive `block` values of x[0, n) (block a power of two dividing n) times the n x n
// Sylvester-Hadamard matrix / sqrt(block), by the fast transform (block * log2(block) adds).
void hadamard_rotate(float* x, int64_t n, int block);

// The reference: the dense Sylvester matrix, H[i][j] = (-1)^popcount(i & j) / sqrt(block), in double.
void hadamard_rotate_ref(float* x, int64_t n, int block);

}  // namespace kvserve
