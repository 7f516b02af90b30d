#include "model/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace kvserve {

namespace {

constexpr uint32_t kVersion = 3;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Appends raw bytes (resize + memcpy: GCC 12 misreads vector::insert of a few bytes as an overflow).
void put_bytes(std::vector<uint8_t>& b, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = b.size();
  b.resize(at + n);
  std::memcpy(b.data() + at, p, n);
}

template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  put_bytes(b, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& b, std::string_view s) {
  put<uint64_t>(b, s.size());
  put_bytes(b, s.data(), s.size());
}

}  // namespace

GGUFWriter::GGUFWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) fail("GGUF alignment {} is not a power of two", alignment);
  if (alignment != 32) add_u32("general.alignment", alignment);
}

bool GGUFWriter::has_key(std::string_view key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

void GGUFWriter::begin_key(const std::string& key, GGUFType type) {
  if (has_key(key)) fail("GGUF writer: metadata key '{}' added twice", key);
  keys_.push_back(key);
  ++n_kv_;
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
}

void GGUFWriter::add_u8(const std::string& key, uint8_t v) {
  begin_key(key, GGUFType::UINT8);
  put(kv_, v);
}
void GGUFWriter::add_u16(const std::string& key, uint16_t v) {
  begin_key(key, GGUFType::UINT16);
  put(kv_, v);
}
void GGUFWriter::add_u32(const std::string& key, uint32_t v) {
  begin_key(key, GGUFType::UINT32);
  put(kv_, v);
}
void GGUFWriter::add_i32(const std::string& key, int32_t v) {
  begin_key(key, GGUFType::INT32);
  put(kv_, v);
}
void GGUFWriter::add_u64(const std::string& key, uint64_t v) {
  begin_key(key, GGUFType::UINT64);
  put(kv_, v);
}
void GGUFWriter::add_f32(const std::string& key, float v) {
  begin_key(key, GGUFType::FLOAT32);
  put(kv_, v);
}
void GGUFWriter::add_bool(const std::string& key, bool v) {
  begin_key(key, GGUFType::BOOL);
  put<uint8_t>(kv_, v ? 1 : 0);
}
void GGUFWriter::add_str(const std::string& key, std::string_view v) {
  begin_key(key, GGUFType::STRING);
  put_string(kv_, v);
}
void GGUFWriter::add_str_array(const std::string& key, const std::vector<std::string>& v) {
  begin_key(key, GGUFType::ARRAY);
  put<uint32_t>(kv_, static_cast<uint32_t>(GGUFType::STRING));
  put<uint64_t>(kv_, v.size());
  for (const std::string& s : v) put_string(kv_, s);
}
void GGUFWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  begin_key(key, GGUFType::ARRAY);
  put<uint32_t>(kv_, static_cast<uint32_t>(GGUFType::FLOAT32));
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}
void GGUFWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  begin_key(key, GGUFType::ARRAY);
  put<uint32_t>(kv_, static_cast<uint32_t>(GGUFType::INT32));
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

void GGUFWriter::put_value(const GGUFValue& v) {
  switch (v.type) {
    case GGUFType::UINT8:
    case GGUFType::BOOL: put<uint8_t>(kv_, static_cast<uint8_t>(v.u64)); return;
    case GGUFType::UINT16: put<uint16_t>(kv_, static_cast<uint16_t>(v.u64)); return;
    case GGUFType::UINT32: put<uint32_t>(kv_, static_cast<uint32_t>(v.u64)); return;
    case GGUFType::UINT64: put<uint64_t>(kv_, v.u64); return;
    case GGUFType::INT8: put<int8_t>(kv_, static_cast<int8_t>(v.i64)); return;
    case GGUFType::INT16: put<int16_t>(kv_, static_cast<int16_t>(v.i64)); return;
    case GGUFType::INT32: put<int32_t>(kv_, static_cast<int32_t>(v.i64)); return;
    case GGUFType::INT64: put<int64_t>(kv_, v.i64); return;
    case GGUFType::FLOAT32: put<float>(kv_, static_cast<float>(v.f64)); return;
    case GGUFType::FLOAT64: put<double>(kv_, v.f64); return;
    case GGUFType::STRING: put_string(kv_, v.str); return;
    case GGUFType::ARRAY: {
      put<uint32_t>(kv_, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(kv_, v.count);
      if (v.elem_type == GGUFType::STRING) {
        for (const std::string& s : v.strings) put_string(kv_, s);
      } else if (v.elem_type == GGUFType::ARRAY) {
        for (const GGUFValue& item : v.items) put_value(item);  // nested: each item carries its own header
      } else {
        const size_t n = gguf_scalar_size(v.elem_type) * static_cast<size_t>(v.count);
        if (n > 0 && v.raw == nullptr) fail("GGUF writer: numeric array without data");
        put_bytes(kv_, v.raw, n);
      }
      return;
    }
  }
  fail("GGUF writer: unknown value type {}", static_cast<uint32_t>(v.type));
}

void GGUFWriter::add_value(const std::string& key, const GGUFValue& v) {
  begin_key(key, v.type);
  put_value(v);
}

GGUFWriter::TensorEntry GGUFWriter::make_entry(const std::string& name, DType type, const std::vector<int64_t>& ne) const {
  for (const TensorEntry& t : tensors_)
    if (t.name == name) fail("GGUF writer: tensor '{}' added twice", name);
  if (ne.empty() || ne.size() > 4) fail("GGUF writer: tensor '{}' has {} dimensions (1..4)", name, ne.size());
  const DTypeInfo info = dtype_info(type);
  int64_t rows = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] <= 0) fail("GGUF writer: tensor '{}' dimension {} is {}", name, i, ne[i]);
    if (i > 0) rows *= ne[i];
  }
  if (ne[0] % info.block_elems != 0)
    fail("GGUF writer: tensor '{}' row length {} is not a multiple of {}'s block size {}", name, ne[0], info.name,
         info.block_elems);
  TensorEntry t;
  t.name = name;
  t.type = type;
  t.ne = ne;
  t.bytes = row_bytes(type, ne[0]) * static_cast<uint64_t>(rows);
  t.offset = align_up(data_bytes_, alignment_);
  return t;
}

void GGUFWriter::push(TensorEntry t) {
  data_bytes_ = t.offset + t.bytes;
  tensors_.push_back(std::move(t));
}

void GGUFWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                            std::vector<uint8_t> data) {
  TensorEntry t = make_entry(name, type, ne);
  if (data.size() != t.bytes) fail("GGUF writer: tensor '{}' needs {} bytes, got {}", name, t.bytes, data.size());
  t.data = std::move(data);
  push(std::move(t));
}

void GGUFWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, TensorFill fill) {
  if (!fill) fail("GGUF writer: tensor '{}' has no data", name);
  TensorEntry t = make_entry(name, type, ne);
  t.fill = std::move(fill);
  push(std::move(t));
}

std::vector<uint8_t> GGUFWriter::header_bytes() const {
  std::vector<uint8_t> b;
  put_bytes(b, "GGUF", 4);
  put<uint32_t>(b, kVersion);
  put<uint64_t>(b, tensors_.size());
  put<uint64_t>(b, n_kv_);
  put_bytes(b, kv_.data(), kv_.size());
  for (const TensorEntry& t : tensors_) {
    put_string(b, t.name);
    put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<int64_t>(b, d);
    put<uint32_t>(b, static_cast<uint32_t>(t.type));
    put<uint64_t>(b, t.offset);
  }
  b.resize(align_up(b.size(), alignment_), 0);
  return b;
}

uint64_t GGUFWriter::file_size() const { return header_bytes().size() + data_bytes_; }

void GGUFWriter::emit(const std::function<void(const uint8_t*, size_t)>& sink,
                      const std::function<void(float)>& progress) const {
  const std::vector<uint8_t> header = header_bytes();
  sink(header.data(), header.size());
  uint64_t at = 0;
  std::vector<uint8_t> buf;
  const uint8_t zeros[64] = {};
  for (const TensorEntry& t : tensors_) {
    while (at < t.offset) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(zeros), t.offset - at));
      sink(zeros, n);
      at += n;
    }
    if (t.fill) {
      buf.assign(static_cast<size_t>(t.bytes), 0);
      t.fill(buf.data());
      sink(buf.data(), buf.size());
    } else {
      sink(t.data.data(), t.data.size());
    }
    at += t.bytes;
    if (progress && data_bytes_ > 0) progress(static_cast<float>(static_cast<double>(at) / static_cast<double>(data_bytes_)));
  }
}

void GGUFWriter::write(const std::string& path, const std::function<void(float)>& progress) const {
  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
  if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  std::error_code ec;
  try {
    emit(
        [&](const uint8_t* p, size_t n) {
          if (n > 0 && std::fwrite(p, 1, n, f.get()) != n) fail("{}: write failed: {}", tmp, std::strerror(errno));
        },
        progress);
    if (std::fclose(f.release()) != 0) fail("{}: write failed: {}", tmp, std::strerror(errno));
  } catch (...) {
    f.reset();
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename to {}: {}", tmp, path, ec.message());
}

std::vector<uint8_t> GGUFWriter::to_bytes() const {
  std::vector<uint8_t> out;
  emit([&](const uint8_t* p, size_t n) { put_bytes(out, p, n); }, {});
  return out;
}

}  // namespace kvserve
