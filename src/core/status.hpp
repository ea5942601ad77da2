// Internal error values. Every fallible internal call returns Status or Result<T>; nothing
// throws across the C ABI, and src/api/errors.cpp is the one place that maps a Status to a
// trncclResult_t.
#pragma once

#include <memory>
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

// An OK status is one null pointer, so the hot path (every step of every call returns one)
// constructs, tests and destroys it for the cost of a register; only errors allocate.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message)
      : error_(code == Code::kOk ? nullptr : new Error{code, std::move(message)}) {}
  Status(const Status& other) : error_(other.error_ ? new Error(*other.error_) : nullptr) {}
  Status(Status&& other) noexcept = default;
  Status& operator=(const Status& other) {
    if (this != &other) error_.reset(other.error_ ? new Error(*other.error_) : nullptr);
    return *this;
  }
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  static Status ok() { return {}; }
  bool isOk() const { return !error_; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return error_ ? error_->code : Code::kOk; }
  const std::string& message() const { return error_ ? error_->message : emptyMessage(); }

  // Adds context in front of the message ("rank 2 AllReduce: " + message).
  Status withContext(const std::string& prefix) const {
    if (isOk()) return {};
    return Status(error_->code, prefix + error_->message);
  }

 private:
  struct Error {
    Code code;
    std::string message;
  };
  static const std::string& emptyMessage() {
    static const std::string empty;
    return empty;
  }
  std::unique_ptr<Error> error_;
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
