#include "model/weight_repack.h"

#include <vector>

#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"

namespace kvserve {

namespace {
// Each tensor starts on a cache line, so no record straddles two lines more than it does on its own.
constexpr size_t kArenaAlign = 64;
}  // namespace

size_t repack_weights_for_cpu(Model& model) {
  if (!cpu_has_avx2()) return 0;
  std::vector<Tensor*> targets;
  auto add = [&](Tensor& t) {
    if (t.valid() && t.interleaved == nullptr && has_interleaved_layout(t.type) && t.rows() >= kInterleaveRows)
      targets.push_back(&t);
  };
  for (LayerWeights& L : model.layers) {
    // MLA's projections (DeepSeek) where a model has them, in the order its forward reads them.
    for (Tensor* t : {&L.wq_a, &L.wq_b, &L.wq, &L.wk, &L.wv, &L.wkv_a}) add(*t);
    for (auto* heads : {&L.wk_b, &L.wv_b})
      for (Tensor& t : *heads) add(t);
    for (Tensor* t : {&L.wo, &L.w_gate, &L.w_up, &L.w_down}) add(*t);
    for (auto* experts : {&L.gate_exps, &L.up_exps, &L.down_exps})
      for (Tensor& t : *experts) add(t);
    for (Tensor* t : {&L.ffn_gate_shexp, &L.ffn_up_shexp, &L.ffn_down_shexp}) add(*t);
  }
  add(model.output);  // a copy of tok_embd's view when tied; tok_embd itself keeps only the row layout
  // One buffer for all of them, in the order a forward pass reads them: decode streams it front to back
  // through huge pages (where the kernel gives them). Small models' tensors are each under a huge page,
  // and as separate allocations sat in 4 KiB pages: a TLB miss and a fresh prefetch stream every 4 KiB.
  std::vector<size_t> offsets(targets.size());
  size_t bytes = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    offsets[i] = bytes;
    bytes += (interleaved_bytes(*targets[i]) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  }
  if (targets.empty()) return 0;
  std::shared_ptr<uint8_t[]> arena = allocate_large_buffer(bytes);
  ThreadPool::global().parallel_for(static_cast<int64_t>(targets.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      interleave_rows_into(*targets[i], arena.get() + offsets[i], interleaved_pairs_preferred(targets[i]->type));
  });
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i]->interleaved = arena.get() + offsets[i];
    targets[i]->interleaved_pairs = interleaved_pairs_preferred(targets[i]->type);
  }
  model.storage.push_back(std::move(arena));
  return bytes;
}

}  // namespace kvserve
