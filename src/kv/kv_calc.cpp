#include "kv/kv_calc.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/gguf.h"
#include "model/loaders.h"

namespace kvserve {

namespace {

bool quantized(KVCacheDType t) { return kv_dtype_bits(t) < 16; }

int json_int(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int>::max())
    fail("config.json: '{}' must be a non-negative integer, got {}", key, v.dump());
  return v.get<int>();
}

int json_int_or(const nlohmann::json& j, const char* key, int fallback) {
  return j.contains(key) && !j.at(key).is_null() ? json_int(j, key) : fallback;
}

// The layers that cache KV: the full-attention ones first, then the sliding ones (with their own heads where they
// differ); layers on another's KV have none.
KVLayout layout_of(const KVCalcRequest& r) {
  const KVModelShape& s = r.shape;
  if (s.kind == AttentionKind::MLA) return KVLayout::mla(s.n_layers, s.kv_lora_rank, s.rope_dim, r.dtype, r.block_size);
  const int n_full = s.own_full_layers(), n_swa = s.own_swa_layers();
  KVLayout l = KVLayout::mha(n_full + n_swa, s.n_kv_heads, s.head_dim, r.dtype, r.block_size);
  if (s.n_kv_heads_swa > 0 || s.head_dim_swa > 0) {
    for (int i = 0; i < n_full + n_swa; ++i) {
      const bool swa = i >= n_full;
      l.layer_kv_heads.push_back(swa && s.n_kv_heads_swa > 0 ? s.n_kv_heads_swa : s.n_kv_heads);
      l.layer_head_dims.push_back(swa && s.head_dim_swa > 0 ? s.head_dim_swa : s.head_dim);
    }
    l.validate();
  }
  return l;
}

// a * b, refusing to wrap around silently.
uint64_t mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) fail("kv-calc: figure overflows 64 bits");
  return a * b;
}

std::string with_commas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string attention_kind_name(const KVModelShape& s) {
  if (s.kind == AttentionKind::MLA) return "MLA";
  if (s.n_kv_heads == 1 && s.n_heads != 1) return "MQA";
  if (s.n_heads > 0 && s.n_kv_heads < s.n_heads) return "GQA";
  return "MHA";
}

void validate_kv_shape(const KVModelShape& s) {
  if (s.n_layers <= 0) fail("kv-calc: number of layers missing or not positive (--layers)");
  if (s.kind == AttentionKind::MLA) {
    if (s.kv_lora_rank <= 0) fail("kv-calc: MLA needs a positive kv_lora_rank (--kv-lora-rank)");
    if (s.rope_dim < 0) fail("kv-calc: MLA rope dim must not be negative (--rope-dim)");
    return;
  }
  if (s.n_kv_heads <= 0) fail("kv-calc: number of KV heads missing or not positive (--kv-heads)");
  if (s.head_dim <= 0) fail("kv-calc: head dim missing or not positive (--head-dim)");
  if (s.n_heads > 0 && s.n_heads % s.n_kv_heads != 0)
    fail("kv-calc: {} attention heads is not a multiple of {} KV heads", s.n_heads, s.n_kv_heads);
  if (s.sliding_window < 0) fail("kv-calc: sliding window {} must not be negative (--sliding-window)", s.sliding_window);
  if (s.n_swa_layers < 0 || s.n_swa_layers > s.n_layers)
    fail("kv-calc: {} sliding-window layers is not in [0, {}] (--swa-layers)", s.n_swa_layers, s.n_layers);
  if (s.n_kv_heads_swa < 0 || s.head_dim_swa < 0 ||
      (s.n_kv_heads_swa > 0 && s.n_heads > 0 && s.n_heads % s.n_kv_heads_swa != 0))
    fail("kv-calc: sliding layers' {} KV heads of {} are not valid", s.n_kv_heads_swa, s.head_dim_swa);
  if (s.n_kv_shared_layers < 0 || s.n_shared_swa_layers < 0 || s.n_shared_swa_layers > s.n_kv_shared_layers ||
      s.own_full_layers() < 0 || s.own_swa_layers() < 0 || s.own_full_layers() + s.own_swa_layers() <= 0)
    fail("kv-calc: {} layers sharing KV ({} sliding) leave no valid layers of their own among {}", s.n_kv_shared_layers,
         s.n_shared_swa_layers, s.n_layers);
}

namespace {

// Gemma 4's layers as the model loader reads its config: each type's KV heads and head size, its window, and the last
// layers on earlier layers' KV.
void gemma4_shape(const ModelConfig& c, KVModelShape& s) {
  s.n_layers = c.n_layers;
  s.n_heads = c.n_heads;
  s.head_dim = c.head_dim;
  s.context_length = c.n_ctx_train;
  s.n_kv_heads = s.n_kv_heads_swa = s.head_dim_swa = s.n_swa_layers = s.n_shared_swa_layers = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    int& heads = c.is_swa_layer(l) ? s.n_kv_heads_swa : s.n_kv_heads;
    if (heads != 0 && heads != c.kv_heads_of(l))
      fail("config.json: KV head counts that differ among layers of one kind are not supported by kv-calc");
    heads = c.kv_heads_of(l);
  }
  if (s.n_kv_heads_swa == s.n_kv_heads) s.n_kv_heads_swa = 0;
  if (c.sliding_window > 0) {
    s.sliding_window = c.sliding_window;
    s.n_swa_layers = static_cast<int>(std::count(c.swa_layers.begin(), c.swa_layers.end(), true));
    s.head_dim_swa = c.head_dim_swa;
  }
  s.n_kv_shared_layers = c.n_kv_shared_layers;
  for (int l = c.n_layers - c.n_kv_shared_layers; l < c.n_layers; ++l) s.n_shared_swa_layers += c.is_swa_layer(l);
}

}  // namespace

KVModelShape kv_shape_from_hf_config(const nlohmann::json& config) {
  if (!config.is_object()) fail("config.json: expected a JSON object");
  const nlohmann::json* c = &config;
  if (!c->contains("num_hidden_layers") && config.contains("text_config") && config["text_config"].is_object())
    c = &config["text_config"];
  KVModelShape s;
  s.name = config.value("_name_or_path", config.value("model_type", std::string("config.json")));
  const std::string model_type = c->value("model_type", config.value("model_type", std::string()));
  if (model_type == "gemma4_text" || model_type == "gemma4") {  // over Gemma4TextConfig's defaults
    nlohmann::json text = *c;
    text["architectures"] = nlohmann::json::array({"Gemma4ForCausalLM"});
    gemma4_shape(hf_model_config(text, "config.json"), s);
    validate_kv_shape(s);
    return s;
  }
  if (!c->contains("num_hidden_layers")) fail("config.json: no 'num_hidden_layers'");
  if (!c->contains("num_attention_heads")) fail("config.json: no 'num_attention_heads'");
  s.n_layers = json_int(*c, "num_hidden_layers");
  s.n_heads = json_int(*c, "num_attention_heads");
  s.n_kv_heads = json_int_or(*c, "num_key_value_heads", s.n_heads);
  s.context_length = json_int_or(*c, "max_position_embeddings", 0);
  const int kv_lora_rank = json_int_or(*c, "kv_lora_rank", 0);
  if (kv_lora_rank > 0) {
    s.kind = AttentionKind::MLA;
    s.kv_lora_rank = kv_lora_rank;
    s.rope_dim = json_int_or(*c, "qk_rope_head_dim", 0);
    // What MHA would cache per head: the non-rope query/key dim (= v_head_dim on DeepSeek-V2).
    s.head_dim = json_int_or(*c, "qk_nope_head_dim", json_int_or(*c, "v_head_dim", 0));
  } else if (c->contains("head_dim") && !c->at("head_dim").is_null()) {
    s.head_dim = json_int(*c, "head_dim");
  } else {
    if (!c->contains("hidden_size")) fail("config.json: neither 'head_dim' nor 'hidden_size' is given");
    if (s.n_heads <= 0) fail("config.json: 'num_attention_heads' must be positive");
    s.head_dim = json_int(*c, "hidden_size") / s.n_heads;
  }
  const SlidingWindowLayers swa = hf_sliding_window_layers(*c, model_type, s.n_layers, "config.json");
  if (swa.window > 0) {
    s.sliding_window = swa.window;
    s.n_swa_layers = static_cast<int>(std::count(swa.layers.begin(), swa.layers.end(), true));
  }
  validate_kv_shape(s);
  return s;
}

KVModelShape kv_shape_from_gguf(const GGUFFile& f) {
  const std::string a = f.get_str("general.architecture");
  KVModelShape s;
  s.name = f.find_str("general.name").value_or(a);
  s.n_layers = static_cast<int>(f.get_u32(a + ".block_count"));
  s.n_heads = static_cast<int>(f.get_u32(a + ".attention.head_count"));
  const SlidingWindowLayers swa = gguf_sliding_window_layers(f, a, s.n_layers);
  const auto is_swa = [&](int l) { return swa.window > 0 && swa.layers[static_cast<size_t>(l)]; };
  const GGUFValue* kv = f.find(a + ".attention.head_count_kv");
  if (kv && kv->is_array()) {
    // Per layer (Gemma 4): one count for the full-attention layers and one for the sliding ones.
    const std::vector<int32_t> heads = f.get_i32_array(a + ".attention.head_count_kv");
    if (heads.size() != static_cast<size_t>(s.n_layers))
      fail("{}: attention.head_count_kv has {} entries for {} layers", f.name(), heads.size(), s.n_layers);
    for (int l = 0; l < s.n_layers; ++l) {
      int& kind = is_swa(l) ? s.n_kv_heads_swa : s.n_kv_heads;
      if (kind != 0 && kind != heads[static_cast<size_t>(l)])
        fail("{}: KV head counts that differ among layers of one kind are not supported by kv-calc", f.name());
      kind = heads[static_cast<size_t>(l)];
    }
    if (s.n_kv_heads == 0) s.n_kv_heads = s.n_kv_heads_swa;
  } else {
    s.n_kv_heads =
        static_cast<int>(f.find_u32(a + ".attention.head_count_kv").value_or(static_cast<uint32_t>(s.n_heads)));
  }
  s.context_length = f.find_u32(a + ".context_length").value_or(0);
  const std::optional<uint32_t> key_length = f.find_u32(a + ".attention.key_length");
  if (auto rank = f.find_u32(a + ".attention.kv_lora_rank"); rank && *rank > 0) {
    s.kind = AttentionKind::MLA;
    s.kv_lora_rank = static_cast<int>(*rank);
    s.rope_dim = static_cast<int>(f.find_u32(a + ".rope.dimension_count").value_or(0));
    // The heads' key is nope + rope wide (key_length_mla in current files, whose key_length is the latent
    // row's; key_length in older ones); the MHA comparison uses the nope part.
    const std::optional<uint32_t> head_key = f.find_u32(a + ".attention.key_length_mla");
    const std::optional<uint32_t> k = head_key ? head_key : key_length;
    s.head_dim = k ? static_cast<int>(*k) - s.rope_dim : 0;
  } else if (key_length) {
    s.head_dim = static_cast<int>(*key_length);
  } else {
    if (s.n_heads <= 0) fail("{}: attention.head_count must be positive", f.name());
    s.head_dim = static_cast<int>(f.get_u32(a + ".embedding_length")) / s.n_heads;
  }
  if (swa.window > 0) {
    s.sliding_window = swa.window;
    s.n_swa_layers = static_cast<int>(std::count(swa.layers.begin(), swa.layers.end(), true));
  }
  // Gemma 4: its sliding layers' head size, and its last layers on earlier layers' KV.
  if (const std::optional<uint32_t> k = f.find_u32(a + ".attention.key_length_swa"); k && swa.window > 0)
    s.head_dim_swa = static_cast<int>(*k);
  s.n_kv_shared_layers = static_cast<int>(f.find_u32(a + ".attention.shared_kv_layers").value_or(0));
  if (s.n_kv_shared_layers < 0 || s.n_kv_shared_layers >= s.n_layers)
    fail("{}: attention.shared_kv_layers {} leaves none of {} layers its own KV", f.name(), s.n_kv_shared_layers,
         s.n_layers);
  for (int l = s.n_layers - s.n_kv_shared_layers; l < s.n_layers; ++l) s.n_shared_swa_layers += is_swa(l) ? 1 : 0;
  validate_kv_shape(s);
  return s;
}

KVCalcFigures compute_kv_figures(const KVCalcRequest& r) {
  validate_kv_shape(r.shape);
  if (r.seq_len <= 0) fail("kv-calc: sequence length must be positive, got {}", r.seq_len);
  if (r.batch <= 0) fail("kv-calc: batch must be positive, got {}", r.batch);
  if (r.block_size <= 0) fail("kv-calc: block size must be positive, got {}", r.block_size);
  const KVLayout layout = layout_of(r);
  KVCalcFigures f;
  const KVModelShape& s = r.shape;
  // Full-attention layers come first in the layout, sliding ones after.
  const int n_full = s.kind == AttentionKind::MLA ? s.n_layers - s.n_swa_layers : s.own_full_layers();
  const int n_swa = s.kind == AttentionKind::MLA ? s.n_swa_layers : s.own_swa_layers();
  f.bytes_per_token_per_layer = layout.bytes_per_token_layer(0);
  const uint64_t per_swa = n_swa > 0 ? layout.bytes_per_token_layer(n_full) : f.bytes_per_token_per_layer;
  if (per_swa != f.bytes_per_token_per_layer) f.bytes_per_token_per_swa_layer = per_swa;
  f.bytes_per_token = layout.bytes_per_token();
  f.bytes_per_request = mul(f.bytes_per_token, static_cast<uint64_t>(r.seq_len));
  f.bytes_total = mul(f.bytes_per_request, static_cast<uint64_t>(r.batch));
  f.bytes_per_block = layout.bytes_per_block();
  if (layout.stored_bytes_per_token() != f.bytes_per_token) f.stored_bytes_per_token = layout.stored_bytes_per_token();
  if (r.shape.kind == AttentionKind::MLA && r.shape.n_heads > 0 && r.shape.head_dim > 0)
    f.mha_bytes_per_token_per_layer =
        KVLayout::mha(1, r.shape.n_heads, r.shape.head_dim, r.dtype, r.block_size).bytes_per_token_layer(0);
  if (r.memory_bytes) {
    // What fits is what kvserve stores (int8's scales included), as its pool is sized.
    f.tokens_fit = *r.memory_bytes / layout.stored_bytes_per_token();
    f.blocks_fit = *r.memory_bytes / layout.stored_bytes_per_block();
    f.requests_fit = *f.tokens_fit / static_cast<uint64_t>(r.seq_len);
  }
  const uint64_t per_full = f.bytes_per_token_per_layer;
  // A request's bytes when the full-attention layers keep `full_tokens` and the sliding ones their window.
  const auto request_bytes = [&](uint64_t full_per_token, uint64_t full_tokens) {
    const int swa_layers = s.sliding_window > 0 ? n_swa : 0;
    const uint64_t windowed =
        static_cast<uint64_t>(std::min(r.seq_len, s.sliding_window > 0 ? s.sliding_window : r.seq_len));
    return mul(full_per_token, mul(static_cast<uint64_t>(n_full + (n_swa - swa_layers)), full_tokens)) +
           mul(per_swa, mul(static_cast<uint64_t>(swa_layers), windowed));
  };
  if (s.sliding_window > 0 && s.n_swa_layers > 0) {
    // Full layers keep seq_len tokens, windowed ones at most the window.
    f.windowed_bytes_per_request = request_bytes(per_full, static_cast<uint64_t>(r.seq_len));
    f.windowed_bytes_total = mul(*f.windowed_bytes_per_request, static_cast<uint64_t>(r.batch));
    if (r.memory_bytes) f.windowed_requests_fit = *r.memory_bytes / *f.windowed_bytes_per_request;
  }
  if (r.streaming_window < 0 || r.attention_sinks < 0)
    fail("kv-calc: streaming window {} and attention sinks {} must not be negative", r.streaming_window,
         r.attention_sinks);
  if (r.attention_sinks > 0 && r.streaming_window == 0)
    fail("kv-calc: attention sinks need a streaming window (--streaming-window)");
  if (r.streaming_window > 0) {
    f.streaming_bytes_per_request =
        request_bytes(per_full, static_cast<uint64_t>(std::min(r.seq_len, r.attention_sinks + r.streaming_window)));
    f.streaming_bytes_total = mul(*f.streaming_bytes_per_request, static_cast<uint64_t>(r.batch));
    if (r.memory_bytes) f.streaming_requests_fit = *r.memory_bytes / *f.streaming_bytes_per_request;
  }
  if (r.h2o_heavy < 0 || r.h2o_recent < 0)
    fail("kv-calc: H2O heavy hitters {} and recent tokens {} must not be negative", r.h2o_heavy, r.h2o_recent);
  if (r.h2o_heavy > 0 && r.h2o_recent == 0) fail("kv-calc: H2O heavy hitters need recent tokens too (--h2o-recent)");
  if (r.h2o_recent > 0) {
    if (r.streaming_window > 0) fail("kv-calc: choose one eviction: a streaming window or H2O, not both");
    const uint64_t kept = static_cast<uint64_t>(std::min(r.seq_len, r.h2o_heavy + r.h2o_recent));
    // A record per KV head and token (MLA: one per latent row).
    const uint64_t records = s.kind == AttentionKind::MLA ? 1 : static_cast<uint64_t>(s.n_kv_heads);
    f.h2o_bytes_per_request = request_bytes(per_full + kHeavyHitterRecordBytes * records, kept);
    f.h2o_bytes_total = mul(*f.h2o_bytes_per_request, static_cast<uint64_t>(r.batch));
    if (r.memory_bytes) f.h2o_requests_fit = *r.memory_bytes / *f.h2o_bytes_per_request;
  }
  return f;
}

nlohmann::json kv_figures_json(const KVCalcRequest& r, const KVCalcFigures& f) {
  const KVModelShape& s = r.shape;
  nlohmann::json j;
  j["model"] = s.name;
  j["attention"] = attention_kind_name(s);
  j["layers"] = s.n_layers;
  if (s.n_heads > 0) j["heads"] = s.n_heads;
  if (s.kind == AttentionKind::MLA) {
    j["kv_lora_rank"] = s.kv_lora_rank;
    j["rope_dim"] = s.rope_dim;
  } else {
    j["kv_heads"] = s.n_kv_heads;
  }
  if (s.head_dim > 0) j["head_dim"] = s.head_dim;
  if (s.n_kv_heads_swa > 0) j["kv_heads_swa"] = s.n_kv_heads_swa;
  if (s.head_dim_swa > 0) j["head_dim_swa"] = s.head_dim_swa;
  if (s.n_kv_shared_layers > 0) j["kv_shared_layers"] = s.n_kv_shared_layers;
  j["kv_dtype"] = std::string(kv_dtype_name(r.dtype));
  j["bits_per_value"] = kv_dtype_bits(r.dtype);
  j["scales_included"] = false;  // quantized dtypes: payload only
  j["seq_len"] = r.seq_len;
  j["batch"] = r.batch;
  j["block_size"] = r.block_size;
  j["bytes_per_token_per_layer"] = f.bytes_per_token_per_layer;
  if (f.bytes_per_token_per_swa_layer) j["bytes_per_token_per_swa_layer"] = *f.bytes_per_token_per_swa_layer;
  j["bytes_per_token"] = f.bytes_per_token;
  j["bytes_per_request"] = f.bytes_per_request;
  j["bytes_total"] = f.bytes_total;
  j["bytes_per_block"] = f.bytes_per_block;
  if (f.mha_bytes_per_token_per_layer) j["mha_bytes_per_token_per_layer"] = *f.mha_bytes_per_token_per_layer;
  if (f.stored_bytes_per_token) j["stored_bytes_per_token"] = *f.stored_bytes_per_token;
  if (f.windowed_bytes_per_request) {
    j["sliding_window"] = s.sliding_window;
    j["sliding_window_layers"] = s.n_swa_layers;
    j["windowed_bytes_per_request"] = *f.windowed_bytes_per_request;
    j["windowed_bytes_total"] = *f.windowed_bytes_total;
    if (f.windowed_requests_fit) j["windowed_requests_fit"] = *f.windowed_requests_fit;
  }
  if (f.streaming_bytes_per_request) {
    j["streaming_window"] = r.streaming_window;
    j["attention_sinks"] = r.attention_sinks;
    j["streaming_bytes_per_request"] = *f.streaming_bytes_per_request;
    j["streaming_bytes_total"] = *f.streaming_bytes_total;
    if (f.streaming_requests_fit) j["streaming_requests_fit"] = *f.streaming_requests_fit;
  }
  if (f.h2o_bytes_per_request) {
    j["h2o_heavy"] = r.h2o_heavy;
    j["h2o_recent"] = r.h2o_recent;
    j["h2o_bytes_per_request"] = *f.h2o_bytes_per_request;
    j["h2o_bytes_total"] = *f.h2o_bytes_total;
    if (f.h2o_requests_fit) j["h2o_requests_fit"] = *f.h2o_requests_fit;
  }
  if (r.memory_bytes) {
    j["memory_bytes"] = *r.memory_bytes;
    j["tokens_fit"] = *f.tokens_fit;
    j["blocks_fit"] = *f.blocks_fit;
    j["requests_fit"] = *f.requests_fit;
  }
  return j;
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {} ({} B)", v, kUnits[u], with_commas(bytes));
}

std::string kv_figures_text(const KVCalcRequest& r, const KVCalcFigures& f) {
  const KVModelShape& s = r.shape;
  std::string out;
  auto line = [&out](const std::string& label, const std::string& value) {
    out += fmt::format("{:<28}{}\n", label + ":", value);
  };
  line("model", s.name.empty() ? "(from flags)" : s.name);
  if (s.kind == AttentionKind::MLA)
    line("attention", fmt::format("MLA, {} layers, kv_lora_rank {} + rope dim {}", s.n_layers, s.kv_lora_rank, s.rope_dim));
  else
    line("attention", fmt::format("{}, {} layers, {} KV heads x head dim {}{}", attention_kind_name(s), s.n_layers,
                                  s.n_kv_heads, s.head_dim,
                                  s.n_heads > 0 ? fmt::format(" ({} query heads)", s.n_heads) : std::string()));
  line("KV dtype", fmt::format("{} ({} bits per value{})", kv_dtype_name(r.dtype), kv_dtype_bits(r.dtype),
                               quantized(r.dtype) ? ", quantization scales excluded" : ""));
  if (s.n_kv_heads_swa > 0 || s.head_dim_swa > 0)
    line("  sliding layers",
         fmt::format("{} KV heads x head dim {}", s.n_kv_heads_swa > 0 ? s.n_kv_heads_swa : s.n_kv_heads,
                     s.head_dim_swa > 0 ? s.head_dim_swa : s.head_dim));
  if (s.n_kv_shared_layers > 0)
    line("  shared KV", fmt::format("the last {} layers read earlier layers' KV and cache none", s.n_kv_shared_layers));
  line("per token per layer", format_bytes(f.bytes_per_token_per_layer));
  if (f.bytes_per_token_per_swa_layer) line("  per sliding layer", format_bytes(*f.bytes_per_token_per_swa_layer));
  if (f.mha_bytes_per_token_per_layer)
    line(fmt::format("  MHA {} x {} would be", s.n_heads, s.head_dim),
         fmt::format("{}, {:.1f}x more", format_bytes(*f.mha_bytes_per_token_per_layer),
                     static_cast<double>(*f.mha_bytes_per_token_per_layer) /
                         static_cast<double>(f.bytes_per_token_per_layer)));
  line("per token", format_bytes(f.bytes_per_token));
  if (f.stored_bytes_per_token)
    line("  as kvserve stores it",
         fmt::format("{} ({}: an f16 scale per {} values)", format_bytes(*f.stored_bytes_per_token),
                     r.dtype == KVCacheDType::INT4 ? "q4_0" : "q8_0", kKVScaleGroup));
  line(fmt::format("per request ({} tokens)", r.seq_len), format_bytes(f.bytes_per_request));
  line(fmt::format("batch of {}", r.batch), format_bytes(f.bytes_total));
  if (r.memory_bytes) {
    line("budget", format_bytes(*r.memory_bytes));
    line("  tokens that fit", with_commas(*f.tokens_fit));
    line(fmt::format("  blocks of {} tokens", r.block_size), with_commas(*f.blocks_fit));
    line(fmt::format("  requests of {} tokens", r.seq_len), with_commas(*f.requests_fit));
  }
  if (f.windowed_bytes_per_request) {
    line("sliding window", fmt::format("{} of {} layers attend to the last {} tokens", s.n_swa_layers, s.n_layers,
                                       with_commas(static_cast<uint64_t>(s.sliding_window))));
    line("  hybrid cache per request", fmt::format("{}, {:.1f}x less", format_bytes(*f.windowed_bytes_per_request),
                                                   static_cast<double>(f.bytes_per_request) /
                                                       static_cast<double>(*f.windowed_bytes_per_request)));
    line(fmt::format("  hybrid batch of {}", r.batch), format_bytes(*f.windowed_bytes_total));
    if (f.windowed_requests_fit)
      line(fmt::format("  hybrid requests that fit"), with_commas(*f.windowed_requests_fit));
  }
  if (f.streaming_bytes_per_request) {
    line("streaming", fmt::format("full-attention layers keep {} sink{} + the last {} tokens", r.attention_sinks,
                                  r.attention_sinks == 1 ? "" : "s",
                                  with_commas(static_cast<uint64_t>(r.streaming_window))));
    line("  per request", fmt::format("{}, {:.1f}x less", format_bytes(*f.streaming_bytes_per_request),
                                      static_cast<double>(f.bytes_per_request) /
                                          static_cast<double>(*f.streaming_bytes_per_request)));
    line(fmt::format("  batch of {}", r.batch), format_bytes(*f.streaming_bytes_total));
    if (f.streaming_requests_fit) line("  requests that fit", with_commas(*f.streaming_requests_fit));
  }
  if (f.h2o_bytes_per_request) {
    line("H2O", fmt::format("full-attention layers keep {} heavy hitters + the last {} tokens, with {}-byte records",
                            with_commas(static_cast<uint64_t>(r.h2o_heavy)),
                            with_commas(static_cast<uint64_t>(r.h2o_recent)), kHeavyHitterRecordBytes));
    line("  per request", fmt::format("{}, {:.1f}x less", format_bytes(*f.h2o_bytes_per_request),
                                      static_cast<double>(f.bytes_per_request) /
                                          static_cast<double>(*f.h2o_bytes_per_request)));
    line(fmt::format("  batch of {}", r.batch), format_bytes(*f.h2o_bytes_total));
    if (f.h2o_requests_fit) line("  requests that fit", with_commas(*f.h2o_requests_fit));
  }
  return out;
}

}  // namespace kvserve
