// The communicator's side of the topology: which transport carries each peer, the
// TRNCCL_TOPO_DUMP_FILE dump, and the per-peer traffic counters (trncclCommGetPeerTraffic, INFO
// at destroy, TRNCCL_TRAFFIC_DIR).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "comm.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/text_file.hpp"

namespace trnccl {

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
  const std::string pattern = env::getString(env::kTopoDumpFile);
  if (pattern.empty()) return Status::ok();
  const std::string path = expandPathPattern(pattern, peers_[rank_].hostName, peers_[rank_].pid);
  const std::string text = "# discovered from " + topology_.discovery().source + "\n" +
                           topology::toText(topology_.devices());
  TRNCCL_RETURN_IF_ERROR(writeTextFile(path, text).withContext("TRNCCL_TOPO_DUMP_FILE: "));
  TRNCCL_INFO(log::kTopo, "topology written to %s", path.c_str());
  return Status::ok();
}

bool Communicator::everyPeerMapsMemory() const {
  if (!cmaReadable_ && nranks_ > 1) return false;
  return std::all_of(classOfPeer_.begin(), classOfPeer_.end(), [](topology::LinkClass c) {
    return c == topology::LinkClass::kSelf || c == topology::LinkClass::kShm;
  });
}

bool Communicator::everyNodePeerMapsMemory() const {
  const int myNode = topology_.nodeOf(rank_);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_ || topology_.nodeOf(r) != myNode) continue;
    if (!cmaReadable_ || classOfPeer_[r] != topology::LinkClass::kShm) return false;
  }
  return true;
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

}  // namespace trnccl
