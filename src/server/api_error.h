#pragma once
// A failed API call, carried as an exception from wherever it is detected to the HTTP layer, which
// answers with OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace kvserve::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)),
        type_(std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

  // {"error": {...}}; empty param/code are JSON null, as OpenAI sends them.
  nlohmann::json to_json() const {
    nlohmann::json err = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
    if (!param_.empty()) err["param"] = param_;
    if (!code_.empty()) err["code"] = code_;
    return {{"error", err}};
  }

 private:
  int status_;
  std::string param_, code_, type_;
};

inline ApiError bad_request(std::string message, std::string param = {}) {
  return ApiError(400, std::move(message), std::move(param));
}

}  // namespace kvserve::server
