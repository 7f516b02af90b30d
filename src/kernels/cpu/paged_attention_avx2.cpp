// The 256-bit build of the paged attention worker (paged_attention_simd.h): compiled with -mavx2 -mfma
// -mf16c, only called after cpu_has_avx2_fma_f16c().
#define KVSERVE_ATTN_SUFFIX avx2
#include "kernels/cpu/paged_attention_simd.h"
