#include "cli/model_path.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace kvserve::cli {

namespace {
constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string default_model_path() {
  if (const char* m = std::getenv("KVSERVE_MODEL"); m && *m) return m;
  std::filesystem::path dir;
  if (const char* d = std::getenv("KVSERVE_MODELS"); d && *d) {
    dir = d;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = std::filesystem::path(home) / ".cache" / "kvserve" / "models";
  } else {
    fail("no -m given and neither KVSERVE_MODEL, KVSERVE_MODELS nor HOME is set");
  }
  const auto path = dir / kDefaultModelFile;
  if (!std::filesystem::exists(path))
    fail("default model not found at {} — run scripts/setup.sh to install it, or pass -m MODEL", path.string());
  return path.string();
}

}  // namespace kvserve::cli
