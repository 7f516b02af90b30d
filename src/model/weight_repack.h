#pragma once
// Load-time repacking of matmul weights into the layouts the CPU kernels run fastest on (today: Q4_0, Q4_1 and
// Q8_0 interleaved 8 rows at a time, kernels/cpu/interleaved_rows.h). The original tensor data stays
// for embedding lookups and the scalar paths.
#include "model/model.h"

namespace kvserve {

// Repacks every eligible weight when the AVX2 kernels are in use (no-op otherwise); the buffers are
// owned by model.storage. Returns the bytes of repacked copies made.
size_t repack_weights_for_cpu(Model& model);

}  // namespace kvserve
