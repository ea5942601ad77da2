#include "core/text_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace trnccl {

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
