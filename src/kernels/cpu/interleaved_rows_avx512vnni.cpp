// The Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K interleaved kernels with vpdpbusd (AVX512-VNNI on 256-bit registers, EVEX
// encoded). Compiled with -mavx512f -mavx512vl -mavx512bw -mavx512vnni on top of the AVX2 flags; only
// called after cpu_has_avx512_vnni(). Bit-identical to the AVX2 versions (interleaved_q32_kernels.h,
// interleaved_kquant_kernels.h).
#include "kernels/cpu/interleaved_kquant_kernels.h"
#include "kernels/cpu/interleaved_q32_kernels.h"

namespace kvserve::avx512vnni {

#include "kernels/cpu/interleaved_rows_vnni_entries.inc"

}  // namespace kvserve::avx512vnni
