#include "model/safetensors.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "model/json_file.h"

namespace kvserve {

namespace {

using json = nlohmann::json;

// The safetensors reference implementation refuses headers above 100 MB; so do we, so a corrupt length
// cannot make us hand a huge buffer to the JSON parser.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;

// Bytes per element of every dtype the safetensors format defines; 0 for a name we do not know (its
// byte range is still bounds-checked, but the tensor cannot be used).
size_t safetensors_element_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8},
  };
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer from the header that fits in int64 (nlohmann keeps unsigned and signed apart).
bool json_to_index(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace

bool safetensors_dtype(const std::string& dtype, DType* out) {
  if (dtype == "F32") {
    *out = DType::F32;
  } else if (dtype == "F16") {
    *out = DType::F16;
  } else if (dtype == "BF16") {
    *out = DType::BF16;
  } else {
    return false;
  }
  return true;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : label_(path) {
  file_ = std::make_unique<MappedFile>(path);
  parse(file_->data(), file_->size());
}

SafetensorsFile::SafetensorsFile(const uint8_t* data, size_t size, std::string label)
    : label_(std::move(label)) {
  parse(data, size);
}

void SafetensorsFile::parse(const uint8_t* data, size_t size) {
  if (size < 8) fail("'{}': not a safetensors file: {} bytes, too short for the header length", label_, size);
  const uint64_t header_len = read_u64_le(data);
  if (header_len > size - 8) {
    fail("'{}': safetensors header length {} runs past the end of the file ({} bytes)", label_, header_len, size);
  }
  if (header_len > kMaxHeaderBytes) fail("'{}': safetensors header length {} is too large", label_, header_len);
  const uint8_t* header_begin = data + 8;
  const uint8_t* header_end = header_begin + header_len;
  const uint8_t* payload = header_end;
  const uint64_t payload_size = size - 8 - header_len;

  json header;
  try {
    header = json::parse(header_begin, header_end);
  } catch (const json::exception& e) {
    fail("'{}': safetensors header is not valid JSON: {}", label_, e.what());
  }
  if (!header.is_object()) fail("'{}': safetensors header is not a JSON object", label_);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings (format, producer); nothing we need
    if (!entry.is_object()) fail("'{}': tensor '{}': header entry is not an object", label_, name);
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      fail("'{}': tensor '{}': missing or non-string 'dtype'", label_, name);
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      fail("'{}': tensor '{}': missing or non-array 'shape'", label_, name);
    }
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      fail("'{}': tensor '{}': 'data_offsets' must be an array [begin, end]", label_, name);
    }

    SafetensorsTensor t;
    t.name = name;
    t.dtype = dtype_it->get<std::string>();

    // Element count with overflow checks: a hostile shape must not wrap around to a small byte count.
    uint64_t elements = 1;
    for (const json& dim : *shape_it) {
      uint64_t d = 0;
      if (!json_to_index(dim, &d) || d > static_cast<uint64_t>(INT64_MAX)) {
        fail("'{}': tensor '{}': shape has an entry that is not a non-negative integer", label_, name);
      }
      if (__builtin_mul_overflow(elements, d, &elements) || elements > static_cast<uint64_t>(INT64_MAX)) {
        fail("'{}': tensor '{}': shape element count overflows", label_, name);
      }
      t.shape.push_back(static_cast<int64_t>(d));
    }

    uint64_t begin = 0, end = 0;
    if (!json_to_index((*offsets_it)[0], &begin) || !json_to_index((*offsets_it)[1], &end)) {
      fail("'{}': tensor '{}': data_offsets must be non-negative integers", label_, name);
    }
    if (begin > end || end > payload_size) {
      fail("'{}': tensor '{}': data_offsets [{}, {}] out of range (data section is {} bytes)", label_, name, begin,
           end, payload_size);
    }
    const size_t element_bytes = safetensors_element_bytes(t.dtype);
    if (element_bytes != 0) {
      uint64_t expected = 0;
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(element_bytes), &expected) ||
          expected != end - begin) {
        fail("'{}': tensor '{}': data_offsets span {} bytes but dtype {} and shape need {}", label_, name,
             end - begin, t.dtype, elements * element_bytes);
      }
    }
    t.data = payload + begin;
    t.n_bytes = static_cast<size_t>(end - begin);
    tensors_.emplace(name, std::move(t));
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensor* st = find(name);
  if (!st) fail("'{}': tensor '{}' not found", label_, name);
  DType type;
  if (!safetensors_dtype(st->dtype, &type)) {
    fail("'{}': tensor '{}' has dtype {}; kvserve supports F32, F16 and BF16", label_, name, st->dtype);
  }
  if (st->shape.size() > 4) fail("'{}': tensor '{}' has {} dims, at most 4 are supported", label_, name,
                                 st->shape.size());
  Tensor t;
  t.name = name;
  t.type = type;
  t.n_dims = static_cast<int>(st->shape.size());
  // safetensors lists dims outermost first; GGUF/ggml lists the contiguous one first.
  for (int i = 0; i < t.n_dims; ++i) t.ne[i] = st->shape[st->shape.size() - 1 - i];
  t.data = st->data;
  return t;
}

SafetensorsModel::SafetensorsModel(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const json index = read_json_file(index_path.string());
    auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (wm == index.end() || !wm->is_object()) fail("'{}': missing 'weight_map' object", index_path.string());
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [tensor_name, shard] : wm->items()) {
      if (!shard.is_string()) fail("'{}': weight_map entry for '{}' is not a file name", index_path.string(),
                                   tensor_name);
      const std::string shard_name = shard.get<std::string>();
      // Shards live beside the index; a name that leaves the folder is a broken (or hostile) index.
      if (shard_name.empty() || shard_name.find('/') != std::string::npos || shard_name == "..") {
        fail("'{}': weight_map entry for '{}' names '{}', not a file in the folder", index_path.string(),
             tensor_name, shard_name);
      }
      auto it = shards.find(shard_name);
      if (it == shards.end()) {
        auto file = std::make_shared<SafetensorsFile>((fs::path(dir) / shard_name).string());
        files_.push_back(file);
        it = shards.emplace(shard_name, file).first;
      }
      if (!it->second->find(tensor_name)) {
        fail("'{}': weight_map puts tensor '{}' in '{}', which does not contain it", index_path.string(),
             tensor_name, it->second->path());
      }
      owner_[tensor_name] = it->second.get();
    }
  } else if (fs::exists(single_path, ec)) {
    auto file = std::make_shared<SafetensorsFile>(single_path.string());
    files_.push_back(file);
    for (const auto& [name, t] : file->tensors()) owner_[name] = file.get();
  } else {
    fail("'{}': no model.safetensors or model.safetensors.index.json", dir);
  }
}

bool SafetensorsModel::has(const std::string& name) const { return owner_.count(name) != 0; }

Tensor SafetensorsModel::tensor(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail("'{}': tensor '{}' not found in the safetensors weights", dir_, name);
  return it->second->tensor(name);
}

const SafetensorsTensor& SafetensorsModel::raw(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail("'{}': tensor '{}' not found in the safetensors weights", dir_, name);
  return *it->second->find(name);
}

}  // namespace kvserve
