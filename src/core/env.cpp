#include "core/env.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace trnccl::env {

const Var kDebug{"TRNCCL_DEBUG", Kind::kString, "WARN", "Log level: NONE, WARN, INFO or TRACE."};
const Var kDebugSubsys{"TRNCCL_DEBUG_SUBSYS", Kind::kString, "ALL",
                       "Comma list of subsystems to log: INIT,COLL,NET,SHM,TOPO,BOOT,MOE or ALL; "
                       "a leading ^ excludes the listed ones."};
const Var kDebugFile{"TRNCCL_DEBUG_FILE", Kind::kString, "",
                     "Write logs to this file instead of stderr; %h is replaced by the host name "
                     "and %p by the pid."};
const Var kTimeout{"TRNCCL_TIMEOUT", Kind::kSeconds, "300",
                   "Upper bound in seconds on every wait (init rendezvous, collectives, "
                   "requests). A wait that runs past it returns trncclTimeout naming the peers "
                   "still missing."};
const Var kSpinCount{"TRNCCL_SPIN_COUNT", Kind::kInt, "2000",
                     "Polls a waiting rank spins before it starts yielding the core "
                     "(sched_yield). When ranks outnumber this machine's cores and this is "
                     "not set, 0: a rank yields at its first pass that finds nothing to do."};
const Var kSpinTimeUs{"TRNCCL_SPIN_TIME_US", Kind::kInt, "1000",
                      "Microseconds a waiting rank keeps spinning and yielding without seeing "
                      "progress before it sleeps (on a futex in the node's shared segment that "
                      "peers ring when they publish). A sleeping rank uses almost no CPU and "
                      "wakes some tens of microseconds later; a wait for an efa peer sleeps on "
                      "the network instead (TRNCCL_EFA_SLEEP). -1 never sleeps."};
const Var kCma{"TRNCCL_CMA", Kind::kBool, "1",
               "Lets ranks of a node copy large blocks straight out of each other's buffers "
               "with process_vm_readv (one copy instead of two through the shared windows), "
               "where init finds that the kernel allows it between every pair of local ranks. "
               "The same permission lets peers map each other's trncclMemAlloc buffers (read "
               "and reduce them in place). 0 turns both off. The segment's creator (local "
               "rank 0) decides for its node."};
const Var kCmaMinBytes{"TRNCCL_CMA_MIN_BYTES", Kind::kBytes, "64K",
                       "Smallest block (bytes one rank reads from one peer) that the direct "
                       "all-gather, all-to-all and broadcast read with CMA; smaller blocks go "
                       "through the windows. Bound by the node segment's creator."};
const Var kCmaMaxBytes{
    "TRNCCL_CMA_MAX_BYTES", Kind::kBytes, "0",
    "Blocks of this many bytes and more go through the shared windows instead of CMA. 0 "
    "decides at init: local rank 0 times the kernel's copy (process_vm_readv) against memcpy, "
    "and where the kernel's takes more than twice as long, every broadcast block and the other "
    "collectives' blocks of TRNCCL_STREAM_COPY_BYTES and more take the windows, and every "
    "block does when ranks outnumber cores. Bound by the node segment's creator; INFO at init "
    "says what it chose."};
const Var kMoeDirect{"TRNCCL_MOE_DIRECT", Kind::kBool, "1",
                     "Lets an MoE group whose ranks all share one node's memory (every peer on "
                     "shm, single copy allowed: TRNCCL_CMA) move dispatch and combine rows "
                     "through staging that peers map: a receiver copies rows straight out of the "
                     "sender's staging, and combine sums them where they lie, instead of two "
                     "copies through the shm rings. 0 sends them over the transports. Every "
                     "rank must agree, or the group uses the transports."};
const Var kHostId{"TRNCCL_HOSTID", Kind::kString, "",
                  "Overrides this process's host identity (default: hash of hostname and boot "
                  "id). Ranks with different values are treated as different nodes."};
const Var kBootstrapAddr{"TRNCCL_BOOTSTRAP_ADDR", Kind::kString, "127.0.0.1",
                         "IPv4 address the rendezvous root listens on and puts in the unique "
                         "id. Set a routable address for jobs that span hosts."};
const Var kRank{"TRNCCL_RANK", Kind::kInt, "-1",
                "Rank of this process, set by the trnccl-run launcher for tools and examples."};
const Var kNranks{"TRNCCL_NRANKS", Kind::kInt, "-1",
                  "Number of ranks in the job, set by the trnccl-run launcher."};
const Var kUniqueId{"TRNCCL_UNIQUE_ID", Kind::kString, "",
                    "Hex-encoded trncclUniqueId, set by the trnccl-run launcher."};
const Var kTransport{"TRNCCL_TRANSPORT", Kind::kString, "",
                     "Comma list restricting the transports used between ranks: self, shm, efa. "
                     "Empty = every transport built in (shm inside a node, efa between "
                     "nodes); 'efa' alone sends every peer's traffic through libfabric."};
const Var kAlgo{"TRNCCL_ALGO", Kind::kString, "",
                "Algorithm override: one name for every collective that has it (ring, "
                "direct, hierarchical, torus, rd, rhd, bruck, binomial), per collective "
                "'allreduce:rhd;allgather:bruck', or '^direct' to exclude one. Empty = "
                "planner's choice."};
const Var kShmChunkBytes{"TRNCCL_SHM_CHUNK_BYTES", Kind::kBytes, "256K",
                         "Bytes per rank in each shared-window pipeline chunk (two chunks per "
                         "rank are staged). Keep all ranks' chunks inside the last-level cache."};
const Var kShmRingSlots{"TRNCCL_SHM_RING_SLOTS", Kind::kInt, "16",
                        "Slots in each shared-memory point-to-point ring (16 x 64 KiB: a 1 MiB "
                        "message fits whole, so a sender need not wait for its receiver to be "
                        "scheduled mid-message)."};
const Var kShmRingSlotBytes{"TRNCCL_SHM_RING_SLOT_BYTES", Kind::kBytes, "64K",
                            "Bytes per slot of each shared-memory point-to-point ring."};
const Var kOneShotMaxBytes{"TRNCCL_ONESHOT_MAX_BYTES", Kind::kBytes, "16K",
                           "All-reduce messages up to this size use the one-shot direct "
                           "algorithm (every rank reduces every input) instead of two-shot."};
const Var kAggregateMaxBytes{
    "TRNCCL_AGGREGATE_MAX_BYTES", Kind::kBytes, "16K",
    "Node-aggregated all-to-all(v) (the hierarchical algorithm) gathers the blocks of up to this "
    "size that go to another node into one message per node pair; larger blocks go straight to "
    "their rank, all at once. On the development machine (all-to-all, 2 emulated hosts x 2 "
    "ranks) aggregation was about 2-3x faster for blocks of 1-4 KiB, level at 16 KiB and "
    "1.2-2.7x slower from 64 KiB. 0 sends every block straight. Must be the same on every "
    "rank."};
const Var kLLMaxBytes{
    "TRNCCL_LL_MAX_BYTES", Kind::kBytes, "64",
    "All-reduce messages, all-gather blocks per rank, reduce-scatter inputs and the bytes an "
    "all-to-all sends its peers up to this size use small-message lines (data and flag in one "
    "cache line, 56 bytes each; at most "
    "896). Past two lines the windows were faster on the development machine. 0 disables."};
const Var kStreamCopyBytes{
    "TRNCCL_STREAM_COPY_BYTES", Kind::kBytes, "8M",
    "A call whose copies into user buffers (all-gather, all-to-all, broadcast and "
    "point-to-point receives over shared memory, MoE dispatch's expert slots), counted for the "
    "whole node (this rank's "
    "bytes x its local ranks), reach this size writes them with streaming (non-temporal) "
    "stores, which skip the read-for-ownership of lines about to be overwritten and leave the "
    "caches to the shared windows. Set it near the last-level cache size: smaller calls stay "
    "cached for the reader that follows. 0 = never."};
const Var kShmDir{"TRNCCL_SHM_DIR", Kind::kString, "/dev/shm",
                  "Where shared-memory segments live; must be a tmpfs mount."};

const Var kFiProvider{"TRNCCL_FI_PROVIDER", Kind::kString, "",
                      "libfabric provider for the efa transport, e.g. 'efa', 'net' (pin it "
                      "with FI_NET_IFACE), 'tcp;ofi_rxm' (FI_TCP_IFACE) or 'shm'. Empty = efa "
                      "if present, else TCP with the provider's own RDM endpoints ('net' in "
                      "libfabric 1.16-1.17, 'tcp' without ofi_rxm later), else tcp;ofi_rxm, "
                      "else shm."};
const Var kEfaRails{"TRNCCL_EFA_RAILS", Kind::kInt, "0",
                    "Endpoints (rails) per rank that large messages are striped over. 0 = one "
                    "per NIC (domain) the provider offers; more than the NICs opens several "
                    "endpoints per NIC (how loopback exercises striping)."};

const Var kEfaRendezvousBytes{
    "TRNCCL_EFA_RNDV_BYTES", Kind::kBytes, "auto",
    "Messages over efa of at least this many bytes go by rendezvous: the sender announces its "
    "registered buffer and the receiver pulls the data with RMA reads (fi_read) straight into "
    "place, when the provider offers FI_RMA. Smaller messages are sent eagerly (tagged sends). "
    "0 = never. auto = 1M, except never over TCP providers with their own RDM endpoints (net, "
    "tcp without ofi_rxm): their reads cross the same socket as messages, so a rendezvous only "
    "adds a round trip (2-rank all-reduce over net at 4 MiB: eager took 0.6-0.8x the time). "
    "Ranks that disagree use the larger value; a rank without FI_RMA turns it off for its pairs."};

const Var kEfaMrCache{
    "TRNCCL_EFA_MR_CACHE", Kind::kString, "auto",
    "Whether the efa transport caches memory registrations of user buffers. 'auto' caches "
    "them unless the provider pins registered pages (FI_MR_LOCAL or FI_MR_ALLOCATED, as EFA "
    "does): trnccl cannot see a buffer being freed, and a cached registration of freed memory "
    "would send the NIC to the old pages. There each message registers its buffer and "
    "libfabric's own cache, which watches munmap, makes that cheap. '1' caches anyway (safe "
    "only if buffers are never freed while the communicator lives), '0' never caches."};

const Var kEfaSleep{
    "TRNCCL_EFA_SLEEP", Kind::kBool, "1",
    "1 (default) lets a rank blocked on an efa peer sleep in poll() on the completion queues' "
    "wait descriptors once TRNCCL_SPIN_TIME_US passed without progress: about 1% of a core "
    "instead of a whole one, woken 0.14-0.31 ms after the peer's data (0.09-0.16 ms yielding; "
    "wait_perf over tcp;ofi_rxm); 0 keeps such a rank yielding. Where the provider has no wait "
    "descriptor it has no effect; where its descriptor stays readable (libfabric 1.17's net "
    "provider, once peers connect) the wait naps on a timer instead (50 us doubling to 1 ms), "
    "logged at INFO."};

const Var kTopoXml{"TRNCCL_TOPO_XML", Kind::kString, "",
                   "An hwloc XML topology file to use instead of discovering this machine (as "
                   "exported by lstopo --of xml); it decides which NICs are near a rank."};
const Var kTopoFile{
    "TRNCCL_TOPO_FILE", Kind::kString, "",
    "A topology file (docs/TOPOLOGY.md: chips, NeuronLinks, NICs) to use instead of "
    "discovering the Neuron devices. First in the discovery order: file, "
    "TRNCCL_TOPO_PRESET, the driver's sysfs, none."};
const Var kTopoDumpFile{"TRNCCL_TOPO_DUMP_FILE", Kind::kString, "",
                        "Local rank 0 of each node writes the topology it discovered here, in "
                        "the TRNCCL_TOPO_FILE format (%h = host name, %p = pid)."};
const Var kTopoPreset{"TRNCCL_TOPO_PRESET", Kind::kString, "",
                      "A named machine: trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge or "
                      "trn2u.48xlarge (UltraServer: 4 nodes, 64 chips). Used when "
                      "TRNCCL_TOPO_FILE is unset; with NeuronLink emulated on machines "
                      "without Neuron devices."};
const Var kNeuronSysfs{"TRNCCL_NEURON_SYSFS", Kind::kString, "/sys/devices/virtual/neuron_device",
                       "Where the Neuron driver's sysfs tree is read (tests point it at "
                       "fixture trees)."};
const Var kNeuronDevices{"TRNCCL_NEURON_DEVICES", Kind::kString, "",
                         "Comma list of the chips the local ranks drive, in local-rank order "
                         "(e.g. '0,1,4,5'). Empty = local rank i drives chip i."};
const Var kTrafficDir{"TRNCCL_TRAFFIC_DIR", Kind::kString, "",
                      "At destroy every rank writes what it sent to and received from each peer "
                      "(messages, bytes, over which transport and chips) into a file in this "
                      "directory; `trnccl-topo --stats DIR` sums them per link. Also logged at "
                      "destroy with TRNCCL_DEBUG=INFO (subsystem TOPO)."};
const Var kFlightRecorderEntries{
    "TRNCCL_FLIGHT_RECORDER_ENTRIES", Kind::kInt, "256",
    "Calls each communicator's flight recorder keeps (the last N: call, algorithm, state, step, "
    "the peer it waits for, times). 0 = off."};
const Var kFlightRecorderDir{
    "TRNCCL_FLIGHT_RECORDER_DIR", Kind::kString, "",
    "When set, every rank writes its flight recorder into this directory when a communicator "
    "fails (timeout, a peer's failure, a mismatch, abort) and on SIGUSR2; "
    "`trnccl-inspect DIR` merges the files into a verdict. trncclCommDumpFlightRecorder "
    "writes it on demand."};
const Var kPipelineChunks{"TRNCCL_PIPELINE_CHUNKS", Kind::kInt, "0",
                          "Slices a hierarchical or torus all-reduce is cut into, so that one "
                          "slice's exchange between nodes overlaps the next slice's phase "
                          "inside the node. 0 = the planner's choice per call size: the "
                          "power of two up to 64 with the least modeled time "
                          "(trnccl-topo --plan shows it)."};
const Var kTuningFile{"TRNCCL_TUNING_FILE", Kind::kString, "",
                      "A tuning file (docs/PLANNER.md; written by trnccl-tune) whose latencies "
                      "and bandwidths replace the cost model's defaults; every rank must read "
                      "the same numbers."};
const Var kTestQuick{"TRNCCL_TEST_QUICK", Kind::kBool, "0",
                     "Test suite only: a shorter sweep (no 1 Mi-element counts; libfabric "
                     "configurations with 3 ranks only), for the sanitizer passes."};

const Var kTestWide{"TRNCCL_TEST_WIDE", Kind::kBool, "0",
                    "Test suite only: five data types (one per element size, both half "
                    "floats) and three ops instead of all, for the 8-rank, single-provider "
                    "efa and 16- and 32-rank topology configurations."};
const Var kFaultMatrixOut{"TRNCCL_FAULT_MATRIX_OUT", Kind::kString, "",
                          "Test suite only: tests/fault_matrix_test appends what every survivor "
                          "got (JSON lines) to this file; scripts/fault_matrix.sh sets it."};

const std::vector<const Var*>& all() {
  static const std::vector<const Var*> vars = {&kDebug,
                                               &kDebugSubsys,
                                               &kDebugFile,
                                               &kTimeout,
                                               &kSpinCount,
                                               &kSpinTimeUs,
                                               &kHostId,
                                               &kBootstrapAddr,
                                               &kRank,
                                               &kNranks,
                                               &kUniqueId,
                                               &kTransport,
                                               &kAlgo,
                                               &kShmChunkBytes,
                                               &kShmRingSlots,
                                               &kShmRingSlotBytes,
                                               &kOneShotMaxBytes,
                                               &kAggregateMaxBytes,
                                               &kLLMaxBytes,
                                               &kStreamCopyBytes,
                                               &kCma,
                                               &kCmaMinBytes,
                                               &kCmaMaxBytes,
                                               &kMoeDirect,
                                               &kShmDir,
                                               &kFiProvider,
                                               &kEfaRails,
                                               &kEfaRendezvousBytes,
                                               &kEfaMrCache,
                                               &kEfaSleep,
                                               &kTopoXml,
                                               &kTopoFile,
                                               &kTopoDumpFile,
                                               &kTopoPreset,
                                               &kNeuronSysfs,
                                               &kNeuronDevices,
                                               &kTrafficDir,
                                               &kFlightRecorderEntries,
                                               &kFlightRecorderDir,
                                               &kPipelineChunks,
                                               &kTuningFile,
                                               &kTestQuick,
                                               &kTestWide,
                                               &kFaultMatrixOut};
  return vars;
}

const Var* find(const std::string& name) {
  for (const Var* var : all())
    if (name == var->name) return var;
  return nullptr;
}

const char* rawValue(const Var& var) {
  return std::getenv(var.name);
}

bool isSet(const Var& var) {
  return rawValue(var) != nullptr;
}

std::string getString(const Var& var) {
  const char* value = rawValue(var);
  return value ? std::string(value) : std::string(var.defaultValue);
}

static Status badValue(const Var& var, const std::string& value, const char* expected) {
  return makeError(Code::kInvalidArgument, "%s='%s' is not %s (default %s: %s)", var.name,
                   value.c_str(), expected, var.defaultValue, var.doc);
}

Result<int64_t> getInt(const Var& var) {
  std::string value = getString(var);
  const char* text = value.c_str();
  char* end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(text, &end, 10);
  if (end == text || errno == ERANGE) return badValue(var, value, "an integer");
  int64_t scale = 1;
  if (var.kind == Kind::kBytes && *end) {
    switch (*end) {
      case 'k':
      case 'K': scale = 1LL << 10; break;
      case 'm':
      case 'M': scale = 1LL << 20; break;
      case 'g':
      case 'G': scale = 1LL << 30; break;
      default: return badValue(var, value, "a byte count (e.g. 64K, 4M)");
    }
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
    if (*end == 'b' || *end == 'B') ++end;
  }
  if (*end) return badValue(var, value, "an integer");
  return static_cast<int64_t>(parsed) * scale;
}

Result<int64_t> getIntBetween(const Var& var, int64_t minimum, int64_t maximum) {
  auto value = getInt(var);
  TRNCCL_RETURN_IF_ERROR(value.status());
  if (value.value() < minimum || value.value() > maximum)
    return makeError(Code::kInvalidArgument, "%s=%lld is outside [%lld, %lld]", var.name,
                     static_cast<long long>(value.value()), static_cast<long long>(minimum),
                     static_cast<long long>(maximum));
  return value;
}

Result<double> getSeconds(const Var& var) {
  std::string value = getString(var);
  char* end = nullptr;
  double parsed = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end || !std::isfinite(parsed) || parsed <= 0)
    return badValue(var, value, "a positive number of seconds");
  return parsed;
}

Result<bool> getBool(const Var& var) {
  std::string value = getString(var);
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off" || value.empty())
    return false;
  return badValue(var, value, "a boolean (0/1)");
}

void ScopedOverride::set(const Var& var, const char* value) {
  const char* old = rawValue(var);
  saved_.push_back({&var, old != nullptr, old ? old : ""});
  if (value)
    setenv(var.name, value, 1);
  else
    unsetenv(var.name);
}

ScopedOverride::~ScopedOverride() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->wasSet)
      setenv(it->var->name, it->value.c_str(), 1);
    else
      unsetenv(it->var->name);
  }
}

std::string describeAll() {
  std::string out;
  for (const Var* var : all()) {
    const char* current = rawValue(*var);
    std::string shown = current ? std::string(" current=") + current : "";
    out += strformat("%-26s default=%-10s%s\n    %s\n", var->name, var->defaultValue, shown.c_str(),
                     var->doc);
  }
  return out;
}

}  // namespace trnccl::env
