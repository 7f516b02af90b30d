#pragma once
// One exception type for every user-facing failure (bad file, bad request, bad flag), so the CLI and
// the server can turn any of them into a clear message instead of a crash.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvserve {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvserve
