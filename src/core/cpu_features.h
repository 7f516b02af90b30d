#pragma once
// Run-time CPU feature detection for choosing SIMD kernels. CPUID directly (not
// __builtin_cpu_supports, whose feature names differ between GCC and clang), including the
// OS check that the AVX register state is saved across context switches.

namespace kvserve {

// AVX2 + FMA + F16C, usable by this process. Computed once.
bool cpu_has_avx2_fma_f16c();
// AVX2/FMA/F16C plus AVX512F, AVX512VL, AVX512BW and AVX512_VNNI, with the OS saving the AVX-512 state
// (XCR0 opmask and ZMM bits). KVSERVE_NO_VNNI=1 in the environment says no (to compare the AVX2 kernels),
// and so does KVSERVE_NO_AVX512=1 (to run what a core with AVX-VNNI but no AVX-512 runs).
bool cpu_has_avx512_vnni();
// AVX2/FMA/F16C plus AVX-VNNI: vpdpbusd VEX-encoded on 256-bit registers, on cores without AVX-512
// (Intel's client cores from Alder Lake on; Zen 5 has it too, beside AVX512-VNNI). KVSERVE_NO_VNNI=1 says
// no here too.
bool cpu_has_avx_vnni();
// cpu_has_avx512_vnni() on a core that runs 512-bit operations at full width, so the 512-bit kernels do
// twice the work per instruction (Zen 5, Intel). Zen 4 (AMD family 0x19) splits each into two 256-bit
// halves: there only some 512-bit kernels pay (interleaved_pairs_preferred, paged attention's
// simd_worker), the rest stay 256-bit. KVSERVE_ZMM=0 or 1 in the environment overrides the choice (still
// only with cpu_has_avx512_vnni()), and then every 512-bit path follows it (cpu_uses_zmm_path).
bool cpu_prefers_zmm();
// cpu_has_avx512_vnni() plus AVX512-BF16 (vdpbf16ps: Zen 4, Zen 5, Intel from Cooper Lake on).
// KVSERVE_NO_AVX512_BF16=1 says no (to compare the float tiles).
bool cpu_has_avx512_bf16();
// cpu_has_avx512_vnni() plus AMX-TILE and AMX-INT8 (Intel Xeon from Sapphire Rapids on), with the OS saving
// the tile state (XCR0 bits 17-18) and granting it to this process (Linux's arch_prctl
// ARCH_REQ_XCOMP_PERM, asked once here). KVSERVE_NO_AMX=1 in the environment says no (to compare the
// vpdpbusd kernels).
bool cpu_has_amx_int8();
// The same with AMX-BF16 (tdpbf16ps) instead of AMX-INT8.
bool cpu_has_amx_bf16();
// An Intel core (CPUID vendor "GenuineIntel"): where a tuning measured on AMD hosts differs on Intel's.
bool cpu_is_intel();
// The CPUID family of an AMD core (0x19 Zen 3 and Zen 4, 0x1A Zen 5), 0 on any other vendor's: where a
// tuning measured on one AMD generation differs on the next.
unsigned cpu_amd_family();
// KVSERVE_ZMM as set in the environment: env_switch("KVSERVE_ZMM").
int cpu_zmm_forced();
// An on/off switch from the environment, for A/B runs: -1 when unset or empty, 0 for "0", else 1.
int env_switch(const char* name);
// Whether one 512-bit path runs: its own switch (env_switch value) if set, else KVSERVE_ZMM if set, else
// where the core runs zmm at full width, or on any AVX512-VNNI core when `pays_on_split_zmm` (the path
// measured faster on a core that splits zmm in two halves too). Never without cpu_has_avx512_vnni().
bool cpu_uses_zmm_path(int own_switch, bool pays_on_split_zmm);

}  // namespace kvserve
