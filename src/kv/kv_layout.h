#pragma once
// How many bytes the KV cache needs per token, per layer and per block, for each attention kind, and
// how many blocks a memory budget buys. Figures follow the usual formulas exactly:
//   MHA / GQA / MQA: 2 * n_kv_heads * head_dim * bytes(dtype) per token per layer (K and V)
//   MLA:            (kv_lora_rank + rope_dim) * bytes(dtype)  (only the latent c_kv and k_rope)
// Quantized dtypes (fp8, int8: 1 byte; int4: half a byte) count the values only, the textbook figures;
// what kvserve stores, int8's and int4's f16 scales per 32 values included, is stored_bytes_*.
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvserve {

enum class KVCacheDType { F32, F16, BF16, FP8_E4M3, FP8_E5M2, INT8, INT4 };

int kv_dtype_bits(KVCacheDType t);
std::string_view kv_dtype_name(KVCacheDType t);
// Every dtype is stored and computed with (kernels/cpu/kv_elem.h): fp8 as OCP E4M3 or E5M2, one byte a
// value; int8 and int4 as ggml's q8_0 and q4_0 rows.
// int8 and int4 rows carry an f16 scale for each kKVScaleGroup values beside the values.
constexpr int kKVScaleGroup = 32;
bool kv_dtype_has_scales(KVCacheDType t);
// Bytes one row of n cached values takes (a KV head's K or V of one token, or an MLA latent): the values
// and, for int8 and int4, their scales (34 and 18 bytes per 32 values).
uint64_t kv_dtype_row_bytes(KVCacheDType t, int64_t n);
// Accepts f32, f16 (fp16), bf16, fp8 (= fp8_e4m3), fp8_e5m2, int8, int4; throws Error otherwise.
KVCacheDType parse_kv_dtype(std::string_view name);

// Bytes of an H2O slot record (kernels/cpu/h2o_attention.h: a float score and an int32 position).
constexpr uint64_t kHeavyHitterRecordBytes = 8;

enum class AttentionKind {
  MHA,  // separate K and V per KV head; covers GQA and MQA (n_kv_heads < n_heads)
  MLA,  // DeepSeek-V2 multi-head latent attention: one compressed latent + shared rope key per token
};

struct KVLayout {
  AttentionKind kind = AttentionKind::MHA;
  int n_layers = 0;
  int n_kv_heads = 0;    // MHA only
  int head_dim = 0;      // MHA only
  int kv_lora_rank = 0;  // MLA only
  int rope_dim = 0;      // MLA only
  int block_size = 16;
  std::vector<KVCacheDType> layer_dtypes;  // one per layer (e.g. first/last layers kept at higher precision)
  // MHA layers whose heads differ (Gemma 4: its sliding and full layers): KV heads and head size per layer; empty:
  // n_kv_heads and head_dim for every layer.
  std::vector<int> layer_kv_heads, layer_head_dims;
  int kv_heads_of(int layer) const;
  int head_dim_of(int layer) const;
  // H2O eviction (engine/heavy_hitter_eviction.h): every KV head's slot also records its token's position
  // and accumulated attention (kHeavyHitterRecordBytes), stored beside the values (MLA: one per token).
  bool eviction_records = false;

  static KVLayout mha(int n_layers, int n_kv_heads, int head_dim, KVCacheDType dtype, int block_size = 16);
  static KVLayout mla(int n_layers, int kv_lora_rank, int rope_dim, KVCacheDType dtype, int block_size = 16);

  void validate() const;  // throws Error on a non-positive dimension or a dtype list of the wrong length
  // Cached values per token of a layer: 2 * n_kv_heads * head_dim, or kv_lora_rank + rope_dim.
  int64_t elements_per_token_layer(int layer) const;
  // The rows those values form (2 * n_kv_heads of head_dim, or 1 of kv_lora_rank + rope_dim) and their length.
  int64_t rows_per_token_layer(int layer) const;
  int64_t row_elements(int layer) const;
  // The textbook figures, the values alone (bits per value x values): bytes per token of one layer (a half
  // byte of int4 rounds up; blocks round per block instead), per token over all layers, and of one block
  // (block_size tokens) over all layers.
  uint64_t bytes_per_token_layer(int layer) const;
  uint64_t bytes_per_token() const;
  uint64_t bytes_per_block() const;
  // What KVStorage holds: the same but for int8's and int4's scales (kv_dtype_row_bytes) and H2O's records.
  uint64_t stored_bytes_per_token_layer(int layer) const;
  uint64_t stored_bytes_per_token() const;
  uint64_t stored_bytes_per_block() const;

 private:
  uint64_t record_bytes_per_token_layer(int layer) const;    // H2O's records, when kept
  uint64_t block_bytes_layer(int layer, bool stored) const;  // one layer's share of a block
};

// Whole blocks (as stored) that fit in budget_bytes.
int64_t blocks_for_budget(const KVLayout& layout, uint64_t budget_bytes);

// "4096", "512K", "1.5GiB", "2GB": K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of
// 1000; a trailing "B" alone means bytes. Throws Error on anything else.
uint64_t parse_byte_size(std::string_view text);
// Physical memory (MemTotal of /proc/meminfo) in bytes; throws Error if it cannot be read.
uint64_t total_ram_bytes();
// A KV memory budget as given on the command line: a fraction of RAM ("0.9", "90%") or a byte size.
// A plain number with a decimal point in (0, 1] is a fraction; an integer is bytes.
uint64_t resolve_kv_memory_budget(std::string_view spec);

}  // namespace kvserve
