// printf-style formatting into std::string (g++ 12 has no <format>).
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace trnccl {

std::string vstrformat(const char* fmt, va_list args);

__attribute__((format(printf, 1, 2))) std::string strformat(const char* fmt, ...);

// 0, 1, 512, 1K, 64K, 3M, 1G, 1T: powers of two in the unit that keeps them whole, else bytes.
std::string sizeText(size_t bytes);

}  // namespace trnccl
