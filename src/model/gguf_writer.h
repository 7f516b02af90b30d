#pragma once
// GGUF v3 writer: metadata key/values (scalars, strings, arrays, or values copied from another GGUF
// file) and tensors, written in the layout llama.cpp expects (header, metadata, tensor infos, padding to
// general.alignment, then each tensor's data at an aligned offset). Tensor data is either handed over as
// bytes or produced by a callback while the file is written, so a multi-GB model never sits in memory.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "model/gguf.h"

namespace kvserve {

class GGUFWriter {
 public:
  // Fills `dst` (exactly the tensor's byte size) with the tensor's data.
  using TensorFill = std::function<void(uint8_t* dst)>;

  explicit GGUFWriter(uint32_t alignment = 32);

  // Metadata, in the order added. Adding a key twice throws Error.
  void add_u8(const std::string& key, uint8_t v);
  void add_u16(const std::string& key, uint16_t v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_str(const std::string& key, std::string_view v);
  void add_str_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Copies a value parsed by GGUFFile (any type, nested arrays included). Numeric array elements are
  // copied now, so the source file may be closed afterwards.
  void add_value(const std::string& key, const GGUFValue& v);
  bool has_key(std::string_view key) const;

  // Tensors, in the order added. ne is in ggml order (ne[0] = row length, a multiple of the type's block
  // size). Names must be unique.
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, std::vector<uint8_t> data);
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, TensorFill fill);

  size_t n_tensors() const { return tensors_.size(); }
  // Bytes the whole file will take.
  uint64_t file_size() const;

  // Writes the file (to path + ".tmp", renamed into place when complete). `progress`, when set, gets the
  // fraction of tensor bytes written. Throws Error on I/O failure.
  void write(const std::string& path, const std::function<void(float)>& progress = {}) const;
  // The whole file in memory (for tests and small files).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct TensorEntry {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    uint64_t bytes = 0;
    uint64_t offset = 0;  // in the data section
    std::vector<uint8_t> data;
    TensorFill fill;
  };
  TensorEntry make_entry(const std::string& name, DType type, const std::vector<int64_t>& ne) const;
  void push(TensorEntry t);
  void begin_key(const std::string& key, GGUFType type);
  void put_value(const GGUFValue& v);
  std::vector<uint8_t> header_bytes() const;  // everything before the data section, padded
  void emit(const std::function<void(const uint8_t*, size_t)>& sink, const std::function<void(float)>& progress) const;

  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;  // serialized metadata
  std::vector<std::string> keys_;
  std::vector<TensorEntry> tensors_;
  uint64_t data_bytes_ = 0;
};

}  // namespace kvserve
