#pragma once
// Reader for Hugging Face .safetensors files: an 8-byte little-endian header length, a JSON header
// mapping tensor names to {dtype, shape, data_offsets}, then the raw tensor bytes. Tensors are used in
// place (no copy); every offset and length in the header is checked against the file size, because
// the header is untrusted input.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor.h"

namespace kvserve {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // as written in the header ("F16", "BF16", "I64", ...)
  std::vector<int64_t> shape;   // safetensors (row-major, PyTorch) order: last dim is contiguous
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
};

class SafetensorsFile {
 public:
  // Maps the file; throws Error naming the path on any malformed header.
  explicit SafetensorsFile(const std::string& path);
  // Parses a buffer the caller keeps alive (used by the fuzzer and tests). `label` names it in errors.
  SafetensorsFile(const uint8_t* data, size_t size, std::string label);

  const std::string& path() const { return label_; }
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;

  // A view with GGUF dimension order (ne[0] = last safetensors dim). Throws Error naming the tensor and
  // the file when it is absent, has more than 4 dims, or has a dtype kvserve cannot compute with
  // (only F32, F16 and BF16 are accepted).
  Tensor tensor(const std::string& name) const;

 private:
  void parse(const uint8_t* data, size_t size);

  std::string label_;
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

// Maps a safetensors dtype string to a DType kvserve computes with; false for anything else.
bool safetensors_dtype(const std::string& dtype, DType* out);

// The weights of a Hugging Face folder: either one model.safetensors or the shards listed by
// model.safetensors.index.json's weight_map.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir);

  bool has(const std::string& name) const;
  // Throws Error naming the tensor (and, for sharded models, the shard) when absent or unusable.
  Tensor tensor(const std::string& name) const;
  // The tensor's header entry and bytes whatever its dtype (gpt-oss's U8 MXFP4 blocks and scales); throws Error
  // naming it when absent.
  const SafetensorsTensor& raw(const std::string& name) const;
  // Every file opened, to keep the mappings alive as long as the tensors they back.
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> owner_;  // tensor name -> file that holds it
};

}  // namespace kvserve
