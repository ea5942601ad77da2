// The flight recorder: per communicator, a bounded ring of its last calls (what was called,
// the algorithm, where each stands, whom it waits for, when), written to a text file per rank
// when the communicator fails (timeout, a peer's failure, a mismatch, abort) and on demand
// (trncclCommDumpFlightRecorder, or SIGUSR2 with TRNCCL_FLIGHT_RECORDER_DIR set).
// `trnccl-inspect DIR` merges the files of all ranks into a verdict (src/tools/inspect.*).
//
// Every access happens under the communicator's mutex (enqueue, progress, failure and dump
// all hold it), so entries need no atomics; recording a call is a few stores and one read of
// the coarse clock. docs/RELIABILITY.md documents the file format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "engine/coll_kind.hpp"

namespace trnccl {

struct FlightEntry {
  enum class State : uint8_t { kQueued, kStarted, kDone, kFailed };
  uint64_t seq = 0;  // 1, 2, ... per communicator; 0 = empty slot
  CollKind kind = CollKind::kAllReduce;
  size_t count = 0;
  trncclDataType_t dtype = trncclUint8;
  trncclRedOp_t op = trncclSum;
  int root = -1;
  int peer = -1;  // point-to-point: the first call's peer
  int calls = 1;  // calls fused into the operation (a group's point-to-point calls)
  bool isSend = false;
  const char* algorithm = "";  // static strings only
  std::string planned;         // calls the MoE engine plans itself: their description
  State state = State::kQueued;
  uint32_t stepsDone = 0, stepsTotal = 0;  // filled in for the running call when dumped
  int waitingFor = -1;
  const char* blockedOn = "";
  int64_t queuedNs = 0, startedNs = 0, endedNs = 0;  // coarse monotonic clock
};

class FlightRecorder {
 public:
  // entries == 0 turns recording off.
  void configure(size_t entries);
  bool enabled() const { return !ring_.empty(); }

  // A new call; returns its sequence number (0 when recording is off).
  uint64_t record(const CollArgs* calls, size_t ncalls, const char* algorithm);
  uint64_t recordPlanned(CollKind kind, const std::string& description);
  // nullptr when seq's slot has been reused by a newer call (or recording is off).
  FlightEntry* find(uint64_t seq);
  void started(uint64_t seq);
  void ended(uint64_t seq, bool ok);

  struct Header {
    int rank = 0, nranks = 0;
    std::string comm, commKey, host, reason, lastError;
    int pid = 0;
  };
  // The documented text form (docs/RELIABILITY.md), oldest call first.
  std::string format(const Header& header) const;
  // Writes format() to DIR/trnccl-fr-<commKey>-rank<R>.txt (whole, then renamed into place).
  Status dumpTo(const std::string& dir, const Header& header) const;

  static int64_t coarseNowNs();

 private:
  std::vector<FlightEntry> ring_;
  uint64_t next_ = 1;
};

// Parsed back (trnccl-inspect and tests).
struct FlightDump {
  FlightRecorder::Header header;
  int64_t dumpedNs = 0;
  struct Call {
    uint64_t seq = 0;
    std::string call;       // "AllReduce(count=1024, float, sum)"
    std::string signature;  // what must match across ranks: the call without peer/root order
    std::string algorithm, state;
    uint32_t stepsDone = 0, stepsTotal = 0;
    int waitingFor = -1;
    std::string blockedOn;
    double queuedMs = -1, startedMs = -1, endedMs = -1;  // before the dump
  };
  std::vector<Call> calls;
};
Result<FlightDump> parseFlightDump(const std::string& text);

}  // namespace trnccl
