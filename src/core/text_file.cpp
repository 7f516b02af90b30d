#include "core/text_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kvserve {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvserve
