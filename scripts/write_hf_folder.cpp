// Writes the Hugging Face folder of a tiny GGUF golden as the tests do (tests/hf_test_folder.h), for
// scripts that run transformers on it (scripts/make_hf_variant_golden.py). Build from the repo root after
// `cmake --build --preset release`:
//
//   g++ -std=c++20 -Isrc -Itests -DKVSERVE_SHARED_DIR='"../shared"' -DKVSERVE_SOURCE_DIR='"."' \
//       scripts/write_hf_folder.cpp -Lbuild -lkvserve -lfmt -lpcre2-8 -lxxhash -fopenmp -o build/write_hf_folder
//   build/write_hf_folder tests/golden/arch/tiny-deepseek3.gguf /tmp/folder
#include <cstdio>

#include "hf_test_folder.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_hf_folder MODEL.gguf DIR\n");
    return 2;
  }
  kvserve::test::make_hf_folder_from_gguf(argv[1], argv[2], kvserve::DType::F32);
  return 0;
}
