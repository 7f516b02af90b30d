#pragma once
// KV cache sizing from model hyper-parameters (behind `kvserve kv-calc`): bytes per token, per
// request and per batch, and how many tokens a memory budget holds. Pure functions; the figures use
// KVLayout, the same arithmetic the engine sizes its block pool with.
//
// Quantized KV dtypes (fp8, int8: 1 byte; int4: half a byte per value) count the payload only; their
// scales are excluded and the output says so.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kv/kv_layout.h"

namespace kvserve {

class GGUFFile;

// The hyper-parameters that decide KV size.
struct KVModelShape {
  std::string name;
  AttentionKind kind = AttentionKind::MHA;
  int n_layers = 0;
  int n_heads = 0;       // query heads (0 = unknown); names MHA/GQA/MQA and the MLA comparison
  int n_kv_heads = 0;    // MHA/GQA/MQA
  int head_dim = 0;      // per head; for MLA the per-head dim an MHA cache would store
  int kv_lora_rank = 0;  // MLA
  int rope_dim = 0;      // MLA: decoupled rope key dim
  int64_t context_length = 0;  // trained context (0 = unknown), the default sequence length
  // Sliding-window layers (Gemma 2 and 3's local ones): n_swa_layers of the layers attend to the last
  // sliding_window positions only, so a hybrid cache keeps at most that many of their tokens.
  int64_t sliding_window = 0;
  int n_swa_layers = 0;
  // Gemma 4: the sliding layers' KV heads and head size where they differ from the full layers' (0: the same), and
  // the last n_kv_shared_layers layers (n_shared_swa_layers of them sliding), which read earlier layers' KV and
  // cache nothing.
  int n_kv_heads_swa = 0;
  int head_dim_swa = 0;
  int n_kv_shared_layers = 0;
  int n_shared_swa_layers = 0;
  // The layers that cache their own KV, full-attention and sliding.
  int own_full_layers() const { return n_layers - n_swa_layers - (n_kv_shared_layers - n_shared_swa_layers); }
  int own_swa_layers() const { return n_swa_layers - n_shared_swa_layers; }
};

// "MHA", "GQA", "MQA" or "MLA".
std::string attention_kind_name(const KVModelShape& shape);
void validate_kv_shape(const KVModelShape& shape);  // throws Error naming the missing or bad field

// Hugging Face config.json: num_hidden_layers, num_attention_heads, num_key_value_heads (default:
// heads), head_dim (default: hidden_size / heads), and kv_lora_rank + qk_rope_head_dim for MLA
// (DeepSeek-V2/V3). A nested "text_config" is used when the top level has no layers.
KVModelShape kv_shape_from_hf_config(const nlohmann::json& config);
// GGUF metadata: {arch}.block_count, .attention.head_count(_kv), .attention.key_length or
// embedding_length / heads, and .attention.kv_lora_rank + .rope.dimension_count for MLA; Gemma 2 and
// 3's sliding-window layers as the loader reads them.
KVModelShape kv_shape_from_gguf(const GGUFFile& file);

struct KVCalcRequest {
  KVModelShape shape;
  KVCacheDType dtype = KVCacheDType::F16;
  int64_t seq_len = 0;  // tokens per request
  int64_t batch = 1;    // concurrent requests
  std::optional<uint64_t> memory_bytes;  // a budget to fit tokens into
  int block_size = 16;
  // StreamingLLM eviction (--streaming-window, --attention-sinks): full-attention layers keep at most
  // sinks + window tokens. 0: off.
  int64_t streaming_window = 0;
  int64_t attention_sinks = 0;
  // H2O eviction (--h2o-heavy, --h2o-recent): full-attention layers keep at most heavy + recent tokens a
  // KV head, each with an 8-byte record (kHeavyHitterRecordBytes). recent 0: off.
  int64_t h2o_heavy = 0;
  int64_t h2o_recent = 0;
};

struct KVCalcFigures {
  uint64_t bytes_per_token_per_layer = 0;  // a full-attention layer's (the first's)
  // Where the sliding layers' heads differ (Gemma 4): one of theirs.
  std::optional<uint64_t> bytes_per_token_per_swa_layer;
  uint64_t bytes_per_token = 0;    // all layers
  uint64_t bytes_per_request = 0;  // seq_len tokens
  uint64_t bytes_total = 0;        // batch requests
  uint64_t bytes_per_block = 0;    // block_size tokens, all layers
  // Where kvserve stores more than the values (int8: an f16 scale per 32 values), what it stores per token.
  std::optional<uint64_t> stored_bytes_per_token;
  // MLA only: what an MHA cache of n_heads x head_dim would take per token per layer.
  std::optional<uint64_t> mha_bytes_per_token_per_layer;
  // With a memory budget:
  std::optional<uint64_t> tokens_fit;    // whole tokens
  std::optional<uint64_t> blocks_fit;    // whole blocks (what a paged pool really gets)
  std::optional<uint64_t> requests_fit;  // whole requests of seq_len tokens
  // With sliding-window layers: what a cache keeping only their window holds per request (full layers
  // seq_len tokens, windowed ones min(seq_len, window)), for the batch, and requests a budget fits.
  std::optional<uint64_t> windowed_bytes_per_request;
  std::optional<uint64_t> windowed_bytes_total;
  std::optional<uint64_t> windowed_requests_fit;
  // With streaming eviction: a request's bytes when the full-attention layers keep min(seq_len, sinks +
  // window) tokens (and sliding-window layers their own window), for the batch, and requests a budget fits.
  std::optional<uint64_t> streaming_bytes_per_request;
  std::optional<uint64_t> streaming_bytes_total;
  std::optional<uint64_t> streaming_requests_fit;
  // With H2O: a request's bytes when the full-attention layers keep min(seq_len, heavy + recent) tokens
  // (their K/V and records; sliding-window layers their own window), for the batch, requests that fit.
  std::optional<uint64_t> h2o_bytes_per_request;
  std::optional<uint64_t> h2o_bytes_total;
  std::optional<uint64_t> h2o_requests_fit;
};

KVCalcFigures compute_kv_figures(const KVCalcRequest& request);
nlohmann::json kv_figures_json(const KVCalcRequest& request, const KVCalcFigures& figures);
std::string kv_figures_text(const KVCalcRequest& request, const KVCalcFigures& figures);
// "10.00 GiB (10,737,418,240 B)"
std::string format_bytes(uint64_t bytes);

}  // namespace kvserve
