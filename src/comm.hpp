// The communicator: rendezvous, transports per peer, the shared segment, the planner and the
// ordered queue of operations that the progress engine advances. Every entry point is
// thread-safe; operations run in the order they were enqueued.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "collectives/planner.hpp"
#include "collectives/shapes.hpp"
#include "core/liveness.hpp"
#include "engine/operation.hpp"
#include "flight_recorder.hpp"
#include "topology/topology.hpp"
#include "transports/efa/efa_transport.hpp"
#include "transports/neuronlink/neuronlink_transport.hpp"
#include "transports/self/self_transport.hpp"
#include "transports/shm/segment.hpp"
#include "transports/shm/shm_transport.hpp"

namespace trnccl {

struct CommOptions {
  double timeoutSeconds = 300;
  std::string algorithm;  // TRNCCL_ALGO syntax
  std::string name = "comm";
  // A split's parent's ranks on this machine: they keep sharing its cores, so a child of an
  // oversubscribed communicator is oversubscribed too, however few of them it holds.
  unsigned parentRanksOnMachine = 0;
};

class Communicator {
 public:
  static Result<std::shared_ptr<Communicator>> create(int nranks, const trncclUniqueId& id,
                                                      int rank, const CommOptions& options);
  ~Communicator();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const std::string& name() const { return options_.name; }
  const CommOptions& options() const { return options_; }
  double timeoutSeconds() const { return options_.timeoutSeconds; }
  // This communicator's ranks on this machine (with a split's parent's, if more): what
  // shares its cores.
  unsigned ranksOnThisMachine() const;

  // Queues one call (a collective, or a fused group of point-to-point calls).
  Result<std::shared_ptr<Operation>> enqueue(const std::vector<CollArgs>& calls);
  // Queues one call and waits for it (the blocking C calls): no allocation per call.
  Status run(const CollArgs& call) { return run(&call, 1); }
  // Several point-to-point calls fused into one operation (a group's), the same way.
  Status run(const CollArgs* calls, size_t ncalls);
  // A call whose schedule its caller builds (the MoE engine's dispatch and combine, which
  // carry their own layout): plan runs when the operation reaches the head of the queue, like
  // an algorithm's builder. description names the call in logs and errors; buffers are the
  // caller's, pinned while the call is queued when they are trncclMemAlloc memory.
  using PlanFn = std::function<Status(ScheduleBuilder&)>;
  Result<std::shared_ptr<Operation>> enqueuePlan(CollKind kind, std::string description,
                                                 PlanFn plan,
                                                 const std::vector<const void*>& buffers = {});
  Status runPlan(CollKind kind, std::string description, PlanFn plan,
                 const std::vector<const void*>& buffers = {});
  // Progresses until op completes, fails, or (timeoutSeconds >= 0) the wait times out; a
  // timed-out wait leaves the operation queued (kInProgress is returned).
  Status wait(const std::shared_ptr<Operation>& op, double timeoutSeconds);
  // One non-blocking progress pass; true if op has finished.
  bool test(const std::shared_ptr<Operation>& op);
  // test() that also returns what the operation at the head of the queue is spinning on.
  bool test(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint);
  // Progress passes a waiter spins before it yields the core (see wait).
  int spinPasses() const { return spinCount_; }
  // Waits for every queued operation (used by destroy).
  Status flush();
  // Tells local peers this rank left on purpose (after flush, before destroy).
  void markDeparted();
  // Before destroy's endpoints close: trades a farewell with each efa peer it exchanged
  // messages with (bounded), so no peer's unread last message goes with them (comm.cpp).
  void drainNetwork();

  const topology::Topology& topology() const { return topology_; }
  // This rank's share of TRNCCL_STREAM_COPY_BYTES (0 = never): copies into user memory of at
  // least this many bytes in one call write with streaming stores.
  size_t streamingCopyBytes() const { return ctx_.streamCopyBytes; }
  // True when every peer is reached over shm (same node, no device links, no efa) and the
  // node allows single-copy reads between every pair of its ranks (init's CMA probe): peers
  // can then map each other's shm::sharedAlloc memory (the MoE engine's direct mode).
  bool everyPeerMapsMemory() const;
  // The same for the peers of this rank's node only (the others may be across the network):
  // the MoE engine's hierarchical mode then forwards rows inside the node through staging its
  // node's ranks map.
  bool everyNodePeerMapsMemory() const;
  // The cost model and tuning entries the planner (and the MoE engine's auto mode) use.
  const CostParams& costs() const { return planner_->costs(); }
  // The communicator's shape as the planner prices it (trnccl-tune inverts the model with it).
  const PlanShape& planShape() const { return planner_->shape(); }
  // What this rank sent to and received from each peer, and over which transport.
  struct PeerTrafficEntry {
    int peer;
    topology::LinkClass via;
    int myChip, peerChip;  // -1 without Neuron devices
    PeerTraffic counts;
  };
  std::vector<PeerTrafficEntry> traffic();
  // At destroy: the traffic table at INFO, and into TRNCCL_TRAFFIC_DIR when set.
  void reportTraffic();

  // Writes the flight recorder (src/flight_recorder.hpp) into dir (empty:
  // TRNCCL_FLIGHT_RECORDER_DIR). Waits at most a second for the communicator's lock: a dump
  // asked for by a signal must not hang on a thread stuck inside it.
  Status dumpFlightRecorder(const std::string& dir, const std::string& reason);

  // Any thread: fail every pending operation and tell local peers.
  void requestAbort();
  Status asyncError();

  void setLastError(const std::string& text);
  std::string lastError();

  // trncclCommRegister / trncclCommDeregister: the user promises [addr, addr + bytes) stays
  // valid until deregistered, so network transports may keep it registered (efa: on every
  // rail, used whatever TRNCCL_EFA_MR_CACHE says). Shared memory needs no registration; the
  // handle is still tracked, so that a wrong or repeated deregistration is an error.
  struct Registration {
    const void* addr = nullptr;
    size_t bytes = 0;
    efa::UserRegistration efa;
  };
  Result<Registration*> registerBuffer(const void* addr, size_t bytes);
  // Fails (kInvalidUsage) while a posted network operation still uses the buffer, and
  // (kInvalidArgument) for a handle this communicator did not give out.
  Status deregisterBuffer(Registration* registration);

 private:
  Communicator() = default;
  // init's steps, in order (comm_init.cpp).
  struct Settings;
  Status init(int nranks, const trncclUniqueId& id, int rank, const CommOptions& options);
  Status readSettings(const CommOptions& options, Settings* settings);
  Status joinJob(const trncclUniqueId& id, Settings* settings);  // fills settings->allowed
  Status attachSegment(const trncclUniqueId& id, const Settings& settings,
                       const Deadline& deadline);
  Status setupCma(const Deadline& deadline);
  std::string cmaBandNote() const;  // the node's CMA band and why, for the log
  Status setupFlightRecorder(const trncclUniqueId& id);
  Status localPeersAlive(const char* when) const;  // during init's waits for local ranks
  Status chooseTransports(const topology::TransportSet& allowed);  // comm_topology.cpp
  void buildPlanner(const Settings& settings);
  void adaptToCores();
  bool oversubscribed() const;  // more ranks on this machine than it has cores
  // This communicator's own ranks that share this machine's kernel (this one included).
  int ranksSharingThisMachine() const;
  void logInit() const;
  Status dumpTopology() const;  // comm_topology.cpp
  Status push(const std::shared_ptr<Operation>& op);
  Status pushLocked(const std::shared_ptr<Operation>& op);
  void progressLocked();
  Status healthLocked(Operation& op);
  // The wait policy's pieces (comm_wait.cpp).
  bool testWithHealthCheck(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint);
  bool sleepOnce(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint, int64_t napNs);
  // The same for a wait on an efa peer: sleeps on the completion queues' wait descriptors.
  bool sleepOnNetwork(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint,
                      int64_t napNs);
  void failLocked(const Status& status);
  // The flight recorder's view of the running call, then its file (when a directory is set).
  void noteRunningLocked();
  Status dumpFlightLocked(const std::string& dir, const std::string& reason);
  std::string describePeer(int rank) const;
  std::string abortSentence() const;  // what peers read after trncclCommAbort

  int rank_ = 0;
  int nranks_ = 0;
  CommOptions options_;
  int spinCount_ = 2000;
  int watchPauses_ = 64;  // pauses per pass while watching the awaited word (see wait)
  // A waiter sleeps once nothing moved for this long (TRNCCL_SPIN_TIME_US; -1 = never).
  int64_t sleepAfterNs_ = 1'000'000;
  // Some efa peer runs on this machine (emulated nodes, loopback): a spinning wait yields
  // every 16 passes so that such a peer, woken onto this core by our send, gets to run.
  bool efaPeerOnThisMachine_ = false;
  // Every local rank can read every other's memory with CMA, and the segment's creator asked
  // for it (setupCma); cmaNote_ says why not, for the log.
  bool cmaReadable_ = false;
  std::string cmaNote_;
  std::vector<bootstrap::PeerInfo> peers_;
  topology::Topology topology_;
  std::vector<topology::LinkClass> classOfPeer_;  // what carries this rank's traffic to each
  std::vector<int> localOfRank_;
  shm::Segment segment_;
  std::unique_ptr<shm::ShmTransport> shm_;
  std::unique_ptr<SelfTransport> self_;
  std::unique_ptr<efa::EfaTransport> efa_;  // only when some peer is reached through libfabric
  std::unique_ptr<neuronlink::NeuronLinkTransport> neuronlink_;  // only with linked local peers
  WindowState windows_;
  ExecContext ctx_;
  shm::PeerRegionCache peerRegions_;  // local peers' trncclMemAlloc buffers (ctx_ points here)
  Shapes shapes_;                     // the planner's view points here
  std::unique_ptr<Planner> planner_;
  ProcessWatch watch_;

  std::mutex mutex_;
  std::deque<std::shared_ptr<Operation>> queue_;
  std::vector<std::unique_ptr<Registration>> registrations_;
  Status failure_;  // sticky: once set, the communicator only reports it
  int64_t lastLivenessCheckNs_ = 0;
  // When this rank first saw the peer it waits for gone, departed from the node segment or
  // exited (0 = not yet); see healthLocked.
  int64_t departedSeenNs_ = 0;
  // drainNetwork: how long a destroy waits for peers' farewells, and where they land.
  static constexpr double kFarewellSeconds = 1.0;
  std::vector<char> farewellBytes_;
  static constexpr int64_t kDepartedGraceNs = 2'000'000'000;
  uint64_t blockedPasses_ = 0;
  std::atomic<bool> abortRequested_{false};

  std::mutex errorMutex_;
  std::string lastError_;

  FlightRecorder flight_;  // under mutex_
  std::string flightDir_;  // TRNCCL_FLIGHT_RECORDER_DIR: where failures dump it
  std::string commKey_;    // the same on every rank of this communicator (from its id)
};

}  // namespace trnccl
