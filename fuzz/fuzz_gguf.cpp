// libFuzzer target: arbitrary bytes → GGUF parse → typed accessors → vocab → model build. Every
// failure must be a kvserve::Error; anything else (crash, sanitizer report, other exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "model/gguf.h"
#include "model/loaders.h"

using namespace kvserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const GGUFFile> file;
  try {
    file = std::make_shared<const GGUFFile>(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  // Exercise every accessor on every key (wrong-type errors are expected).
  for (const auto& [key, value] : file->metadata()) {
    try { (void)file->get_u32(key); } catch (const Error&) {}
    try { (void)file->get_i32(key); } catch (const Error&) {}
    try { (void)file->get_u64(key); } catch (const Error&) {}
    try { (void)file->get_f32(key); } catch (const Error&) {}
    try { (void)file->get_bool(key); } catch (const Error&) {}
    try { (void)file->get_str(key); } catch (const Error&) {}
    try { (void)file->get_str_array(key); } catch (const Error&) {}
    try { (void)file->get_f32_array(key); } catch (const Error&) {}
    try { (void)file->get_i32_array(key); } catch (const Error&) {}
  }
  // Touch every tensor's first and last byte: the parser promised they are inside the buffer.
  volatile uint8_t sink = 0;
  for (const GGUFTensorInfo& t : file->tensors())
    if (t.bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.bytes - 1];
  try {
    (void)vocab_from_gguf(*file);
  } catch (const Error&) {
  }
  try {
    (void)load_gguf_model(file);
  } catch (const Error&) {
  }
  return 0;
}
