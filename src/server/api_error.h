// An error as the OpenAI API reports it: an HTTP status and {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace df::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or "authentication_error", "server_error", ...
  std::string param;                           // the request field at fault ("" where none)
  std::string code;                            // a short machine-readable reason ("" where none)
};

inline nlohmann::ordered_json error_body(const ApiError& e) {
  nlohmann::ordered_json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.param);
  err["code"] = e.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.code);
  return {{"error", err}};
}

inline ApiError bad_request(std::string message, std::string param = {}, std::string code = {}) {
  return {.status = 400, .message = std::move(message), .param = std::move(param), .code = std::move(code)};
}

}  // namespace df::server
