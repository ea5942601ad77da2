// Communicator::init, in the order it happens: read the settings, join the job (rendezvous,
// the topology every rank discovers, libfabric's endpoints and the second bootstrap round),
// map the node's shared-memory segment, choose each peer's transport, build the planner, and
// adapt waiting to this machine's cores.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "collectives/shapes.hpp"
#include "comm.hpp"
#include "core/copy.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"
#include "flight_signal.hpp"
#include "transports/shm/cma.hpp"

namespace trnccl {

// Everything init reads from the environment and the options, checked once, up front.
struct Communicator::Settings {
  size_t windowBytes = 0, ringSlots = 0, ringSlotBytes = 0, oneShotMaxBytes = 0, llMaxBytes = 0;
  size_t streamCopyBytes = 0;
  size_t aggregateMaxBytes = 0;
  size_t cmaMinBytes = 0;  // 0: TRNCCL_CMA=0
  size_t cmaMaxBytes = 0;  // 0: decided at init (shm::cmaMaxBytes)
  int pipelineChunks = 0;
  std::string algoText, transportText;
  uint64_t algoHash = 0;  // of algoText: compared between ranks, bound in the node segment
  AlgoOverrides algo;
  // Filled by joinJob once the device graph is discovered; compared between ranks.
  CostParams costs;
  // Filled by joinJob once the topology is known; the same on every rank.
  topology::TransportSet allowed;
  bool allLocal = false;     // one node, no pair of ranks over efa (the direct algorithms)
  bool deviceLinks = false;  // some pair of ranks of some node talks over NeuronLink
};

namespace {

void appendWord(std::string& blob, uint64_t word) {
  blob.append(reinterpret_cast<const char*>(&word), sizeof(word));
}
uint64_t wordAt(const std::string& blob, size_t index) {
  uint64_t word = 0;
  std::memcpy(&word, blob.data() + index * sizeof(word), sizeof(word));
  return word;
}

}  // namespace

Status Communicator::readSettings(const CommOptions& options, Settings* s) {
  auto spin = env::getInt(env::kSpinCount);
  TRNCCL_RETURN_IF_ERROR(spin.status());
  spinCount_ = static_cast<int>(std::max<int64_t>(0, spin.value()));
  auto spinTime = env::getInt(env::kSpinTimeUs);
  TRNCCL_RETURN_IF_ERROR(spinTime.status());
  if (spinTime.value() < -1)
    return makeError(Code::kInvalidArgument,
                     "TRNCCL_SPIN_TIME_US=%lld: give microseconds >= 0, or -1 to never sleep",
                     static_cast<long long>(spinTime.value()));
  sleepAfterNs_ =
      spinTime.value() < 0 ? -1 : std::min<int64_t>(spinTime.value(), INT64_MAX / 1000) * 1000;
  struct Bounded {
    const env::Var& var;
    int64_t minimum, maximum;
    size_t* into;
  };
  size_t chunks = 0;
  for (const Bounded& b : {Bounded{env::kShmChunkBytes, 4096, 1LL << 30, &s->windowBytes},
                           Bounded{env::kShmRingSlots, 2, 1024, &s->ringSlots},
                           Bounded{env::kShmRingSlotBytes, 4096, 64LL << 20, &s->ringSlotBytes},
                           Bounded{env::kOneShotMaxBytes, 0, 1LL << 30, &s->oneShotMaxBytes},
                           Bounded{env::kAggregateMaxBytes, 0, INT64_MAX, &s->aggregateMaxBytes},
                           Bounded{env::kLLMaxBytes, 0, shm::kLLMaxBytes, &s->llMaxBytes},
                           Bounded{env::kStreamCopyBytes, 0, INT64_MAX, &s->streamCopyBytes},
                           Bounded{env::kCmaMinBytes, 1, INT64_MAX, &s->cmaMinBytes},
                           Bounded{env::kCmaMaxBytes, 0, INT64_MAX, &s->cmaMaxBytes},
                           Bounded{env::kPipelineChunks, 0, kMaxPipelineSlices, &chunks}}) {
    auto value = env::getIntBetween(b.var, b.minimum, b.maximum);
    TRNCCL_RETURN_IF_ERROR(value.status());
    *b.into = static_cast<size_t>(value.value());
  }
  s->pipelineChunks = static_cast<int>(chunks);
  auto cma = env::getBool(env::kCma);
  TRNCCL_RETURN_IF_ERROR(cma.status());
  if (!cma.value()) s->cmaMinBytes = 0;
  s->algoText = options.algorithm.empty() ? env::getString(env::kAlgo) : options.algorithm;
  s->algoHash = std::hash<std::string>{}(s->algoText);
  // (Every rank must plan alike: the second bootstrap round compares the settings.)
  auto parsedAlgo = parseAlgoOverrides(s->algoText);
  TRNCCL_RETURN_IF_ERROR(parsedAlgo.status());
  s->algo = parsedAlgo.value();
  s->transportText = env::getString(env::kTransport);
  return Status::ok();
}

Status Communicator::setupFlightRecorder(const trncclUniqueId& id) {
  auto entries = env::getInt(env::kFlightRecorderEntries);
  TRNCCL_RETURN_IF_ERROR(entries.status());
  if (entries.value() < 0 || entries.value() > (1 << 20))
    return makeError(Code::kInvalidArgument,
                     "TRNCCL_FLIGHT_RECORDER_ENTRIES=%lld: give 0 (off) to 1048576 calls",
                     static_cast<long long>(entries.value()));
  flight_.configure(static_cast<size_t>(entries.value()));
  // Every rank derives the same key from the communicator's unique id, so that
  // trnccl-inspect can tell the communicators of one job apart.
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : id.internal) hash = (hash ^ c) * 1099511628211ull;
  commKey_ = strformat("%016llx", static_cast<unsigned long long>(hash));
  flightDir_ = env::getString(env::kFlightRecorderDir);
  if (!flightDir_.empty() && flight_.enabled()) registerForSignalDumps(this, flightDir_);
  return Status::ok();
}

Status Communicator::init(int nranks, const trncclUniqueId& id, int rank,
                          const CommOptions& options) {
  rank_ = rank;
  nranks_ = nranks;
  options_ = options;
  Settings settings;
  TRNCCL_RETURN_IF_ERROR(readSettings(options, &settings));
  const Deadline deadline = Deadline::after(options.timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(joinJob(id, &settings));
  TRNCCL_RETURN_IF_ERROR(attachSegment(id, settings, deadline));
  TRNCCL_RETURN_IF_ERROR(setupCma(deadline));
  shm_ = std::make_unique<shm::ShmTransport>(segment_, rank, localOfRank_);
  self_ = std::make_unique<SelfTransport>(rank);
  ctx_.rank = rank;
  ctx_.localRank = topology_.localRank(rank);
  ctx_.globalOfLocal = topology_.ranksOfNode(topology_.nodeOf(rank));
  for (int r : ctx_.globalOfLocal) ctx_.pidOfLocal.push_back(peers_[r].pid);
  ctx_.peerRegions = &peerRegions_;
  ctx_.segment = &segment_;
  ctx_.windows = &windows_;
  // The last-level cache is the node's: every local rank of a collective copies about as much
  // into its own buffers at the same time, so the threshold counts the node's bytes. 4 ranks on
  // 2 cores, all-to-all 2-4 MiB: 0.72-0.84x Open MPI with 8 MiB per rank, 1.28-1.71x with 2.
  ctx_.streamCopyBytes =
      streamCopyBytesPerRank(settings.streamCopyBytes, ctx_.globalOfLocal.size());
  TRNCCL_RETURN_IF_ERROR(chooseTransports(settings.allowed));
  buildPlanner(settings);
  adaptToCores();
  logInit();
  TRNCCL_RETURN_IF_ERROR(setupFlightRecorder(id));
  if (topology_.localRank(rank) == 0) {
    // A dump that cannot be written must not fail init on one rank only: the others would wait.
    Status dumped = dumpTopology();
    if (!dumped.isOk()) TRNCCL_WARN(log::kTopo, "%s", dumped.message().c_str());
  }
  return Status::ok();
}

// The first bootstrap round gives the table of ranks (so the node layout); each rank then
// discovers the device graph and its chip, opens libfabric if some peer may need it, and the
// second round carries the settings every rank must share, the graph's hash, the chip and the
// network addresses. The topology is built from what every rank said.
Status Communicator::joinJob(const trncclUniqueId& id, Settings* settings) {
  Settings& s = *settings;
  const topology::HostIdentity host = topology::localHostIdentity();
  bootstrap::PeerInfo me;
  me.hostHash = host.hash;
  me.machineHash = host.machineHash;
  me.kernelHash = host.kernelHash;
  me.rank = rank_;
  me.pid = getpid();
  me.cmaProbeAddress = reinterpret_cast<uint64_t>(shm::cmaProbeWord());
  // Before the rendezvous completes, so that no peer probes this process before it allows it.
  if (s.cmaMinBytes) cmaNote_ = shm::allowCmaReaders();
  std::snprintf(me.hostName, sizeof(me.hostName), "%s", host.name.c_str());
  std::snprintf(me.hostId, sizeof(me.hostId), "%s", host.id.c_str());
  auto joined = bootstrap::rendezvous(id, nranks_, rank_, me, options_.timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(joined.status());
  peers_ = std::move(joined.value().table);
  bootstrap::Session session = std::move(joined.value().session);

  // Parsed once this rank has joined, so that a rank whose setting is wrong leaves between the
  // bootstrap rounds and the others hear of it at once, not at their timeout.
  auto usable = topology::parseTransportList(s.transportText);
  TRNCCL_RETURN_IF_ERROR(usable.status());
  s.allowed = usable.value();
  std::vector<uint64_t> hashes;
  for (const auto& p : peers_) hashes.push_back(p.hostHash);
  topology::JobLayout layout = topology::groupByHost(hashes);
  auto discovered = topology::discoverDevices(!env::getString(env::kTopoDumpFile).empty());
  TRNCCL_RETURN_IF_ERROR(discovered.status());
  const int myNode = layout.nodeOfRank[rank_];
  auto myChip = topology::chipOfLocalRank(
      discovered.value(), myNode % std::max(1, discovered.value().graph.nodes),
      layout.localRank(rank_), layout.localSize(rank_), host.name);
  if (!myChip.isOk() && discovered.value().kind == topology::Discovery::Kind::kSysfs) {
    // The driver's chips were found, not asked for: a job with more local ranks than chips
    // (one process per NeuronCore, say) runs host-only rather than failing. Every rank of the
    // node sees the same counts, so they all fall back together.
    TRNCCL_WARN(log::kTopo, "rank %d: %s; running without the device graph", rank_,
                myChip.status().message().c_str());
    discovered.value() = topology::Discovery{};
    discovered.value().source = "none (the Neuron driver's chips do not fit the job)";
    myChip = -1;
  }
  TRNCCL_RETURN_IF_ERROR(myChip.status());
  // NICs are left out of the comparison: hosts of one job may name their interfaces apart.
  topology::DeviceGraph compared = discovered.value().graph;
  compared.nics.clear();
  const uint64_t graphHash = std::hash<std::string>{}(topology::toText(compared));

  // Libfabric is needed for ranks on other nodes, and (when TRNCCL_TRANSPORT leaves out shm)
  // for ranks of this node that NeuronLink may not reach; which exactly is known once the
  // chips are, after the exchange, so this errs towards opening it.
  std::vector<char> viaEfa(nranks_, 0);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    const bool sameNode = layout.nodeOfRank[r] == myNode;
    if (sameNode && s.allowed.shm) continue;
    if (!s.allowed.efa) {
      if (sameNode && s.allowed.neuronlink) continue;  // checked against the links below
      return makeError(Code::kInvalidUsage,
                       "TRNCCL_TRANSPORT='%s' leaves no transport to rank %d (%s node '%s'); "
                       "allow shm for ranks of one node and efa between nodes",
                       s.transportText.c_str(), r, sameNode ? "same" : "other", peers_[r].hostId);
    }
    viaEfa[r] = 1;
  }
  if (std::count(viaEfa.begin(), viaEfa.end(), 1) > 0) {
    auto efaOptions = efa::EfaOptions::fromEnvironment();
    TRNCCL_RETURN_IF_ERROR(efaOptions.status());
    auto efaSleep = env::getBool(env::kEfaSleep);
    TRNCCL_RETURN_IF_ERROR(efaSleep.status());
    efaOptions.value().waitObject = efaSleep.value() && sleepAfterNs_ >= 0;
    auto opened = efa::EfaTransport::open(rank_, nranks_, efaOptions.value());
    TRNCCL_RETURN_IF_ERROR(opened.status());
    efa_ = std::move(opened.value());
  }

  auto costs = loadCosts(discovered.value(), env::getString(env::kTuningFile));
  TRNCCL_RETURN_IF_ERROR(costs.status());
  s.costs = costs.value();

  // Second round. Ranks of other nodes cannot compare settings through the node segment.
  const uint64_t algoHash = s.algoHash;
  const uint64_t transportHash = std::hash<std::string>{}(s.transportText);
  // What the planner's choices depend on besides the topology: the cost model and the shm
  // protocol limits (every node's segment takes its creator's values).
  const uint64_t planHash = std::hash<std::string>{}(
      tuningText(s.costs) + strformat("%zu %zu %zu %zu", s.windowBytes, s.oneShotMaxBytes,
                                      s.llMaxBytes, s.aggregateMaxBytes));
  std::string blob;
  for (uint64_t word : {algoHash, transportHash, graphHash, static_cast<uint64_t>(myChip.value()),
                        static_cast<uint64_t>(s.pipelineChunks), planHash})
    appendWord(blob, word);
  constexpr size_t kSettingsBytes = 6 * sizeof(uint64_t);
  if (efa_) blob += efa_->addressBlob();
  // The full timeout: the root reports missing ranks at 0.9 of it, before anyone gives up.
  auto blobs = session.exchange(blob, options_.timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(blobs.status());
  if (blobs.value().size() != static_cast<size_t>(nranks_))
    return makeError(Code::kRemoteError, "the bootstrap exchange returned %zu entries for %d ranks",
                     blobs.value().size(), nranks_);
  std::vector<std::string> efaAddresses(nranks_);
  std::vector<int> chipOfRank(nranks_, -1);
  for (int r = 0; r < nranks_; ++r) {
    const std::string& theirs = blobs.value()[r];
    if (theirs.size() < kSettingsBytes)
      return makeError(Code::kRemoteError, "rank %d sent a malformed bootstrap exchange entry", r);
    if (wordAt(theirs, 0) != algoHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d were started with different TRNCCL_ALGO settings "
                       "(this rank: '%s'); every rank must plan alike",
                       rank_, r, s.algoText.c_str());
    if (wordAt(theirs, 1) != transportHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d were started with different TRNCCL_TRANSPORT "
                       "settings (this rank: '%s'); every rank must choose transports alike",
                       rank_, r, s.transportText.c_str());
    if (wordAt(theirs, 2) != graphHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d discovered different Neuron topologies (this rank: "
                       "%s, %s); every rank must see the same one (set the same "
                       "TRNCCL_TOPO_FILE or TRNCCL_TOPO_PRESET everywhere)",
                       rank_, r, discovered.value().source.c_str(),
                       discovered.value().graph.shape().c_str());
    chipOfRank[r] = static_cast<int>(static_cast<int64_t>(wordAt(theirs, 3)));
    if (wordAt(theirs, 4) != static_cast<uint64_t>(s.pipelineChunks))
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d were started with different TRNCCL_PIPELINE_CHUNKS "
                       "(this rank: %d, rank %d: %llu); every rank must cut all-reduces alike",
                       rank_, r, s.pipelineChunks, r,
                       static_cast<unsigned long long>(wordAt(theirs, 4)));
    if (wordAt(theirs, 5) != planHash)
      return makeError(Code::kInvalidUsage,
                       "rank %d and rank %d plan with different numbers (this rank: cost model "
                       "from %s, TRNCCL_SHM_CHUNK_BYTES=%zu, TRNCCL_ONESHOT_MAX_BYTES=%zu, "
                       "TRNCCL_LL_MAX_BYTES=%zu, TRNCCL_AGGREGATE_MAX_BYTES=%zu); set "
                       "TRNCCL_TUNING_FILE and these variables alike on every rank",
                       rank_, r, s.costs.origin.c_str(), s.windowBytes, s.oneShotMaxBytes,
                       s.llMaxBytes, s.aggregateMaxBytes);
    if (viaEfa[r]) {
      efaAddresses[r] = theirs.substr(kSettingsBytes);
      if (efaAddresses[r].empty())
        return makeError(Code::kInvalidUsage,
                         "rank %d reaches rank %d over efa, but rank %d opened no efa endpoint "
                         "(do the two agree on their host ids, TRNCCL_HOSTID?)",
                         rank_, r, r);
    }
  }
  if (efa_) TRNCCL_RETURN_IF_ERROR(efa_->connect(efaAddresses));

  auto built = topology::Topology::build(std::move(layout), std::move(discovered.value()),
                                         std::move(chipOfRank));
  TRNCCL_RETURN_IF_ERROR(built.status());
  topology_ = std::move(built.value());
  localOfRank_ = topology_.localIndexFrom(rank_);
  // One pass over every pair of ranks of every node, the same on every rank (not only this
  // rank's own peers): a TRNCCL_TRANSPORT that leaves some pair without a transport fails init
  // on every rank alike, and the planner's facts come out equal everywhere. Direct algorithms
  // need every rank on one node's segment and no pair over efa.
  s.allLocal = topology_.nnodes() == 1;
  s.deviceLinks = false;
  for (int node = 0; node < topology_.nnodes(); ++node) {
    const auto& ranks = topology_.ranksOfNode(node);
    for (size_t i = 0; i < ranks.size(); ++i)
      for (size_t j = i + 1; j < ranks.size(); ++j) {
        auto c = topology_.classBetween(ranks[i], ranks[j], s.allowed);
        TRNCCL_RETURN_IF_ERROR(c.status());
        if (c.value() == topology::LinkClass::kEfa) s.allLocal = false;
        if (c.value() == topology::LinkClass::kNeuronLink) s.deviceLinks = true;
      }
  }
  return Status::ok();
}

// Local rank 0 creates the node's segment; init returns only once every local rank mapped it,
// and a local rank that dies first makes the others fail, naming it (the segment's name is
// unlinked either way).
Status Communicator::attachSegment(const trncclUniqueId& id, const Settings& s,
                                   const Deadline& deadline) {
  const auto& localRanks = topology_.ranksOfNode(topology_.nodeOf(rank_));
  shm::SegmentParams params;
  params.localSize = static_cast<uint32_t>(localRanks.size());
  params.windowBytes = (s.windowBytes + 4095) / 4096 * 4096;
  params.ringSlots = static_cast<uint32_t>(s.ringSlots);
  params.ringSlotBytes = shm::alignUp(s.ringSlotBytes, 64);
  params.oneShotMaxBytes = s.oneShotMaxBytes;
  params.llMaxBytes = s.llMaxBytes;
  params.algorithmHash = s.algoHash;
  params.cmaMinBytes = s.cmaMinBytes;
  // Only the segment's creator (local rank 0) times the kernel's copy: its values bind.
  if (s.cmaMinBytes && localRanks.size() > 1 && topology_.localRank(rank_) == 0) {
    const double slowdown = s.cmaMaxBytes ? 0 : shm::kernelCopySlowdown();
    params.kernelCopyPermille = static_cast<uint64_t>(slowdown * 1000);
    params.cmaMaxBytes =
        shm::cmaMaxBytes(s.cmaMaxBytes, slowdown, s.streamCopyBytes, oversubscribed());
  }
  bootstrap::UniqueIdData idData = bootstrap::parseUniqueId(id).value();
  std::string segmentName =
      strformat("trnccl-%016llx-%016llx", static_cast<unsigned long long>(idData.nonce),
                static_cast<unsigned long long>(peers_[rank_].hostHash));
  // Watch every rank on this machine, emulated nodes (TRNCCL_HOSTID) included: a peer that
  // dies is then reported at once instead of at the timeout.
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_ && peers_[r].machineHash == peers_[rank_].machineHash)
      watch_.watch(r, peers_[r].pid);
  return segment_.attach(
      env::getString(env::kShmDir), segmentName, topology_.localRank(rank_), params, deadline,
      [this] { return localPeersAlive("before mapping the shared-memory segment"); }, rank_);
}

// An error naming the first rank of this node that has exited, while init waits for them.
Status Communicator::localPeersAlive(const char* when) const {
  for (int r : topology_.ranksOfNode(topology_.nodeOf(rank_))) {
    if (r == rank_ || !watch_.isDead(r)) continue;
    // A rank that gave up because another died said so in the segment before it left (the
    // report is written before its exit, so it is visible once the exit is): name the rank
    // it names, not the one that only followed.
    if (segment_.header() && segment_.aborted() && segment_.abortRank() != rank_)
      return makeError(Code::kRemoteError, "initialisation failed on another rank of this node: %s",
                       segment_.abortReason().c_str());
    return makeError(Code::kRemoteError, "%s exited during initialisation, %s",
                     describePeer(r).c_str(), when);
  }
  return Status::ok();
}

// CMA must work between every pair of local ranks, or no rank of the node uses it (the
// schedules of one call must agree). Each rank reads every local peer's probe word (addresses
// came with the bootstrap table), counts a failure into the segment header and waits until
// every local rank has probed; then all of them read the same verdict.
Status Communicator::setupCma(const Deadline& deadline) {
  const auto& localRanks = topology_.ranksOfNode(topology_.nodeOf(rank_));
  if (segment_.params().cmaMinBytes == 0) {
    cmaNote_ = "off (TRNCCL_CMA=0 on the node's local rank 0)";
    return Status::ok();
  }
  if (localRanks.size() < 2) return Status::ok();
  std::string failure;
  for (int r : localRanks) {
    if (r == rank_) continue;
    std::string why = shm::probeCma(peers_[r].pid, peers_[r].cmaProbeAddress);
    if (!why.empty() && failure.empty()) failure = strformat("reading rank %d: %s", r, why.c_str());
  }
  shm::SegmentHeader* header = segment_.header();
  if (!failure.empty()) header->cmaFailed.fetch_add(1);
  header->cmaProbed.fetch_add(1);
  while (header->cmaProbed.load() < localRanks.size()) {
    if (deadline.expired())
      return makeError(Code::kTimeout,
                       "rank %d: the ranks of this node did not all finish init's CMA probe "
                       "within TRNCCL_TIMEOUT=%.1f s",
                       rank_, options_.timeoutSeconds);
    TRNCCL_RETURN_IF_ERROR(localPeersAlive("during the CMA probe"));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  const uint32_t failed = header->cmaFailed.load();
  cmaReadable_ = failed == 0;
  if (cmaReadable_)
    cmaNote_ = cmaBandNote() + (cmaNote_.empty() ? "" : " (" + cmaNote_ + ")");
  else if (!failure.empty())
    cmaNote_ = "off: " + failure + (cmaNote_.empty() ? "" : "; " + cmaNote_);
  else if (failed)
    cmaNote_ = strformat("off: %u local rank(s) could not read their peers", failed);
  return Status::ok();
}

// What the node's CMA band is and why, for the INFO line at init.
std::string Communicator::cmaBandNote() const {
  const shm::SegmentParams& p = segment_.params();
  const auto minBytes = static_cast<unsigned long long>(p.cmaMinBytes);
  const auto maxBytes = static_cast<unsigned long long>(p.cmaMaxBytes);
  const std::string timed = strformat("the kernel's copy took %.1fx memcpy's time at init",
                                      static_cast<double>(p.kernelCopyPermille) / 1000);
  if (p.cmaMaxBytes > p.cmaMinBytes &&
      shm::broadcastCmaMaxBytes(p.cmaMaxBytes, p.kernelCopyPermille) != p.cmaMaxBytes)
    return strformat("on for blocks of %llu B and more, below %llu B; never in broadcast (",
                     minBytes, maxBytes) +
           timed + "; TRNCCL_CMA_MAX_BYTES)";
  if (p.cmaMaxBytes <= p.cmaMinBytes) {
    std::string why = "TRNCCL_CMA_MAX_BYTES=" + std::to_string(maxBytes);
    if (p.kernelCopyPermille && p.cmaMaxBytes == 0)
      why = timed + " and ranks outnumber cores";
    else if (p.kernelCopyPermille)
      why = timed + strformat("; blocks from %llu B take the windows", maxBytes);
    return "allowed, but collectives read no block with it (" + why + ")";
  }
  if (p.cmaMaxBytes == UINT64_MAX)
    return strformat("on for blocks of %llu B and more", minBytes) +
           (p.kernelCopyPermille ? " (" + timed + ")" : "");
  return strformat("on for blocks of %llu B and more, below %llu B (", minBytes, maxBytes) +
         (p.kernelCopyPermille ? timed + "; " : "") + "TRNCCL_CMA_MAX_BYTES)";
}

void Communicator::buildPlanner(const Settings& s) {
  CommView view;
  view.rank = rank_;
  view.nranks = nranks_;
  view.allLocal = s.allLocal;  // both computed by joinJob over every pair, equal on every rank
  view.deviceLinks = s.deviceLinks;
  view.pipelineChunks = s.pipelineChunks;
  view.ring = RingGroup::of(topology_.ringOrder(), rank_);
  view.topology = &topology_;
  shapes_ = buildShapes(topology_, rank_);
  view.shapes = &shapes_;
  view.segment = &segment_;
  view.windowBytes = segment_.params().windowBytes;  // the creator's values bind everyone
  view.oneShotMaxBytes = segment_.params().oneShotMaxBytes;
  view.aggregateMaxBytes = s.aggregateMaxBytes;
  view.llMaxBytes = segment_.params().llMaxBytes;
  if (cmaReadable_)
    view.cma = cmaBand(segment_.params().cmaMinBytes, segment_.params().cmaMaxBytes,
                       segment_.params().kernelCopyPermille);
  // Every rank must plan alike, and machines may differ in cores and ranks: the planner sees
  // oversubscription only where every rank shares this machine (one node, or nodes emulated
  // on it), which every rank then computes alike.
  view.oversubscribed = ranksSharingThisMachine() == nranks_ && oversubscribed();
  planner_ = std::make_unique<Planner>(view, s.algo, s.costs);
}

// Oversubscription is about this machine's cores, whatever node identities say (emulated
// nodes share the cores too, and so do libfabric's progress threads): ranks count together
// when they share the kernel, also from containers with their own host names.
// Every rank of a machine computes the same answer (the table of ranks is the same everywhere).
// A split counts its parent's ranks: two node communicators of 2 ranks each on a 2-core machine
// spun their whole budget while the other's ranks held the cores, and calls took a scheduler
// slice (5 ms) instead of tens of microseconds (trnccl-tune on 2 emulated nodes x 2 ranks).
int Communicator::ranksSharingThisMachine() const {
  return static_cast<int>(std::count_if(peers_.begin(), peers_.end(), [&](const auto& p) {
    return p.kernelHash == peers_[rank_].kernelHash;
  }));
}

unsigned Communicator::ranksOnThisMachine() const {
  return std::max(static_cast<unsigned>(ranksSharingThisMachine()), options_.parentRanksOnMachine);
}

bool Communicator::oversubscribed() const {
  return ranksOnThisMachine() > std::max(1u, std::thread::hardware_concurrency());
}

void Communicator::adaptToCores() {
  for (int r = 0; r < nranks_; ++r)
    if (classOfPeer_[r] == topology::LinkClass::kEfa &&
        peers_[r].kernelHash == peers_[rank_].kernelHash)
      efaPeerOnThisMachine_ = true;
  // Oversubscribed, the peer a rank waits for is often not running: give the core away at the
  // first pass that finds nothing to do (as Open MPI does with more ranks than cores), unless
  // TRNCCL_SPIN_COUNT was set. 4 ranks on 2 cores, shm, 1 KiB-1 MiB, 10 interleaved rounds
  // (docs/PERFORMANCE.md): against 50 passes, small calls 1.2-2x faster (all-to-all 1 KiB
  // 0.55-0.89x -> 0.97-1.10x Open MPI); mid-size all-reduce up to 45% slower in half of them.
  // With efa a pass reads the completion queues up to 8 times (poll() calls with tcp): 50
  // passes kept the core for hundreds of microseconds (8 B all-reduce over tcp;ofi_rxm:
  // 678 us per call at 50, 116 us at 0).
  if (oversubscribed()) {
    if (!env::isSet(env::kSpinCount)) spinCount_ = 0;
    watchPauses_ = 1;
    // And the pass reads the queues once: 4 ranks on 2 cores, 8 B all-reduce over tcp;ofi_rxm
    // 133-166 -> 77-86 us against 8 reads.
    if (efa_) efa_->setReadsPerPass(1);
  }
}

void Communicator::logInit() const {
  auto peersOver = [&](topology::LinkClass c) {
    return static_cast<int>(std::count(classOfPeer_.begin(), classOfPeer_.end(), c));
  };
  const int localRank = topology_.localRank(rank_);
  TRNCCL_INFO(log::kInit,
              "%s rank %d/%d: %d node(s), local rank %d of %d, pid %d on %s; transports: "
              "self for itself, neuronlink for %d peer(s), shm for %d, efa for %d; shm window "
              "%zu B x %d slots, rings %u x %zu B; reduction kernels %s; spin %d passes, sleep "
              "after %lld us; timeout %.1f s",
              options_.name.c_str(), rank_, nranks_, topology_.nnodes(), localRank,
              topology_.localSize(rank_), peers_[rank_].pid, peers_[rank_].hostName,
              peersOver(topology::LinkClass::kNeuronLink), peersOver(topology::LinkClass::kShm),
              peersOver(topology::LinkClass::kEfa),
              static_cast<size_t>(segment_.params().windowBytes), shm::kWindowSlots,
              segment_.params().ringSlots, static_cast<size_t>(segment_.params().ringSlotBytes),
              reduceKernelIsa(), spinCount_,
              static_cast<long long>(sleepAfterNs_ < 0 ? -1 : sleepAfterNs_ / 1000),
              options_.timeoutSeconds);
  if (!cmaNote_.empty())
    TRNCCL_INFO(log::kInit, "%s rank %d: single-copy reads of local peers' buffers (CMA): %s",
                options_.name.c_str(), rank_, cmaNote_.c_str());
  if (localRank == 0)
    TRNCCL_INFO(log::kTopo, "%s rank %d: topology from %s (%s): %s; this rank drives chip %d",
                options_.name.c_str(), rank_, discoveryKindName(topology_.discovery().kind),
                topology_.discovery().source.c_str(), topology_.devices().shape().c_str(),
                topology_.chipOf(rank_));
  if (efa_)
    TRNCCL_INFO(log::kNet, "%s rank %d efa: %s", options_.name.c_str(), rank_,
                efa_->describe().c_str());
  TRNCCL_INFO(log::kInit, "%s rank %d plan: %s", options_.name.c_str(), rank_,
              planner_->planTable().c_str());
  if (rank_ == 0)  // the same on every rank
    for (const std::string& line : planner_->planDetails())
      TRNCCL_INFO(log::kInit, "%s plan: %s", options_.name.c_str(), line.c_str());
}

}  // namespace trnccl
