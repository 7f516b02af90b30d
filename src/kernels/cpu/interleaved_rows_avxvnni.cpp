// The interleaved kernels with AVX-VNNI's vpdpbusd (VEX-encoded, 256-bit, 16 registers): what a core with
// AVX-VNNI but without AVX-512 runs (Intel's client cores from Alder Lake on). The same kernels as
// interleaved_rows_avx512vnni.cpp, compiled with -mavxvnni on top of the AVX2 flags; only called after
// cpu_has_avx_vnni(). Bit-identical to the AVX2 versions.
#include "kernels/cpu/interleaved_kquant_kernels.h"
#include "kernels/cpu/interleaved_q32_kernels.h"

namespace kvserve::avxvnni {

#include "kernels/cpu/interleaved_rows_vnni_entries.inc"

}  // namespace kvserve::avxvnni
