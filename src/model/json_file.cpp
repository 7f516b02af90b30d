#include "model/json_file.h"

#include "core/error.h"
#include "core/text_file.h"

namespace kvserve {

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", path, e.what());
  }
}

}  // namespace kvserve
