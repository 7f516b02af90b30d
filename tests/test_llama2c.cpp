// llama2.c checkpoint + tokenizer.bin loading, checked against llama.cpp's conversion of the same
// checkpoint (stories260K-F32.gguf: same vocab, bit-identical weights).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/model.h"

using namespace kvserve;

namespace {

const std::string kShared = KVSERVE_SHARED_DIR;
const std::string kCheckpoint = kShared + "/models/stories260K/stories260K.bin";
const std::string kTokenizer = kShared + "/models/stories260K/tok512.bin";
const std::string kGguf = kShared + "/golden/gguf/models/stories260K-F32.gguf";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A scratch directory removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("kvserve-l2c-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::string p = (path / name).string();
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
};

LoadOptions with_tokenizer(const std::string& tok = kTokenizer) {
  LoadOptions o;
  o.tokenizer_path = tok;
  return o;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Llama2c, Stories260KConfig) {
  auto m = load_llama2c_model(kCheckpoint, with_tokenizer());
  const ModelConfig& c = m->config;
  EXPECT_EQ(m->format, "llama2c");
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_ctx_train, 512);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_base, 10000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::Interleaved);
  EXPECT_TRUE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(m->output.data, m->tok_embd.data);
  EXPECT_NO_THROW(validate_model(*m));
}

TEST(Llama2c, VocabEqualsLlamaCppConversion) {
  auto m = load_llama2c_model(kCheckpoint, with_tokenizer());
  const Vocab& a = m->vocab;
  const Vocab b = load_gguf_vocab(kGguf);
  EXPECT_EQ(a.kind, Vocab::Kind::SPM);
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << "token " << i;
    EXPECT_EQ(a.scores[i], b.scores[i]) << "token " << i;
    EXPECT_EQ(a.token_types[i], b.token_types[i]) << "token " << i;
  }
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
  EXPECT_EQ(a.unk_id, b.unk_id);
  EXPECT_EQ(a.add_bos, b.add_bos);
  EXPECT_EQ(a.add_eos, b.add_eos);
  EXPECT_EQ(a.add_space_prefix, b.add_space_prefix);
  EXPECT_EQ(a.pre, b.pre);
  EXPECT_EQ(a.tokens[410], "\xE2\x96\x81");  // " " → "▁"

  // Same vocab → same tokenization ("Once upon a time" → [1, 403, 407, 261, 378] per the golden README).
  auto g = load_gguf_model(kGguf);
  ASSERT_NE(m->tokenizer, nullptr);
  const auto ids = m->tokenizer->encode("Once upon a time", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(ids, g->tokenizer->encode("Once upon a time", true, false));
}

TEST(Llama2c, WeightsBitIdenticalToGguf) {
  auto a = load_llama2c_model(kCheckpoint, with_tokenizer());
  auto b = load_gguf_model(kGguf);
  auto same = [](const Tensor& x, const Tensor& y) {
    SCOPED_TRACE(x.name);
    ASSERT_EQ(x.type, DType::F32);
    ASSERT_EQ(y.type, DType::F32);
    ASSERT_EQ(x.ne, y.ne);
    EXPECT_EQ(0, std::memcmp(x.data, y.data, x.bytes()));
  };
  same(a->tok_embd, b->tok_embd);
  same(a->output_norm, b->output_norm);
  same(a->output, b->output);  // the GGUF stores a copy of the shared classifier
  ASSERT_EQ(a->layers.size(), b->layers.size());
  for (size_t l = 0; l < a->layers.size(); ++l) {
    const LayerWeights& x = a->layers[l];
    const LayerWeights& y = b->layers[l];
    same(x.attn_norm, y.attn_norm);
    same(x.wq, y.wq);
    same(x.wk, y.wk);
    same(x.wv, y.wv);
    same(x.wo, y.wo);
    same(x.ffn_norm, y.ffn_norm);
    same(x.w_gate, y.w_gate);
    same(x.w_up, y.w_up);
    same(x.w_down, y.w_down);
  }
  EXPECT_EQ(a->weight_bytes(), b->weight_bytes());
}

TEST(Llama2c, LoadModelDetectsFormatAndFindsTokenizerBeside) {
  TempDir dir;
  const std::string ckpt = dir.write("model.bin", read_bytes(kCheckpoint));
  dir.write("tokenizer.bin", read_bytes(kTokenizer));
  auto m = load_model(ckpt);
  EXPECT_EQ(m->format, "llama2c");
  EXPECT_EQ(m->vocab.tokens.size(), 512u);
}

TEST(Llama2c, MissingTokenizerNamesBothPlaces) {
  TempDir dir;
  const std::string ckpt = dir.write("model.bin", read_bytes(kCheckpoint));
  std::string err = error_of([&] { load_llama2c_model(ckpt); });
  EXPECT_NE(err.find((dir.path / "tokenizer.bin").string()), std::string::npos) << err;
  EXPECT_NE(err.find("tokenizer path option"), std::string::npos) << err;
  err = error_of([&] { load_llama2c_model(ckpt, with_tokenizer("/nonexistent/tok.bin")); });
  EXPECT_NE(err.find("/nonexistent/tok.bin"), std::string::npos) << err;
  EXPECT_NE(err.find((dir.path / "tokenizer.bin").string()), std::string::npos) << err;
}

TEST(Llama2c, TruncatedOrPaddedCheckpointIsRejected) {
  const auto bytes = read_bytes(kCheckpoint);
  TempDir dir;
  for (size_t n : {size_t{0}, size_t{3}, size_t{27}, size_t{28}, size_t{1000}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string p = dir.write("cut.bin", std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n)));
    const std::string err = error_of([&] { load_llama2c_model(p, with_tokenizer()); });
    ASSERT_FALSE(err.empty()) << "cut at " << n;
    EXPECT_NE(err.find(p), std::string::npos) << err;
  }
  auto longer = bytes;
  longer.push_back(0);
  const std::string p = dir.write("long.bin", longer);
  const std::string err = error_of([&] { load_llama2c_model(p, with_tokenizer()); });
  EXPECT_NE(err.find("trailing data"), std::string::npos) << err;
}

TEST(Llama2c, CorruptHeaderIsRejected) {
  const auto bytes = read_bytes(kCheckpoint);
  TempDir dir;
  for (int field = 0; field < 7; ++field) {
    for (int32_t value : {0, -1, 3, 1 << 30, INT32_MIN}) {
      auto bad = bytes;
      std::memcpy(bad.data() + 4 * field, &value, 4);
      const std::string p = dir.write("bad.bin", bad);
      const std::string err = error_of([&] { load_llama2c_model(p, with_tokenizer()); });
      // vocab_size = -vocab only flips tied/untied and is still a size mismatch; every case errors.
      ASSERT_FALSE(err.empty()) << "field " << field << " = " << value;
      EXPECT_NE(err.find(p), std::string::npos) << err;
    }
  }
}

TEST(Llama2c, TruncatedTokenizerIsRejected) {
  const auto tok = read_bytes(kTokenizer);
  for (size_t n = 0; n < tok.size(); n += 7) {
    const std::string err = error_of([&] { llama2c_vocab_from_memory(tok.data(), n, 512, "tok.bin"); });
    ASSERT_FALSE(err.empty()) << "cut at " << n;
    EXPECT_NE(err.find("tok.bin"), std::string::npos) << err;
  }
  EXPECT_NO_THROW(llama2c_vocab_from_memory(tok.data(), tok.size(), 512, "tok.bin"));
}
