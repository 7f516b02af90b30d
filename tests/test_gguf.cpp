// GGUF parsing and model loading: every golden model's config against the README table, vocab-only
// files, and corrupted / hostile inputs (each must throw kvserve::Error naming the file, never crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/loaders.h"
#include "model/model.h"

using namespace kvserve;

namespace {

const std::string kShared = KVSERVE_SHARED_DIR;
const std::string kGoldenModels = kShared + "/golden/gguf/models/";
const std::string kVocabDir = kShared + "/models/vocab/";

struct ExpectedModel {
  std::string file;
  std::string arch;
  int n_embd, layers, heads, kv_heads, head_dim, n_ff, vocab, ctx;
  float rms_eps, rope_base;
  bool tied;
  std::map<std::string, int> type_counts;
};

// /work/shared/golden/gguf/README.md, "Models" table.
const std::vector<ExpectedModel> kModels = {
    {"stories260K-F32.gguf", "llama", 64, 5, 8, 4, 8, 172, 512, 512, 1e-5f, 10000, false, {{"F32", 48}}},
    {"stories260K-F16.gguf", "llama", 64, 5, 8, 4, 8, 172, 512, 512, 1e-5f, 10000, false, {{"F16", 37}, {"F32", 11}}},
    {"stories260K-Q8_0.gguf", "llama", 64, 5, 8, 4, 8, 172, 512, 512, 1e-5f, 10000, false, {{"F32", 16}, {"Q8_0", 32}}},
    {"stories260K-Q4_0.gguf", "llama", 64, 5, 8, 4, 8, 172, 512, 512, 1e-5f, 10000, false,
     {{"F32", 16}, {"Q4_0", 31}, {"Q8_0", 1}}},
    {"stories260K-Q4_1.gguf", "llama", 64, 5, 8, 4, 8, 172, 512, 512, 1e-5f, 10000, false,
     {{"F32", 16}, {"Q4_1", 31}, {"Q8_0", 1}}},
    {"tiny-mha.gguf", "llama", 256, 2, 4, 4, 64, 768, 512, 512, 1e-5f, 10000, false, {{"F16", 16}, {"F32", 5}}},
    {"tiny-gqa.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false, {{"F16", 16}, {"F32", 5}}},
    {"tiny-mqa.gguf", "llama", 256, 2, 4, 1, 64, 768, 512, 512, 1e-5f, 10000, false, {{"F16", 16}, {"F32", 5}}},
    {"tiny-qwen2.gguf", "qwen2", 256, 2, 4, 2, 64, 768, 512, 512, 1e-6f, 1e6f, true, {{"F16", 15}, {"F32", 11}}},
    {"tiny-gqa-BF16.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false, {{"BF16", 16}, {"F32", 5}}},
    {"tiny-gqa-Q8_0.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false, {{"F32", 5}, {"Q8_0", 16}}},
    {"tiny-gqa-Q6_K.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false, {{"F32", 5}, {"Q6_K", 16}}},
    {"tiny-gqa-Q5_K_M.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false,
     {{"F32", 5}, {"Q5_K", 13}, {"Q6_K", 3}}},
    {"tiny-gqa-Q4_K_M.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false,
     {{"F32", 5}, {"Q4_K", 13}, {"Q6_K", 3}}},
    {"tiny-gqa-Q4_1.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false,
     {{"F32", 5}, {"Q4_1", 15}, {"Q6_K", 1}}},
    {"tiny-gqa-Q4_0.gguf", "llama", 256, 2, 4, 2, 64, 768, 512, 512, 1e-5f, 10000, false,
     {{"F32", 5}, {"Q4_0", 15}, {"Q6_K", 1}}},
    {"llama-2-tiny-random.gguf", "llama", 8, 1, 2, 2, 4, 32, 32000, 4096, 1e-5f, 10000, false,
     {{"F16", 9}, {"F32", 3}}},
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A temp file removed at scope exit.
struct TempFile {
  std::string path;
  TempFile(const std::string& stem, const std::vector<uint8_t>& bytes) {
    path = (std::filesystem::temp_directory_path() /
            (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++)))
               .string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::filesystem::remove(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// Minimal GGUF writer for hand-made (and deliberately broken) files.
// Hand-made GGUF bytes, for files the real writer would refuse to make.
struct GgufBytes {
  std::vector<uint8_t> b;
  template <typename T>
  GgufBytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  GgufBytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put(version).put(n_tensors).put(n_kv);
  }
  GgufBytes& kv_str(const std::string& k, const std::string& v) { return str(k).put<uint32_t>(8).str(v); }
  GgufBytes& kv_u32(const std::string& k, uint32_t v) { return str(k).put<uint32_t>(4).put(v); }
  GgufBytes& kv_f32(const std::string& k, float v) { return str(k).put<uint32_t>(6).put(v); }
  GgufBytes& tensor(const std::string& name, std::vector<int64_t> dims, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) put(d);
    return put(type).put(offset);
  }
  GgufBytes& pad(size_t align = 32) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
};

// Parses from memory and, when that works, builds a model from it; returns the Error text, or "" when
// everything succeeded. Anything but kvserve::Error escapes and fails the test.
std::string parse_and_load(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    auto f = std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), name);
    try {
      load_gguf_model(f);
    } catch (const Error&) {
      // Loading may legitimately reject a file that parses; parse success is what we report.
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

TEST(GgufModels, ConfigMatchesReadmeTable) {
  for (const ExpectedModel& e : kModels) {
    SCOPED_TRACE(e.file);
    auto m = load_gguf_model(kGoldenModels + e.file);
    const ModelConfig& c = m->config;
    EXPECT_EQ(m->format, "gguf");
    EXPECT_EQ(c.arch, e.arch);
    EXPECT_EQ(c.n_embd, e.n_embd);
    EXPECT_EQ(c.n_layers, e.layers);
    EXPECT_EQ(c.n_heads, e.heads);
    EXPECT_EQ(c.n_kv_heads, e.kv_heads);
    EXPECT_EQ(c.head_dim, e.head_dim);
    EXPECT_EQ(c.n_rot, e.head_dim);
    EXPECT_EQ(c.n_ff, e.n_ff);
    EXPECT_EQ(c.n_vocab, e.vocab);
    EXPECT_EQ(c.n_ctx_train, e.ctx);
    EXPECT_FLOAT_EQ(c.rms_eps, e.rms_eps);
    EXPECT_FLOAT_EQ(c.rope_base, e.rope_base);
    EXPECT_EQ(c.tied_output, e.tied);
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
    EXPECT_EQ(c.rope_style, e.arch == "qwen2" ? RopeStyle::NeoX : RopeStyle::Interleaved);
    EXPECT_EQ(c.qkv_bias, e.arch == "qwen2");
    EXPECT_EQ(m->layers.size(), static_cast<size_t>(e.layers));
    if (e.tied) {
      EXPECT_EQ(m->output.data, m->tok_embd.data);
    }
    EXPECT_EQ(m->vocab.tokens.size(), static_cast<size_t>(e.vocab));
    EXPECT_EQ(m->vocab.kind, Vocab::Kind::SPM);
    EXPECT_EQ(m->vocab.bos_id, 1);
    EXPECT_EQ(m->vocab.eos_id, 2);
    EXPECT_EQ(m->vocab.unk_id, 0);
    EXPECT_TRUE(m->vocab.add_bos);
    EXPECT_FALSE(m->vocab.add_eos);
    EXPECT_TRUE(m->vocab.add_space_prefix);
    EXPECT_GT(m->weight_bytes(), 0u);
    EXPECT_EQ(m->unread_tensors, std::vector<std::string>{});
    ASSERT_NE(m->tokenizer, nullptr);
    EXPECT_EQ(m->tokenizer->n_vocab(), e.vocab);

    GGUFFile f(kGoldenModels + e.file);
    EXPECT_EQ(f.version(), 3u);
    std::map<std::string, int> counts;
    for (const GGUFTensorInfo& t : f.tensors()) counts[std::string(dtype_name(t.type))]++;
    EXPECT_EQ(counts, e.type_counts);
    EXPECT_EQ(f.size(), std::filesystem::file_size(kGoldenModels + e.file));
  }
}

// Every tensor of every architecture's golden file is read (llama.cpp refuses a file with tensors it does not
// read); a tensor the loader has no use for, added to a copy, is named, and only it.
TEST(GgufModels, EveryTensorIsReadAndAnUnknownOneIsNamed) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch")) {
    if (e.path().extension() != ".gguf") continue;
    SCOPED_TRACE(e.path().string());
    EXPECT_EQ(load_gguf_model(e.path().string())->unread_tensors, std::vector<std::string>{});
    ++n;
  }
  EXPECT_GE(n, 20);
  EXPECT_EQ(load_gguf_model(kShared + "/models/llama-2-tiny-random/llama-2-tiny-random.gguf")->unread_tensors,
            std::vector<std::string>{});

  const GGUFFile src(kGoldenModels + "tiny-gqa.gguf");
  kvserve::GGUFWriter w;
  for (const auto& [key, value] : src.metadata())
    if (key != "general.alignment") w.add_value(key, value);
  for (const GGUFTensorInfo& t : src.tensors()) {
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::vector<uint8_t>(t.data, t.data + t.bytes));
    if (t.name == "blk.1.ffn_down.weight")
      w.add_tensor("blk.1.ffn_gate_inp_shexp.weight", DType::F32, {t.ne[1]},
                   std::vector<uint8_t>(static_cast<size_t>(t.ne[1]) * 4));
  }
  TempFile tmp("unread.gguf", w.to_bytes());
  const auto m = load_gguf_model(tmp.path);
  EXPECT_EQ(m->unread_tensors, std::vector<std::string>{"blk.1.ffn_gate_inp_shexp.weight"});
}

TEST(GgufModels, TensorViewsPointIntoTheFileWithTheRightSizes) {
  GGUFFile f(kGoldenModels + "tiny-gqa-Q4_K_M.gguf");
  for (const GGUFTensorInfo& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    EXPECT_GE(t.data, f.bytes() + f.data_offset());
    EXPECT_LE(t.data + t.bytes, f.bytes() + f.size());
    Tensor view;
    view.type = t.type;
    view.ne = t.ne;
    EXPECT_EQ(view.bytes(), t.bytes);
  }
  const GGUFTensorInfo* v1 = f.find_tensor("blk.1.attn_v.weight");
  ASSERT_NE(v1, nullptr);
  EXPECT_EQ(v1->type, DType::Q6_K);
  EXPECT_EQ(f.find_tensor("blk.0.attn_v.weight")->type, DType::Q4_K);
}

TEST(GgufModels, QwenBiasesAndTiedOutput) {
  auto m = load_gguf_model(kGoldenModels + "tiny-qwen2.gguf");
  for (const LayerWeights& L : m->layers) {
    ASSERT_TRUE(L.bq.valid() && L.bk.valid() && L.bv.valid());
    EXPECT_EQ(L.bq.ne[0], 256);
    EXPECT_EQ(L.bk.ne[0], 128);
    EXPECT_EQ(L.bv.type, DType::F32);
  }
  EXPECT_TRUE(m->config.tied_output);
  EXPECT_EQ(m->output.type, DType::F16);
}

TEST(GgufModels, TypedAccessors) {
  GGUFFile f(kGoldenModels + "stories260K-F32.gguf");
  EXPECT_EQ(f.get_str("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 5u);
  EXPECT_FLOAT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f.get_str_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_EQ(f.get_f32_array("tokenizer.ggml.scores").size(), 512u);
  EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type").size(), 512u);
  EXPECT_FALSE(f.find_f32("llama.rope.freq_base").has_value());
  EXPECT_FALSE(f.find_u32("no.such.key").has_value());
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  // Wrong type and missing key both name the file and the key.
  try {
    f.get_u32("general.architecture");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stories260K-F32.gguf"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos);
  }
  EXPECT_THROW(f.get_str("no.such.key"), Error);
  EXPECT_THROW(f.get_str_array("tokenizer.ggml.scores"), Error);
}

TEST(GgufModels, MemoryParseEqualsFileParse) {
  const std::string path = kGoldenModels + "stories260K-Q4_0.gguf";
  auto bytes = read_bytes(path);
  GGUFFile mem(bytes.data(), bytes.size(), "mem");
  GGUFFile file(path);
  ASSERT_EQ(mem.tensors().size(), file.tensors().size());
  ASSERT_EQ(mem.metadata().size(), file.metadata().size());
  EXPECT_EQ(mem.data_offset(), file.data_offset());
  for (size_t i = 0; i < mem.tensors().size(); ++i) {
    const auto& a = mem.tensors()[i];
    const auto& b = file.tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.ne, b.ne);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(0, std::memcmp(a.data, b.data, a.bytes));
  }
}

TEST(GgufModels, LlamaTinyRandomVocab) {
  auto m = load_gguf_model(kGoldenModels + "llama-2-tiny-random.gguf");
  EXPECT_EQ(m->vocab.tokens.size(), 32000u);
  EXPECT_EQ(m->vocab.tokens[1], "<s>");
  EXPECT_EQ(m->vocab.tokens[2], "</s>");
  EXPECT_EQ(m->vocab.token_types[3], TokenType::Byte);  // <0x00>
  EXPECT_EQ(m->vocab.tokens[3], "<0x00>");
  EXPECT_EQ(m->config.n_ctx_train, 4096);
}

TEST(GgufModels, LoadModelDetectsGguf) {
  auto m = load_model(kGoldenModels + "tiny-mqa.gguf");
  EXPECT_EQ(m->format, "gguf");
  EXPECT_EQ(m->config.n_kv_heads, 1);
  EXPECT_NO_THROW(validate_model(*m));
}

TEST(GgufModels, ValidateModelNamesTheBadTensor) {
  auto m = load_gguf_model(kGoldenModels + "tiny-gqa.gguf");
  m->layers[1].wk.ne[1] = 64;
  try {
    validate_model(*m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_k.weight"), std::string::npos) << e.what();
  }
}

struct VocabCase {
  std::string file;
  Vocab::Kind kind;
  std::string pre;
  size_t n_tokens;
  int32_t bos, eos;
  bool add_bos, add_space_prefix;
  size_t min_merges;
};

TEST(GgufVocab, VocabOnlyFilesLoad) {
  const std::vector<VocabCase> cases = {
      {"ggml-vocab-llama-spm.gguf", Vocab::Kind::SPM, "default", 32000, 1, 2, true, true, 0},
      {"ggml-vocab-baichuan.gguf", Vocab::Kind::SPM, "default", 64000, 1, 2, true, true, 0},
      {"ggml-vocab-phi-3.gguf", Vocab::Kind::SPM, "default", 32064, 1, 32000, true, true, 0},
      {"ggml-vocab-bert-bge.gguf", Vocab::Kind::WPM, "bert-bge", 30522, 101, -1, true, false, 0},
      {"ggml-vocab-gpt-2.gguf", Vocab::Kind::BPE, "gpt-2", 50257, 50256, 50256, false, false, 50000},
      {"ggml-vocab-deepseek-llm.gguf", Vocab::Kind::BPE, "deepseek-llm", 102400, 100000, 100001, true, false, 90000},
      {"ggml-vocab-deepseek-coder.gguf", Vocab::Kind::BPE, "deepseek-coder", 32256, 32013, 32014, true, false, 30000},
      {"ggml-vocab-falcon.gguf", Vocab::Kind::BPE, "falcon", 65024, 11, 11, false, false, 60000},
      {"ggml-vocab-starcoder.gguf", Vocab::Kind::BPE, "starcoder", 49152, 0, 0, false, false, 40000},
      {"ggml-vocab-refact.gguf", Vocab::Kind::BPE, "refact", 49216, 0, 0, false, false, 40000},
      {"ggml-vocab-mpt.gguf", Vocab::Kind::BPE, "mpt", 50432, 0, 0, false, false, 50000},
      {"ggml-vocab-gpt-neox.gguf", Vocab::Kind::BPE, "default", 50432, 0, 0, false, false, 50000},
  };
  for (const VocabCase& c : cases) {
    SCOPED_TRACE(c.file);
    Vocab v = load_gguf_vocab(kVocabDir + c.file);
    EXPECT_EQ(v.kind, c.kind);
    EXPECT_EQ(v.pre, c.pre);
    EXPECT_EQ(v.tokens.size(), c.n_tokens);
    EXPECT_EQ(v.token_types.size(), c.n_tokens);
    EXPECT_EQ(v.scores.size(), c.n_tokens);
    EXPECT_EQ(v.bos_id, c.bos);
    EXPECT_EQ(v.eos_id, c.eos);
    EXPECT_EQ(v.add_bos, c.add_bos);
    EXPECT_FALSE(v.add_eos);
    EXPECT_EQ(v.add_space_prefix, c.add_space_prefix);
    EXPECT_GE(v.merges.size(), c.min_merges);
    if (c.kind == Vocab::Kind::BPE) {
      ASSERT_FALSE(v.merges.empty());
      EXPECT_NE(v.merges[0].find(' '), std::string::npos);
    }
  }
  // A vocab-only file is not a model.
  EXPECT_THROW(load_gguf_model(kVocabDir + "ggml-vocab-llama-spm.gguf"), Error);
}

TEST(GgufVocab, EndOfTurnFoundByText) {
  Vocab v = load_gguf_vocab(kVocabDir + "ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(v.eot_id, 50256);  // <|endoftext|>
  EXPECT_EQ(v.token_types[50256], TokenType::Control);
  Vocab p = load_gguf_vocab(kVocabDir + "ggml-vocab-phi-3.gguf");
  EXPECT_FALSE(p.chat_template.empty());
}

// ---- corruption ----------------------------------------------------------------------------------

TEST(GgufCorruption, TruncatedAtEveryOffsetInMetadataAndSampledInData) {
  const std::string path = kGoldenModels + "stories260K-F32.gguf";
  const auto bytes = read_bytes(path);
  GGUFFile full(bytes.data(), bytes.size(), "full");
  const size_t meta_end = full.data_offset();
  std::vector<size_t> cuts;
  for (size_t n = 0; n < meta_end + 64; ++n) cuts.push_back(n);
  for (size_t n = meta_end + 64; n < bytes.size(); n += 4093) cuts.push_back(n);
  cuts.push_back(bytes.size() - 1);
  for (size_t n : cuts) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string err = parse_and_load(prefix, "cut.gguf");
    ASSERT_FALSE(err.empty()) << "truncated at " << n << " parsed without error";
    ASSERT_NE(err.find("cut.gguf"), std::string::npos) << err;
  }
  // Through the file path too, and the message says what ran past the end.
  std::vector<uint8_t> half(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2));
  TempFile tmp("half-model.gguf", half);
  try {
    load_model(tmp.path);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(tmp.path), std::string::npos) << msg;
    EXPECT_NE(msg.find("runs past end of file"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
  }
}

TEST(GgufCorruption, FlippedBytesInHeaderAndTensorInfos) {
  const auto bytes = read_bytes(kGoldenModels + "tiny-gqa-Q4_K_M.gguf");
  GGUFFile full(bytes.data(), bytes.size(), "full");
  const size_t meta_end = static_cast<size_t>(full.data_offset());
  std::mt19937 rng(1234);
  // Every byte of the fixed header and of the tensor-info region (after the big token arrays), plus a
  // random sample of the metadata, each with several replacement values.
  std::vector<size_t> offsets;
  for (size_t i = 0; i < 24; ++i) offsets.push_back(i);
  const size_t infos_from = meta_end > 2200 ? meta_end - 2200 : 0;
  for (size_t i = infos_from; i < meta_end; ++i) offsets.push_back(i);
  for (int k = 0; k < 500; ++k) offsets.push_back(rng() % meta_end);
  int rejected = 0;
  for (size_t off : offsets) {
    for (uint8_t val : {uint8_t{0xFF}, uint8_t{0x00}, static_cast<uint8_t>(bytes[off] ^ 0x80)}) {
      std::vector<uint8_t> bad = bytes;
      bad[off] = val;
      const std::string err = parse_and_load(bad, "flip.gguf");
      if (!err.empty()) {
        ++rejected;
        ASSERT_NE(err.find("flip.gguf"), std::string::npos) << err;
      }
    }
  }
  EXPECT_GT(rejected, 100);
}

TEST(GgufCorruption, HandMadeHostileFiles) {
  auto expect_error = [](const GgufBytes& w, const std::string& needle) {
    TempFile tmp("hostile.gguf", w.b);
    try {
      GGUFFile f(tmp.path);
      load_gguf_model(tmp.path);
      ADD_FAILURE() << "no error, expected one containing '" << needle << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(tmp.path), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  {
    GgufBytes w;
    w.b = {'G', 'G', 'U'};
    expect_error(w, "not a GGUF file");
  }
  {
    GgufBytes w;
    w.header(0, 0, 1);
    expect_error(w, "version 1");
  }
  {
    GgufBytes w;
    w.header(0, 0, 7);
    expect_error(w, "unsupported GGUF version 7");
  }
  {
    GgufBytes w;
    w.header(uint64_t{1} << 62, 0);
    expect_error(w, "tensor count");
  }
  {
    GgufBytes w;
    w.header(0, uint64_t{1} << 60);
    expect_error(w, "key/value count");
  }
  {  // absurd string length
    GgufBytes w;
    w.header(0, 1).put<uint64_t>(uint64_t{1} << 60);
    w.b.resize(w.b.size() + 64, 'a');
    expect_error(w, "has length");
  }
  {  // absurd string value length
    GgufBytes w;
    w.header(0, 1).str("general.architecture").put<uint32_t>(8).put<uint64_t>(~uint64_t{0});
    expect_error(w, "has length");
  }
  {  // absurd array count
    GgufBytes w;
    w.header(0, 1).str("arr").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(uint64_t{1} << 61);
    expect_error(w, "array of");
  }
  {  // unknown value type
    GgufBytes w;
    w.header(0, 1).str("k").put<uint32_t>(77);
    expect_error(w, "unknown value type 77");
  }
  {  // arrays nested without end
    GgufBytes w;
    w.header(0, 1).str("nest").put<uint32_t>(9);
    for (int i = 0; i < 100; ++i) w.put<uint32_t>(9).put<uint64_t>(1);
    expect_error(w, "nested deeper");
  }
  {  // duplicate key
    GgufBytes w;
    w.header(0, 2).kv_u32("a", 1).kv_u32("a", 2);
    expect_error(w, "duplicate metadata key 'a'");
  }
  {  // bad alignment
    GgufBytes w;
    w.header(0, 1).kv_u32("general.alignment", 3);
    expect_error(w, "power of two");
  }
  // Tensor-info problems.
  auto model_header = [](GgufBytes& w, uint64_t n_tensors, const std::string& arch = "llama") {
    w.header(n_tensors, 1).kv_str("general.architecture", arch);
  };
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {4, 4, 4, 4, 4}, 0, 0);
    expect_error(w, "5 dimensions");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {-4}, 0, 0);
    expect_error(w, "negative dimension");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {4}, 99, 0);
    expect_error(w, "unknown type id 99");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {int64_t{1} << 40, int64_t{1} << 40}, 0, 0);
    expect_error(w, "'x'");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {33}, 8, 0);  // Q8_0 rows must be multiples of 32
    expect_error(w, "block size 32");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {8}, 0, 3);
    expect_error(w, "not a multiple of the alignment");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("blk.0.attn_q.weight", {1024}, 0, 0).pad();
    w.b.resize(w.b.size() + 100);
    expect_error(w, "tensor 'blk.0.attn_q.weight' data [offset");
  }
  {
    GgufBytes w;
    model_header(w, 1);
    w.tensor("x", {8}, 0, ~uint64_t{0} - 31);
    expect_error(w, "runs past end of file");
  }
  {
    GgufBytes w;
    model_header(w, 2);
    w.tensor("x", {8}, 0, 0).tensor("x", {8}, 0, 32).pad();
    w.b.resize(w.b.size() + 64);
    expect_error(w, "duplicate tensor name 'x'");
  }
  {  // unsupported architecture
    GgufBytes w;
    model_header(w, 0, "mamba");
    expect_error(w, "unsupported architecture 'mamba'");
  }
}

TEST(GgufCorruption, UnsupportedTensorTypeIsNamed) {
  // Rewrite one tensor of a real model as TQ1_0 (type 34): the loader must name type and tensor.
  const auto bytes = read_bytes(kGoldenModels + "tiny-gqa-Q4_K_M.gguf");
  GGUFFile f(bytes.data(), bytes.size(), "x");
  const GGUFTensorInfo* t = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, DType::Q4_K);
  // Tensor info layout: name (8 + len), n_dims (4), dims (8 each), type (4). Find it by its name.
  const std::string needle = "blk.0.attn_q.weight";
  auto bad = bytes;
  size_t pos = 0;
  for (size_t i = 0; i + needle.size() < static_cast<size_t>(f.data_offset()); ++i) {
    if (std::memcmp(bad.data() + i, needle.data(), needle.size()) == 0 && bad[i - 8] == needle.size()) pos = i;
  }
  ASSERT_GT(pos, 0u);
  const size_t type_at = pos + needle.size() + 4 + 8 * static_cast<size_t>(t->n_dims);
  uint32_t type = 34;  // TQ1_0: 256-element blocks, fewer bytes than Q4_K's, so sizes still check out
  std::memcpy(bad.data() + type_at, &type, 4);
  TempFile tmp("tq1_0.gguf", bad);
  try {
    load_gguf_model(tmp.path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported tensor type TQ1_0 (34) for 'blk.0.attn_q.weight'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(tmp.path), std::string::npos) << e.what();
  }
}

TEST(GgufCorruption, AbsurdBlockCountIsRejectedBeforeAllocating) {
  // Found by fuzz_gguf: block_count = 2^30 made the loader allocate 2^30 LayerWeights.
  auto bytes = read_bytes(kGoldenModels + "stories260K-F32.gguf");
  const std::string key = "llama.block_count";
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(it, bytes.end());
  const size_t value_at = static_cast<size_t>(it - bytes.begin()) + key.size() + 4;
  const uint32_t huge = 1u << 30;
  std::memcpy(bytes.data() + value_at, &huge, 4);
  auto f = std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), "blocks.gguf");
  try {
    load_gguf_model(f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_count = 1073741824 but the file has only 48 tensors"),
              std::string::npos)
        << e.what();
  }
}
