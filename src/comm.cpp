#include "comm.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "collectives/shapes.hpp"
#include "core/dtype.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"
#include "core/text_file.hpp"

namespace trnccl {
namespace {

std::string describeCall(const std::vector<CollArgs>& calls) {
  const CollArgs& a = calls.front();
  if (a.kind == CollKind::kSendRecv) {
    std::string text;
    for (const CollArgs& c : calls) {
      text += strformat("%s%s(count=%zu, %s, peer=%d)", text.empty() ? "" : "+",
                        c.isSend ? "Send" : "Recv", c.count, dtypeName(c.dtype), c.peer);
    }
    return text;
  }
  std::string text = strformat("%s(count=%zu, %s", collName(a.kind), a.count, dtypeName(a.dtype));
  if (a.kind == CollKind::kAllReduce || a.kind == CollKind::kReduce ||
      a.kind == CollKind::kReduceScatter)
    text += strformat(", %s", redOpName(a.op));
  if (a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce)
    text += strformat(", root=%d", a.root);
  return text + ")";
}

// A queued call (or a fused group of point-to-point calls) and how to plan it. Queued calls
// own a copy of their arguments; a blocking call borrows the caller's, which outlive it.
class CallOperation final : public Operation {
 public:
  CallOperation(std::vector<CollArgs> calls, const Planner* planner, Algorithm algo)
      : Operation(calls.front().kind),
        owned_(std::move(calls)),
        calls_(owned_.data()),
        ncalls_(owned_.size()),
        planner_(planner),
        algo_(algo) {}
  // Borrows the calls, which outlive the operation (run() waits for it).
  CallOperation(const CollArgs* calls, size_t ncalls, const Planner* planner, Algorithm algo)
      : Operation(calls[0].kind), calls_(calls), ncalls_(ncalls), planner_(planner), algo_(algo) {}

  std::string description() const override {
    return describeCall(std::vector<CollArgs>(calls_, calls_ + ncalls_));
  }

 private:
  Status plan(ScheduleBuilder& b) override {
    if (ncalls_ == 1) return planner_->build(b, calls_[0], algo_);
    ConcurrentSteps together(b);  // a group of point-to-point calls progresses as one
    for (size_t i = 0; i < ncalls_; ++i)
      TRNCCL_RETURN_IF_ERROR(planner_->build(b, calls_[i], algo_));
    return Status::ok();
  }

  std::vector<CollArgs> owned_;
  const CollArgs* calls_;
  size_t ncalls_;
  const Planner* planner_;
  Algorithm algo_;
};

inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

Result<size_t> bytesSetting(const env::Var& var, int64_t minimum, int64_t maximum) {
  auto value = env::getInt(var);
  TRNCCL_RETURN_IF_ERROR(value.status());
  if (value.value() < minimum || value.value() > maximum)
    return makeError(Code::kInvalidArgument, "%s=%lld is outside [%lld, %lld]", var.name,
                     static_cast<long long>(value.value()), static_cast<long long>(minimum),
                     static_cast<long long>(maximum));
  return static_cast<size_t>(value.value());
}

}  // namespace

Result<std::shared_ptr<Communicator>> Communicator::create(int nranks, const trncclUniqueId& id,
                                                           int rank, const CommOptions& options) {
  std::shared_ptr<Communicator> comm(new Communicator());
  TRNCCL_RETURN_IF_ERROR(comm->init(nranks, id, rank, options));
  return comm;
}

Communicator::~Communicator() = default;

Status Communicator::init(int nranks, const trncclUniqueId& id, int rank,
                          const CommOptions& options) {
  rank_ = rank;
  nranks_ = nranks;
  options_ = options;
  auto spin = env::getInt(env::kSpinCount);
  TRNCCL_RETURN_IF_ERROR(spin.status());
  spinCount_ = static_cast<int>(std::max<int64_t>(0, spin.value()));
  auto windowBytes = bytesSetting(env::kShmChunkBytes, 4096, 1LL << 30);
  TRNCCL_RETURN_IF_ERROR(windowBytes.status());
  auto ringSlots = bytesSetting(env::kShmRingSlots, 2, 1024);
  TRNCCL_RETURN_IF_ERROR(ringSlots.status());
  auto ringSlotBytes = bytesSetting(env::kShmRingSlotBytes, 4096, 64LL << 20);
  TRNCCL_RETURN_IF_ERROR(ringSlotBytes.status());
  auto oneShot = bytesSetting(env::kOneShotMaxBytes, 0, 1LL << 30);
  TRNCCL_RETURN_IF_ERROR(oneShot.status());
  auto llMax = bytesSetting(env::kLLMaxBytes, 0, shm::kLLMaxBytes);
  TRNCCL_RETURN_IF_ERROR(llMax.status());
  auto streamCopy = bytesSetting(env::kStreamCopyBytes, 0, INT64_MAX);
  TRNCCL_RETURN_IF_ERROR(streamCopy.status());
  auto chunksSetting = bytesSetting(env::kPipelineChunks, 0, 64);
  TRNCCL_RETURN_IF_ERROR(chunksSetting.status());
  auto parsedAlgo = parseAlgoOverrides(options.algorithm.empty() ? env::getString(env::kAlgo)
                                                                 : options.algorithm);
  // (Every rank must plan alike: the segment's creator checks TRNCCL_ALGO agrees, below.)
  TRNCCL_RETURN_IF_ERROR(parsedAlgo.status());

  topology::HostIdentity host = topology::localHostIdentity();
  bootstrap::PeerInfo me;
  me.hostHash = host.hash;
  me.machineHash = host.machineHash;
  me.rank = rank;
  me.pid = getpid();
  std::snprintf(me.hostName, sizeof(me.hostName), "%s", host.name.c_str());
  std::snprintf(me.hostId, sizeof(me.hostId), "%s", host.id.c_str());
  Deadline deadline = Deadline::after(options.timeoutSeconds);
  auto joined = bootstrap::rendezvous(id, nranks, rank, me, options.timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(joined.status());
  peers_ = std::move(joined.value().table);
  bootstrap::Session session = std::move(joined.value().session);

  std::vector<uint64_t> hashes;
  for (const auto& p : peers_) hashes.push_back(p.hostHash);
  topology::JobLayout layout = topology::groupByHost(hashes);
  auto usable = topology::parseTransportList(env::getString(env::kTransport));
  TRNCCL_RETURN_IF_ERROR(usable.status());
  const topology::TransportSet allowed = usable.value();
  // The device graph every rank discovers for itself; which chip it drives travels in the
  // exchange below, with the graph's hash (all ranks must have discovered the same one).
  auto discovered = topology::discoverDevices(!env::getString(env::kTopoDumpFile).empty());
  TRNCCL_RETURN_IF_ERROR(discovered.status());
  const int myNode = layout.nodeOfRank[rank];
  const int myLocal = layout.localRank(rank);
  auto myChip = topology::chipOfLocalRank(discovered.value(),
                                          myNode % std::max(1, discovered.value().graph.nodes),
                                          myLocal, layout.localSize(rank), host.name);
  TRNCCL_RETURN_IF_ERROR(myChip.status());
  // NICs are left out of the comparison: hosts of one job may name their interfaces apart.
  topology::DeviceGraph compared = discovered.value().graph;
  compared.nics.clear();
  const uint64_t graphHash = std::hash<std::string>{}(topology::toText(compared));
  // Libfabric is needed for ranks on other nodes, and (when TRNCCL_TRANSPORT leaves out shm)
  // for ranks of this node that NeuronLink may not reach; which exactly is known once the
  // chips are, after the exchange, so this errs towards opening it.
  std::vector<char> viaEfa(nranks, 0);
  for (int r = 0; r < nranks; ++r) {
    if (r == rank) continue;
    bool sameNode = layout.nodeOfRank[r] == myNode;
    if (sameNode && allowed.shm) continue;
    if (!allowed.efa) {
      if (sameNode && allowed.neuronlink) continue;  // checked against the links below
      return makeError(Code::kInvalidUsage,
                       "TRNCCL_TRANSPORT='%s' leaves no transport to rank %d (%s node '%s'); "
                       "allow shm for ranks of one node and efa between nodes",
                       env::getString(env::kTransport).c_str(), r, sameNode ? "same" : "other",
                       peers_[r].hostId);
    }
    viaEfa[r] = 1;
  }
  const bool needEfa = std::count(viaEfa.begin(), viaEfa.end(), 1) > 0;
  if (needEfa) {
    auto efaOptions = efa::EfaOptions::fromEnvironment();
    TRNCCL_RETURN_IF_ERROR(efaOptions.status());
    auto opened = efa::EfaTransport::open(rank, nranks, efaOptions.value());
    TRNCCL_RETURN_IF_ERROR(opened.status());
    efa_ = std::move(opened.value());
  }
  // Second bootstrap round: the network addresses, and the settings every rank must share
  // (ranks of other nodes cannot compare them through the node segment).
  std::string algoText = options.algorithm.empty() ? env::getString(env::kAlgo) : options.algorithm;
  const std::string transportText = env::getString(env::kTransport);
  const uint64_t algoHash = std::hash<std::string>{}(algoText);
  const uint64_t transportHash = std::hash<std::string>{}(transportText);
  std::string blob(reinterpret_cast<const char*>(&algoHash), sizeof(algoHash));
  blob.append(reinterpret_cast<const char*>(&transportHash), sizeof(transportHash));
  blob.append(reinterpret_cast<const char*>(&graphHash), sizeof(graphHash));
  const int64_t chipWord = myChip.value();
  blob.append(reinterpret_cast<const char*>(&chipWord), sizeof(chipWord));
  if (efa_) blob += efa_->addressBlob();
  // The full timeout: the root reports missing ranks at 0.9 of it, before anyone gives up.
  auto blobs = session.exchange(blob, options.timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(blobs.status());
  if (blobs.value().size() != static_cast<size_t>(nranks))
    return makeError(Code::kRemoteError, "the bootstrap exchange returned %zu entries for %d ranks",
                     blobs.value().size(), nranks);
  std::vector<std::string> efaAddresses(nranks);
  constexpr size_t kSettingsBytes = 4 * sizeof(uint64_t);
  std::vector<int> chipOfRank(nranks, -1);
  for (int r = 0; r < nranks; ++r) {
    const std::string& theirs = blobs.value()[r];
    uint64_t theirAlgo = 0, theirTransport = 0;
    if (theirs.size() < kSettingsBytes)
      return makeError(Code::kRemoteError, "rank %d sent a malformed bootstrap exchange entry", r);
    std::memcpy(&theirAlgo, theirs.data(), 8);
    std::memcpy(&theirTransport, theirs.data() + 8, 8);
    if (theirAlgo != algoHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d were started with different TRNCCL_ALGO settings "
                       "(this rank: '%s'); every rank must plan alike",
                       rank, r, algoText.c_str());
    if (theirTransport != transportHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d were started with different TRNCCL_TRANSPORT "
                       "settings (this rank: '%s'); every rank must choose transports alike",
                       rank, r, transportText.c_str());
    uint64_t theirGraph = 0;
    int64_t theirChip = -1;
    std::memcpy(&theirGraph, theirs.data() + 16, 8);
    std::memcpy(&theirChip, theirs.data() + 24, 8);
    if (theirGraph != graphHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d discovered different Neuron topologies (this rank: "
                       "%s, %s); every rank must see the same one (set the same "
                       "TRNCCL_TOPO_FILE or TRNCCL_TOPO_PRESET everywhere)",
                       rank, r, discovered.value().source.c_str(),
                       discovered.value().graph.shape().c_str());
    chipOfRank[r] = static_cast<int>(theirChip);
    if (viaEfa[r]) {
      efaAddresses[r] = theirs.substr(kSettingsBytes);
      if (efaAddresses[r].empty())
        return makeError(Code::kInvalidUsage,
                         "rank %d reaches rank %d over efa, but rank %d opened no efa endpoint "
                         "(do the two agree on their host ids, TRNCCL_HOSTID?)",
                         rank, r, r);
    }
  }
  if (efa_) TRNCCL_RETURN_IF_ERROR(efa_->connect(efaAddresses));

  auto built = topology::Topology::build(std::move(layout), std::move(discovered.value()),
                                         std::move(chipOfRank));
  TRNCCL_RETURN_IF_ERROR(built.status());
  topology_ = std::move(built.value());
  const auto& localRanks = topology_.ranksOfNode(myNode);
  localOfRank_ = topology_.localIndexFrom(rank);
  const int localRank = myLocal;

  shm::SegmentParams params;
  params.localSize = static_cast<uint32_t>(localRanks.size());
  params.windowBytes = (windowBytes.value() + 4095) / 4096 * 4096;
  params.ringSlots = static_cast<uint32_t>(ringSlots.value());
  params.ringSlotBytes = (ringSlotBytes.value() + 63) / 64 * 64;
  params.oneShotMaxBytes = oneShot.value();
  params.llMaxBytes = llMax.value();
  params.algorithmHash = algoHash;
  bootstrap::UniqueIdData idData = bootstrap::parseUniqueId(id).value();
  std::string segmentName =
      strformat("trnccl-%016llx-%016llx", static_cast<unsigned long long>(idData.nonce),
                static_cast<unsigned long long>(peers_[rank].hostHash));
  // Watch every rank on this machine, emulated nodes (TRNCCL_HOSTID) included: a peer that
  // dies is then reported at once instead of at the timeout.
  for (int r = 0; r < nranks; ++r)
    if (r != rank && peers_[r].machineHash == peers_[rank].machineHash)
      watch_.watch(r, peers_[r].pid);
  auto localPeersAlive = [&]() -> Status {
    for (int r : localRanks)
      if (r != rank && watch_.isDead(r))
        return makeError(Code::kRemoteError,
                         "%s exited during initialisation, before mapping "
                         "the shared-memory segment",
                         describePeer(r).c_str());
    return Status::ok();
  };
  TRNCCL_RETURN_IF_ERROR(segment_.attach(env::getString(env::kShmDir), segmentName, localRank,
                                         params, deadline, localPeersAlive));

  shm_ = std::make_unique<shm::ShmTransport>(segment_, rank, localOfRank_);
  self_ = std::make_unique<SelfTransport>(rank);
  ctx_.rank = rank;
  ctx_.localRank = localRank;
  ctx_.globalOfLocal = localRanks;
  ctx_.segment = &segment_;
  ctx_.windows = &windows_;
  ctx_.streamCopyBytes = streamCopy.value();
  TRNCCL_RETURN_IF_ERROR(chooseTransports(allowed));

  CommView view;
  view.rank = rank;
  view.nranks = nranks;
  // Direct algorithms read peers' windows: every peer on this node's segment, none on efa.
  view.allLocal = std::none_of(classOfPeer_.begin(), classOfPeer_.end(),
                               [](auto c) { return c == topology::LinkClass::kEfa; });
  view.deviceLinks = neuronlink_ != nullptr;
  view.pipelineChunks = static_cast<int>(chunksSetting.value());
  view.ring = RingGroup::of(topology_.ringOrder(), rank);
  view.topology = &topology_;
  shapes_ = buildShapes(topology_, rank);
  view.shapes = &shapes_;
  view.segment = &segment_;
  view.windowBytes = segment_.params().windowBytes;  // the creator's values bind everyone
  view.oneShotMaxBytes = segment_.params().oneShotMaxBytes;
  view.llMaxBytes = segment_.params().llMaxBytes;
  planner_ = std::make_unique<Planner>(view, parsedAlgo.value());

  // Oversubscription is about this machine's cores, whatever node identities say (emulated
  // nodes share the cores too, and so do libfabric's progress threads).
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  unsigned onThisMachine = 0;
  for (const auto& p : peers_) onThisMachine += p.machineHash == peers_[rank].machineHash;
  // Oversubscribed, the peer a rank waits for is often not running: spin briefly (a few
  // pauses per pass, not a long watch of the word) and give the core away soon. With efa,
  // at once: a pass reads the completion queues up to 8 times (poll() calls with tcp), so 50
  // passes kept the core for hundreds of microseconds (4 ranks on 2 cores, 8 B all-reduce
  // over tcp;ofi_rxm: 678 us per call at 50, 116 us at 0).
  if (onThisMachine > cores) {
    spinCount_ = std::min(spinCount_, efa_ ? 0 : 50);
    watchPauses_ = 1;
    // And the pass reads the queues once: 4 ranks on 2 cores, 8 B all-reduce over tcp;ofi_rxm
    // 133-166 -> 77-86 us against 8 reads.
    if (efa_) efa_->setReadsPerPass(1);
  }

  auto peersOver = [&](topology::LinkClass c) {
    return static_cast<int>(std::count(classOfPeer_.begin(), classOfPeer_.end(), c));
  };
  TRNCCL_INFO(log::kInit,
              "%s rank %d/%d: %d node(s), local rank %d of %zu, pid %d on %s; transports: "
              "self for itself, neuronlink for %d peer(s), shm for %d, efa for %d; shm window "
              "%zu B x %d slots, rings %u x %zu B; reduction kernels %s; spin %d; timeout %.1f s",
              options_.name.c_str(), rank, nranks, topology_.nnodes(), localRank, localRanks.size(),
              me.pid, host.name.c_str(), peersOver(topology::LinkClass::kNeuronLink),
              peersOver(topology::LinkClass::kShm), peersOver(topology::LinkClass::kEfa),
              view.windowBytes, shm::kWindowSlots, segment_.params().ringSlots,
              static_cast<size_t>(segment_.params().ringSlotBytes), reduceKernelIsa(), spinCount_,
              options_.timeoutSeconds);
  if (localRank == 0)
    TRNCCL_INFO(log::kTopo, "%s rank %d: topology from %s (%s): %s; this rank drives chip %d",
                options_.name.c_str(), rank, discoveryKindName(topology_.discovery().kind),
                topology_.discovery().source.c_str(), topology_.devices().shape().c_str(),
                topology_.chipOf(rank));
  if (localRank == 0) TRNCCL_RETURN_IF_ERROR(dumpTopology());
  if (efa_)
    TRNCCL_INFO(log::kNet, "%s rank %d efa: %s", options_.name.c_str(), rank,
                efa_->describe().c_str());
  TRNCCL_INFO(log::kInit, "%s rank %d plan: %s", options_.name.c_str(), rank,
              planner_->planTable().c_str());
  return Status::ok();
}

// Per peer, in order: itself, NeuronLink (same node, linked chips), shm (same node), efa.
Status Communicator::chooseTransports(const topology::TransportSet& allowed) {
  classOfPeer_.assign(nranks_, topology::LinkClass::kSelf);
  ctx_.transportOfPeer.assign(nranks_, nullptr);
  ctx_.traffic.assign(nranks_, PeerTraffic{});
  for (int r = 0; r < nranks_; ++r) {
    auto chosen = topology_.classBetween(rank_, r, allowed);
    TRNCCL_RETURN_IF_ERROR(chosen.status());
    classOfPeer_[r] = chosen.value();
    switch (chosen.value()) {
      case topology::LinkClass::kSelf: ctx_.transportOfPeer[r] = self_.get(); break;
      case topology::LinkClass::kNeuronLink:
        if (!neuronlink_)
          neuronlink_ = std::make_unique<neuronlink::NeuronLinkTransport>(*shm_, rank_, topology_);
        ctx_.transportOfPeer[r] = neuronlink_.get();
        break;
      case topology::LinkClass::kShm: ctx_.transportOfPeer[r] = shm_.get(); break;
      case topology::LinkClass::kEfa:
        if (!efa_)
          return makeError(Code::kInternalError,
                           "rank %d reaches rank %d over efa, which it did "
                           "not open",
                           rank_, r);
        ctx_.transportOfPeer[r] = efa_.get();
        break;
    }
  }
  return Status::ok();
}

// TRNCCL_TOPO_DUMP_FILE: the discovered graph in the TRNCCL_TOPO_FILE format.
Status Communicator::dumpTopology() const {
  std::string path = env::getString(env::kTopoDumpFile);
  if (path.empty()) return Status::ok();
  for (size_t at; (at = path.find("%h")) != std::string::npos;)
    path.replace(at, 2, peers_[rank_].hostName);
  for (size_t at; (at = path.find("%p")) != std::string::npos;)
    path.replace(at, 2, std::to_string(peers_[rank_].pid));
  const std::string text = "# discovered from " + topology_.discovery().source + "\n" +
                           topology::toText(topology_.devices());
  TRNCCL_RETURN_IF_ERROR(writeTextFile(path, text).withContext("TRNCCL_TOPO_DUMP_FILE: "));
  TRNCCL_INFO(log::kTopo, "topology written to %s", path.c_str());
  return Status::ok();
}

std::vector<Communicator::PeerTrafficEntry> Communicator::traffic() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PeerTrafficEntry> entries;
  for (int r = 0; r < nranks_; ++r)
    entries.push_back(
        {r, classOfPeer_[r], topology_.chipOf(rank_), topology_.chipOf(r), ctx_.traffic[r]});
  return entries;
}

void Communicator::reportTraffic() {
  const auto table = traffic();
  const std::string dir = env::getString(env::kTrafficDir);
  const bool info = log::enabled(log::Level::kInfo, log::kTopo);
  if (dir.empty() && !info) return;
  std::string text =
      strformat("# trnccl traffic 1\nrank %d nranks %d node %d chip %d comm %s\n", rank_, nranks_,
                topology_.nodeOf(rank_), topology_.chipOf(rank_), options_.name.c_str());
  for (const PeerTrafficEntry& e : table) {
    if (e.counts.sentMessages == 0 && e.counts.recvMessages == 0) continue;
    text += strformat("peer %d via %s chip %d sent %llu %llu recv %llu %llu\n", e.peer,
                      topology::linkClassName(e.via), e.peerChip,
                      static_cast<unsigned long long>(e.counts.sentMessages),
                      static_cast<unsigned long long>(e.counts.sentBytes),
                      static_cast<unsigned long long>(e.counts.recvMessages),
                      static_cast<unsigned long long>(e.counts.recvBytes));
  }
  if (info) TRNCCL_INFO(log::kTopo, "traffic at destroy (messages, bytes):\n%s", text.c_str());
  if (dir.empty()) return;
  static std::atomic<int> serial{0};
  const std::string path =
      strformat("%s/traffic.%d.%d.rank%d.txt", dir.c_str(), peers_[rank_].pid, serial++, rank_);
  if (Status written = writeTextFile(path, text); !written.isOk())
    TRNCCL_WARN(log::kTopo, "TRNCCL_TRAFFIC_DIR: %s", written.message().c_str());
}

Result<std::shared_ptr<Operation>> Communicator::enqueue(const std::vector<CollArgs>& calls) {
  const CollArgs& first = calls.front();
  auto algo = planner_->choose(first.kind, first.count * dtypeSize(first.dtype));
  TRNCCL_RETURN_IF_ERROR(algo.status());
  auto op = std::make_shared<CallOperation>(calls, planner_.get(), algo.value());
  TRNCCL_RETURN_IF_ERROR(push(op));
  return std::shared_ptr<Operation>(std::move(op));
}

Status Communicator::run(const CollArgs* calls, size_t ncalls) {
  const CollArgs& first = calls[0];
  auto algo = planner_->choose(first.kind, first.count * dtypeSize(first.dtype));
  TRNCCL_RETURN_IF_ERROR(algo.status());
  // The operation lives on this stack: the queue holds a non-owning pointer, and this call
  // returns only once the operation has left the queue (finished, failed or aborted).
  CallOperation op(calls, ncalls, planner_.get(), algo.value());
  std::shared_ptr<Operation> handle(std::shared_ptr<Operation>(), &op);
  {
    // Queued and given its first progress pass under one lock: a small call on an idle
    // communicator often completes here, without a second round trip through the mutex.
    std::lock_guard<std::mutex> lock(mutex_);
    TRNCCL_RETURN_IF_ERROR(pushLocked(handle));
    if (queue_.size() == 1) progressLocked();
    if (op.finished.load(std::memory_order_acquire)) return std::move(op.result);
  }
  return wait(handle, -1);
}

Status Communicator::push(const std::shared_ptr<Operation>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  return pushLocked(op);
}

Status Communicator::pushLocked(const std::shared_ptr<Operation>& op) {
  if (!failure_.isOk())
    return Status(failure_.code() == Code::kAborted ? Code::kAborted : Code::kInvalidUsage,
                  strformat("rank %d %s on %s: the communicator is unusable after an earlier "
                            "error (%s); destroy or abort it",
                            rank_, op->description().c_str(), options_.name.c_str(),
                            failure_.message().c_str()));
  TRNCCL_TRACE(log::kColl, "%s rank %d enqueue %s", options_.name.c_str(), rank_,
               op->description().c_str());
  queue_.push_back(op);
  return Status::ok();
}

std::string Communicator::describePeer(int rank) const {
  if (rank < 0 || rank >= nranks_) return "an unknown rank";
  return strformat("rank %d (pid %d on %s)", rank, peers_[rank].pid, peers_[rank].hostName);
}

Status Communicator::healthLocked(Operation& op) {
  if (efa_) efa_->progressIdle();  // the head operation may be waiting on shm only
  if (abortRequested_.load(std::memory_order_acquire))
    return makeError(Code::kAborted,
                     "trncclCommAbort was called on this communicator while "
                     "the operation was in progress");
  if (segment_.aborted()) {
    int who = segment_.abortRank();
    return makeError(who == rank_ ? Code::kAborted : Code::kRemoteError,
                     "stopped because rank %d failed: %s", who, segment_.abortReason().c_str());
  }
  int64_t now = nowNs();
  int peer = op.blockedOnPeer();
  // Only the peer this rank waits for matters: a peer that finished and exited is fine, and a
  // crash elsewhere reaches us through the segment's abort flag raised by its neighbours.
  if (peer >= 0 && peer != rank_ && now - lastLivenessCheckNs_ > 5'000'000) {
    lastLivenessCheckNs_ = now;
    int local = localOfRank_[peer];
    bool departed =
        local >= 0 && segment_.rankArea(local)->departed.load(std::memory_order_acquire);
    bool exited = watch_.isDead(peer);
    // A peer can write what this rank waits for, finish and leave (even exit) between this
    // rank's last progress pass and this check: this rank may have been descheduled there.
    // Keep progressing for a grace period before calling the peer gone. Over shm the peer's
    // writes are already in the segment, so the grace lasts until the next check (at least
    // 5 ms and 63 passes later). Over the network its last message can still be on its way
    // (in socket buffers, or not yet read by the provider): a provider that completes a send
    // once the socket holds its bytes (net) lets the sender leave, and even exit, before this
    // rank has read them, and they stay readable; that grace is kDepartedGraceNs.
    bool inGrace = false;
    if (departed || exited) {
      if (departedSeenNs_ == 0) departedSeenNs_ = now;
      const int64_t grace = ctx_.transportOfPeer[peer] == efa_.get() ? kDepartedGraceNs : 0;
      inGrace = now - departedSeenNs_ <= grace;  // with no grace, only the first sighting
    }
    if (departed && !inGrace)
      return makeError(Code::kInvalidUsage,
                       "%s destroyed its communicator while this rank was still %s it: the "
                       "ranks made different numbers of calls",
                       describePeer(peer).c_str(), op.blockedOn());
    TRNCCL_RETURN_IF_ERROR(op.probeMismatch(ctx_, local));
    if (exited && !inGrace)
      return makeError(Code::kRemoteError,
                       "%s exited while this rank was %s it; the job cannot continue (look at "
                       "rank %d's output for why it died)",
                       describePeer(peer).c_str(), op.blockedOn(), peer);
  }
  if (now - op.blockedSinceNs(now) > static_cast<int64_t>(options_.timeoutSeconds * 1e9))
    return makeError(Code::kTimeout,
                     "not complete after %.1f s: still %s %s. Raise TRNCCL_TIMEOUT (or the "
                     "config's timeoutMs) if the peer is just slow; otherwise it is stuck or "
                     "made a different call",
                     options_.timeoutSeconds, op.blockedOn(), describePeer(peer).c_str());
  return Status::ok();
}

void Communicator::failLocked(const Status& status) {
  if (failure_.isOk()) {
    failure_ = status;
    if (efa_) efa_->shutdown();  // nothing posted may land in user buffers after this
    if (!segment_.aborted()) segment_.raiseAbort(status.code(), rank_, status.message());
    // Logged as a warning when a caller receives it (api/errors.cpp); INFO here has the time.
    TRNCCL_INFO(log::kColl, "communicator failed: %s", status.message().c_str());
    setLastError(status.message());
  }
  bool first = true;
  for (auto& op : queue_) {
    op->result = first ? status
                       : Status(status.code(),
                                "rank " + std::to_string(rank_) + " " + op->description() +
                                    ": not run, an earlier operation failed: " + status.message());
    op->finished.store(true, std::memory_order_release);
    first = false;
  }
  queue_.clear();
}

void Communicator::progressLocked() {
  while (!queue_.empty()) {
    Operation* op = queue_.front().get();  // no reference count traffic on the hot path
    Status status;
    if (!failure_.isOk()) {
      status = failure_;
    } else {
      auto done = op->progress(ctx_);
      status = done.status();
      if (status.isOk() && done.value()) {
        op->result = Status::ok();
        op->finished.store(true, std::memory_order_release);
        queue_.pop_front();
        departedSeenNs_ = 0;
        continue;
      }
      // Waiting on peers. Health checks read the clock and poll pidfds: every 64th pass is
      // often enough to notice failures within microseconds and keeps the spin loop tight.
      if (status.isOk() && efa_) status = efa_->endPass();
      if (status.isOk() && (++blockedPasses_ & 63) == 0) status = healthLocked(*op);
      if (status.isOk()) return;
      status = status.withContext(
          strformat("rank %d %s on %s: ", rank_, op->description().c_str(), options_.name.c_str()));
    }
    failLocked(status);
    return;
  }
}

bool Communicator::test(const std::shared_ptr<Operation>& op) {
  Operation::SpinHint unused;
  return test(op, &unused);
}

bool Communicator::test(const std::shared_ptr<Operation>& op, Operation::SpinHint* hint) {
  if (op->finished.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  progressLocked();
  *hint = queue_.empty() ? Operation::SpinHint{} : queue_.front()->spinHint();
  return op->finished.load(std::memory_order_acquire);
}

Status Communicator::wait(const std::shared_ptr<Operation>& op, double timeoutSeconds) {
  Operation::SpinHint hint;
  if (test(op, &hint)) return op->result;  // the common case for small calls: no clock read
  // The clock is read only once a wait outlasts its first 64 polls: most small calls finish
  // before that, and a clock read costs as much as the rest of their software path.
  Deadline deadline;
  bool deadlineSet = timeoutSeconds < 0;
  int polls = 0;
  while (!test(op, &hint)) {
    // Watch the one word the head operation waits for (it lives in the node segment, which
    // outlives every operation): the progress pass reruns as soon as a peer writes it, and
    // after at most 64 pauses, so that health checks and other waiters still get their turn.
    // TRNCCL_SPIN_COUNT counts progress passes, however long each watches its word.
    if (++polls > spinCount_) {
      sched_yield();
    } else if (hint.word) {
      for (int i = 0; i < watchPauses_ && hint.word->load(std::memory_order_acquire) == hint.seen;
           ++i)
        cpuRelax();
    } else {
      cpuRelax();
    }
    if ((polls & 63) != 0 || timeoutSeconds < 0) continue;
    if (!deadlineSet) {
      deadline = Deadline::after(timeoutSeconds);
      deadlineSet = true;
    } else if (deadline.expired())
      return makeError(Code::kInProgress,
                       "rank %d %s on %s: still in progress after the "
                       "wait's %.3f s timeout",
                       rank_, op->description().c_str(), options_.name.c_str(), timeoutSeconds);
  }
  return op->result;
}

Status Communicator::flush() {
  std::shared_ptr<Operation> last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return Status::ok();
    last = queue_.back();
  }
  return wait(last, -1);
}

// Every operation has finished. Each efa peer this rank exchanged messages with gets one byte
// (the next message of the pair), and this rank waits for that peer's byte: a peer sends it
// only once its own operations finished, so by then it has consumed everything this rank sent
// it, and the endpoints may close. Without it a closing endpoint could take a peer's unread
// last message with it: over net a send completes once the socket holds the bytes (a 4-rank
// efa-net broadcast lost its last 1 MiB message to a destroyed sender in about 1 of 13 runs
// of that suite). Bounded: a peer that left the node segment or exited is not waited for, and
// one that destroys later (it had other work first) or never at most kFarewellSeconds.
void Communicator::drainNetwork() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!efa_ || !failure_.isOk()) return;
  const Deadline deadline = Deadline::after(std::min(kFarewellSeconds, options_.timeoutSeconds));
  struct Farewell {
    TransferOp send, recv;
    bool sent = false, received = false;  // done, or no longer waited for
    bool posted = true;                   // its receive may still be posted
  };
  std::vector<Farewell> farewells;
  static const char kByte = 1;
  farewellBytes_.assign(nranks_, 0);
  for (int peer = 0; peer < nranks_; ++peer) {
    if (ctx_.transportOfPeer[peer] != efa_.get() || !efa_->exchangedWith(peer)) continue;
    Farewell f;
    f.send.peer = f.recv.peer = peer;
    f.send.bytes = f.recv.bytes = 1;
    f.send.src = &kByte;
    f.recv.dst = &farewellBytes_[peer];
    farewells.push_back(f);
  }
  auto gone = [&](int peer) {
    int local = localOfRank_[peer];
    return (local >= 0 && segment_.rankArea(local)->departed.load(std::memory_order_acquire)) ||
           watch_.isDead(peer);
  };
  bool waiting = !farewells.empty();
  while (waiting && !deadline.expired()) {
    waiting = false;
    for (Farewell& f : farewells) {
      // An error (the peer made more calls, or its connection broke) ends the wait for it.
      if (!f.sent) {
        auto r = efa_->progressSend(f.send);
        f.sent = !r.isOk() || r.value();
      }
      if (!f.received) {
        auto r = efa_->progressRecv(f.recv);
        f.posted = !r.isOk() || !r.value();  // after an error, parts of it may be
        f.received = !r.isOk() || r.value() || gone(f.recv.peer);
      }
      waiting = waiting || !f.sent || !f.received;
    }
    if (waiting && !efa_->endPass().isOk()) break;  // the queues are read once per pass
    if (waiting) std::this_thread::yield();         // the peer may need this core
  }
  efa_->drain(std::max(0.0, deadline.remainingMs() / 1000.0));
  // A farewell receive still posted could land after this returns: close the endpoints now.
  if (std::any_of(farewells.begin(), farewells.end(), [](const Farewell& f) { return f.posted; }))
    efa_->shutdown();
}

void Communicator::markDeparted() {
  segment_.rankArea(localOfRank_[rank_])->departed.store(1, std::memory_order_release);
}

void Communicator::requestAbort() {
  abortRequested_.store(true, std::memory_order_release);
  segment_.raiseAbort(
      Code::kAborted, rank_,
      strformat("rank %d called trncclCommAbort on %s", rank_, options_.name.c_str()));
  std::lock_guard<std::mutex> lock(mutex_);
  failLocked(makeError(Code::kAborted, "rank %d %s: aborted by trncclCommAbort", rank_,
                       options_.name.c_str()));
}

Status Communicator::asyncError() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.isOk() && !queue_.empty()) progressLocked();
  if (failure_.isOk()) {
    // Nothing queued: still notice peers that failed or died, as NCCL's async error does.
    if (segment_.aborted() && segment_.abortRank() != rank_) {
      failLocked(makeError(Code::kRemoteError, "rank %d %s: rank %d failed: %s", rank_,
                           options_.name.c_str(), segment_.abortRank(),
                           segment_.abortReason().c_str()));
    }
  }
  return failure_;
}

void Communicator::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(errorMutex_);
  lastError_ = text;
}

std::string Communicator::lastError() {
  std::lock_guard<std::mutex> lock(errorMutex_);
  return lastError_;
}

}  // namespace trnccl
