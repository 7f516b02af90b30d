#pragma once
// Where scripts/setup.sh installs downloaded models and test vocabularies.
#include <string>

namespace kvserve {

// $KVSERVE_MODELS, else ~/.cache/kvserve/models; empty when neither KVSERVE_MODELS nor HOME is set.
std::string model_cache_dir();

}  // namespace kvserve
