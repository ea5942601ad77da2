// Whole-file text input and output: the files trnccl reads (topology, tuning) and writes on
// request (topology dumps, traffic).
#pragma once

#include <string>

#include "core/status.hpp"

namespace trnccl {

// A file name pattern with %h replaced by the host name and %p by the pid, in one pass (a host
// name holding "%h" stays as it is).
std::string expandPathPattern(const std::string& pattern, const std::string& host, int pid);

// The whole file; the error names the path and the system's reason.
Result<std::string> readTextFile(const std::string& path);

// Replaces path with text; the error names the path and the system's reason.
Status writeTextFile(const std::string& path, const std::string& text);

}  // namespace trnccl
