// The one registry of every TRNCCL_* environment variable: name, default and meaning.
// Nothing else in the library reads the environment; `trnccl-info --env` prints this table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace trnccl::env {

enum class Kind { kString, kInt, kBytes, kSeconds, kBool };

struct Var {
  const char* name;
  Kind kind;
  const char* defaultValue;
  const char* doc;
};

// Logging.
extern const Var kDebug;
extern const Var kDebugSubsys;
extern const Var kDebugFile;
// Behaviour of every wait.
extern const Var kTimeout;
extern const Var kSpinCount;
extern const Var kSpinTimeUs;
// Identity, bootstrap and launch.
extern const Var kHostId;
extern const Var kBootstrapAddr;
extern const Var kRank;
extern const Var kNranks;
extern const Var kUniqueId;
// Transports and algorithms.
extern const Var kTransport;
extern const Var kAlgo;
extern const Var kShmChunkBytes;
extern const Var kShmRingSlots;
extern const Var kShmRingSlotBytes;
extern const Var kOneShotMaxBytes;
extern const Var kAggregateMaxBytes;
extern const Var kLLMaxBytes;
extern const Var kStreamCopyBytes;
extern const Var kCma;
extern const Var kCmaMinBytes;
extern const Var kCmaMaxBytes;
extern const Var kMoeDirect;
extern const Var kShmDir;
extern const Var kFiProvider;
extern const Var kEfaRails;
extern const Var kEfaRendezvousBytes;
extern const Var kEfaMrCache;
extern const Var kEfaSleep;
extern const Var kTopoXml;
// Topology discovery (docs/TOPOLOGY.md).
extern const Var kTopoFile;
extern const Var kTopoDumpFile;
extern const Var kTopoPreset;
extern const Var kNeuronSysfs;
extern const Var kNeuronDevices;
extern const Var kTrafficDir;
// Hang diagnosis (docs/RELIABILITY.md).
extern const Var kFlightRecorderEntries;
extern const Var kFlightRecorderDir;
extern const Var kPipelineChunks;
// The planner's cost model (docs/PLANNER.md).
extern const Var kTuningFile;
// The test suite.
extern const Var kTestQuick;
extern const Var kTestWide;
extern const Var kFaultMatrixOut;

const std::vector<const Var*>& all();
// The registered variable of that name, or nullptr.
const Var* find(const std::string& name);
// The environment's own string, nullptr when unset (trncclGetEnv hands it on as it is).
const char* rawValue(const Var& var);

// True when the variable is set in the environment (even to the empty string).
bool isSet(const Var& var);
// The raw value, or the default when unset.
std::string getString(const Var& var);
// Integers accept K/M/G (powers of 1024) for kBytes; seconds accept fractions ("2.5").
Result<int64_t> getInt(const Var& var);
// getInt, refused (naming the variable and the range) outside [minimum, maximum].
Result<int64_t> getIntBetween(const Var& var, int64_t minimum, int64_t maximum);
Result<double> getSeconds(const Var& var);
Result<bool> getBool(const Var& var);

// Human-readable table of every variable with its current value.
std::string describeAll();

// Sets registered variables for a scope and puts back what was there when it ends: for tools
// and tests that create communicators under other settings (trnccl-tune's probes, the perf
// tools' -X tuned=FILE, the topology tests). A value of nullptr unsets the variable.
class ScopedOverride {
 public:
  ScopedOverride() = default;
  ScopedOverride(const Var& var, const char* value) { set(var, value); }
  ScopedOverride(const ScopedOverride&) = delete;
  ScopedOverride& operator=(const ScopedOverride&) = delete;
  ~ScopedOverride();
  void set(const Var& var, const char* value);

 private:
  struct Saved {
    const Var* var;
    bool wasSet;
    std::string value;
  };
  std::vector<Saved> saved_;
};

}  // namespace trnccl::env
