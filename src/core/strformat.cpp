#include "core/strformat.hpp"

#include <vector>

#include "core/status.hpp"

namespace trnccl {

std::string vstrformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  char small[256];
  int needed = std::vsnprintf(small, sizeof(small), fmt, copy);
  va_end(copy);
  if (needed < 0) return fmt;
  if (static_cast<size_t>(needed) < sizeof(small)) return std::string(small, needed);
  std::vector<char> big(static_cast<size_t>(needed) + 1);
  std::vsnprintf(big.data(), big.size(), fmt, args);
  return std::string(big.data(), needed);
}

std::string strformat(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vstrformat(fmt, args);
  va_end(args);
  return out;
}

Status makeError(Code code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string message = vstrformat(fmt, args);
  va_end(args);
  return Status(code, std::move(message));
}

std::string sizeText(size_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return strformat("%zu%s", bytes, units[unit]);
}

}  // namespace trnccl
