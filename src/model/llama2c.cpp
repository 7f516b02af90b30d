// llama2.c "v0" checkpoints (Karpathy's run.c format) and their tokenizer.bin.
//
// Checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means the classifier is stored separately), then float32 arrays in run.c's order. The
// weights are used in place from the mapped file.
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/loaders.h"

namespace kvserve {

namespace {

constexpr int kHeaderInts = 7;
constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42": llama2.c's newer export versions

// Escapes spaces as SentencePiece's U+2581, as llama.cpp's llama_escape_whitespaces does.
std::string escape_spaces(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    if (ch == ' ')
      out += "\xE2\x96\x81";
    else
      out += ch;
  }
  return out;
}

bool is_byte_token(const std::string& s) {
  // "<0xXX>" with two hex digits.
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

}  // namespace

Vocab llama2c_vocab_from_memory(const uint8_t* data, size_t size, int n_vocab, const std::string& name) {
  if (n_vocab <= 0) fail("{}: vocabulary size {} must be positive", name, n_vocab);
  size_t pos = 0;
  auto need = [&](size_t n, std::string_view what) {
    if (n > size - pos)
      fail("{}: truncated tokenizer: expected {} ({} bytes) at offset {}, but the file ends at {}", name, what, n,
           pos, size);
  };
  auto read_i32 = [&](std::string_view what) {
    need(4, what);
    int32_t v;
    std::memcpy(&v, data + pos, 4);
    pos += 4;
    return v;
  };
  const int32_t max_token_length = read_i32("max_token_length");
  if (max_token_length < 0) fail("{}: max_token_length {} is negative", name, max_token_length);
  // Each token takes at least 8 bytes (score + length).
  if (static_cast<size_t>(n_vocab) > (size - pos) / 8)
    fail("{}: tokenizer too small for {} tokens ({} bytes)", name, n_vocab, size);

  Vocab v;
  v.kind = Vocab::Kind::SPM;
  v.pre = "default";
  v.tokens.resize(static_cast<size_t>(n_vocab));
  v.scores.resize(static_cast<size_t>(n_vocab));
  v.token_types.resize(static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_vocab; ++i) {
    const std::string which = "token " + std::to_string(i);
    need(4, which + " score");
    float score;
    std::memcpy(&score, data + pos, 4);
    pos += 4;
    const int32_t len = read_i32(which + " length");
    if (len < 0) fail("{}: {} has negative length {} at offset {}", name, which, len, pos - 4);
    need(static_cast<size_t>(len), which + " text");
    std::string text(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);

    // Ids and types as llama.cpp's convert-llama2c-to-ggml assigns them.
    TokenType type = TokenType::Normal;
    if (i == 0) {
      text = "<unk>";
      type = TokenType::Unknown;
    } else if (i == 1) {
      text = "<s>";
      type = TokenType::Control;
    } else if (i == 2) {
      text = "</s>";
      type = TokenType::Control;
    } else if (text.empty()) {
      type = TokenType::Control;
    } else if (is_byte_token(text)) {
      type = TokenType::Byte;
    }
    v.tokens[static_cast<size_t>(i)] = escape_spaces(text);
    v.scores[static_cast<size_t>(i)] = score;
    v.token_types[static_cast<size_t>(i)] = type;
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_eos = false;
  v.add_space_prefix = true;
  return v;
}

Vocab load_llama2c_vocab(const std::string& path, int n_vocab) {
  MappedFile f(path);
  return llama2c_vocab_from_memory(f.data(), f.size(), n_vocab, path);
}

std::unique_ptr<Model> load_llama2c_model(const std::string& path, const LoadOptions& opts) {
  if (opts.progress) opts.progress(0.0f);
  auto file = std::make_shared<MappedFile>(path);
  const size_t size = file->size();
  if (size < kHeaderInts * 4)
    fail("{}: too small for a llama2.c checkpoint ({} bytes, the header alone is {})", path, size, kHeaderInts * 4);
  int32_t h[kHeaderInts];
  std::memcpy(h, file->data(), sizeof(h));
  if (static_cast<uint32_t>(h[0]) == kMagicV1)
    fail("{}: llama2.c export version 1/2 (magic 'ak42') is not supported; use the legacy v0 format", path);
  const int32_t dim = h[0], hidden = h[1], n_layers = h[2], n_heads = h[3], n_kv_heads = h[4], seq_len = h[6];
  const bool shared_classifier = h[5] > 0;
  const int64_t vocab = h[5] < 0 ? -int64_t{h[5]} : h[5];
  constexpr int32_t kLimit = 1 << 20;  // far above any llama2.c model; keeps size arithmetic in range
  auto check = [&](const char* what, int64_t v) {
    if (v <= 0 || v > kLimit)
      fail("{}: not a llama2.c checkpoint: header {} = {} is out of range (is this the right file format?)", path,
           what, v);
  };
  check("dim", dim);
  check("hidden_dim", hidden);
  check("n_layers", n_layers);
  check("n_heads", n_heads);
  check("n_kv_heads", n_kv_heads);
  check("vocab_size", vocab);
  check("seq_len", seq_len);
  if (dim % n_heads != 0 || n_heads % n_kv_heads != 0 || (dim / n_heads) % 2 != 0)
    fail("{}: inconsistent llama2.c header: dim {}, n_heads {}, n_kv_heads {}", path, dim, n_heads, n_kv_heads);
  const int64_t head_size = dim / n_heads;
  const int64_t kv_dim = head_size * n_kv_heads;

  // Float counts of each array, in file order (run.c memory_map_weights).
  const int64_t L = n_layers;
  struct Part {
    const char* name;
    int64_t floats;
  };
  const Part parts[] = {
      {"token_embedding", vocab * dim},  {"rms_att", L * dim},        {"wq", L * dim * dim},
      {"wk", L * dim * kv_dim},          {"wv", L * dim * kv_dim},    {"wo", L * dim * dim},
      {"rms_ffn", L * dim},              {"w1", L * dim * hidden},    {"w2", L * hidden * dim},
      {"w3", L * dim * hidden},          {"rms_final", int64_t{dim}}, {"freq_cis_real", seq_len * head_size / 2},
      {"freq_cis_imag", seq_len * head_size / 2}, {"wcls", shared_classifier ? 0 : vocab * dim},
  };
  uint64_t expected = kHeaderInts * 4;
  for (const Part& p : parts) expected += static_cast<uint64_t>(p.floats) * 4;
  if (size != expected)
    fail("{}: llama2.c checkpoint size mismatch: the header (dim {}, hidden {}, layers {}, heads {}, kv heads {}, "
         "vocab {}{}, seq_len {}) needs {} bytes, the file has {}{}",
         path, dim, hidden, n_layers, n_heads, n_kv_heads, vocab, shared_classifier ? "" : " untied", seq_len,
         expected, size, size < expected ? " (truncated)" : " (trailing data)");

  auto m = std::make_unique<Model>();
  m->path = path;
  m->format = "llama2c";
  ModelConfig& c = m->config;
  c.arch = "llama";
  c.name = std::filesystem::path(path).stem().string();
  c.n_vocab = static_cast<int>(vocab);
  c.n_embd = dim;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = static_cast<int>(head_size);
  c.n_ff = hidden;
  c.n_ctx_train = seq_len;
  c.rms_eps = 1e-5f;
  c.rope_base = 10000.0f;
  c.n_rot = c.head_dim;
  c.rope_style = RopeStyle::Interleaved;
  c.tied_output = shared_classifier;

  const float* base = reinterpret_cast<const float*>(file->data() + kHeaderInts * 4);
  const float* cursor = base;
  const float* starts[std::size(parts)];
  for (size_t i = 0; i < std::size(parts); ++i) {
    starts[i] = cursor;
    cursor += parts[i].floats;
  }
  auto tensor = [](std::string name, const float* data, int64_t ne0, int64_t ne1 = 1) {
    Tensor t;
    t.name = std::move(name);
    t.type = DType::F32;
    t.ne = {ne0, ne1, 1, 1};
    t.n_dims = ne1 == 1 ? 1 : 2;
    t.data = data;
    return t;
  };
  m->tok_embd = tensor("token_embd.weight", starts[0], dim, vocab);
  m->output_norm = tensor("output_norm.weight", starts[10], dim);
  m->output = shared_classifier ? m->tok_embd : tensor("output.weight", starts[13], dim, vocab);
  m->layers.resize(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& W = m->layers[static_cast<size_t>(l)];
    W.attn_norm = tensor(p + "attn_norm.weight", starts[1] + l * dim, dim);
    W.wq = tensor(p + "attn_q.weight", starts[2] + l * dim * dim, dim, dim);
    W.wk = tensor(p + "attn_k.weight", starts[3] + l * dim * kv_dim, dim, kv_dim);
    W.wv = tensor(p + "attn_v.weight", starts[4] + l * dim * kv_dim, dim, kv_dim);
    W.wo = tensor(p + "attn_output.weight", starts[5] + l * dim * dim, dim, dim);
    W.ffn_norm = tensor(p + "ffn_norm.weight", starts[6] + l * dim, dim);
    W.w_gate = tensor(p + "ffn_gate.weight", starts[7] + l * dim * hidden, dim, hidden);  // w1
    W.w_down = tensor(p + "ffn_down.weight", starts[8] + l * hidden * dim, hidden, dim);  // w2
    W.w_up = tensor(p + "ffn_up.weight", starts[9] + l * dim * hidden, dim, hidden);      // w3
  }
  m->storage.push_back(file);
  if (opts.progress) opts.progress(0.5f);

  // Tokenizer: an explicit path wins; otherwise tokenizer.bin next to the checkpoint.
  const std::string beside = (std::filesystem::path(path).parent_path() / "tokenizer.bin").string();
  std::string tok_path;
  if (!opts.tokenizer_path.empty() && std::filesystem::is_regular_file(opts.tokenizer_path))
    tok_path = opts.tokenizer_path;
  else if (opts.tokenizer_path.empty() && std::filesystem::is_regular_file(beside))
    tok_path = beside;
  else
    fail("{}: no llama2.c tokenizer found: looked at {} and at '{}' beside the checkpoint{}", path,
         opts.tokenizer_path.empty() ? std::string("the tokenizer path option (not given)")
                                     : "'" + opts.tokenizer_path + "' (tokenizer path option, does not exist)",
         beside,
         std::filesystem::is_regular_file(beside) ? " (exists, but an explicit tokenizer path takes precedence)"
                                                  : " (does not exist)");
  m->vocab = load_llama2c_vocab(tok_path, c.n_vocab);
  validate_model(*m);
  m->tokenizer = Tokenizer::create(m->vocab);
  if (opts.progress) opts.progress(1.0f);
  return m;
}

}  // namespace kvserve
