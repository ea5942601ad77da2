// How a perf tool learns its rank and the unique id: from trnccl-run (TRNCCL_RANK,
// TRNCCL_NRANKS, TRNCCL_UNIQUE_ID) or from mpirun (MPI initialised here; rank 0 creates the id
// and broadcasts it). MPI only bootstraps and, for side-by-side runs, is the peer measured.
#pragma once

#include <string>

#include "trnccl.h"

namespace trnccl::bench {

struct Launch {
  int rank = -1;
  int nranks = 0;
  trncclUniqueId id{};
  bool viaMpi = false;
};

// Whether this process is rank 0 (or runs alone), read from the launcher's environment before
// anything starts: for messages that only one process should print.
bool isFirstProcess();

// On failure returns false after printing a message that says how to start the tool.
bool discoverLaunch(const std::string& tool, Launch* launch);
void finishLaunch(const Launch& launch);

}  // namespace trnccl::bench
