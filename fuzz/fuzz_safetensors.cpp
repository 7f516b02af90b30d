// libFuzzer target: the safetensors header parser on arbitrary bytes. Any input must either parse or
// throw kvserve::Error; every tensor view it hands out must lie inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kvserve::SafetensorsFile file(data, size, "fuzz.safetensors");
    for (const auto& [name, t] : file.tensors()) {
      if (t.data < data || t.data + t.n_bytes > data + size) std::abort();  // bounds check failed
      try {
        kvserve::Tensor view = file.tensor(name);
        // Touch the first and last byte so ASan sees any out-of-bounds view.
        if (t.n_bytes > 0) {
          volatile uint8_t first = t.data[0], last = t.data[t.n_bytes - 1];
          (void)first, (void)last;
        }
        (void)view;
      } catch (const kvserve::Error&) {
      }
    }
  } catch (const kvserve::Error&) {
  }
  return 0;
}
