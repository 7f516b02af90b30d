#pragma once
#include <string>

namespace kvserve::cli {

// The model used when no -m is given: $KVSERVE_MODEL, else the default model in the model cache
// ($KVSERVE_MODELS or ~/.cache/kvserve/models) that scripts/setup.sh installs. Throws Error telling
// the user how to install it when it is missing.
std::string default_model_path();

}  // namespace kvserve::cli
