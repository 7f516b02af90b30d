#include "model/gguf.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"

namespace kvserve {

namespace {

// Caps that no real file comes near but that keep hostile counts from driving allocations or
// recursion. Counts are additionally checked against the bytes left in the file before any reserve.
constexpr int kMaxArrayNesting = 8;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxNameLength = 65535;


bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GGUFType::FLOAT64); }

// Bounds-checked little-endian cursor over the file bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  void need(size_t n, std::string_view what) const {
    if (n > remaining())
      fail("{}: truncated file: expected {} ({} bytes) at offset {}, but the file ends at {}", name_, what, n, pos_,
           size_);
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  void skip(size_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

  std::string read_string(std::string_view what, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail("{}: {} at offset {} has length {}, but only {} bytes remain in the file", name_, what, at, len,
           remaining());
    if (len > max_len) fail("{}: {} at offset {} has absurd length {} (limit {})", name_, what, at, len, max_len);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

void read_value(Reader& r, GGUFValue& v, GGUFType type, const std::string& key, const std::string& file,
                int depth);

void read_scalar(Reader& r, GGUFValue& v, GGUFType type, const std::string& key) {
  v.type = type;
  const std::string what = "value of '" + key + "'";
  switch (type) {
    case GGUFType::UINT8: v.u64 = r.read<uint8_t>(what); break;
    case GGUFType::INT8: v.i64 = r.read<int8_t>(what); break;
    case GGUFType::UINT16: v.u64 = r.read<uint16_t>(what); break;
    case GGUFType::INT16: v.i64 = r.read<int16_t>(what); break;
    case GGUFType::UINT32: v.u64 = r.read<uint32_t>(what); break;
    case GGUFType::INT32: v.i64 = r.read<int32_t>(what); break;
    case GGUFType::UINT64: v.u64 = r.read<uint64_t>(what); break;
    case GGUFType::INT64: v.i64 = r.read<int64_t>(what); break;
    case GGUFType::FLOAT32: v.f64 = r.read<float>(what); break;
    case GGUFType::FLOAT64: v.f64 = r.read<double>(what); break;
    case GGUFType::BOOL: v.u64 = r.read<uint8_t>(what) != 0; break;
    case GGUFType::STRING: v.str = r.read_string(what); break;
    case GGUFType::ARRAY: break;  // handled by read_value
  }
}

void read_array(Reader& r, GGUFValue& v, const std::string& key, const std::string& file, int depth) {
  v.type = GGUFType::ARRAY;
  if (depth >= kMaxArrayNesting)
    fail("{}: metadata '{}' at offset {}: arrays nested deeper than {}", file, key, r.pos(), kMaxArrayNesting);
  const size_t type_at = r.pos();
  const uint32_t elem = r.read<uint32_t>("array element type of '" + key + "'");
  if (!valid_type(elem))
    fail("{}: metadata '{}' at offset {}: unknown array element type {}", file, key, type_at, elem);
  v.elem_type = static_cast<GGUFType>(elem);
  const size_t count_at = r.pos();
  v.count = r.read<uint64_t>("array length of '" + key + "'");
  // Smallest possible encoding of one element: a fixed-size scalar, an 8-byte string length, or a
  // 12-byte nested array header. A count that cannot fit in what is left is rejected before allocating.
  const size_t elem_min = v.elem_type == GGUFType::STRING  ? 8
                          : v.elem_type == GGUFType::ARRAY ? 12
                                                           : gguf_scalar_size(v.elem_type);
  if (v.count > r.remaining() / elem_min)
    fail("{}: metadata '{}' at offset {}: array of {} {} elements needs at least {} bytes, only {} remain", file,
         key, count_at, v.count, gguf_type_name(v.elem_type),
         static_cast<double>(v.count) * static_cast<double>(elem_min), r.remaining());
  const size_t n = static_cast<size_t>(v.count);
  if (v.elem_type == GGUFType::STRING) {
    v.strings.reserve(n);
    for (size_t i = 0; i < n; ++i) v.strings.push_back(r.read_string("string " + std::to_string(i) + " of '" + key + "'"));
  } else if (v.elem_type == GGUFType::ARRAY) {
    v.items.resize(n);
    for (size_t i = 0; i < n; ++i) read_value(r, v.items[i], GGUFType::ARRAY, key, file, depth + 1);
  } else {
    v.raw = r.here();
    r.skip(n * elem_min, "array data of '" + key + "'");
  }
}

void read_value(Reader& r, GGUFValue& v, GGUFType type, const std::string& key, const std::string& file,
                int depth) {
  if (type == GGUFType::ARRAY)
    read_array(r, v, key, file, depth);
  else
    read_scalar(r, v, type, key);
}

// Element i of a numeric array as double / int64, whatever its stored type.
template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool array_elem_as_int(const GGUFValue& v, size_t i, int64_t& out) {
  const uint8_t* p = v.raw + i * gguf_scalar_size(v.elem_type);
  switch (v.elem_type) {
    case GGUFType::UINT8: out = load_le<uint8_t>(p); return true;
    case GGUFType::INT8: out = load_le<int8_t>(p); return true;
    case GGUFType::UINT16: out = load_le<uint16_t>(p); return true;
    case GGUFType::INT16: out = load_le<int16_t>(p); return true;
    case GGUFType::UINT32: out = load_le<uint32_t>(p); return true;
    case GGUFType::INT32: out = load_le<int32_t>(p); return true;
    case GGUFType::INT64: out = load_le<int64_t>(p); return true;
    case GGUFType::UINT64: {
      const uint64_t u = load_le<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(u);
      return true;
    }
    case GGUFType::BOOL: out = load_le<uint8_t>(p) != 0; return true;
    default: return false;
  }
}

}  // namespace

std::string_view gguf_type_name(GGUFType t) {
  switch (t) {
    case GGUFType::UINT8: return "uint8";
    case GGUFType::INT8: return "int8";
    case GGUFType::UINT16: return "uint16";
    case GGUFType::INT16: return "int16";
    case GGUFType::UINT32: return "uint32";
    case GGUFType::INT32: return "int32";
    case GGUFType::FLOAT32: return "float32";
    case GGUFType::BOOL: return "bool";
    case GGUFType::STRING: return "string";
    case GGUFType::ARRAY: return "array";
    case GGUFType::UINT64: return "uint64";
    case GGUFType::INT64: return "int64";
    case GGUFType::FLOAT64: return "float64";
  }
  return "?";
}

bool GGUFValue::is_integer() const {
  switch (type) {
    case GGUFType::UINT8:
    case GGUFType::INT8:
    case GGUFType::UINT16:
    case GGUFType::INT16:
    case GGUFType::UINT32:
    case GGUFType::INT32:
    case GGUFType::UINT64:
    case GGUFType::INT64: return true;
    default: return false;
  }
}

GGUFFile::GGUFFile(const std::string& path) : mapping_(std::make_shared<MappedFile>(path)), name_(path) {
  data_ = mapping_->data();
  size_ = mapping_->size();
  parse();
}

GGUFFile::GGUFFile(const uint8_t* data, size_t size, std::string name)
    : name_(std::move(name)), data_(data), size_(size) {
  parse();
}

void GGUFFile::parse() {
  Reader r(data_, size_, name_);
  if (size_ < 4 || std::memcmp(data_, "GGUF", 4) != 0) fail("{}: not a GGUF file (missing 'GGUF' magic at offset 0)", name_);
  r.skip(4, "magic");
  version_ = r.read<uint32_t>("version");
  if (version_ == 1) fail("{}: GGUF version 1 is not supported (only versions 2 and 3)", name_);
  if (version_ != 2 && version_ != 3) {
    // A byte-swapped small number means a big-endian file.
    if ((version_ & 0xFFFF) == 0 && __builtin_bswap32(version_) <= 3)
      fail("{}: big-endian GGUF (version {}) is not supported", name_, __builtin_bswap32(version_));
    fail("{}: unsupported GGUF version {} (expected 2 or 3)", name_, version_);
  }
  const size_t n_tensors_at = r.pos();
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const size_t n_kv_at = r.pos();
  const uint64_t n_kv = r.read<uint64_t>("metadata key/value count");

  // Smallest encodings: a key/value pair is >= 8 (key length) + 4 (type) + 1 bytes; a tensor info is
  // >= 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
  if (n_kv > r.remaining() / 13)
    fail("{}: metadata key/value count {} at offset {} is absurd: the rest of the file ({} bytes) cannot hold it",
         name_, n_kv, n_kv_at, r.remaining());
  if (n_tensors > r.remaining() / 24)
    fail("{}: tensor count {} at offset {} is absurd: the rest of the file ({} bytes) cannot hold it", name_,
         n_tensors, n_tensors_at, r.remaining());

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t key_at = r.pos();
    std::string key = r.read_string("key of metadata entry " + std::to_string(i), kMaxNameLength);
    const size_t type_at = r.pos();
    const uint32_t type = r.read<uint32_t>("type of metadata '" + key + "'");
    if (!valid_type(type)) fail("{}: metadata '{}' at offset {}: unknown value type {}", name_, key, type_at, type);
    GGUFValue v;
    read_value(r, v, static_cast<GGUFType>(type), key, name_, 0);
    if (kv_index_.count(key)) fail("{}: duplicate metadata key '{}' at offset {}", name_, key, key_at);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GGUFValue* a = find("general.alignment")) {
    if (a->type != GGUFType::UINT32)
      fail("{}: general.alignment must be uint32, found {}", name_, gguf_type_name(a->type));
    if (a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0)
      fail("{}: general.alignment {} is not a power of two", name_, a->u64);
    alignment_ = static_cast<uint32_t>(a->u64);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GGUFTensorInfo t;
    const size_t info_at = r.pos();
    t.name = r.read_string("name of tensor " + std::to_string(i), kMaxNameLength);
    const uint32_t n_dims = r.read<uint32_t>("n_dims of tensor '" + t.name + "'");
    if (n_dims > kMaxDims)
      fail("{}: tensor '{}' (info at offset {}) has {} dimensions, at most {} are allowed", name_, t.name, info_at,
           n_dims, kMaxDims);
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t ne = r.read<int64_t>("dimension of tensor '" + t.name + "'");
      if (ne < 0) fail("{}: tensor '{}' has negative dimension {} ({})", name_, t.name, d, ne);
      t.ne[d] = ne;
    }
    t.type_id = r.read<uint32_t>("type of tensor '" + t.name + "'");
    const auto info = dtype_info(t.type_id);
    if (!info) fail("{}: tensor '{}' has unknown type id {}", name_, t.name, t.type_id);
    t.type = static_cast<DType>(t.type_id);
    t.offset = r.read<uint64_t>("data offset of tensor '" + t.name + "'");

    // Element count and byte size, with overflow checks: dims multiply into int64 range.
    int64_t elements = 1;
    for (int d = 0; d < 4; ++d) {
      if (t.ne[d] != 0 && elements > std::numeric_limits<int64_t>::max() / t.ne[d])
        fail("{}: tensor '{}' dimensions [{}, {}, {}, {}] overflow the element count", name_, t.name, t.ne[0],
             t.ne[1], t.ne[2], t.ne[3]);
      elements *= t.ne[d];
    }
    if (t.ne[0] % info->block_elems != 0)
      fail("{}: tensor '{}' of type {} has row length {}, not a multiple of the block size {}", name_, t.name,
           info->name, t.ne[0], info->block_elems);
    const uint64_t blocks = static_cast<uint64_t>(elements / info->block_elems);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info->block_bytes))
      fail("{}: tensor '{}' byte size overflows", name_, t.name);
    const uint64_t bytes = blocks * static_cast<uint64_t>(info->block_bytes);
    if (bytes > size_)
      fail("{}: tensor '{}' data [offset {}, {} bytes] runs past end of file (size {})", name_, t.name, t.offset,
           bytes, size_);
    t.bytes = static_cast<size_t>(bytes);
    if (t.offset % alignment_ != 0)
      fail("{}: tensor '{}' data offset {} is not a multiple of the alignment {}", name_, t.name, t.offset,
           alignment_);
    if (tensor_index_.count(t.name)) fail("{}: duplicate tensor name '{}' at offset {}", name_, t.name, info_at);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section starts at the next multiple of the alignment.
  const uint64_t end_of_infos = r.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  for (GGUFTensorInfo& t : tensors_) {
    // t.bytes <= size_ was checked above; the offset is arbitrary, so check it before adding.
    const uint64_t start = data_offset_ + t.offset;
    if (t.offset > size_ || start > size_ || t.bytes > size_ - start)
      fail("{}: tensor '{}' data [offset {}, {} bytes] runs past end of file (size {})", name_, t.name,
           t.offset > size_ ? t.offset : start, t.bytes, size_);
    t.data = data_ + start;
  }
}

const GGUFValue* GGUFFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

void GGUFFile::adopt_shard_tensors(std::shared_ptr<const GGUFFile> shard) {
  for (const GGUFTensorInfo& t : shard->tensors()) {
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      fail("{}: tensor '{}' is in more than one shard (again in {})", name_, t.name, shard->name());
    tensors_.push_back(t);
  }
  shards_.push_back(std::move(shard));
}

namespace {

// llama.cpp's llama_split_path: PREFIX-%05d-of-%05d.gguf, shards counted from 1.
std::string split_path(const std::string& prefix, uint32_t no, uint32_t count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, no + 1, count);
}

}  // namespace

std::shared_ptr<GGUFFile> open_gguf_with_shards(const std::string& path) {
  auto first = std::make_shared<GGUFFile>(path);
  const uint32_t count = first->find_u32("split.count").value_or(0);
  if (count <= 1) return first;
  const uint32_t no = first->find_u32("split.no").value_or(0);
  if (no != 0)
    fail("{}: this is shard {} of a model split in {}; give its first shard ({})", path, no + 1, count,
         fmt::format("...-00001-of-{:05d}.gguf", count));
  const std::string suffix = fmt::format("-{:05d}-of-{:05d}.gguf", 1, count);
  if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    fail(
        "{}: a model split in {} shards (split.count), but the name does not end in '{}', so the other shards "
        "cannot be found",
        path, count, suffix);
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  for (uint32_t i = 1; i < count; ++i) {
    const std::string shard_path = split_path(prefix, i, count);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(shard_path, ec))
      fail("{}: shard {} of {} is missing: no file '{}'", path, i + 1, count, shard_path);
    auto shard = std::make_shared<const GGUFFile>(shard_path);
    if (shard->find_u32("split.no").value_or(UINT32_MAX) != i || shard->find_u32("split.count").value_or(0) != count)
      fail("{}: its split.no / split.count ({} / {}) do not make it shard {} of {}", shard_path,
           shard->find_u32("split.no").value_or(0), shard->find_u32("split.count").value_or(0), i + 1, count);
    first->adopt_shard_tensors(std::move(shard));
  }
  if (const auto total = first->find_i32("split.tensors.count");
      total && *total != static_cast<int64_t>(first->tensors().size()))
    fail("{}: split.tensors.count says {} tensors, the {} shards hold {}", path, *total, count,
         first->tensors().size());
  return first;
}

const GGUFTensorInfo* GGUFFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) return nullptr;
  if (found_.size() < tensors_.size()) found_.resize(tensors_.size(), 0);
  found_[it->second] = 1;
  return &tensors_[it->second];
}

std::vector<std::string> GGUFFile::tensors_not_found() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (i >= found_.size() || found_[i] == 0) names.push_back(tensors_[i].name);
  return names;
}

const GGUFValue& GGUFFile::require(std::string_view key) const {
  const GGUFValue* v = find(key);
  if (!v) fail("{}: required metadata key '{}' is missing", name_, key);
  return *v;
}

namespace {

// Integer value of a scalar, range-checked into [lo, hi].
int64_t scalar_int(const GGUFValue& v, std::string_view key, const std::string& file, int64_t lo, int64_t hi,
                   std::string_view want) {
  if (!v.is_integer())
    fail("{}: metadata '{}' has type {}, expected {}", file, key, gguf_type_name(v.type), want);
  const bool is_signed = v.type == GGUFType::INT8 || v.type == GGUFType::INT16 || v.type == GGUFType::INT32 ||
                         v.type == GGUFType::INT64;
  if (!is_signed && v.u64 > static_cast<uint64_t>(hi))
    fail("{}: metadata '{}' = {} does not fit in {}", file, key, v.u64, want);
  const int64_t x = is_signed ? v.i64 : static_cast<int64_t>(v.u64);
  if (x < lo || x > hi) fail("{}: metadata '{}' = {} does not fit in {}", file, key, x, want);
  return x;
}

}  // namespace

uint32_t GGUFFile::get_u32(std::string_view key) const {
  return static_cast<uint32_t>(scalar_int(require(key), key, name_, 0, UINT32_MAX, "uint32"));
}
int32_t GGUFFile::get_i32(std::string_view key) const {
  return static_cast<int32_t>(scalar_int(require(key), key, name_, INT32_MIN, INT32_MAX, "int32"));
}
uint64_t GGUFFile::get_u64(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::UINT64) return v.u64;
  return static_cast<uint64_t>(scalar_int(v, key, name_, 0, INT64_MAX, "uint64"));
}

float GGUFFile::get_f32(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::FLOAT32 || v.type == GGUFType::FLOAT64) return static_cast<float>(v.f64);
  // Some converters write integral hyper-parameters (e.g. rope base 10000) as integers.
  if (v.is_integer()) return static_cast<float>(scalar_int(v, key, name_, INT64_MIN, INT64_MAX, "float32"));
  fail("{}: metadata '{}' has type {}, expected float32", name_, key, gguf_type_name(v.type));
}

bool GGUFFile::get_bool(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::BOOL) return v.u64 != 0;
  fail("{}: metadata '{}' has type {}, expected bool", name_, key, gguf_type_name(v.type));
}

std::string GGUFFile::get_str(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::STRING) return v.str;
  fail("{}: metadata '{}' has type {}, expected string", name_, key, gguf_type_name(v.type));
}

std::vector<std::string> GGUFFile::get_str_array(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::ARRAY && v.elem_type == GGUFType::STRING) return v.strings;
  fail("{}: metadata '{}' has type {}{}, expected array of string", name_, key, gguf_type_name(v.type),
       v.is_array() ? fmt::format(" of {}", gguf_type_name(v.elem_type)) : "");
}

std::vector<float> GGUFFile::get_f32_array(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::ARRAY && (v.elem_type == GGUFType::FLOAT32 || v.elem_type == GGUFType::FLOAT64)) {
    std::vector<float> out(static_cast<size_t>(v.count));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = v.elem_type == GGUFType::FLOAT32 ? load_le<float>(v.raw + 4 * i)
                                                 : static_cast<float>(load_le<double>(v.raw + 8 * i));
    return out;
  }
  fail("{}: metadata '{}' has type {}{}, expected array of float32", name_, key, gguf_type_name(v.type),
       v.is_array() ? fmt::format(" of {}", gguf_type_name(v.elem_type)) : "");
}

std::vector<int32_t> GGUFFile::get_i32_array(std::string_view key) const {
  const GGUFValue& v = require(key);
  if (v.type == GGUFType::ARRAY && v.raw != nullptr && v.elem_type != GGUFType::FLOAT32 &&
      v.elem_type != GGUFType::FLOAT64) {
    std::vector<int32_t> out(static_cast<size_t>(v.count));
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t x = 0;
      if (!array_elem_as_int(v, i, x) || x < INT32_MIN || x > INT32_MAX)
        fail("{}: metadata '{}' element {} does not fit in int32", name_, key, i);
      out[i] = static_cast<int32_t>(x);
    }
    return out;
  }
  if (v.type == GGUFType::ARRAY && v.count == 0 && v.elem_type != GGUFType::STRING &&
      v.elem_type != GGUFType::ARRAY)
    return {};
  fail("{}: metadata '{}' has type {}{}, expected array of int32", name_, key, gguf_type_name(v.type),
       v.is_array() ? fmt::format(" of {}", gguf_type_name(v.elem_type)) : "");
}

std::optional<uint32_t> GGUFFile::find_u32(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_u32(key);
}
std::optional<int32_t> GGUFFile::find_i32(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_i32(key);
}
std::optional<float> GGUFFile::find_f32(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_f32(key);
}
std::optional<bool> GGUFFile::find_bool(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_bool(key);
}
std::optional<std::string> GGUFFile::find_str(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_str(key);
}
std::optional<std::vector<std::string>> GGUFFile::find_str_array(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_str_array(key);
}
std::optional<std::vector<float>> GGUFFile::find_f32_array(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_f32_array(key);
}
std::optional<std::vector<int32_t>> GGUFFile::find_i32_array(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_i32_array(key);
}

size_t gguf_scalar_size(GGUFType t) {
  switch (t) {
    case GGUFType::UINT8:
    case GGUFType::INT8:
    case GGUFType::BOOL: return 1;
    case GGUFType::UINT16:
    case GGUFType::INT16: return 2;
    case GGUFType::UINT32:
    case GGUFType::INT32:
    case GGUFType::FLOAT32: return 4;
    case GGUFType::UINT64:
    case GGUFType::INT64:
    case GGUFType::FLOAT64: return 8;
    case GGUFType::STRING:
    case GGUFType::ARRAY: return 0;
  }
  return 0;
}

}  // namespace kvserve
