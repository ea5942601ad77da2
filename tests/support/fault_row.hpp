// One row of the fault matrix as the JSON line scripts/fault_matrix.sh reads: written by
// tests/fault_matrix_test.cpp (kill / stall / abort) and tests/faulty_link_job.cpp (loss +
// delay), which must agree on it. Header only: faulty_link_job links the public library alone.
#pragma once

#include <cstdio>
#include <string>

namespace trnccl::testing {

inline std::string faultRowJson(const std::string& layout, const std::string& fault,
                                const std::string& phase, int rank, const std::string& result,
                                double seconds, const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  char head[512];
  std::snprintf(head, sizeof(head),
                "{\"layout\":\"%s\",\"fault\":\"%s\",\"phase\":\"%s\",\"rank\":%d,"
                "\"result\":\"%s\",\"seconds\":%.2f,\"message\":\"",
                layout.c_str(), fault.c_str(), phase.c_str(), rank, result.c_str(), seconds);
  return head + escaped + "\"}\n";
}

}  // namespace trnccl::testing
