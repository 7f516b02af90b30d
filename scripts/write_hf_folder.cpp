// Writes the Hugging Face folder of a tiny GGUF golden as the tests do (tests/hf_test_folder.h), for
// scripts that run transformers on it (scripts/make_hf_variant_golden.py). Build from the repo root after
// `cmake --build --preset release`:
//
//   g++ -std=c++20 -Isrc -Itests -DKVSERVE_SHARED_DIR='"../shared"' -DKVSERVE_SOURCE_DIR='"."' \
//       scripts/write_hf_folder.cpp -Lbuild -lkvserve -lfmt -lpcre2-8 -lxxhash -fopenmp -o build/write_hf_folder
//   build/write_hf_folder tests/golden/arch/tiny-deepseek3.gguf /tmp/folder
//   build/write_hf_folder tests/golden/arch/tiny-gptoss.gguf /tmp/folder --dequantized-experts
//
// --dequantized-experts: gpt-oss's experts as float matrices (a folder transformers saved), not MXFP4 blocks.
#include <cstdio>
#include <cstring>

#include "hf_test_folder.h"

int main(int argc, char** argv) {
  const bool dequantized = argc == 4 && std::strcmp(argv[3], "--dequantized-experts") == 0;
  if (argc != 3 && !dequantized) {
    std::fprintf(stderr, "usage: write_hf_folder MODEL.gguf DIR [--dequantized-experts]\n");
    return 2;
  }
  kvserve::test::make_hf_folder_from_gguf(argv[1], argv[2], kvserve::DType::F32, !dequantized);
  return 0;
}
