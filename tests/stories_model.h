#pragma once
// Test helper: the stories260K llama2.c model from ../shared, loaded once per test binary.
#include <memory>
#include <string>

#include "model/model.h"

namespace kvserve::test {

inline const Model& stories260k() {
  static const std::unique_ptr<Model> model = [] {
    const std::string shared = KVSERVE_SHARED_DIR;
    LoadOptions opts;
    opts.tokenizer_path = shared + "/models/stories260K/tok512.bin";
    return load_model(shared + "/models/stories260K/stories260K.bin", opts);
  }();
  return *model;
}

}  // namespace kvserve::test
