// Models split by llama.cpp's gguf-split: opened from the first shard ("NAME-00001-of-0000N.gguf"), the other
// shards' tensors joined to it; the same model, bit for bit, as the file they were split from.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/loaders.h"

namespace kvserve {
namespace {

const std::string kTinyGqa = std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/tiny-gqa.gguf";

struct SplitDir {
  // One folder per test process: ctest runs the tests side by side.
  SplitDir()
      : dir(std::filesystem::path(testing::TempDir()) /
            ("kvserve_gguf_split_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~SplitDir() { std::filesystem::remove_all(dir); }
  std::string shard(int no, int count) const {
    char name[64];
    std::snprintf(name, sizeof(name), "tiny-%05d-of-%05d.gguf", no + 1, count);
    return (dir / name).string();
  }
  std::filesystem::path dir;
};

// tiny-gqa split as gguf-split writes it: every shard carries split.no (u16), split.count (u16) and
// split.tensors.count (i32); the first one also all of the model's metadata. Tensors go round the shards in
// order, `first_holds_tensors` false leaving the first with metadata only (gguf-split --no-tensor-first-split).
void write_split(const SplitDir& d, int count, bool first_holds_tensors, int tensors_count_delta = 0) {
  const GGUFFile src(kTinyGqa);
  std::vector<GGUFWriter> shards(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    GGUFWriter& w = shards[static_cast<size_t>(i)];
    if (i == 0)
      for (const auto& [key, value] : src.metadata())
        if (key != "general.alignment") w.add_value(key, value);
    w.add_u16("split.no", static_cast<uint16_t>(i));
    w.add_u16("split.count", static_cast<uint16_t>(count));
    w.add_i32("split.tensors.count", static_cast<int32_t>(src.tensors().size()) + tensors_count_delta);
  }
  const int first = first_holds_tensors ? 0 : 1;
  size_t k = 0;
  for (const GGUFTensorInfo& t : src.tensors()) {
    GGUFWriter& w = shards[static_cast<size_t>(first + static_cast<int>(k++ % static_cast<size_t>(count - first)))];
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::vector<uint8_t>(t.data, t.data + t.bytes));
  }
  for (int i = 0; i < count; ++i) shards[static_cast<size_t>(i)].write(d.shard(i, count));
}

std::vector<std::vector<float>> logits_of(const Model& m) {
  Generator gen(m, {.max_context = 128});
  return gen.teacher_forced_logits({1, 403, 407, 261, 378, 300, 269, 264}, 3);
}

TEST(GgufSplit, ShardsLoadAsTheWholeFile) {
  const auto whole = load_model(kTinyGqa);
  const auto want = logits_of(*whole);
  for (const bool first_holds_tensors : {true, false}) {
    SCOPED_TRACE(first_holds_tensors);
    SplitDir d;
    write_split(d, 3, first_holds_tensors);
    const auto f = open_gguf_with_shards(d.shard(0, 3));
    EXPECT_EQ(f->tensors().size(), GGUFFile(kTinyGqa).tensors().size());
    const auto m = load_model(d.shard(0, 3));
    EXPECT_EQ(m->config.n_layers, whole->config.n_layers);
    EXPECT_EQ(logits_of(*m), want);
  }
}

TEST(GgufSplit, ErrorsNameTheShard) {
  const auto error_of = [](const std::string& path) {
    try {
      load_model(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    SplitDir d;
    write_split(d, 3, true);
    EXPECT_NE(error_of(d.shard(1, 3)).find("give its first shard"), std::string::npos) << error_of(d.shard(1, 3));
    std::filesystem::remove(d.shard(2, 3));
    EXPECT_NE(error_of(d.shard(0, 3)).find("tiny-00003-of-00003.gguf"), std::string::npos) << error_of(d.shard(0, 3));
    const std::string renamed = (d.dir / "renamed.gguf").string();
    std::filesystem::rename(d.shard(0, 3), renamed);
    EXPECT_NE(error_of(renamed).find("-00001-of-00003.gguf"), std::string::npos) << error_of(renamed);
  }
  {
    SplitDir d;
    write_split(d, 2, true, /*tensors_count_delta=*/1);
    EXPECT_NE(error_of(d.shard(0, 2)).find("split.tensors.count"), std::string::npos) << error_of(d.shard(0, 2));
  }
}

}  // namespace
}  // namespace kvserve
