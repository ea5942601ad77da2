// Internal error values. Every fallible internal call returns Status or Result<T>; nothing
// throws across the C ABI, and src/api/errors.cpp is the one place that maps a Status to a
// trncclResult_t.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/strformat.hpp"

namespace trnccl {

enum class Code {
  kOk = 0,
  kUnhandledSystemError,
  kSystemError,
  kInternalError,
  kInvalidArgument,
  kInvalidUsage,
  kRemoteError,
  kTimeout,
  kAborted,
  kInProgress,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool isOk() const { return code_ == Code::kOk; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // Adds context in front of the message ("rank 2 AllReduce: " + message).
  Status withContext(const std::string& prefix) const {
    if (isOk()) return *this;
    return Status(code_, prefix + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// printf-checked constructor for an error Status.
__attribute__((format(printf, 2, 3))) Status makeError(Code code, const char* fmt, ...);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {}  // NOLINT
  bool isOk() const { return std::holds_alternative<T>(value_); }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  Status status() const { return isOk() ? Status::ok() : std::get<Status>(value_); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace trnccl

#define TRNCCL_RETURN_IF_ERROR(expr)     \
  do {                                   \
    ::trnccl::Status status_ = (expr);   \
    if (!status_.isOk()) return status_; \
  } while (0)
