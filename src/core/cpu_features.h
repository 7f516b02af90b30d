#pragma once
// Run-time CPU feature detection for choosing SIMD kernels. CPUID directly (not
// __builtin_cpu_supports, whose feature names differ between GCC and clang), including the
// OS check that the AVX register state is saved across context switches.

namespace kvserve {

// AVX2 + FMA + F16C, usable by this process. Computed once.
bool cpu_has_avx2_fma_f16c();

}  // namespace kvserve
