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

// Call after timing Open MPI and before the next trnccl call. Open MPI completes an eager send
// once its data is queued for the byte transport, and writes queued fragments only while the
// sending process is inside MPI: a rank that went on to wait in trnccl could leave a peer
// waiting in MPI for that data until trnccl's timeout (seen with the tcp BTL between
// emulated nodes, about once in ten runs). A barrier keeps every rank in MPI until all are out.
void settleMpi();

}  // namespace trnccl::bench
