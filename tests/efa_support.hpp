// What the two efa test files share (one binary, tests/meson.build): timing and text
// helpers, the socket providers the tests run over, and how a rank process is set up to reach
// every peer over libfabric.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "transports/efa/efa_transport.hpp"

namespace trnccl::efa_test {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline int openFds() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir)) ++n;
    closedir(dir);
  }
  return n;
}

// The two ways over TCP: net (reliable datagrams in the provider) and tcp under ofi_rxm.
constexpr const char* kSocketProviders[] = {"net", "tcp;ofi_rxm"};

// In a rank process before init: every peer over libfabric with this provider, and the socket
// providers pinned to loopback.
inline void useEfaOver(const char* provider) {
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  setenv("TRNCCL_TRANSPORT", "efa", 1);
  setenv("TRNCCL_FI_PROVIDER", provider, 1);
}

// Test names of cases parametrized by kSocketProviders end in /net or /tcp, so the in-process
// net cases can run as their own meson test (tests/meson.build says why).
inline std::string providerName(const ::testing::TestParamInfo<const char*>& info) {
  return std::string(info.param).substr(0, 3);  // "net", "tcp"
}

}  // namespace trnccl::efa_test
