// The efa transport itself between two endpoints of this process: striping over rails, the
// registration cache, reducing receives, rendezvous reads and their thresholds, posting order
// with a full budget, size mismatches, rail and provider choice. Loopback only. The
// communicator over efa (several rank processes) is in efa_comm_test.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "efa_support.hpp"
#include "transports/efa/efa_transport.hpp"

namespace trnccl {
namespace {

using namespace efa_test;

// Two transports in this process, ranks 0 and 1 of 2, connected to each other.
struct Pair {
  std::unique_ptr<efa::EfaTransport> a, b;
};

// Parameter: one of kSocketProviders.
class SocketTransport : public ::testing::TestWithParam<const char*> {};

// rendezvousA/B: each side's TRNCCL_EFA_RNDV_BYTES (0 = eager only).
// maxQueued: EfaOptions::maxQueued (0 = the provider's queue sizes).
Pair connectedPair(const std::string& provider, int rails, size_t rendezvousA = 0,
                   size_t rendezvousB = 0,
                   efa::EfaOptions::UserMrCache userMrCache = efa::EfaOptions::UserMrCache::kAuto,
                   size_t maxQueued = 0) {
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  Pair p;
  efa::EfaOptions options;
  options.maxQueued = maxQueued;
  options.userMrCache = userMrCache;
  options.provider = provider;
  options.rails = rails;
  options.rendezvousBytes = rendezvousA;
  auto a = efa::EfaTransport::open(0, 2, options);
  options.rendezvousBytes = rendezvousB;
  auto b = efa::EfaTransport::open(1, 2, options);
  EXPECT_TRUE(a.isOk()) << a.status().message();
  EXPECT_TRUE(b.isOk()) << b.status().message();
  if (!a.isOk() || !b.isOk()) return p;
  p.a = std::move(a.value());
  p.b = std::move(b.value());
  std::vector<std::string> blobs = {p.a->addressBlob(), p.b->addressBlob()};
  EXPECT_TRUE(p.a->connect(blobs).isOk());
  EXPECT_TRUE(p.b->connect(blobs).isOk());
  return p;
}

// One message from rank 0 (transport a) to rank 1 (transport b): a send of sendBytes from src
// and a receive of recvBytes into dst.
struct Message {
  TransferOp send, recv;
};
Message aToB(const void* src, size_t sendBytes, void* dst, size_t recvBytes) {
  Message m;
  m.send.peer = 1;
  m.send.src = src;
  m.send.bytes = sendBytes;
  m.recv.peer = 0;
  m.recv.dst = dst;
  m.recv.bytes = recvBytes;
  return m;
}

// Progresses one send and one receive until both complete (or 20 s pass).
std::string transfer(Pair& p, TransferOp& send, TransferOp& recv) {
  auto start = Clock::now();
  bool sent = false, received = false;
  while (!sent || !received) {
    if (!sent) {
      auto r = p.a->progressSend(send);
      if (!r.isOk()) return "send: " + r.status().message();
      sent = r.value();
    }
    if (!received) {
      auto r = p.b->progressRecv(recv);
      if (!r.isOk()) return "recv: " + r.status().message();
      received = r.value();
    }
    if (since(start) > 20) return "transfer did not finish in 20 s";
  }
  return "";
}

TEST_P(SocketTransport, StripesLargeMessagesOverRailsAndCachesRegistrations) {
  const char* provider = GetParam();
  Pair p = connectedPair(provider, 3);
  ASSERT_TRUE(p.a && p.b);
  EXPECT_TRUE(contains(p.a->describe(), "3 rail(s)")) << p.a->describe();
  std::vector<float> src(3 << 20), dst(src.size(), -1.0f);  // 12 MiB: 24 fragments
  std::iota(src.begin(), src.end(), 0.0f);
  for (int round = 0; round < 2; ++round) {
    auto [send, recv] =
        aToB(src.data(), src.size() * sizeof(float), dst.data(), dst.size() * sizeof(float));
    ASSERT_EQ(transfer(p, send, recv), "");
    ASSERT_EQ(std::memcmp(src.data(), dst.data(), send.bytes), 0) << "round " << round;
  }
  for (size_t r = 0; r < 3; ++r)
    EXPECT_EQ(p.a->fragmentsPerRail()[r], 16u) << "rail " << r << " of the sender";
  // Same buffers both rounds: one registration per rail each side, then cache hits; plus the
  // control slots' chunk on rail 0 (the failure-notice receive posted at connect uses it).
  EXPECT_EQ(p.a->registrations(), 3u + 1);
  EXPECT_EQ(p.a->registrationHits(), 3u);
  EXPECT_EQ(p.b->registrations(), 3u + 1);
}

// A rank that fails tells a peer waiting on it why: a failure notice, which over ofi_rxm --
// whose failed endpoints stay open -- is the only thing that reaches the peer before its
// timeout. Over net the endpoint then closes, and the reset may be what the peer reads first.
TEST_P(SocketTransport, FailureNoticeReachesAPeerWaitingOnTheFailedRank) {
  const std::string provider = GetParam();
  Pair p = connectedPair(provider, 2);
  ASSERT_TRUE(p.a && p.b);
  std::vector<float> data(1024, 0.0f);
  TransferOp recv;  // rank 0 waits for a message rank 1 will never send
  recv.peer = 1;
  recv.dst = data.data();
  recv.bytes = data.size() * sizeof(float);
  auto first = p.a->progressRecv(recv);
  ASSERT_TRUE(first.isOk() && !first.value());
  // Rank 0 keeps progressing meanwhile, as a real peer would: the notice may need a
  // connection made first, and that takes both sides' progress. The communicator's health
  // check reads peerFailure(); a transport error (a reset, over net) may come instead.
  std::string error;
  bool completed = false;
  std::thread waiter([&] {
    for (auto start = Clock::now(); error.empty() && !completed && since(start) < 5;) {
      auto r = p.a->progressRecv(recv);
      completed = r.isOk() && r.value();
      if (!r.isOk()) error = r.status().message();
      if (!p.a->peerFailure().isOk()) error = p.a->peerFailure().message();
    }
  });
  p.b->fail(1, "rank 1 ran out of patience");
  waiter.join();
  EXPECT_FALSE(completed) << "a receive completed from a rank that never sent";
  if (provider == "tcp;ofi_rxm") {
    EXPECT_EQ(error, "stopped because rank 1 failed: rank 1 ran out of patience");
    EXPECT_EQ(p.a->noticeOrigin(), 1);
  } else {
    EXPECT_TRUE(contains(error, "rank 1")) << error;
  }
  p.b.reset();
  p.a.reset();
}

// A failure in the middle of a large transfer: the failed side progresses no more and both
// destroy without crashing. Over ofi_rxm the failed endpoints are left open (closing them after
// a peer reset crashes libfabric 1.17's ofi_rxm); over net they close.
TEST_P(SocketTransport, FailureMidTransferLeftOpenEndpointsDestroyCleanly) {
  const std::string provider = GetParam();
  Pair p = connectedPair(provider, 2, 1 << 20, 1 << 20);
  ASSERT_TRUE(p.a && p.b);
  std::vector<float> src(4 << 20, 1.0f), dst(src.size(), -1.0f);  // 16 MiB: rendezvous on rxm
  auto [send, recv] =
      aToB(src.data(), src.size() * sizeof(float), dst.data(), dst.size() * sizeof(float));
  auto sent = p.a->progressSend(send);
  auto received = p.b->progressRecv(recv);
  ASSERT_TRUE(sent.isOk() && received.isOk());
  ASSERT_FALSE(received.value()) << "16 MiB arrived in one progress call: nothing in flight";
  p.b->fail(1, "rank 1 failed mid-transfer");
  EXPECT_EQ(p.b->endpointsLeftOpen(), provider == "tcp;ofi_rxm");
  EXPECT_FALSE(p.b->progressRecv(recv).isOk()) << "a failed transport still progresses";
  p.b.reset();
  for (int pass = 0; pass < 100; ++pass) (void)p.a->progressSend(send);
  p.a->fail(0, "rank 0 lost rank 1");
  EXPECT_EQ(p.a->endpointsLeftOpen(), provider == "tcp;ofi_rxm");
  p.a.reset();
  // What was not received is not written afterwards, even by a provider left open.
  const size_t landed = std::count(dst.begin(), dst.end(), 1.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(static_cast<size_t>(std::count(dst.begin(), dst.end(), 1.0f)), landed);
}

// Where registration pins pages (EFA), a cached registration could outlive a freed buffer, so
// user buffers are registered per message there. Forced here over tcp, eager and rendezvous:
// every message registers its buffer on each rail, nothing is served from the cache, and no
// registration is left open once the messages complete (each closes with its message).
TEST(EfaTransport, RegistersUserBuffersPerMessageWhenNotCaching) {
  for (size_t rendezvous : {size_t{0}, size_t{64} << 10}) {
    Pair p =
        connectedPair("tcp;ofi_rxm", 2, rendezvous, rendezvous, efa::EfaOptions::UserMrCache::kOff);
    ASSERT_TRUE(p.a && p.b);
    EXPECT_FALSE(p.a->cachesUserRegistrations());
    EXPECT_TRUE(contains(p.a->describe(), "registered per message")) << p.a->describe();
    size_t before = 0;  // after the first round, which also registers the control slots
    std::vector<int32_t> src(1 << 20), dst(src.size());
    for (int round = 0; round < 3; ++round) {
      std::iota(src.begin(), src.end(), round * 7);
      std::fill(dst.begin(), dst.end(), -1);
      auto [send, recv] =
          aToB(src.data(), src.size() * sizeof(int32_t), dst.data(), dst.size() * sizeof(int32_t));
      ASSERT_EQ(transfer(p, send, recv), "");
      ASSERT_EQ(src, dst) << "round " << round << ", rendezvous " << rendezvous;
      EXPECT_EQ(p.a->transientRegistrations(), 0u) << "round " << round;
      EXPECT_EQ(p.b->transientRegistrations(), 0u) << "round " << round;
      if (round == 0) before = p.a->registrations();
    }
    // 4 MiB over 2 rails: each later message registered its buffer once per rail again.
    EXPECT_EQ(p.a->registrations() - before, 2u * 2);
    EXPECT_EQ(p.a->registrationHits(), 0u);
    if (rendezvous) {
      EXPECT_EQ(p.b->rendezvousReceives(), 3u);
    }
  }
  // The default caches where the provider does not pin (tcp: MR mode none).
  Pair cached = connectedPair("tcp;ofi_rxm", 1);
  ASSERT_TRUE(cached.a);
  EXPECT_TRUE(cached.a->cachesUserRegistrations()) << cached.a->describe();
}

// trncclCommRegister's transport half: with per-message registration forced (as on EFA), a
// buffer the user registered is served by that registration, eager and rendezvous, so later
// messages register nothing. It cannot be deregistered while a message uses it; afterwards
// messages register per message again.
TEST(EfaTransport, UserRegisteredBuffersAreUsedWhateverTheCachePolicy) {
  for (size_t rendezvous : {size_t{0}, size_t{64} << 10}) {
    Pair p =
        connectedPair("tcp;ofi_rxm", 2, rendezvous, rendezvous, efa::EfaOptions::UserMrCache::kOff);
    ASSERT_TRUE(p.a && p.b);
    std::vector<int32_t> src(1 << 20), dst(src.size());
    const size_t bytes = src.size() * sizeof(int32_t);
    // Registered a little wider than the messages, as a framework registers a whole pool.
    auto mine = p.a->registerUserBuffer(src.data(), bytes);
    auto theirs = p.b->registerUserBuffer(dst.data(), bytes);
    ASSERT_TRUE(mine.isOk() && theirs.isOk());
    EXPECT_EQ(mine.value().perRail.size(), 2u);
    EXPECT_EQ(p.a->userRegistrations(), 1u);
    size_t before = 0, hitsBefore = 0;
    for (int round = 0; round < 3; ++round) {
      std::iota(src.begin(), src.end(), round * 5);
      std::fill(dst.begin(), dst.end(), -1);
      // Inside the registered range, not at its start.
      auto [send, recv] = aToB(src.data() + 1024, bytes - 8192, dst.data() + 1024, bytes - 8192);
      ASSERT_EQ(transfer(p, send, recv), "");
      ASSERT_TRUE(std::equal(src.begin() + 1024, src.end() - 1024, dst.begin() + 1024))
          << "round " << round << ", rendezvous " << rendezvous;
      EXPECT_EQ(dst[0], -1);
      if (round == 0) {
        before = p.a->registrations() + p.b->registrations();
        hitsBefore = p.a->registrationHits();
      }
    }
    EXPECT_EQ(p.a->registrations() + p.b->registrations(), before)
        << "later messages registered their buffers although the user had";
    EXPECT_EQ(p.a->registrationHits() - hitsBefore, 2u * 2) << "2 messages x 2 rails";
    EXPECT_EQ(p.a->transientRegistrations(), 0u);

    // In flight: the send is posted; 4 MiB cannot complete before the receiver has run.
    auto [send, recv] = aToB(src.data(), bytes, dst.data(), bytes);
    auto posted = p.a->progressSend(send);
    ASSERT_TRUE(posted.isOk());
    ASSERT_FALSE(posted.value());
    Status busy = p.a->deregisterUserBuffer(mine.value());
    EXPECT_EQ(busy.code(), Code::kInvalidUsage) << busy.message();
    EXPECT_TRUE(contains(busy.message(), "still in use")) << busy.message();
    EXPECT_EQ(p.a->userRegistrations(), 1u) << "a refused deregistration left a rail closed";
    ASSERT_EQ(transfer(p, send, recv), "");
    EXPECT_TRUE(p.a->deregisterUserBuffer(mine.value()).isOk());
    EXPECT_TRUE(p.b->deregisterUserBuffer(theirs.value()).isOk());
    EXPECT_EQ(p.a->userRegistrations(), 0u);
    Status again = p.a->deregisterUserBuffer(mine.value());
    EXPECT_EQ(again.code(), Code::kInvalidArgument) << again.message();

    const size_t afterDeregistering = p.a->registrations();
    auto [send2, recv2] = aToB(src.data(), bytes, dst.data(), bytes);
    ASSERT_EQ(transfer(p, send2, recv2), "");
    EXPECT_EQ(p.a->registrations() - afterDeregistering, 2u) << "per message again, 2 rails";
  }
}

// Sends `count` int32 (i * a) from a to b, whose receive sums them into its own (b - i);
// returns "" or the first error or wrong element. Out of place the fragments land in the
// output and are reduced there; in place (the output is the local operand) they must go
// through staging, or the local values would be overwritten before they are read.
std::string reducingTransfer(Pair& p, size_t count, int32_t a, int32_t b, bool inPlace = false) {
  std::vector<int32_t> incoming(count), local(count), separate(count, 0);
  for (size_t i = 0; i < count; ++i) {
    incoming[i] = static_cast<int32_t>(i * a);
    local[i] = static_cast<int32_t>(b - i);
  }
  std::vector<int32_t>& out = inPlace ? local : separate;
  auto [send, recv] = aToB(incoming.data(), count * 4, out.data(), count * 4);
  recv.action.kind = RecvAction::Kind::kReduce;
  recv.action.dtype = trncclInt32;
  recv.action.op = trncclSum;
  recv.action.local = local.data();
  std::string error = transfer(p, send, recv);
  if (!error.empty()) return error;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != static_cast<int32_t>(i * a + b - i))
      return "element " + std::to_string(i) + " is " + std::to_string(out[i]);
  return "";
}

TEST_P(SocketTransport, ReducingReceiveFoldsEveryFragmentIn) {
  const char* provider = GetParam();
  Pair p = connectedPair(provider, 2);
  ASSERT_TRUE(p.a && p.b);
  for (bool inPlace : {false, true}) {
    SCOPED_TRACE(inPlace ? "in place (staged)" : "out of place (in the destination)");
    EXPECT_EQ(reducingTransfer(p, (5 << 20) / 4 + 3, 3, 7, inPlace), "");  // ragged end
  }
}

// One message from a to b; returns "" or the first error, and checks the bytes arrived.
std::string sendBytes(Pair& p, size_t bytes, size_t receiverBytes = 0) {
  std::vector<unsigned char> src(bytes), dst(receiverBytes ? receiverBytes : bytes, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  auto [send, recv] = aToB(src.data(), src.size(), dst.data(), dst.size());
  std::string error = transfer(p, send, recv);
  if (error.empty() && std::memcmp(src.data(), dst.data(), bytes) != 0) return "data differs";
  return error;
}

// Over a provider with FI_RMA, 3 rails.
void checkRendezvousReads(const char* provider) {
  Pair p = connectedPair(provider, 3, 1 << 20, 1 << 20);
  ASSERT_TRUE(p.a && p.b);
  EXPECT_TRUE(contains(p.a->describe(), "rendezvous reads from 1048576 B")) << p.a->describe();
  ASSERT_EQ(p.b->rendezvousBytesWith(0), 1u << 20);
  std::vector<float> src(3 << 20), dst(src.size(), -1.0f);  // 12 MiB: 24 fragments
  std::iota(src.begin(), src.end(), 0.0f);
  for (int round = 0; round < 2; ++round) {
    auto [send, recv] =
        aToB(src.data(), src.size() * sizeof(float), dst.data(), dst.size() * sizeof(float));
    ASSERT_EQ(transfer(p, send, recv), "");
    ASSERT_EQ(std::memcmp(src.data(), dst.data(), send.bytes), 0) << "round " << round;
    std::fill(dst.begin(), dst.end(), -1.0f);
  }
  EXPECT_EQ(p.b->rendezvousReceives(), 2u);
  // The receiver pulled every fragment (8 per rail per round); the sender moved none.
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(p.b->fragmentsPerRail()[r], 16u) << "rail " << r << " of the receiver";
    EXPECT_EQ(p.a->fragmentsPerRail()[r], 0u) << "rail " << r << " of the sender";
  }
  // Below the threshold the same pair sends eagerly.
  EXPECT_EQ(sendBytes(p, (1 << 20) - 1), "");
  EXPECT_EQ(p.b->rendezvousReceives(), 2u);
  EXPECT_EQ(sendBytes(p, 1 << 20), "");
  EXPECT_EQ(p.b->rendezvousReceives(), 3u);
}

TEST_P(SocketTransport, RendezvousReadsLargeMessagesStripedOverRails) {
  checkRendezvousReads(GetParam());
}

TEST(EfaTransport, RendezvousReadsLargeMessagesStripedOverRailsOverShm) {
  checkRendezvousReads("shm");
}

TEST_P(SocketTransport, RendezvousReducingReceiveReadsIntoPlaceOrStaging) {
  const char* provider = GetParam();
  Pair p = connectedPair(provider, 2, 1 << 20, 1 << 20);
  ASSERT_TRUE(p.a && p.b);
  // More fragments than the staging window, and a ragged end.
  EXPECT_EQ(reducingTransfer(p, (9 << 20) / 4 + 5, 5, 3), "");
  EXPECT_EQ(reducingTransfer(p, (9 << 20) / 4 + 5, 5, 3, /*inPlace=*/true), "");
  EXPECT_EQ(p.b->rendezvousReceives(), 2u);
}

// Several messages to one peer at once with the budget full: a pass that finds no room for
// one message's next fragment reads completions, and the room that frees must not go to a later
// message first. net reads each connection in order and waits, without reading further, for
// a receive that matches what comes next; a receiver whose budget held later fragments while
// the sender's stream had an earlier one first deadlocked (fabric_pingpong, net, eager
// stream of 16 x 16 MiB: both ranks spun for 18 minutes). Budgets of 8 here, 8 messages of 9
// fragments each way, both ends posting in the same order as the engine does.
void manyMessagesOneWay(Pair& p, size_t rendezvous) {
  constexpr int kMessages = 8;
  const size_t bytes = (9u << 19) - 12;  // 9 fragments of 512 KiB, the last one short
  std::vector<std::vector<unsigned char>> src(kMessages), dst(kMessages);
  std::vector<TransferOp> sends(kMessages), recvs(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    src[i].resize(bytes);
    for (size_t j = 0; j < bytes; ++j) src[i][j] = static_cast<unsigned char>(j * 13 + i);
    dst[i].assign(bytes, 0);
    auto [send, recv] = aToB(src[i].data(), bytes, dst[i].data(), bytes);
    sends[i] = send;
    recvs[i] = recv;
  }
  std::vector<bool> sent(kMessages), received(kMessages);
  auto start = Clock::now();
  for (int left = 2 * kMessages; left > 0;) {
    for (int i = 0; i < kMessages; ++i) {
      if (!sent[i]) {
        auto r = p.a->progressSend(sends[i]);
        ASSERT_TRUE(r.isOk()) << r.status().message();
        if (r.value()) sent[i] = true, --left;
      }
    }
    for (int i = 0; i < kMessages; ++i) {
      if (!received[i]) {
        auto r = p.b->progressRecv(recvs[i]);
        ASSERT_TRUE(r.isOk()) << r.status().message();
        if (r.value()) received[i] = true, --left;
      }
    }
    ASSERT_TRUE(p.a->endPass().isOk());
    ASSERT_TRUE(p.b->endPass().isOk());
    ASSERT_LT(since(start), 20) << "8 messages of 4.5 MiB did not arrive in 20 s (rendezvous "
                                << rendezvous << ")";
  }
  for (int i = 0; i < kMessages; ++i) EXPECT_EQ(src[i], dst[i]) << "message " << i;
}

TEST_P(SocketTransport, ManyMessagesToOnePeerWithAFullBudgetAllArrive) {
  for (size_t rendezvous : {size_t{0}, size_t{1} << 20}) {
    Pair p = connectedPair(GetParam(), 1, rendezvous, rendezvous,
                           efa::EfaOptions::UserMrCache::kAuto, /*maxQueued=*/8);
    ASSERT_TRUE(p.a && p.b);
    manyMessagesOneWay(p, rendezvous);
  }
}

// Each side computes the pair's threshold from both published values: the larger one, or
// off when either side has it off. Both sides then pick the same protocol for every size.
TEST(EfaTransport, RendezvousThresholdIsAgreedPerPair) {
  {
    Pair p = connectedPair("tcp;ofi_rxm", 1, 1 << 20, 4 << 20);
    ASSERT_TRUE(p.a && p.b);
    EXPECT_EQ(p.a->rendezvousBytesWith(1), 4u << 20);
    EXPECT_EQ(p.b->rendezvousBytesWith(0), 4u << 20);
    EXPECT_EQ(sendBytes(p, 2 << 20), "");
    EXPECT_EQ(p.b->rendezvousReceives(), 0u);
    EXPECT_EQ(sendBytes(p, 4 << 20), "");
    EXPECT_EQ(p.b->rendezvousReceives(), 1u);
  }
  {
    Pair p = connectedPair("tcp;ofi_rxm", 1, 0, 1 << 20);
    ASSERT_TRUE(p.a && p.b);
    EXPECT_EQ(p.b->rendezvousBytesWith(0), 0u);
    EXPECT_EQ(sendBytes(p, 4 << 20), "");
    EXPECT_EQ(p.b->rendezvousReceives(), 0u);
  }
}

// TRNCCL_EFA_RNDV_BYTES=auto: net streams a message behind its header and carries RMA reads
// over the same socket, so a rendezvous there only adds a round trip: eager only. Through
// ofi_rxm (whose own eager limit is 16 KiB) and elsewhere, reads from 1 MiB.
TEST_P(SocketTransport, RendezvousThresholdDefaultsByProvider) {
  const std::string provider = GetParam();
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  efa::EfaOptions options;
  options.provider = provider;
  options.rails = 1;
  auto byDefault = efa::EfaTransport::open(0, 2, options);
  ASSERT_TRUE(byDefault.isOk()) << byDefault.status().message();
  const std::string expected = provider == "net"
                                   ? "rendezvous off (provider default)"
                                   : "rendezvous reads from 1048576 B (provider default)";
  EXPECT_TRUE(contains(byDefault.value()->describe(), expected)) << byDefault.value()->describe();
  options.rendezvousBytes = 64 << 10;
  auto chosen = efa::EfaTransport::open(0, 2, options);
  ASSERT_TRUE(chosen.isOk()) << chosen.status().message();
  EXPECT_TRUE(
      contains(chosen.value()->describe(), "rendezvous reads from 65536 B (TRNCCL_EFA_RNDV_BYTES)"))
      << chosen.value()->describe();
}

TEST(EfaTransport, RendezvousSettingIsReadAsTheRegistrySays) {
  EXPECT_EQ(efa::defaultRendezvousBytes("net"), 0u);
  EXPECT_EQ(efa::defaultRendezvousBytes("tcp"), 0u);
  EXPECT_EQ(efa::defaultRendezvousBytes("tcp;ofi_rxm"), 1u << 20);
  EXPECT_EQ(efa::defaultRendezvousBytes("efa"), 1u << 20);
  EXPECT_EQ(efa::defaultRendezvousBytes("shm"), 1u << 20);
  unsetenv("TRNCCL_EFA_RNDV_BYTES");
  EXPECT_FALSE(efa::EfaOptions::fromEnvironment().value().rendezvousBytes.has_value());
  setenv("TRNCCL_EFA_RNDV_BYTES", "auto", 1);
  EXPECT_FALSE(efa::EfaOptions::fromEnvironment().value().rendezvousBytes.has_value());
  setenv("TRNCCL_EFA_RNDV_BYTES", "4M", 1);
  EXPECT_EQ(efa::EfaOptions::fromEnvironment().value().rendezvousBytes, size_t{4} << 20);
  setenv("TRNCCL_EFA_RNDV_BYTES", "0", 1);
  EXPECT_EQ(efa::EfaOptions::fromEnvironment().value().rendezvousBytes, size_t{0});
  for (const char* bad : {"-1", "lots"}) {
    setenv("TRNCCL_EFA_RNDV_BYTES", bad, 1);
    auto options = efa::EfaOptions::fromEnvironment();
    ASSERT_FALSE(options.isOk()) << bad;
    EXPECT_TRUE(contains(options.status().message(), "TRNCCL_EFA_RNDV_BYTES")) << bad;
  }
  unsetenv("TRNCCL_EFA_RNDV_BYTES");
}

TEST_P(SocketTransport, RendezvousSizeMismatchIsAnErrorEitherWay) {
  const char* provider = GetParam();
  Pair p = connectedPair(provider, 1, 1 << 20, 1 << 20);
  ASSERT_TRUE(p.a && p.b);
  // Both sides over the threshold: the announcement says how much was sent.
  std::string error = sendBytes(p, 2 << 20, 3 << 20);
  EXPECT_TRUE(contains(error,
                       "rank 0 sent a message of a different size than the 3145728 "
                       "bytes rank 1 expected"))
      << error;
  // Sender over the threshold, receiver under it: an announcement arrives instead of data.
  Pair q = connectedPair(provider, 1, 1 << 20, 1 << 20);
  ASSERT_TRUE(q.a && q.b);
  error = sendBytes(q, 2 << 20, 512 << 10);
  EXPECT_TRUE(contains(error, "different size than the 524288 bytes")) << error;
}

TEST_P(SocketTransport, ShorterMessageThanExpectedIsAMismatchNotAHang) {
  const char* provider = GetParam();
  Pair p = connectedPair(provider, 1);
  ASSERT_TRUE(p.a && p.b);
  std::vector<char> src(1000, 1), dst(4000, 0);
  auto [send, recv] = aToB(src.data(), src.size(), dst.data(), dst.size());
  std::string error = transfer(p, send, recv);
  EXPECT_TRUE(contains(error,
                       "rank 0 sent a message of a different size than the 4000 bytes "
                       "rank 1 expected"))
      << error;
}

// The sender's first fragment fits the receiver's whole buffer exactly: only the size carried
// with every fragment tells the receiver that more was sent.
TEST_P(SocketTransport, LongerMessageInWholeFragmentsIsAMismatch) {
  const char* provider = GetParam();
  Pair p = connectedPair(provider, 1);
  ASSERT_TRUE(p.a && p.b);
  std::vector<char> src(1 << 20, 1), dst(512 << 10, 0);
  auto [send, recv] = aToB(src.data(), src.size(), dst.data(), dst.size());
  auto start = Clock::now();
  std::string error;
  while (error.empty() && since(start) < 20) {
    auto r = p.b->progressRecv(recv);
    if (!r.isOk()) error = r.status().message();
    (void)p.a->progressSend(send);
  }
  EXPECT_TRUE(contains(error, "different size than the 524288 bytes")) << error;
}

// A fabricated fi_getinfo answer: one tcp-style info per (interface, IPv4 address, network).
efa::InfoPtr socketInfos(const std::vector<std::array<const char*, 3>>& interfaces) {
  fi_info* head = nullptr;
  fi_info** tail = &head;
  for (const auto& [name, address, network] : interfaces) {
    fi_info* info = fi_allocinfo();
    info->domain_attr->name = strdup(name);
    info->fabric_attr->name = strdup(network);
    info->addr_format = FI_SOCKADDR_IN;
    auto* in = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
    in->sin_family = AF_INET;
    inet_pton(AF_INET, address, &in->sin_addr);
    info->src_addr = in;
    info->src_addrlen = sizeof(sockaddr_in);
    *tail = info;
    tail = &info->next;
  }
  return efa::InfoPtr(head);
}

std::vector<std::string> domainNames(const std::vector<fi_info*>& infos) {
  std::vector<std::string> names;
  for (const fi_info* i : infos) names.push_back(i->domain_attr->name);
  return names;
}

// Every rail's address is published to peers on other hosts: rails stay off loopback and off
// other networks than the first interface's (a container bridge), unless loopback is all
// there is (one machine).
TEST(EfaTransport, RailsUseOnlyInterfacesOtherHostsCanReach) {
  auto hosts = socketInfos({{"veth0", "10.251.1.1", "10.251.1.0/24"},
                            {"lo", "127.0.0.1", "127.0.0.0/8"},
                            {"docker0", "172.17.0.1", "172.17.0.0/16"},
                            {"eth1", "10.251.1.7", "10.251.1.0/24"}});
  EXPECT_EQ(domainNames(efa::railCandidates(hosts.get())),
            (std::vector<std::string>{"veth0", "eth1"}));
  auto loopbackOnly = socketInfos({{"lo", "127.0.0.1", "127.0.0.0/8"}});
  EXPECT_EQ(domainNames(efa::railCandidates(loopbackOnly.get())), (std::vector<std::string>{"lo"}));
}

TEST(EfaTransport, UnknownProviderListsWhatFiGetinfoOffers) {
  efa::EfaOptions options;
  options.provider = "no-such-provider";
  options.rails = 1;
  auto t = efa::EfaTransport::open(0, 2, options);
  ASSERT_FALSE(t.isOk());
  const std::string text = t.status().message();
  EXPECT_TRUE(contains(text, "no-such-provider")) << text;
  EXPECT_TRUE(contains(text, "fi_getinfo offers")) << text;
  EXPECT_TRUE(contains(text, "tcp;ofi_rxm")) << text;
  EXPECT_TRUE(contains(text, "TRNCCL_FI_PROVIDER")) << text;
}

// Without TRNCCL_FI_PROVIDER, TCP goes by the provider's own reliable datagrams (net) rather
// than through ofi_rxm: the default order asks for net's own endpoints, not the "net;ofi_rxm"
// fi_getinfo also answers with, and pinned to lo it stays on loopback.
TEST(EfaTransport, DefaultProviderOverTcpIsNetWithoutRxm) {
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  auto choice = efa::chooseProvider("", 0);
  ASSERT_TRUE(choice.isOk()) << choice.status().message();
  ASSERT_FALSE(choice.value().use.empty());
  for (const fi_info* rail : choice.value().use) {
    EXPECT_STREQ(rail->fabric_attr->prov_name, "net");
    EXPECT_STREQ(rail->domain_attr->name, "lo");
  }
  // Asked for by name, "net" is libfabric's answer as it stands (layered ones included).
  auto named = efa::chooseProvider("net", 1);
  ASSERT_TRUE(named.isOk()) << named.status().message();
}

INSTANTIATE_TEST_SUITE_P(Providers, SocketTransport, ::testing::ValuesIn(kSocketProviders),
                         providerName);

}  // namespace
}  // namespace trnccl
