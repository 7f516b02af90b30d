#pragma once
// A whole file's bytes, with an error that names it.
#include <string>

namespace kvserve {

// Throws Error "cannot open 'path'".
std::string read_text_file(const std::string& path);

}  // namespace kvserve
