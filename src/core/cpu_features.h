#pragma once
// Run-time CPU feature detection for choosing SIMD kernels. CPUID directly (not
// __builtin_cpu_supports, whose feature names differ between GCC and clang), including the
// OS check that the AVX register state is saved across context switches.

namespace kvserve {

// AVX2 + FMA + F16C, usable by this process. Computed once.
bool cpu_has_avx2_fma_f16c();
// AVX2/FMA/F16C plus AVX512F, AVX512VL, AVX512BW and AVX512_VNNI, with the OS saving the AVX-512 state
// (XCR0 opmask and ZMM bits). KVSERVE_NO_VNNI=1 in the environment says no (to compare the AVX2 kernels).
bool cpu_has_avx512_vnni();

}  // namespace kvserve
