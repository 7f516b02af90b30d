#include "model/mxfp4_weights.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/fp16.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"

namespace kvserve {

bool mxfp4_block_to_q5_0(const BlockMXFP4& in, BlockQ5_0& out) {
  // fp16 holds 2^-24 (its smallest subnormal) up to 2^15 exactly.
  const int exp = static_cast<int>(in.e) - 128;
  const bool fits = exp >= -24 && exp <= 15;
  uint32_t qh = 0;
  bool nonzero = false;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const int lo = kMXFP4Values[in.qs[j] & 0xF] + 16, hi = kMXFP4Values[in.qs[j] >> 4] + 16;
    nonzero = nonzero || lo != 16 || hi != 16;
    out.qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  std::memcpy(out.qh, &qh, sizeof qh);  // Q5_0's qh is a little-endian uint32, as this host's
  out.d = fits ? fp32_to_fp16(mxfp4_half_scale(in.e)) : 0;
  return fits || !nonzero;
}

namespace {

// The Q5_0 copy of a weight the AVX2 kernels will read from its interleaved copy (repack_weights_for_cpu) is
// read again only for its last rows (fewer than 8) and by scalar paths: it goes to a temporary file's pages,
// which the kernel may drop, and not to memory of its own (gpt-oss-20b's experts: 13 GB).
std::shared_ptr<uint8_t[]> q5_buffer(const Tensor& t, size_t bytes) {
  if (bytes >= kHugePageBytes && cpu_has_avx2() && t.rows() >= kInterleaveRows)
    if (std::shared_ptr<uint8_t[]> file = allocate_file_backed_buffer(bytes)) return file;
  return allocate_large_buffer(bytes);
}

}  // namespace

void widen_mxfp4_tensor(Tensor& t, std::vector<std::shared_ptr<const void>>& storage) {
  const int64_t n_blocks = t.elements() / kQK4_0;
  const auto* in = static_cast<const BlockMXFP4*>(t.data);
  std::shared_ptr<uint8_t[]> q5 = q5_buffer(t, static_cast<size_t>(n_blocks) * sizeof(BlockQ5_0));
  auto* out = reinterpret_cast<BlockQ5_0*>(q5.get());
  bool exact = true;
  for (int64_t b = 0; b < n_blocks && exact; ++b) exact = mxfp4_block_to_q5_0(in[b], out[b]);
  if (exact) {
    t.data = q5.get();
    t.type = DType::Q5_0;
    storage.push_back(std::move(q5));
    return;
  }
  std::shared_ptr<uint8_t[]> f32 = allocate_large_buffer(static_cast<size_t>(t.elements()) * sizeof(float));
  dequantize_row_mxfp4(in, reinterpret_cast<float*>(f32.get()), t.elements());
  t.data = f32.get();
  t.type = DType::F32;
  storage.push_back(std::move(f32));
}

int widen_mxfp4_weights(Model& model) {
  std::vector<Tensor*> targets;
  const auto add = [&](Tensor& t) {
    if (t.valid() && t.type == DType::MXFP4) targets.push_back(&t);
  };
  add(model.tok_embd);
  add(model.output);
  for (LayerWeights& L : model.layers) {
    for (Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.ffn_gate_inp, &L.ffn_gate_shexp,
                      &L.ffn_up_shexp, &L.ffn_down_shexp, &L.wq_a, &L.wq_b, &L.wkv_a})
      add(*t);
    for (auto* group : {&L.gate_exps, &L.up_exps, &L.down_exps, &L.wk_b, &L.wv_b})
      for (Tensor& t : *group) add(t);
  }
  // A tied output is a copy of tok_embd's view: it takes the same converted data.
  const bool tied_copy =
      model.output.valid() && model.output.type == DType::MXFP4 && model.output.data == model.tok_embd.data;
  if (tied_copy) targets.erase(targets.begin() + 1);
  std::vector<std::vector<std::shared_ptr<const void>>> owned(targets.size());
  ThreadPool::global().parallel_for(static_cast<int64_t>(targets.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) widen_mxfp4_tensor(*targets[static_cast<size_t>(i)], owned[static_cast<size_t>(i)]);
  });
  for (auto& o : owned)
    for (auto& p : o) model.storage.push_back(std::move(p));
  if (tied_copy) model.output = model.tok_embd;
  return static_cast<int>(targets.size());
}

}  // namespace kvserve
