// trnccl-inspect's analysis: the flight recorder files of every rank (src/flight_recorder.hpp)
// merged into one verdict per communicator -- mismatched calls, ranks that left no file, the
// rank that is behind, the rank the others wait for -- then one line per rank.
#pragma once

#include <string>
#include <vector>

#include "flight_recorder.hpp"

namespace trnccl {

// Reads every trnccl-fr-*.txt in dir. Unreadable or malformed files are reported in *notes.
Result<std::vector<FlightDump>> readFlightDumps(const std::string& dir,
                                                std::vector<std::string>* notes);
// The report (a few lines per communicator, the verdict first).
std::string inspectFlightDumps(const std::vector<FlightDump>& dumps);

}  // namespace trnccl
