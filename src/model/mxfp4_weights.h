#pragma once
// gpt-oss's expert weights come as MXFP4 (OCP microscaling FP4). Every MXFP4 value is k * 2^(e - 128) with k
// in -12..12 (kMXFP4Values) and a power-of-two scale, so a block is exactly a Q5_0 block, whose quants are
// -16..15 times an fp16 scale, whenever 2^(e - 128) is an fp16 number (e in 104..143, where real models'
// scales lie). The loader converts such tensors to Q5_0 and computes with the Q5_0 kernels: the same integer
// dot products llama.cpp's MXFP4 x Q8_0 kernel forms, at 22 bytes per 32 weights instead of 17. A tensor
// with a block outside that range becomes F32 (exact too).
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/quants.h"
#include "model/model.h"

namespace kvserve {

// One block as Q5_0; false (and `out` unspecified) when its scale is not an fp16 number and a value is not 0.
bool mxfp4_block_to_q5_0(const BlockMXFP4& in, BlockQ5_0& out);

// Converts one MXFP4 weight in place (its new buffer appended to `storage`).
void widen_mxfp4_tensor(Tensor& t, std::vector<std::shared_ptr<const void>>& storage);

// Converts every MXFP4 weight of `model` (Q5_0, or F32 where a block does not fit); the buffers go to
// model.storage. Returns the number of tensors converted.
int widen_mxfp4_weights(Model& model);

}  // namespace kvserve
