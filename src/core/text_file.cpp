#include "core/text_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace trnccl {

std::string expandPathPattern(const std::string& pattern, const std::string& host, int pid) {
  std::string expanded;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] == '%' && next == 'h') {
      expanded += host;
      ++i;
    } else if (pattern[i] == '%' && next == 'p') {
      expanded += std::to_string(pid);
      ++i;
    } else {
      expanded += pattern[i];
    }
  }
  return expanded;
}

Result<std::string> readTextFile(const std::string& path) {
  FILE* in = std::fopen(path.c_str(), "r");
  if (!in)
    return makeError(Code::kSystemError, "cannot read %s: %s", path.c_str(), std::strerror(errno));
  std::string text;
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), in)) > 0) text.append(buffer, got);
  const bool failed = std::ferror(in) != 0;
  const int savedErrno = errno;
  std::fclose(in);
  if (failed)
    return makeError(Code::kSystemError, "cannot read %s: %s", path.c_str(),
                     std::strerror(savedErrno));
  return text;
}

Status writeTextFile(const std::string& path, const std::string& text) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (!out)
    return makeError(Code::kSystemError, "cannot write %s: %s", path.c_str(), std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const int savedErrno = errno;
  if (std::fclose(out) != 0 || !written)
    return makeError(Code::kSystemError, "cannot write %s: %s", path.c_str(),
                     std::strerror(written ? errno : savedErrno));
  return Status::ok();
}

}  // namespace trnccl
