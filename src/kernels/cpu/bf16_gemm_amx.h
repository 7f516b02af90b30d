#pragma once
// BF16 weights times BF16 activations on Intel's AMX tile unit (tdpbf16ps), for every token count: the
// BF16 matmul on cores with AMX-BF16 (cpu_has_amx_bf16; matmul.cpp). The weights are the A operand as
// they lie (16 rows of 32 values, at the row stride); the activations, rounded to BF16 as on every other
// path, are packed into the B operand's layout (pairs of consecutive values side by side for each token).
//
// Why every token count, decode too: a tdpbf16ps sums its products in its own order and precision (on the
// Xeon VM none of seven scalar orders tried gave its bits), so a prefill on the tile unit and a decode on
// the FMA path would give a token's K/V and logits different bits by how many tokens its step had. On the
// tile unit each output is the same sequence of tdpbf16ps over its row and token, chunk after chunk of 32
// values, whatever the tile's other rows and tokens (test: Bf16Amx.EachOutputIsTheSameBitsWhateverTheBatch),
// so a token's results do not depend on its batch, its place in it, or the row split across threads.
//
// Compiled with the *_amx.cpp flags plus AMX-BF16; only called after cpu_has_amx_bf16().
#include <cstddef>
#include <cstdint>

namespace kvserve::amx {

// Tokens per group of the packed activations (the B operand's columns).
inline constexpr int kBf16GroupTokens = 16;

// Bytes of the packed activations of n_tokens rows of n_in values: groups of 16 tokens (the last may hold
// fewer), each ceil(n_in / 32) chunks of 16 pairs x the group's tokens x 2 BF16 values, zero past n_in.
int64_t bf16_packed_bytes(int64_t n_in, int64_t n_tokens);

// Token t's row of n_in floats rounded to BF16 (fp32_to_bf16, as quantize_row_bf16) into its slots of the
// packed activations of n_tokens tokens. Tokens' slots are disjoint: different tokens may be packed on
// different threads at once.
void pack_bf16_token(const float* x, int64_t n_in, int64_t n_tokens, int64_t t, uint8_t* packed);

// y[t * n_out + r] = row r of w (n_in BF16 values at w + r * w_row_bytes) . token t, for the rows
// [row_begin, row_end) and every token of the packed activations.
void gemm_bf16(const uint8_t* w, size_t w_row_bytes, int64_t n_in, int64_t n_out, const uint8_t* packed,
               int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end);

}  // namespace kvserve::amx
