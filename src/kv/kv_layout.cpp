#include "kv/kv_layout.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"

namespace kvserve {

int kv_dtype_bits(KVCacheDType t) {
  switch (t) {
    case KVCacheDType::F32: return 32;
    case KVCacheDType::F16:
    case KVCacheDType::BF16: return 16;
    case KVCacheDType::FP8_E4M3:
    case KVCacheDType::FP8_E5M2:
    case KVCacheDType::INT8: return 8;
    case KVCacheDType::INT4: return 4;
  }
  fail("unknown KV cache dtype {}", static_cast<int>(t));
}

std::string_view kv_dtype_name(KVCacheDType t) {
  switch (t) {
    case KVCacheDType::F32: return "f32";
    case KVCacheDType::F16: return "f16";
    case KVCacheDType::BF16: return "bf16";
    case KVCacheDType::FP8_E4M3: return "fp8_e4m3";
    case KVCacheDType::FP8_E5M2: return "fp8_e5m2";
    case KVCacheDType::INT8: return "int8";
    case KVCacheDType::INT4: return "int4";
  }
  return "?";
}

bool kv_dtype_has_scales(KVCacheDType t) { return t == KVCacheDType::INT8 || t == KVCacheDType::INT4; }

uint64_t kv_dtype_row_bytes(KVCacheDType t, int64_t n) {
  const auto values = static_cast<uint64_t>(n);
  const uint64_t bytes = (values * static_cast<uint64_t>(kv_dtype_bits(t)) + 7) / 8;
  return kv_dtype_has_scales(t) ? bytes + 2 * ((values + kKVScaleGroup - 1) / kKVScaleGroup) : bytes;
}

KVCacheDType parse_kv_dtype(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "f32" || s == "fp32" || s == "float32") return KVCacheDType::F32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return KVCacheDType::F16;
  if (s == "bf16" || s == "bfloat16") return KVCacheDType::BF16;
  if (s == "fp8" || s == "fp8_e4m3" || s == "e4m3") return KVCacheDType::FP8_E4M3;
  if (s == "fp8_e5m2" || s == "e5m2") return KVCacheDType::FP8_E5M2;
  if (s == "int8" || s == "i8" || s == "q8") return KVCacheDType::INT8;
  if (s == "int4" || s == "i4" || s == "q4") return KVCacheDType::INT4;
  fail("unknown KV cache dtype '{}' (expected f32, f16, bf16, fp8, fp8_e5m2, int8 or int4)", name);
}

KVLayout KVLayout::mha(int n_layers, int n_kv_heads, int head_dim, KVCacheDType dtype, int block_size) {
  KVLayout l;
  l.kind = AttentionKind::MHA;
  l.n_layers = n_layers;
  l.n_kv_heads = n_kv_heads;
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.layer_dtypes.assign(static_cast<size_t>(std::max(n_layers, 0)), dtype);
  l.validate();
  return l;
}

KVLayout KVLayout::mla(int n_layers, int kv_lora_rank, int rope_dim, KVCacheDType dtype, int block_size) {
  KVLayout l;
  l.kind = AttentionKind::MLA;
  l.n_layers = n_layers;
  l.kv_lora_rank = kv_lora_rank;
  l.rope_dim = rope_dim;
  l.block_size = block_size;
  l.layer_dtypes.assign(static_cast<size_t>(std::max(n_layers, 0)), dtype);
  l.validate();
  return l;
}

void KVLayout::validate() const {
  if (n_layers <= 0) fail("kv layout: number of layers must be positive, got {}", n_layers);
  if (block_size <= 0) fail("kv layout: block size must be positive, got {}", block_size);
  if (layer_dtypes.size() != static_cast<size_t>(n_layers))
    fail("kv layout: {} layer dtypes given for {} layers", layer_dtypes.size(), n_layers);
  if (kind == AttentionKind::MHA) {
    if (n_kv_heads <= 0 || head_dim <= 0)
      fail("kv layout: KV heads ({}) and head dim ({}) must be positive", n_kv_heads, head_dim);
    for (const auto* v : {&layer_kv_heads, &layer_head_dims}) {
      if (!v->empty() && v->size() != static_cast<size_t>(n_layers))
        fail("kv layout: {} per-layer head figures given for {} layers", v->size(), n_layers);
      for (int x : *v)
        if (x <= 0) fail("kv layout: per-layer KV heads and head dims must be positive, got {}", x);
    }
  } else {
    if (kv_lora_rank <= 0 || rope_dim < 0)
      fail("kv layout: MLA needs kv_lora_rank > 0 (got {}) and rope_dim >= 0 (got {})", kv_lora_rank, rope_dim);
  }
}

int KVLayout::kv_heads_of(int layer) const {
  return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads.at(static_cast<size_t>(layer));
}

int KVLayout::head_dim_of(int layer) const {
  return layer_head_dims.empty() ? head_dim : layer_head_dims.at(static_cast<size_t>(layer));
}

int64_t KVLayout::elements_per_token_layer(int layer) const {
  if (kind == AttentionKind::MLA) return int64_t{kv_lora_rank} + rope_dim;
  return 2 * int64_t{kv_heads_of(layer)} * head_dim_of(layer);
}

int64_t KVLayout::rows_per_token_layer(int layer) const {
  return kind == AttentionKind::MLA ? 1 : 2 * int64_t{kv_heads_of(layer)};
}

int64_t KVLayout::row_elements(int layer) const {
  return kind == AttentionKind::MLA ? int64_t{kv_lora_rank} + rope_dim : int64_t{head_dim_of(layer)};
}

uint64_t KVLayout::bytes_per_token_layer(int layer) const {
  if (layer < 0 || layer >= n_layers) fail("kv layout: layer {} out of range [0, {})", layer, n_layers);
  const uint64_t bits = static_cast<uint64_t>(elements_per_token_layer(layer)) * kv_dtype_bits(layer_dtypes[layer]);
  return (bits + 7) / 8;
}

uint64_t KVLayout::stored_bytes_per_token_layer(int layer) const {
  const uint64_t values = bytes_per_token_layer(layer);
  const KVCacheDType t = layer_dtypes[static_cast<size_t>(layer)];
  const uint64_t records = record_bytes_per_token_layer(layer);
  if (!kv_dtype_has_scales(t)) return values + records;
  return static_cast<uint64_t>(rows_per_token_layer(layer)) * kv_dtype_row_bytes(t, row_elements(layer)) + records;
}

uint64_t KVLayout::record_bytes_per_token_layer(int layer) const {
  if (!eviction_records) return 0;
  // MLA: one latent row a token, one record.
  return kHeavyHitterRecordBytes * static_cast<uint64_t>(kind == AttentionKind::MLA ? 1 : kv_heads_of(layer));
}

uint64_t KVLayout::stored_bytes_per_token() const {
  uint64_t total = 0;
  for (int l = 0; l < n_layers; ++l) total += stored_bytes_per_token_layer(l);
  return total;
}

uint64_t KVLayout::block_bytes_layer(int layer, bool stored) const {
  const KVCacheDType t = layer_dtypes[static_cast<size_t>(layer)];
  if (stored && kv_dtype_has_scales(t)) return static_cast<uint64_t>(block_size) * stored_bytes_per_token_layer(layer);
  // Whole blocks round once, not per token (a half byte of int4).
  const uint64_t bits = static_cast<uint64_t>(elements_per_token_layer(layer)) * block_size * kv_dtype_bits(t);
  return (bits + 7) / 8 + (stored ? static_cast<uint64_t>(block_size) * record_bytes_per_token_layer(layer) : 0);
}

uint64_t KVLayout::stored_bytes_per_block() const {
  uint64_t total = 0;
  for (int l = 0; l < n_layers; ++l) total += block_bytes_layer(l, true);
  return total;
}

uint64_t KVLayout::bytes_per_token() const {
  uint64_t total = 0;
  for (int l = 0; l < n_layers; ++l) total += bytes_per_token_layer(l);
  return total;
}

uint64_t KVLayout::bytes_per_block() const {
  uint64_t total = 0;
  for (int l = 0; l < n_layers; ++l) total += block_bytes_layer(l, false);
  return total;
}

int64_t blocks_for_budget(const KVLayout& layout, uint64_t budget_bytes) {
  layout.validate();
  return static_cast<int64_t>(budget_bytes / layout.stored_bytes_per_block());
}

uint64_t parse_byte_size(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.')) ++n;
  if (n == 0) fail("bad byte size '{}': expected a number with an optional K/M/G/T, KiB/MiB/GiB or KB/MB/GB suffix", text);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + n, value);
  if (ec != std::errc() || ptr != s.data() + n || !std::isfinite(value))
    fail("bad byte size '{}': '{}' is not a number", text, s.substr(0, n));
  std::string suffix(s.substr(n));
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(0, 1);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 0;
  if (suffix.empty() || suffix == "B") mult = 1;
  else {
    const char unit = suffix[0];
    int power = unit == 'K' ? 1 : unit == 'M' ? 2 : unit == 'G' ? 3 : unit == 'T' ? 4 : 0;
    const std::string rest = suffix.substr(1);
    double base = 0;
    if (rest.empty() || rest == "IB" || rest == "I") base = 1024;
    else if (rest == "B") base = 1000;
    if (power == 0 || base == 0) fail("bad byte size '{}': unknown unit '{}'", text, s.substr(n));
    mult = std::pow(base, power);
  }
  const double bytes = value * mult;
  if (bytes > 1.8e19) fail("bad byte size '{}': too large", text);
  if (bytes != std::floor(bytes)) fail("bad byte size '{}': not a whole number of bytes", text);
  return static_cast<uint64_t>(bytes);
}

uint64_t total_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) fail("cannot read /proc/meminfo to size the KV cache; give the budget in bytes");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream fields(line.substr(9));
      uint64_t kib = 0;
      std::string unit;
      if (fields >> kib >> unit && unit == "kB") return kib * 1024;
      break;
    }
  }
  fail("/proc/meminfo has no usable MemTotal line; give the KV budget in bytes");
}

uint64_t resolve_kv_memory_budget(std::string_view spec) {
  std::string_view s = spec;
  double fraction = -1;
  if (!s.empty() && s.back() == '%') {
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, fraction);
    if (ec != std::errc() || ptr != s.data() + s.size() - 1) fail("bad KV memory budget '{}'", spec);
    fraction /= 100.0;
  } else if (s.find('.') != std::string_view::npos) {
    double v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && ptr == s.data() + s.size()) fraction = v;  // a bare decimal: fraction of RAM
  }
  if (fraction >= 0) {
    if (!(fraction > 0 && fraction <= 1)) fail("KV memory fraction '{}' must be in (0, 1]", spec);
    return static_cast<uint64_t>(fraction * static_cast<double>(total_ram_bytes()));
  }
  return parse_byte_size(spec);
}

}  // namespace kvserve
