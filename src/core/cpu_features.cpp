#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kvserve {
namespace {

bool detect() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool fma = ecx & (1u << 12);
  const bool osxsave = ecx & (1u << 27);
  const bool avx = ecx & (1u << 28);
  const bool f16c = ecx & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  // XCR0 bits 1 (SSE) and 2 (AVX): the OS saves the YMM registers.
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6u) != 0x6u) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return ebx & (1u << 5);  // AVX2
#else
  return false;
#endif
}

}  // namespace

bool cpu_has_avx2_fma_f16c() {
  static const bool ok = detect();
  return ok;
}

namespace {
bool vnni_turned_off() { return env_switch("KVSERVE_NO_VNNI") == 1; }
}  // namespace

bool cpu_has_avx512_vnni() {
  static const bool ok = [] {
    if (vnni_turned_off() || env_switch("KVSERVE_NO_AVX512") == 1) return false;
    if (!cpu_has_avx2_fma_f16c()) return false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool f = ebx & (1u << 16), bw = ebx & (1u << 30), vl = ebx & (1u << 31);
    const bool vnni = ecx & (1u << 11);
    if (!(f && bw && vl && vnni)) return false;
    // XCR0 bits 5-7: opmask, upper halves of ZMM0-15, ZMM16-31.
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & 0xE6u) == 0xE6u;
#else
    return false;
#endif
  }();
  return ok;
}

bool cpu_has_avx512_bf16() {
  static const bool ok = [] {
    if (env_switch("KVSERVE_NO_AVX512_BF16") == 1 || !cpu_has_avx512_vnni()) return false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
    return (eax & (1u << 5)) != 0;  // AVX512_BF16; its registers are the state cpu_has_avx512_vnni checked
#else
    return false;
#endif
  }();
  return ok;
}

namespace {
// The tile unit usable by this process, and CPUID leaf 7's EDX (whose bits name its data types).
bool amx_tiles_granted(unsigned& edx_out) {
#if defined(__linux__) && defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  edx_out = edx;
  if (!(edx & (1u << 24))) return false;  // AMX-TILE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x60000u) != 0x60000u) return false;  // XTILECFG and XTILEDATA
  // The tile data is not part of a process's state until it asks for it (Linux 5.16 on): without this,
  // the first tile instruction dies of SIGILL.
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  (void)edx_out;
  return false;
#endif
}

// Bit `bit` of CPUID leaf 7's EDX on a core whose tile unit this process may use (and with AVX-512 VNNI,
// which the AMX kernels also use); KVSERVE_NO_AMX=1 says no.
bool amx_type(unsigned bit) {
  static const unsigned edx = [] {
    unsigned e = 0;
    if (env_switch("KVSERVE_NO_AMX") == 1 || !cpu_has_avx512_vnni() || !amx_tiles_granted(e)) return 0u;
    return e;
  }();
  return (edx & (1u << bit)) != 0;
}
}  // namespace

bool cpu_has_amx_int8() { return amx_type(25); }

bool cpu_has_amx_bf16() { return amx_type(22); }

bool cpu_has_avx_vnni() {
  static const bool ok = [] {
    if (vnni_turned_off() || !cpu_has_avx2_fma_f16c()) return false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
    return (eax & (1u << 4)) != 0;  // AVX-VNNI; its registers are the YMM state cpu_has_avx2_fma_f16c checked
#else
    return false;
#endif
  }();
  return ok;
}

int env_switch(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || env[0] == '\0') return -1;
  return std::strcmp(env, "0") != 0 ? 1 : 0;
}

int cpu_zmm_forced() {
  static const int forced = env_switch("KVSERVE_ZMM");
  return forced;
}

bool cpu_uses_zmm_path(int own_switch, bool pays_on_split_zmm) {
  if (own_switch >= 0) return own_switch == 1 && cpu_has_avx512_vnni();
  if (cpu_prefers_zmm()) return true;
  return cpu_zmm_forced() < 0 && pays_on_split_zmm && cpu_has_avx512_vnni();
}

bool cpu_is_intel() {
  static const bool intel = [] {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
    return ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu;  // "Genu" "ineI" "ntel"
#else
    return false;
#endif
  }();
  return intel;
}

unsigned cpu_amd_family() {
  static const unsigned family = []() -> unsigned {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx) || ebx != 0x68747541u) return 0;  // "Auth" of "AuthenticAMD"
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return ((eax >> 8) & 0xFu) + (((eax >> 8) & 0xFu) == 0xFu ? (eax >> 20) & 0xFFu : 0u);
#else
    return 0;
#endif
  }();
  return family;
}

bool cpu_prefers_zmm() {
  static const bool ok = [] {
    if (!cpu_has_avx512_vnni()) return false;
    if (cpu_zmm_forced() >= 0) return cpu_zmm_forced() == 1;
#if defined(__x86_64__) || defined(__i386__)
    return cpu_amd_family() != 0x19;
#else
    return false;
#endif
  }();
  return ok;
}

}  // namespace kvserve
