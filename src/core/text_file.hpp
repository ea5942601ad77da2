// Whole-file text output for the files trnccl writes on request (topology dumps, traffic).
#pragma once

#include <string>

#include "core/status.hpp"

namespace trnccl {

// Replaces path with text; the error names the path and the system's reason.
Status writeTextFile(const std::string& path, const std::string& text);

}  // namespace trnccl
