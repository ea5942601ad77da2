// libfabric point-to-point, raw and through trnccl's efa transport, side by side in one run
// (fabtests fi_rdm_pingpong / fi_rdm_bw style). Both endpoints live in this process and one
// thread drives both, for the raw calls and for the transport alike, so the ratio between the
// two rows of a size is the transport's own overhead (tags, fragments, registration cache,
// bookkeeping), not scheduling noise.
//
// Provider: shm. tcp;ofi_rxm is measured across processes only (the perf tools with
// TRNCCL_TRANSPORT=efa): driven from one thread inside one process, messages of 64 KiB and more
// stall about 130 ms each, raw calls and transport alike (measured 2026-12-02; rxm's
// rendezvous path), which says nothing about either. BM_*/SIZE/1 rows are shm.
#include <benchmark/benchmark.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "transports/efa/efa_transport.hpp"
#include "transports/efa/fabric.hpp"

namespace {

using namespace trnccl;

const char* providerName(int64_t index) {
  return index == 0 ? "tcp;ofi_rxm" : "shm";
}

// Two raw RDM endpoints that know each other.
struct RawPair {
  efa::ProviderChoice choiceA, choiceB;
  std::unique_ptr<efa::Rail> a, b;
  fi_addr_t aToB = FI_ADDR_NOTAVAIL, bToA = FI_ADDR_NOTAVAIL;
  bool ok = false;
};

std::unique_ptr<RawPair> rawPair(const char* provider) {
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  auto p = std::make_unique<RawPair>();
  auto ca = efa::chooseProvider(provider, 1);
  auto cb = efa::chooseProvider(provider, 1);
  if (!ca.isOk() || !cb.isOk()) return p;
  p->choiceA = std::move(ca.value());
  p->choiceB = std::move(cb.value());
  auto ra = efa::openRail(p->choiceA.use[0]);
  auto rb = efa::openRail(p->choiceB.use[0]);
  if (!ra.isOk() || !rb.isOk()) return p;
  p->a = std::move(ra.value());
  p->b = std::move(rb.value());
  auto ab = efa::insertAddresses(*p->a, {"", p->b->address});
  auto ba = efa::insertAddresses(*p->b, {p->a->address, ""});
  if (!ab.isOk() || !ba.isOk()) return p;
  p->aToB = ab.value()[1];
  p->bToA = ba.value()[0];
  p->ok = true;
  return p;
}

// Reads completions until `want` arrived on cq (spinning, as a progress engine would).
bool reap(fid_cq* cq, int want, fid_cq* other) {
  fi_cq_tagged_entry entries[16];
  while (want > 0) {
    ssize_t n = fi_cq_read(cq, entries, 16);
    if (n > 0) want -= static_cast<int>(n);
    if (n < 0 && n != -FI_EAGAIN) return false;
    if (other) (void)fi_cq_read(other, entries, 0);  // progress the peer side too
  }
  return true;
}

// Posts with retries: FI_EAGAIN (queues full, or a connection still being set up) means
// "progress and try again", exactly as the transport treats it.
template <typename Post>
bool posted(Post post, fid_cq* a, fid_cq* b) {
  for (;;) {
    ssize_t rc = post();
    if (rc == 0) return true;
    if (rc != -FI_EAGAIN) return false;
    fi_cq_tagged_entry none[1];
    (void)fi_cq_read(a, none, 0);
    (void)fi_cq_read(b, none, 0);
  }
}

void BM_RawPingPong(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto p = rawPair(providerName(state.range(1)));
  if (!p->ok) return state.SkipWithError("provider unavailable");
  std::vector<char> bufA(bytes + 1, 1), bufB(bytes + 1, 0);
  fi_context2 ctx[4];
  fid_cq* cqA = p->a->cq.get();
  fid_cq* cqB = p->b->cq.get();
  fid_ep* epA = p->a->ep.get();
  fid_ep* epB = p->b->ep.get();
  for (auto _ : state) {
    if (!posted([&] { return fi_trecv(epB, bufB.data(), bytes, nullptr, p->bToA, 1, 0, &ctx[0]); },
                cqA, cqB) ||
        !posted([&] { return fi_tsend(epA, bufA.data(), bytes, nullptr, p->aToB, 1, &ctx[1]); },
                cqA, cqB) ||
        !reap(cqB, 1, cqA) || !reap(cqA, 1, cqB))
      return state.SkipWithError("ping failed");
    if (!posted([&] { return fi_trecv(epA, bufA.data(), bytes, nullptr, p->aToB, 2, 0, &ctx[2]); },
                cqA, cqB) ||
        !posted([&] { return fi_tsend(epB, bufB.data(), bytes, nullptr, p->bToA, 2, &ctx[3]); },
                cqA, cqB) ||
        !reap(cqA, 1, cqB) || !reap(cqB, 1, cqA))
      return state.SkipWithError("pong failed");
  }
  state.counters["per_msg"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * bytes);
  state.SetLabel(providerName(state.range(1)));
}

// A window of messages in flight one way, then a zero-byte acknowledgement (fi_rdm_bw).
void BM_RawStream(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int window = 16;
  auto p = rawPair(providerName(state.range(1)));
  if (!p->ok) return state.SkipWithError("provider unavailable");
  std::vector<char> bufA(bytes * window + 1, 1), bufB(bytes * window + 1, 0);
  std::vector<fi_context2> ctx(2 * window + 2);
  for (auto _ : state) {
    for (int w = 0; w < window; ++w)
      if (!posted(
              [&] {
                return fi_trecv(p->b->ep.get(), bufB.data() + w * bytes, bytes, nullptr, p->bToA, 1,
                                0, &ctx[w]);
              },
              p->a->cq.get(), p->b->cq.get()))
        return state.SkipWithError("trecv failed");
    for (int w = 0; w < window; ++w)
      if (!posted(
              [&] {
                return fi_tsend(p->a->ep.get(), bufA.data() + w * bytes, bytes, nullptr, p->aToB, 1,
                                &ctx[window + w]);
              },
              p->a->cq.get(), p->b->cq.get()))
        return state.SkipWithError("tsend failed");
    if (!reap(p->b->cq.get(), window, p->a->cq.get()) || !reap(p->a->cq.get(), window, nullptr))
      return state.SkipWithError("stream failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * window * bytes);
  state.SetLabel(providerName(state.range(1)));
}

// The same two patterns through EfaTransport (what every collective uses).
struct TransportPair {
  std::unique_ptr<efa::EfaTransport> a, b;
};

std::unique_ptr<TransportPair> transportPair(const char* provider) {
  efa::pinSocketProviders("lo", /*overwrite=*/true);
  auto p = std::make_unique<TransportPair>();
  efa::EfaOptions options;  // the library's defaults, one rail
  options.provider = provider;
  options.rails = 1;
  auto a = efa::EfaTransport::open(0, 2, options);
  auto b = efa::EfaTransport::open(1, 2, options);
  if (!a.isOk() || !b.isOk()) return p;
  p->a = std::move(a.value());
  p->b = std::move(b.value());
  std::vector<std::string> blobs = {p->a->addressBlob(), p->b->addressBlob()};
  if (!p->a->connect(blobs).isOk() || !p->b->connect(blobs).isOk()) p->a.reset();
  return p;
}

bool exchange(efa::EfaTransport& from, efa::EfaTransport& to, int fromRank, const char* src,
              char* dst, size_t bytes) {
  TransferOp send, recv;
  send.peer = 1 - fromRank;
  send.src = src;
  send.bytes = bytes;
  recv.peer = fromRank;
  recv.dst = dst;
  recv.bytes = bytes;
  bool sent = false, received = false;
  while (!sent || !received) {
    if (!received) {
      auto r = to.progressRecv(recv);
      if (!r.isOk()) return false;
      received = r.value();
    }
    if (!sent) {
      auto r = from.progressSend(send);
      if (!r.isOk()) return false;
      sent = r.value();
    }
  }
  return true;
}

void BM_TransportPingPong(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto p = transportPair(providerName(state.range(1)));
  if (!p->a) return state.SkipWithError("provider unavailable");
  std::vector<char> bufA(bytes + 1, 1), bufB(bytes + 1, 0);
  for (auto _ : state) {
    if (!exchange(*p->a, *p->b, 0, bufA.data(), bufB.data(), bytes) ||
        !exchange(*p->b, *p->a, 1, bufB.data(), bufA.data(), bytes))
      return state.SkipWithError("ping-pong failed");
  }
  state.counters["per_msg"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * bytes);
  state.SetLabel(providerName(state.range(1)));
}

void BM_TransportStream(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int window = 16;
  auto p = transportPair(providerName(state.range(1)));
  if (!p->a) return state.SkipWithError("provider unavailable");
  std::vector<char> bufA(bytes * window + 1, 1), bufB(bytes * window + 1, 0);
  std::vector<TransferOp> sends(window), recvs(window);
  for (auto _ : state) {
    for (int w = 0; w < window; ++w) {
      sends[w] = TransferOp{};
      sends[w].peer = 1;
      sends[w].src = bufA.data() + w * bytes;
      sends[w].bytes = bytes;
      recvs[w] = TransferOp{};
      recvs[w].peer = 0;
      recvs[w].dst = bufB.data() + w * bytes;
      recvs[w].bytes = bytes;
    }
    int pending = 2 * window;
    std::vector<char> done(2 * window, 0);
    while (pending > 0) {
      for (int w = 0; w < window; ++w) {
        if (!done[window + w]) {
          auto r = p->b->progressRecv(recvs[w]);
          if (!r.isOk()) return state.SkipWithError("recv failed");
          if (r.value()) done[window + w] = 1, --pending;
        }
        if (!done[w]) {
          auto r = p->a->progressSend(sends[w]);
          if (!r.isOk()) return state.SkipWithError("send failed");
          if (r.value()) done[w] = 1, --pending;
        }
      }
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * window * bytes);
  state.SetLabel(providerName(state.range(1)));
}

// Sizes x provider (0 = tcp;ofi_rxm, 1 = shm; see the top of the file for why only shm).
void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {8, 4096, 65536, 1 << 20, 4 << 20}) b->Args({bytes, 1});
}

}  // namespace

BENCHMARK(BM_RawPingPong)->Apply(sizes)->UseRealTime();
BENCHMARK(BM_TransportPingPong)->Apply(sizes)->UseRealTime();
BENCHMARK(BM_RawStream)->Apply(sizes)->UseRealTime();
BENCHMARK(BM_TransportStream)->Apply(sizes)->UseRealTime();
BENCHMARK_MAIN();
