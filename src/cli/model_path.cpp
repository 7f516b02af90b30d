#include "cli/model_path.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/progress.h"
#include "core/error.h"
#include "jinja/template.h"
#include "model/chat_template.h"
#include "model/model_cache.h"

namespace kvserve::cli {

namespace {
constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string default_model_path() {
  if (const char* m = std::getenv("KVSERVE_MODEL"); m && *m) return m;
  const std::string dir = model_cache_dir();
  if (dir.empty()) fail("no -m given and neither KVSERVE_MODEL, KVSERVE_MODELS nor HOME is set");
  const auto path = std::filesystem::path(dir) / kDefaultModelFile;
  if (!std::filesystem::exists(path))
    fail("default model not found at {} — run scripts/setup.sh to install it, or pass -m MODEL", path.string());
  return path.string();
}

void warn_unread_tensors(const std::string& path, const Model& model) {
  constexpr size_t kNamed = 4;
  const std::vector<std::string>& unread = model.unread_tensors;
  std::string names;
  for (size_t i = 0; i < std::min(unread.size(), kNamed); ++i) names += (i > 0 ? ", " : "") + unread[i];
  if (unread.size() > kNamed) names += fmt::format(" and {} more", unread.size() - kNamed);
  fmt::print(stderr,
             "kvserve: warning: {}: {} tensor{} the {} model does not read ({}); its output may differ from the "
             "model's\n",
             path, unread.size(), unread.size() == 1 ? "" : "s", model.config.arch, names);
}

std::unique_ptr<Model> load_cli_model(const std::string& model_arg, const std::string& tokenizer, bool progress,
                                      const std::string& chat_template) {
  const std::string path = model_arg.empty() ? default_model_path() : model_arg;
  LoadOptions lo;
  lo.tokenizer_path = tokenizer;
  ProgressBar bar("loading " + path, progress);
  lo.progress = [&](float f) { bar.update(f); };
  std::unique_ptr<Model> model = load_model(path, lo);
  bar.done();
  if (!model->unread_tensors.empty()) warn_unread_tensors(path, *model);
  if (!chat_template.empty()) model->vocab.chat_template = chat_template_from_arg(chat_template);
  return model;
}

std::string chat_template_from_arg(const std::string& arg) {
  if (chat_template_from_name(arg)) return arg;
  std::ifstream in(arg, std::ios::binary);
  if (!in) fail("--chat-template '{}' is neither a template family's name nor a readable file", arg);
  std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    const jinja::Template parsed(source);
  } catch (const Error& e) {
    fail("--chat-template {}: {}", arg, e.what());
  }
  return source;
}

CLI::Validator chat_template_name_check() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        if (chat_template_from_name(name) || std::filesystem::is_regular_file(name)) return {};
        std::string known;
        for (const std::string_view n : chat_template_names()) known += (known.empty() ? "" : ", ") + std::string(n);
        return "unknown chat template '" + name + "': neither a Jinja file nor a family's name (known: " + known + ")";
      },
      "FILE|NAME");
}

}  // namespace kvserve::cli
