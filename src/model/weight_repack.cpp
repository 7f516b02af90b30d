#include "model/weight_repack.h"

#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"

namespace kvserve {

size_t repack_weights_for_cpu(Model& model) {
  if (!cpu_has_avx2()) return 0;
  std::vector<Tensor*> targets;
  auto add = [&](Tensor& t) {
    if (t.valid() && t.interleaved == nullptr && has_interleaved_layout(t.type) && t.rows() >= kInterleaveRows)
      targets.push_back(&t);
  };
  for (LayerWeights& L : model.layers) {
    for (Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) add(*t);
  }
  add(model.output);  // a copy of tok_embd's view when tied; tok_embd itself keeps only the row layout
  std::vector<std::shared_ptr<uint8_t[]>> buffers(targets.size());
  ThreadPool::global().parallel_for(static_cast<int64_t>(targets.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buffers[i] = interleave_rows(*targets[i]);
  });
  size_t bytes = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i]->interleaved = buffers[i].get();
    bytes += static_cast<size_t>(targets[i]->rows() / kInterleaveRows) *
             interleaved_group_bytes(targets[i]->type, targets[i]->cols());
    model.storage.push_back(std::move(buffers[i]));
  }
  return bytes;
}

}  // namespace kvserve
