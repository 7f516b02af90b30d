// The 8-lane tokens-in-lanes i-quant kernel (iquants_lanes.h) with AVX-VNNI's vpdpbusd (VEX-encoded, 256-bit,
// 16 registers): what a core with AVX-VNNI but without AVX-512 runs for more than 4 tokens (Intel's client
// cores from Alder Lake on). Compiled with -mavxvnni on top of the AVX2 flags; only called after
// cpu_has_avx_vnni(). The scalar reference's bits, as every i-quant kernel.
#include "kernels/cpu/iquants.h"
#include "kernels/cpu/iquants_lanes.h"

namespace kvserve::avxvnni {

void decode_iq_coded(DType type, const void* row, int64_t n, CodedIQBlock* out) {
  lanes_decode_coded(avx2::iq_decoder(type), static_cast<const uint8_t*>(row),
                     static_cast<size_t>(dtype_info(type).block_bytes), n / kQK_K, out);
}

void tokens_to_lanes8(const uint8_t* rows, size_t row_bytes, int n_tok, int64_t n, IQTokenLanes& out) {
  lanes8_from_tokens(rows, row_bytes, n_tok, n, out);
}

void gemm_iq_coded8(DType type, int64_t n, const CodedIQBlock* w, int n_rows, const IQTokenLanes& acts, float* out) {
  lanes_gemm<LanesYmm>(type, n, w, n_rows, acts, out);
}

}  // namespace kvserve::avxvnni
