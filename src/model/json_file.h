#pragma once
// Reading a JSON file (config.json, tokenizer.json, *.safetensors.index.json) with errors that name it.
#include <nlohmann/json.hpp>
#include <string>

namespace kvserve {

// The parsed file; throws Error "cannot open 'path'" or "'path' is not valid JSON: ...".
nlohmann::json read_json_file(const std::string& path);

}  // namespace kvserve
