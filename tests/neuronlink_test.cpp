// The emulated NeuronLink transport through the real path: rank processes with a preset
// topology, collectives checked against a serial reference, and trncclCommGetPeerTraffic
// showing that NeuronLink carried traffic only between linked chips (the expected links are
// computed here from the 4x4 torus rule). Also: init refuses a job that does not fit its
// topology, and ranks that discovered different topologies; and the hierarchical all-reduce
// runs in the slices the planner chose (2 emulated nodes, no device graph).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/planner.hpp"
#include "collectives/shapes.hpp"
#include "support/sweep.hpp"

namespace trnccl::testing {
namespace {

bool torusAdjacent(int a, int b) {
  int ax = a % 4, ay = a / 4, bx = b % 4, by = b / 4;
  bool sameRow = ay == by && ((ax + 1) % 4 == bx || (bx + 1) % 4 == ax);
  bool sameColumn = ax == bx && ((ay + 1) % 4 == by || (by + 1) % 4 == ay);
  return a != b && (sameRow || sameColumn);
}

void usePreset(const char* name) {
  setenv("TRNCCL_TOPO_PRESET", name, 1);
  unsetenv("TRNCCL_TOPO_FILE");
}

// Sum all-reduce of rank-dependent integers (exact in float): the serial reference is the
// closed form.
void allReduceAndCheck(Failures& f, trncclComm_t comm, int rank, int n, size_t count) {
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * (i % 97));
  if (trncclAllReduce(in.data(), out.data(), count, trncclFloat32, trncclSum, comm) !=
      trncclSuccess) {
    f.add("all-reduce failed: %s", trncclGetLastError(comm));
    return;
  }
  const float ranksSum = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < count; ++i)
    if (out[i] != ranksSum * static_cast<float>(i % 97)) {
      f.add("rank %d element %zu: %g, want %g", rank, i, out[i], ranksSum * (i % 97));
      return;
    }
}

std::vector<trncclPeerTraffic_t> trafficOf(Failures& f, trncclComm_t comm, int n) {
  std::vector<trncclPeerTraffic_t> entries(n);
  int count = 0;
  if (trncclCommGetPeerTraffic(comm, entries.data(), n, &count) != trncclSuccess || count != n)
    f.add("trncclCommGetPeerTraffic failed (count %d)", count);
  return entries;
}

// 16 ranks on an emulated trn2 node (oversubscribed): the ring all-reduce (along the node's
// cycle of links) and an all-to-all that sends to every peer; NeuronLink must carry exactly
// the linked pairs, shm the rest.
TEST(NeuronLink, SixteenRanksOnATrn2NodeUseOnlyLinkedChips) {
  const int n = 16;
  auto outcomes = withComm(
      n,
      [&](int /*rank*/) {
        usePreset("trn2.48xlarge");
        setenv("TRNCCL_ALGO", "ring", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        allReduceAndCheck(f, comm, rank, nranks, (1u << 18) + 5);  // past recursive doubling
        std::vector<int> a2aIn(nranks * 3), a2aOut(nranks * 3);
        for (int i = 0; i < nranks * 3; ++i) a2aIn[i] = rank * 1000 + i;
        if (trncclAllToAll(a2aIn.data(), a2aOut.data(), 3, trncclInt32, comm) != trncclSuccess)
          f.add("all-to-all failed: %s", trncclGetLastError(comm));
        for (int q = 0; q < nranks; ++q)
          for (int j = 0; j < 3; ++j)
            if (a2aOut[q * 3 + j] != q * 1000 + rank * 3 + j)
              f.add("all-to-all from %d element %d: %d", q, j, a2aOut[q * 3 + j]);
        auto traffic = trafficOf(f, comm, nranks);
        for (const auto& t : traffic) {
          const bool linked = torusAdjacent(rank, t.peer);  // local rank i drives chip i
          if (t.peer == rank) continue;
          if (t.localChip != rank || t.peerChip != t.peer)
            f.add("rank %d: peer %d reported chips %d-%d", rank, t.peer, t.localChip, t.peerChip);
          const trncclTransport_t want = linked ? trncclTransportNeuronLink : trncclTransportShm;
          if (t.transport != want)
            f.add("rank %d -> %d: transport %d, want %d", rank, t.peer, t.transport, want);
          if (t.sentMessages == 0 || t.recvMessages == 0)  // the all-to-all reaches everyone
            f.add("rank %d -> %d: no messages counted", rank, t.peer);
        }
        // The ring goes along the node's link cycle: all of the all-reduce's 2(n-1)/n of the
        // buffer leaves over NeuronLink, and unlinked peers get only their all-to-all block.
        unsigned long long overLinks = 0;
        for (const auto& t : traffic) {
          if (t.transport == trncclTransportNeuronLink) overLinks += t.sentBytes;
          if (t.transport == trncclTransportShm && t.sentBytes != 3 * sizeof(int))
            f.add("rank %d -> %d: %llu bytes over shm", rank, t.peer, t.sentBytes);
        }
        if (overLinks < 0.9 * (1u << 20) * 2 * (nranks - 1) / nranks)
          f.add("rank %d: only %llu bytes over NeuronLink", rank, overLinks);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// TRNCCL_NEURON_DEVICES puts 4 ranks on a column of the torus (chips 0, 4, 8, 12): a ring of
// links, so every peer but the opposite one is linked.
TEST(NeuronLink, NeuronDevicesChoosesTheChips) {
  auto outcomes = withComm(
      4,
      [&](int /*rank*/) {
        usePreset("trn2.48xlarge");
        setenv("TRNCCL_NEURON_DEVICES", "0,4,8,12", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        allReduceAndCheck(f, comm, rank, nranks, 1000);
        for (const auto& t : trafficOf(f, comm, nranks)) {
          if (t.peer == rank) continue;
          if (t.localChip != rank * 4 || t.peerChip != t.peer * 4)
            f.add("rank %d: chips %d-%d for peer %d", rank, t.localChip, t.peerChip, t.peer);
          bool opposite = (t.peer + 2) % 4 == rank;
          if ((t.transport == trncclTransportNeuronLink) == opposite)
            f.add("rank %d -> %d: transport %d", rank, t.peer, t.transport);
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Three local ranks and a topology file with two chips: the third rank is refused with the
// file, the counts and the variable; the others fail their init too (no hang).
TEST(NeuronLink, AJobThatDoesNotFitTheTopologyFailsInit) {
  const std::string file = ::testing::TempDir() + "/trnccl-two-chip-node.topo";
  FILE* out = std::fopen(file.c_str(), "w");
  std::fputs("trnccl-topology 1\ndevice 0:0\ndevice 0:1\nlink 0:0 0:1 kind=nl bw=10\n", out);
  std::fclose(out);
  auto outcomes = runRanks(
      3,
      [&](int rank, int nranks, const trncclUniqueId& id) {
        setenv("TRNCCL_TOPO_FILE", file.c_str(), 1);
        setenv("TRNCCL_TIMEOUT", "20", 1);
        trncclComm_t comm = nullptr;
        std::string error = initComm(&comm, nranks, id, rank);
        if (error.empty()) return std::string("init succeeded although 3 ranks share 2 chips");
        for (const char* part : {"TRNCCL_TOPO_FILE", "2 Neuron chip", "3 local ranks"})
          if (error.find(part) == std::string::npos)
            return std::string(part) + " is missing from: " + error;
        return std::string();
      },
      60);
  EXPECT_ALL_RANKS_OK(outcomes);
}

TEST(NeuronLink, RanksWithDifferentTopologiesFailInit) {
  auto outcomes = runRanks(
      2,
      [&](int rank, int nranks, const trncclUniqueId& id) {
        usePreset(rank == 0 ? "trn2.48xlarge" : "trn1.32xlarge");
        trncclComm_t comm = nullptr;
        std::string error = initComm(&comm, nranks, id, rank);
        if (error.empty()) return std::string("init succeeded with two topologies");
        if (error.find("different Neuron topologies") == std::string::npos)
          return "unexpected error: " + error;
        return std::string();
      },
      60);
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Torus all-reduce on a full trn2 node: rows then columns, every ring a ring of links, so no
// message at all goes over shm; 1 MiB whole, 4 MiB in pipelined slices.
TEST(NeuronLink, TorusAllReduceSendsOnlyOverLinks) {
  auto outcomes = withComm(
      16,
      [&](int /*rank*/) {
        usePreset("trn2.48xlarge");
        setenv("TRNCCL_ALGO", "allreduce:torus", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        allReduceAndCheck(f, comm, rank, nranks, (1u << 18) + 5);
        allReduceAndCheck(f, comm, rank, nranks, (1u << 20) + 3);
        for (const auto& t : trafficOf(f, comm, nranks)) {
          if (t.peer == rank || t.sentMessages + t.recvMessages == 0) continue;
          if (t.transport != trncclTransportNeuronLink || !torusAdjacent(rank, t.peer))
            f.add("rank %d -> %d: %llu messages over transport %d", rank, t.peer,
                  t.sentMessages + t.recvMessages, t.transport);
        }
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Hierarchical all-reduce on 2 emulated nodes x 8 ranks of a trn2 preset: each rank talks over
// efa to exactly one peer (the rank at its position on the other node), and sends it exactly
// the model's bytes: 2(N-1)/N of its share of the node's buffer, here N = 2 nodes, so the
// whole share, which is part (position + 1) mod 8 of the buffer split 8 ways (positions along
// the node's link cycle, which the test does not need to know: the share sizes differ by at
// most one element, and the sum over a node's ranks must be the whole buffer).
TEST(NeuronLink, HierarchicalAllReduceCrossesEfaOncePerPosition) {
  const size_t count = (1u << 18) + 5;
  auto outcomes = withComm(
      16,
      [&](int rank) {
        usePreset("trn2.48xlarge");
        setenv("TRNCCL_HOSTID", rank < 8 ? "hier-a" : "hier-b", 1);
        setenv("TRNCCL_ALGO", "allreduce:hierarchical", 1);
        setenv("FI_NET_IFACE", "lo", 1);
        setenv("FI_TCP_IFACE", "lo", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        allReduceAndCheck(f, comm, rank, nranks, count);
        int efaPeers = 0;
        unsigned long long efaBytes = 0;
        for (const auto& t : trafficOf(f, comm, nranks)) {
          const bool otherNode = (t.peer < 8) != (rank < 8);
          if (t.sentMessages + t.recvMessages == 0) continue;
          if (otherNode != (t.transport == trncclTransportEfa))
            f.add("rank %d -> %d: transport %d", rank, t.peer, t.transport);
          if (t.transport == trncclTransportEfa) {
            ++efaPeers;
            efaBytes += t.sentBytes;
            if (t.sentBytes != t.recvBytes)
              f.add("rank %d -> %d: sent %llu, received %llu over efa", rank, t.peer, t.sentBytes,
                    t.recvBytes);
          }
          if (t.transport == trncclTransportNeuronLink && !torusAdjacent(rank % 8, t.peer % 8))
            f.add("rank %d -> %d: NeuronLink between unlinked chips", rank, t.peer);
        }
        if (efaPeers != 1) f.add("rank %d talked to %d ranks over efa, want 1", rank, efaPeers);
        // Every share is count/8 give or take an element per pipelined slice (each slice is
        // split 8 ways on its own); the node's total below is exact.
        const size_t share = count / 8, slack = kMaxPipelineSlices;
        if (efaBytes < (share - slack) * 4 || efaBytes > (share + slack) * 4)
          f.add("rank %d sent %llu bytes over efa; the model says its share, %zu-%zu", rank,
                efaBytes, (share - slack) * 4, (share + slack) * 4);
        // Every rank of a node together sends the whole buffer once over efa: check via a
        // reduction of the per-rank counts.
        unsigned long long total = 0;
        if (trncclAllReduce(&efaBytes, &total, 1, trncclUint64, trncclSum, comm) != trncclSuccess)
          f.add("counting all-reduce failed");
        if (total != 2ull * count * 4)
          f.add("the ranks sent %llu bytes over efa in all, want %zu (the buffer once per node)",
                total, 2 * count * 4);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// The hierarchical all-reduce runs in the slices the planner chose for the call's size (or
// TRNCCL_PIPELINE_CHUNKS): on 2 emulated nodes x 2 ranks each slice sends one reduce-scatter
// and one all-gather message to the rank's peer on the other node, so the efa messages a call
// sends are twice its slices. A small call goes whole; the large one's count is the planner's,
// computed here from the same cost model with this machine's defaults (the job runs with them:
// no tuning file).
int plannedSlices(int nranks, int nodes, size_t bytes) {
  std::vector<uint64_t> hosts;
  for (int r = 0; r < nranks; ++r) hosts.push_back(100 + r * nodes / nranks);
  auto t =
      topology::Topology::build(topology::groupByHost(hosts), {}, std::vector<int>(nranks, -1));
  if (!t.isOk()) return -1;
  const Shapes shapes = buildShapes(t.value(), 0);
  CommView view;
  view.nranks = nranks;
  view.allLocal = nodes == 1;
  view.ring = RingGroup::of(t.value().ringOrder(), 0);
  view.topology = &t.value();
  view.shapes = &shapes;
  return Planner(view, AlgoOverrides{})
      .slicesFor(CollKind::kAllReduce, bytes, Algorithm::kHierarchical);
}

size_t efaMessagesSent(Failures& f, trncclComm_t comm, int n) {
  size_t sent = 0;
  for (const auto& t : trafficOf(f, comm, n))
    if (t.transport == trncclTransportEfa) sent += t.sentMessages;
  return sent;
}

TEST(Topology, HierarchicalAllReduceRunsInThePlannedSlices) {
  for (const char* pinned : {"", "3"}) {
    auto outcomes = withComm(
        4,
        [&](int rank) {
          unsetenv("TRNCCL_TOPO_PRESET");
          unsetenv("TRNCCL_TOPO_FILE");
          unsetenv("TRNCCL_TUNING_FILE");
          setenv("TRNCCL_HOSTID", rank < 2 ? "slices-a" : "slices-b", 1);
          setenv("TRNCCL_ALGO", "allreduce:hierarchical", 1);
          setenv("FI_NET_IFACE", "lo", 1);
          setenv("FI_TCP_IFACE", "lo", 1);
          if (*pinned)
            setenv("TRNCCL_PIPELINE_CHUNKS", pinned, 1);
          else
            unsetenv("TRNCCL_PIPELINE_CHUNKS");
        },
        [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
          const size_t small = 1000, large = (size_t{16} << 20) / sizeof(float) + 3;
          size_t before = efaMessagesSent(f, comm, nranks);
          allReduceAndCheck(f, comm, rank, nranks, small);
          const size_t smallMessages = efaMessagesSent(f, comm, nranks) - before;
          before = efaMessagesSent(f, comm, nranks);
          allReduceAndCheck(f, comm, rank, nranks, large);
          const size_t largeMessages = efaMessagesSent(f, comm, nranks) - before;
          const size_t wantSmall = *pinned ? 6 : 2;
          size_t wantLarge = 6;
          if (!*pinned) {
            const size_t bytes = large * sizeof(float);
            size_t bucket = 1;  // the planner plans a call at its power-of-two bucket's end
            while (bucket < bytes) bucket *= 2;
            wantLarge = 2 * static_cast<size_t>(plannedSlices(4, 2, bucket));
            if (wantLarge <= 2)
              f.add("the model cuts %zu B in one slice; the test needs more", bytes);
          }
          if (smallMessages != wantSmall)
            f.add("rank %d: %zu efa messages for %zu floats, want %zu", rank, smallMessages, small,
                  wantSmall);
          if (largeMessages != wantLarge)
            f.add("rank %d: %zu efa messages for %zu floats, want %zu", rank, largeMessages, large,
                  wantLarge);
        });
    EXPECT_ALL_RANKS_OK(outcomes);
  }
}

// Chips 0, 1 and 10 of a trn2 node: ranks 0 and 1 are linked, rank 2 is linked to neither.
// Every rank must still choose the same algorithms (the planner's facts are the job's, not a
// rank's own peers'), or the all-reduces would wait on each other until the timeout.
TEST(NeuronLink, RanksWithAndWithoutLinksPlanAlike) {
  auto outcomes = withComm(
      3,
      [&](int /*rank*/) {
        usePreset("trn2.48xlarge");
        setenv("TRNCCL_NEURON_DEVICES", "0,1,10", 1);
        setenv("TRNCCL_TIMEOUT", "20", 1);
      },
      [&](Failures& f, trncclComm_t comm, int rank, int nranks) {
        allReduceAndCheck(f, comm, rank, nranks, 1000);
        allReduceAndCheck(f, comm, rank, nranks, (1u << 18) + 5);
      });
  EXPECT_ALL_RANKS_OK(outcomes);
}

// Node-aggregated all-to-all-v on 2 emulated nodes x 2 ranks, rank 1 sending rank 0 more than
// rank 0 expects: rank 0 reports the mismatch and nothing lands past its receive block.
TEST(NeuronLink, NodeAggregatedAllToAllvRefusesMismatchedCounts) {
  auto outcomes = runRanks(
      4,
      [&](int rank, int nranks, const trncclUniqueId& id) {
        setenv("TRNCCL_HOSTID", rank < 2 ? "a2a-a" : "a2a-b", 1);
        setenv("TRNCCL_ALGO", "alltoallv:hierarchical", 1);
        setenv("TRNCCL_TIMEOUT", "10", 1);
        setenv("FI_NET_IFACE", "lo", 1);
        setenv("FI_TCP_IFACE", "lo", 1);
        trncclComm_t comm = nullptr;
        std::string error = initComm(&comm, nranks, id, rank);
        if (!error.empty()) return error;
        std::vector<size_t> sendcounts(nranks, 2), recvcounts(nranks, 2), sd(nranks), rd(nranks);
        if (rank == 1) sendcounts[0] = 5;
        for (int q = 0; q < nranks; ++q) sd[q] = rd[q] = q * 8;  // room for 8 each
        std::vector<int> in(8 * nranks, rank), out(8 * nranks, -7);
        trncclResult_t rc = trncclAllToAllv(in.data(), sendcounts.data(), sd.data(), out.data(),
                                            recvcounts.data(), rd.data(), trncclInt32, comm);
        std::string result;
        if (rank == 0) {
          if (rc == trncclSuccess)
            result = "rank 0: the mismatched all-to-all-v succeeded";
          else if (std::string(trncclGetLastError(comm)).find("5") == std::string::npos &&
                   std::string(trncclGetLastError(comm)).find("20 bytes") == std::string::npos)
            result = std::string("rank 0: unexpected error: ") + trncclGetLastError(comm);
          for (int i = 2; i < 8; ++i)  // past the 2 elements rank 0 expects from rank 0's block
            if (out[i] != -7) result += " wrote past the block from rank 0";
          for (int i = 8 + 2; i < 16; ++i)
            if (out[i] != -7) result += " wrote past the block from rank 1";
        }
        trncclCommAbort(comm);
        return result;
      },
      60);
  EXPECT_ALL_RANKS_OK(outcomes);
}

}  // namespace
}  // namespace trnccl::testing
