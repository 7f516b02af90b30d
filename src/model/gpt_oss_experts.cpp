#include "model/gpt_oss_experts.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/large_buffer.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"

namespace kvserve {

namespace {

const SafetensorsTensor& shaped(const SafetensorsModel& w, const std::string& name, const char* dtype,
                                const std::vector<int64_t>& shape) {
  const SafetensorsTensor& t = w.raw(name);
  if ((dtype != nullptr && t.dtype != dtype) || t.shape != shape) {
    std::string want;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    std::string got;
    for (int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    fail("'{}': tensor '{}' is {} [{}], expected {} [{}]", w.dir(), name, t.dtype, got, dtype ? dtype : "a float",
         want);
  }
  return t;
}

// Element i of an F32 / F16 / BF16 safetensors tensor.
float value(const SafetensorsTensor& t, int64_t i) {
  if (t.dtype == "F32") {
    float f;
    std::memcpy(&f, t.data + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, t.data + 2 * i, 2);
  if (t.dtype == "F16") return fp16_to_fp32(h);
  if (t.dtype == "BF16") return bf16_to_fp32(h);
  fail("tensor '{}' has dtype {}; expected F32, F16 or BF16", t.name, t.dtype);
}

// An owned F32 matrix [rows][cols] filled by f(row, col), as a Tensor named `name`.
template <typename F>
Tensor f32_matrix(const std::string& name, int64_t rows, int64_t cols, F f, Model& m) {
  auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (*buf)[static_cast<size_t>(r * cols + c)] = f(r, c);
  Tensor t;
  t.name = name;
  t.type = DType::F32;
  t.ne = {cols, rows, 1, 1};
  t.n_dims = 2;
  t.data = buf->data();
  m.storage.push_back(buf);
  return t;
}

// A checkpoint's float [rows][cols] tensor (a router) as an owned F32 matrix.
Tensor f32_copy(const SafetensorsModel& w, const std::string& name, int64_t rows, int64_t cols, Model& m) {
  const SafetensorsTensor& t = shaped(w, name, nullptr, {rows, cols});
  return f32_matrix(
      name, rows, cols, [&](int64_t r, int64_t k) { return value(t, r * cols + k); }, m);
}

// A float vector of `n` values from the checkpoint, owned as F32.
Tensor f32_vector(const SafetensorsModel& w, const std::string& name, int64_t n, Model& m) {
  const SafetensorsTensor& t = shaped(w, name, nullptr, {n});
  Tensor out = f32_matrix(
      name, 1, n, [&](int64_t, int64_t k) { return value(t, k); }, m);
  out.ne = {n, 1, 1, 1};
  out.n_dims = 1;
  return out;
}

// An owned [rows][cols] matrix in `t`'s own float type (F32, F16 or BF16: bit copies, no rounding), element (r, c)
// taken from t's element index(r, c), as a Tensor named `name`: a transposed expert keeps its checkpoint's width.
template <typename Index>
Tensor matrix_like(const SafetensorsTensor& t, const std::string& name, int64_t rows, int64_t cols, Index index,
                   Model& m) {
  const size_t elem = t.dtype == "F32" ? 4 : 2;
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
    fail("tensor '{}' has dtype {}; expected F32, F16 or BF16", t.name, t.dtype);
  auto buf = std::shared_ptr<uint8_t[]>(new (std::align_val_t{64}) uint8_t[static_cast<size_t>(rows * cols) * elem],
                                        [](uint8_t* p) { ::operator delete[](p, std::align_val_t{64}); });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(buf.get() + static_cast<size_t>(r * cols + c) * elem,
                  t.data + static_cast<size_t>(index(r, c)) * elem, elem);
  Tensor out;
  out.name = name;
  out.type = t.dtype == "F32" ? DType::F32 : t.dtype == "F16" ? DType::F16 : DType::BF16;
  out.ne = {cols, rows, 1, 1};
  out.n_dims = 2;
  out.data = buf.get();
  m.storage.push_back(std::move(buf));
  return out;
}

// Rows [first, first + n) of `t` as one view per expert of `rows` rows each (expert e's rows e * rows ...).
std::vector<Tensor> per_expert(const Tensor& t, int n_expert, int64_t rows, const std::string& name) {
  std::vector<Tensor> out;
  for (int e = 0; e < n_expert; ++e) out.push_back(row_range(t, e * rows, rows, name + "[" + std::to_string(e) + "]"));
  return out;
}

}  // namespace

std::shared_ptr<uint8_t[]> mxfp4_weight_buffer(size_t bytes, int64_t rows) {
  if (bytes >= kHugePageBytes && cpu_has_avx2() && rows >= kInterleaveRows)
    if (std::shared_ptr<uint8_t[]> file = allocate_file_backed_buffer(bytes)) return file;
  return allocate_large_buffer(bytes);
}

namespace {

// One projection of every expert from MXFP4 blocks and scales: expert e's weight is rows `row0 + step * i` of
// its checkpoint rows (gate: 0, 2, 4, ...; up: 1, 3, ...), each `cols` wide, repacked into ggml's block order.
std::vector<Tensor> mxfp4_experts(const SafetensorsModel& w, const std::string& stem, int n_expert, int64_t ckpt_rows,
                                  int64_t rows, int64_t cols, int64_t row0, int64_t step, Model& m) {
  const int64_t g = cols / kQK4_0;
  if (cols % kQK4_0 != 0) fail("'{}': '{}' rows of {} values are not whole MXFP4 blocks", w.dir(), stem, cols);
  const SafetensorsTensor& blocks = shaped(w, stem + "_blocks", "U8", {n_expert, ckpt_rows, g, 16});
  const SafetensorsTensor& scales = shaped(w, stem + "_scales", "U8", {n_expert, ckpt_rows, g});
  std::vector<Tensor> out;
  for (int e = 0; e < n_expert; ++e) {
    std::shared_ptr<uint8_t[]> buffer = mxfp4_weight_buffer(static_cast<size_t>(rows * g) * sizeof(BlockMXFP4), rows);
    auto* packed = reinterpret_cast<BlockMXFP4*>(buffer.get());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src = int64_t{e} * ckpt_rows + row0 + step * r;
      for (int64_t b = 0; b < g; ++b) {
        BlockMXFP4& dst = packed[static_cast<size_t>(r * g + b)];
        dst.e = scales.data[src * g + b];
        const uint8_t* q = blocks.data + (src * g + b) * 16;
        const auto code = [&](int k) { return k % 2 == 0 ? q[k / 2] & 0xF : q[k / 2] >> 4; };
        for (int j = 0; j < 16; ++j) dst.qs[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
      }
    }
    Tensor t;
    t.name = stem + "[" + std::to_string(e) + "]";
    t.type = DType::MXFP4;
    t.ne = {cols, rows, 1, 1};
    t.n_dims = 2;
    t.data = packed;
    m.storage.push_back(std::move(buffer));
    out.push_back(t);
  }
  return out;
}

// Fused float experts, as x @ W: gate_up_proj [experts][E][2F], gate and up columns interleaved (gpt-oss: 2i, 2i + 1)
// or one after the other (Llama 4: gate's F, then up's), and down_proj [experts][F][E]; each expert's three in
// llama.cpp's layout, in the checkpoint's float type.
void load_fused_float_experts(const SafetensorsModel& w, const std::string& x, int n, int64_t E, int64_t F,
                              bool interleaved, LayerWeights& L, Model& m) {
  const SafetensorsTensor& gu = shaped(w, x + "gate_up_proj", nullptr, {n, E, 2 * F});
  const SafetensorsTensor& dn = shaped(w, x + "down_proj", nullptr, {n, F, E});
  // Column of gate_up_proj holding row j of expert e's gate (up: `up` true).
  const auto column = [&](int64_t j, bool up) { return interleaved ? 2 * j + (up ? 1 : 0) : (up ? F : 0) + j; };
  const Tensor gate = matrix_like(
      gu, x + "gate_proj", int64_t{n} * F, E,
      [&](int64_t r, int64_t k) { return ((r / F) * E + k) * 2 * F + column(r % F, false); }, m);
  const Tensor up = matrix_like(
      gu, x + "up_proj", int64_t{n} * F, E,
      [&](int64_t r, int64_t k) { return ((r / F) * E + k) * 2 * F + column(r % F, true); }, m);
  const Tensor down = matrix_like(
      dn, x + "down_proj", int64_t{n} * E, F, [&](int64_t r, int64_t k) { return ((r / E) * F + k) * E + r % E; }, m);
  L.gate_exps = per_expert(gate, n, F, x + "gate_proj");
  L.up_exps = per_expert(up, n, F, x + "up_proj");
  L.down_exps = per_expert(down, n, E, x + "down_proj");
}

}  // namespace

void load_gpt_oss_experts(const SafetensorsModel& w, const std::string& mlp, const ModelConfig& c, LayerWeights& L,
                          Model& m) {
  const int n = c.n_expert;
  const int64_t E = c.n_embd, F = c.n_ff_exp;
  L.ffn_gate_inp = f32_copy(w, mlp + "router.weight", n, E, m);
  L.ffn_gate_inp_b = f32_vector(w, mlp + "router.bias", n, m);

  const std::string x = mlp + "experts.";
  if (w.has(x + "gate_up_proj_blocks")) {
    L.gate_exps = mxfp4_experts(w, x + "gate_up_proj", n, 2 * F, F, E, 0, 2, m);
    L.up_exps = mxfp4_experts(w, x + "gate_up_proj", n, 2 * F, F, E, 1, 2, m);
    L.down_exps = mxfp4_experts(w, x + "down_proj", n, E, E, F, 0, 1, m);
  } else {
    // Dequantized: gate_up_proj [experts][E][2F] (gate and up interleaved) and down_proj [experts][F][E].
    load_fused_float_experts(w, x, n, E, F, /*interleaved=*/true, L, m);
  }
  const SafetensorsTensor& gu_b = shaped(w, x + "gate_up_proj_bias", nullptr, {n, 2 * F});
  const SafetensorsTensor& dn_b = shaped(w, x + "down_proj_bias", nullptr, {n, E});
  const Tensor gate_b = f32_matrix(
      x + "gate_proj_bias", n, F, [&](int64_t e, int64_t i) { return value(gu_b, e * 2 * F + 2 * i); }, m);
  const Tensor up_b = f32_matrix(
      x + "up_proj_bias", n, F, [&](int64_t e, int64_t i) { return value(gu_b, e * 2 * F + 2 * i + 1); }, m);
  const Tensor down_b = f32_matrix(
      x + "down_proj_bias", n, E, [&](int64_t e, int64_t i) { return value(dn_b, e * E + i); }, m);
  L.gate_exps_b = per_expert(gate_b, n, 1, x + "gate_proj_bias");
  L.up_exps_b = per_expert(up_b, n, 1, x + "up_proj_bias");
  L.down_exps_b = per_expert(down_b, n, 1, x + "down_proj_bias");
}

void load_llama4_experts(const SafetensorsModel& w, const std::string& ff, const ModelConfig& c, LayerWeights& L,
                         Model& m) {
  const int n = c.n_expert;
  const int64_t E = c.n_embd, F = c.n_ff_exp;
  L.ffn_gate_inp = f32_copy(w, ff + "router.weight", n, E, m);
  const std::string x = ff + "experts.";
  load_fused_float_experts(w, x, n, E, F, /*interleaved=*/false, L, m);
}

namespace {

// A [experts][rows][cols] float tensor as one [rows][cols] weight per expert: views of the mapped rows where the data
// is aligned for its type, else of an aligned copy.
std::vector<Tensor> expert_rows(const SafetensorsModel& w, const std::string& name, int n, int64_t rows, int64_t cols,
                                Model& m) {
  const SafetensorsTensor& raw = shaped(w, name, nullptr, {n, rows, cols});
  Tensor all = w.tensor(name);
  const size_t elem = all.type == DType::F32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(all.data) % elem != 0)
    all = matrix_like(
        raw, name, int64_t{n} * rows, cols, [&](int64_t r, int64_t k) { return r * cols + k; }, m);
  all.ne = {cols, int64_t{n} * rows, 1, 1};
  all.n_dims = 2;
  return per_expert(all, n, rows, name);
}

}  // namespace

void load_gemma4_experts(const SafetensorsModel& w, const std::string& layer, const ModelConfig& c, LayerWeights& L,
                         Model& m) {
  const int n = c.n_expert;
  const int64_t E = c.n_embd, F = c.n_ff_exp;
  L.ffn_gate_inp = f32_copy(w, layer + "router.proj.weight", n, E, m);
  L.ffn_gate_inp_scale = f32_vector(w, layer + "router.scale", E, m);
  L.down_exps_scale = f32_vector(w, layer + "router.per_expert_scale", n, m);
  const std::string x = layer + "experts.";
  const std::vector<Tensor> gate_up = expert_rows(w, x + "gate_up_proj", n, 2 * F, E, m);
  for (int e = 0; e < n; ++e) {
    const std::string name = x + "gate_up_proj[" + std::to_string(e) + "]";
    L.gate_exps.push_back(row_range(gate_up[static_cast<size_t>(e)], 0, F, name + ".gate"));
    L.up_exps.push_back(row_range(gate_up[static_cast<size_t>(e)], F, F, name + ".up"));
  }
  L.down_exps = expert_rows(w, x + "down_proj", n, E, F, m);
}

}  // namespace kvserve
