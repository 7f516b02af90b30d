// The 512-bit build of the paged attention worker (paged_attention_simd.h): compiled with the AVX-512
// flags of *_avx512vnni.cpp, only called where cpu_prefers_zmm().
#define KVSERVE_ATTN_SUFFIX avx512
#define KVSERVE_ATTN_ZMM 1
// GCC 12's AVX-512 intrinsics pass self-initialized _mm512_undefined_*() values (see
// interleaved_zmm_avx512vnni.cpp).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/cpu/paged_attention_simd.h"
