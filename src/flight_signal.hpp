// Flight recorder dumps on demand by signal: with TRNCCL_FLIGHT_RECORDER_DIR set, SIGUSR2 makes
// every live communicator of the process write its flight recorder there (when the program
// left SIGUSR2 at its default). The handler only writes a byte to a pipe; a thread of the
// library does the dumping, so a rank stuck in a wait can still be asked where it stands.
#pragma once

#include <string>

namespace trnccl {

class Communicator;

// Called at the end of init and at destruction.
void registerForSignalDumps(Communicator* comm, const std::string& dir);
void unregisterFromSignalDumps(Communicator* comm);

}  // namespace trnccl
