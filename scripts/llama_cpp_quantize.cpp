// Quantizes a GGUF file with llama.cpp's own quantizer (libllama's llama_model_quantize, the mixes its
// llama-quantize tool makes for each file type), for scripts/make_quant_goldens.py.
//
//   llama_cpp_quantize IN.gguf OUT.gguf FTYPE [--uniform-imatrix]
//
// FTYPE: a llama_ftype number, e.g. 8 = Q5_0. --uniform-imatrix gives every weight matrix an importance matrix
// of ones (all columns alike), which the IQ1 / IQ2 / IQ3_XXS types require; with it llama.cpp weighs the
// quantization error as it does without one, so the file is what a plain quantize of those types would be.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "llama.h"

int main(int argc, char** argv) {
  const bool uniform = argc == 5 && std::strcmp(argv[4], "--uniform-imatrix") == 0;
  if (argc != 4 && !uniform) {
    std::fprintf(stderr, "usage: %s IN.gguf OUT.gguf FTYPE [--uniform-imatrix]\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model_quantize_params params = llama_model_quantize_default_params();
  params.nthread = 1;
  params.ftype = static_cast<llama_ftype>(std::atoi(argv[3]));

  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  std::vector<llama_model_imatrix_data> imatrix;
  if (uniform) {
    ggml_context* meta = nullptr;
    gguf_init_params init = {true, &meta};
    gguf_context* g = gguf_init_from_file(argv[1], init);
    if (g == nullptr) {
      std::fprintf(stderr, "cannot read %s\n", argv[1]);
      return 1;
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
      const char* name = gguf_get_tensor_name(g, i);
      const ggml_tensor* t = ggml_get_tensor(meta, name);
      if (t == nullptr || ggml_n_dims(t) < 2) continue;
      names.emplace_back(name);
      values.emplace_back(static_cast<size_t>(t->ne[0] * t->ne[2]), 1.0f);
    }
    for (size_t i = 0; i < names.size(); ++i) imatrix.push_back({names[i].c_str(), values[i].data(), values[i].size()});
    imatrix.push_back({nullptr, nullptr, 0});
    params.imatrix = imatrix.data();
    gguf_free(g);
    ggml_free(meta);
  }
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &params);
  llama_backend_free();
  if (rc != 0) std::fprintf(stderr, "llama_model_quantize failed (%u)\n", rc);
  return rc == 0 ? 0 : 1;
}
