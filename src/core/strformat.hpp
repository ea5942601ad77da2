// printf-style formatting into std::string (g++ 12 has no <format>).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace trnccl {

std::string vstrformat(const char* fmt, va_list args);

__attribute__((format(printf, 1, 2))) std::string strformat(const char* fmt, ...);

}  // namespace trnccl
