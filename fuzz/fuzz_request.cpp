// libFuzzer target: arbitrary bytes as the body of each request the server parses (completions, chat,
// /tokenize, /detokenize). A parser either returns a request whose sampling parameters validate, or
// throws ApiError with a 4xx status and a message; any other exception, or a crash, is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api_error.h"
#include "server/request_parser.h"

using namespace kvserve::server;

namespace {

void check_rejection(const ApiError& e) {
  if (e.status() < 400 || e.status() >= 500 || std::string_view(e.what()).empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint endpoint : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    try {
      const ApiRequest req = parse_api_request(endpoint, body);
      req.params.validate();  // kvserve::Error escaping here is a parser that let a bad value through
    } catch (const ApiError& e) {
      check_rejection(e);
    }
  }
  try {
    parse_tokenize_request(body);
  } catch (const ApiError& e) {
    check_rejection(e);
  }
  try {
    parse_detokenize_request(body, 49152);
  } catch (const ApiError& e) {
    check_rejection(e);
  }
  return 0;
}
