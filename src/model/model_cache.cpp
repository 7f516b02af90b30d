#include "model/model_cache.h"

#include <cstdlib>

namespace kvserve {

std::string model_cache_dir() {
  if (const char* d = std::getenv("KVSERVE_MODELS"); d && *d) return d;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kvserve/models";
  return {};
}

}  // namespace kvserve
