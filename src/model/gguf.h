#pragma once
// GGUF (v2, v3) reader. Parses the header, every metadata key/value and every tensor info, and checks
// each read against the end of the buffer, so a truncated, corrupt or hostile file gives an Error that
// names the file, the byte offset or tensor, and what was expected — never a crash or a huge
// allocation. Tensor data is not copied: TensorInfo::data points into the mapped file.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace kvserve {

// Metadata value types, numbered as in the GGUF spec.
enum class GGUFType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

std::string_view gguf_type_name(GGUFType t);
// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY.
size_t gguf_scalar_size(GGUFType t);

struct GGUFValue {
  GGUFType type = GGUFType::UINT8;

  // Scalars. Integers and bool are widened (signed ones sign-extended) so accessors can range-check.
  uint64_t u64 = 0;  // unsigned integers and bool
  int64_t i64 = 0;   // signed integers
  double f64 = 0;    // float32 / float64
  std::string str;   // STRING

  // ARRAY: element type and count. Numeric elements stay in the file (little-endian, unaligned:
  // read them with memcpy); strings and nested arrays are decoded.
  GGUFType elem_type = GGUFType::UINT8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;       // numeric / bool elements
  std::vector<std::string> strings;   // STRING elements
  std::vector<GGUFValue> items;       // ARRAY elements (nested arrays)

  bool is_array() const { return type == GGUFType::ARRAY; }
  bool is_integer() const;
};

struct GGUFTensorInfo {
  std::string name;
  uint32_t type_id = 0;  // raw ggml_type id from the file
  DType type = DType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  uint64_t offset = 0;  // relative to the data section
  size_t bytes = 0;
  const uint8_t* data = nullptr;
};

class GGUFFile {
 public:
  // Maps and parses the file at `path`.
  explicit GGUFFile(const std::string& path);
  // Parses `size` bytes at `data`, which must outlive this object; `name` is used in error messages.
  // Lets the fuzzer and tests parse without file I/O.
  GGUFFile(const uint8_t* data, size_t size, std::string name);

  GGUFFile(const GGUFFile&) = delete;
  GGUFFile& operator=(const GGUFFile&) = delete;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t size() const { return size_; }
  const uint8_t* bytes() const { return data_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GGUFValue>>& metadata() const { return kv_; }
  const GGUFValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors. get_* throw Error naming the file and key when the key is absent, has the wrong
  // type, or does not fit; find_* return nullopt when absent (and still throw on a wrong type).
  uint32_t get_u32(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::string get_str(std::string_view key) const;
  std::vector<std::string> get_str_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;

  std::optional<uint32_t> find_u32(std::string_view key) const;
  std::optional<int32_t> find_i32(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string> find_str(std::string_view key) const;
  std::optional<std::vector<std::string>> find_str_array(std::string_view key) const;
  std::optional<std::vector<float>> find_f32_array(std::string_view key) const;
  std::optional<std::vector<int32_t>> find_i32_array(std::string_view key) const;

  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }
  // Also notes the tensor as found: a model loader asks for every tensor it reads (loading is one thread).
  const GGUFTensorInfo* find_tensor(std::string_view name) const;
  // The tensors find_tensor() was never asked for, in file order: those a loader left unread.
  std::vector<std::string> tensors_not_found() const;

  // A later shard of a split model (llama.cpp's gguf-split: split.no i of split.count): its tensors join this
  // file's, read where they lie in the shard, which this file keeps alive. A tensor name already here throws.
  void adopt_shard_tensors(std::shared_ptr<const GGUFFile> shard);

 private:
  void parse();
  const GGUFValue& require(std::string_view key) const;

  std::shared_ptr<MappedFile> mapping_;  // null when parsing a caller's buffer
  std::string name_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GGUFValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GGUFTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  mutable std::vector<uint8_t> found_;  // per tensor
  std::vector<std::shared_ptr<const GGUFFile>> shards_;
};

// A model split by llama.cpp's gguf-split ("NAME-00001-of-00003.gguf" ...), opened from its first shard with the
// others' tensors adopted (GGUFFile::adopt_shard_tensors); any other file as it is. Errors name a missing or
// mismatched shard, and a later shard given in place of the first.
std::shared_ptr<GGUFFile> open_gguf_with_shards(const std::string& path);

}  // namespace kvserve
