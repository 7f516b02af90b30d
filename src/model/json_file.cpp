#include "model/json_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kvserve {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", path, e.what());
  }
}

}  // namespace kvserve
