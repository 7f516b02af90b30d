// Quantizes a GGUF file with llama.cpp's own quantizer (libllama's llama_model_quantize, the mixes its
// llama-quantize tool makes for each file type), for scripts/make_quant_goldens.py.
//
//   llama_cpp_quantize IN.gguf OUT.gguf FTYPE     (FTYPE: a llama_ftype number, e.g. 8 = Q5_0)
#include <cstdio>
#include <cstdlib>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s IN.gguf OUT.gguf FTYPE\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model_quantize_params params = llama_model_quantize_default_params();
  params.nthread = 1;
  params.ftype = static_cast<llama_ftype>(std::atoi(argv[3]));
  const uint32_t rc = llama_model_quantize(argv[1], argv[2], &params);
  llama_backend_free();
  if (rc != 0) std::fprintf(stderr, "llama_model_quantize failed (%u)\n", rc);
  return rc == 0 ? 0 : 1;
}
