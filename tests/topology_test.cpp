// NIC locality from hwloc topologies: a fixture of a two-socket host with two EFA devices per
// socket (tests/fixtures), and this machine's own topology.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/nic_locality.hpp"

namespace trnccl::topology {
namespace {

const std::string kFixture = std::string(TRNCCL_FIXTURES_DIR) + "/trn_two_numa_four_efa.xml";

// The fixture's EFA devices as libfabric's efa provider names its RDM domains.
std::vector<NicCandidate> efaDomains() {
  std::vector<NicCandidate> nics;
  for (const char* name :
       {"rdmap16s27-rdm", "rdmap32s27-rdm", "rdmap144s27-rdm", "rdmap160s27-rdm"}) {
    NicCandidate nic;
    nic.name = name;
    nics.push_back(nic);
  }
  return nics;
}

std::vector<size_t> near(const HostTopology& host, const std::vector<NicCandidate>& nics,
                         const std::string& cpus) {
  auto result = host.nearNics(nics, cpus);
  EXPECT_TRUE(result.isOk()) << result.status().message();
  return result.isOk() ? result.value() : std::vector<size_t>{};
}

TEST(NicLocality, RankGetsTheNicsOfItsOwnSocket) {
  auto host = HostTopology::load(kFixture);
  ASSERT_TRUE(host.isOk()) << host.status().message();
  const auto nics = efaDomains();
  EXPECT_EQ(near(*host.value(), nics, "0"), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(near(*host.value(), nics, "0-1"), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(near(*host.value(), nics, "3"), (std::vector<size_t>{2, 3}));
  // A rank spread over both sockets is near all four.
  EXPECT_EQ(near(*host.value(), nics, "1-2"), (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(NicLocality, PciBusIdFindsTheDeviceWhateverItsName) {
  auto host = HostTopology::load(kFixture);
  ASSERT_TRUE(host.isOk()) << host.status().message();
  std::vector<NicCandidate> nics(2);
  nics[0].name = "efa_0";  // names hwloc does not know; the bus ids place them
  nics[0].hasPci = true;
  nics[0].pciBus = 0x10;
  nics[0].pciDevice = 0x1b;
  nics[1].name = "efa_2";
  nics[1].hasPci = true;
  nics[1].pciBus = 0x90;
  nics[1].pciDevice = 0x1b;
  EXPECT_EQ(near(*host.value(), nics, "2"), (std::vector<size_t>{1}));
  EXPECT_EQ(near(*host.value(), nics, "0"), (std::vector<size_t>{0}));
}

TEST(NicLocality, UnplacedNicsCountAsNearAndNoneNearMeansAll) {
  auto host = HostTopology::load(kFixture);
  ASSERT_TRUE(host.isOk()) << host.status().message();
  auto nics = efaDomains();
  NicCandidate loopback;
  loopback.name = "lo";
  nics.push_back(loopback);
  EXPECT_EQ(near(*host.value(), nics, "0"), (std::vector<size_t>{0, 1, 4}));
  // Only far NICs: the rank still gets rails, all of them.
  std::vector<NicCandidate> far(nics.begin() + 2, nics.begin() + 4);
  EXPECT_EQ(near(*host.value(), far, "0"), (std::vector<size_t>{0, 1}));
}

TEST(NicLocality, BadInputsAreNamed) {
  auto missing = HostTopology::load("/nonexistent/topo.xml");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("TRNCCL_TOPO_XML=/nonexistent/topo.xml"),
            std::string::npos)
      << missing.status().message();
  auto host = HostTopology::load(kFixture);
  ASSERT_TRUE(host.isOk());
  auto bad = host.value()->nearNics(efaDomains(), "zero-to-three");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("not a CPU list"), std::string::npos);
}

// This machine: discovery works, and with no binding every NIC is near.
TEST(NicLocality, ThisMachinesTopologyLoads) {
  auto host = HostTopology::load("");
  ASSERT_TRUE(host.isOk()) << host.status().message();
  std::vector<NicCandidate> nics(2);
  nics[0].name = "lo";
  nics[1].name = "eth0";
  auto result = host.value()->nearNics(nics, "");
  ASSERT_TRUE(result.isOk()) << result.status().message();
  EXPECT_EQ(result.value(), (std::vector<size_t>{0, 1}));
}

}  // namespace
}  // namespace trnccl::topology
