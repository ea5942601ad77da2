// trnccl-inspect DIR: merges the flight recorder files every rank wrote into DIR
// (TRNCCL_FLIGHT_RECORDER_DIR) and says what went wrong: mismatched calls, ranks that left no
// file, the rank that is behind, the rank the others wait for; then where each rank stands.
#include <cstdio>
#include <cstring>
#include <string>

#include "flight_inspect.hpp"

int main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(argc == 2 ? stdout : stderr,
                 "usage: trnccl-inspect DIR\n"
                 "  Reads the flight recorder files (trnccl-fr-*.txt) that the ranks of a job\n"
                 "  wrote into DIR (TRNCCL_FLIGHT_RECORDER_DIR: on failure, on SIGUSR2, or by\n"
                 "  trncclCommDumpFlightRecorder) and prints, per communicator, a verdict --\n"
                 "  mismatched calls, ranks that left no file, the rank that is behind, the rank\n"
                 "  the others wait for -- and where each rank stands. docs/RELIABILITY.md.\n");
    return argc == 2 ? 0 : 2;
  }
  std::vector<std::string> notes;
  auto dumps = trnccl::readFlightDumps(argv[1], &notes);
  if (!dumps.isOk()) {
    std::fprintf(stderr, "trnccl-inspect: %s\n", dumps.status().message().c_str());
    return 1;
  }
  for (const auto& note : notes) std::fprintf(stderr, "trnccl-inspect: skipped %s\n", note.c_str());
  std::fputs(trnccl::inspectFlightDumps(dumps.value()).c_str(), stdout);
  return dumps.value().empty() ? 1 : 0;
}
