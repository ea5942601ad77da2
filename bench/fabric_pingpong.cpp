// Raw libfabric point-to-point between two processes (fabtests fi_rdm_pingpong / fi_rdm_bw
// style) side by side with trnccl's efa transport doing the same thing in the same run: the
// transport's overhead over the library it sits on is measured, not guessed. The parent and a
// forked child each open one RDM endpoint with the same provider and hints the transport uses
// (transports/efa/fabric.hpp) and one EfaTransport (one rail, the library's defaults), swap
// addresses through a pipe, then for each size alternate raw and transport runs of a
// ping-pong (half round trip = latency), an exchange (both send and receive at once, as in
// sendrecv_perf and every ring step; time per exchange) and a one-way stream of 16 messages in
// flight followed by a zero-byte acknowledgement (bandwidth). Each figure is the median of -R
// repeats.
// usage: fabric_pingpong [-p PROVIDER] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-R REPEATS]
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transports/efa/efa_transport.hpp"
#include "transports/efa/fabric.hpp"

namespace {

using namespace trnccl;

struct Side {
  efa::ProviderChoice choice;
  std::unique_ptr<efa::Rail> rail;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fabric_pingpong (pid %d): %s\n", getpid(), what.c_str());
  std::exit(1);
}

void waitFor(Side& s, int completions) {
  fi_cq_tagged_entry entries[16];
  while (completions > 0) {
    ssize_t n = fi_cq_read(s.rail->cq.get(), entries, 16);
    if (n > 0) {
      completions -= static_cast<int>(n);
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(s.rail->cq.get(), &err, 0);
      die(std::string("completion error: ") + fi_strerror(err.err));
    } else if (n != -FI_EAGAIN) {
      die(efa::fiError("fi_cq_read", n));
    }
  }
}

template <typename Post>
void post(Side& s, Post fn) {
  for (;;) {
    ssize_t rc = fn();
    if (rc == 0) return;
    if (rc != -FI_EAGAIN) die(efa::fiError("post", rc));
    fi_cq_tagged_entry none[1];
    (void)fi_cq_read(s.rail->cq.get(), none, 0);  // progress, then try again
  }
}

void send(Side& s, const char* buf, size_t bytes, uint64_t tag, fi_context2* ctx) {
  post(s, [&] { return fi_tsend(s.rail->ep.get(), buf, bytes, nullptr, s.peer, tag, ctx); });
}
void recv(Side& s, char* buf, size_t bytes, uint64_t tag, fi_context2* ctx) {
  post(s, [&] { return fi_trecv(s.rail->ep.get(), buf, bytes, nullptr, s.peer, tag, 0, ctx); });
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The transport's side: whole messages as TransferOps, progressed until done.
struct TransportSide {
  std::unique_ptr<efa::EfaTransport> transport;
  int peer = 0;
};

struct Op {
  TransferOp op;
  bool send = false;
  bool done = false;
};

Op sendOp(int peer, const char* buf, size_t bytes) {
  Op o;
  o.op.peer = peer;
  o.op.src = buf;
  o.op.bytes = bytes;
  o.send = true;
  return o;
}

Op recvOp(int peer, char* buf, size_t bytes) {
  Op o;
  o.op.peer = peer;
  o.op.dst = buf;
  o.op.bytes = bytes;
  return o;
}

void progressAll(TransportSide& t, Op* ops, int n) {
  for (int remaining = n; remaining > 0;) {
    for (int i = 0; i < n; ++i) {
      if (ops[i].done) continue;
      auto r =
          ops[i].send ? t.transport->progressSend(ops[i].op) : t.transport->progressRecv(ops[i].op);
      if (!r.isOk()) die(r.status().message());
      if (r.value()) {
        ops[i].done = true;
        --remaining;
      }
    }
    if (remaining > 0) {
      Status polled = t.transport->endPass();  // as the progress engine does
      if (!polled.isOk()) die(polled.message());
    }
  }
}

// Seconds taken by runs 0..count-1 of body(run), after the runs from `first` (< 0) up to 0 as
// untimed warm-ups.
template <typename Body>
double timed(int first, int count, Body body) {
  double start = 0;
  for (int run = first; run < count; ++run) {
    if (run == 0) start = now();
    body();
  }
  return now() - start;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

size_t parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return static_cast<size_t>(v);
}

}  // namespace

// Writes `blob` to the other process and returns its blob (length-prefixed, through pipes).
std::string swap(int out, int in, const std::string& blob) {
  uint32_t length = static_cast<uint32_t>(blob.size());
  if (write(out, &length, 4) != 4 || write(out, blob.data(), length) != length) die("pipe write");
  uint32_t theirLength = 0;
  if (read(in, &theirLength, 4) != 4 || theirLength > 4096) die("pipe read");
  std::string theirs(theirLength, '\0');
  size_t got = 0;
  while (got < theirLength) {
    ssize_t n = read(in, theirs.data() + got, theirLength - got);
    if (n <= 0) die("pipe read");
    got += static_cast<size_t>(n);
  }
  return theirs;
}

int main(int argc, char** argv) {
  std::string provider = "tcp;ofi_rxm";
  size_t minBytes = 8, maxBytes = 4 << 20;
  double factor = 8;
  int iters = 200;
  int repeats = 5;
  const char* usage =
      "usage: fabric_pingpong [-p PROVIDER] [-b MIN] [-e MAX] [-f F] [-n N] [-R REPEATS]\n"
      "  Raw libfabric against trnccl's efa transport, same provider, sizes and endpoints:\n"
      "  ping-pong latency, request/response exchange and a one-way stream, medians.\n"
      "  -p provider (default tcp;ofi_rxm; socket providers are pinned to lo)\n"
      "  -b/-e smallest/largest message (8, 4M), -f size factor (8), -n iterations per\n"
      "  size (200), -R repeats whose median is printed (5). TRNCCL_EFA_RNDV_BYTES applies\n"
      "  to the trnccl side as in the library.\n";
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "fabric_pingpong: %s needs a value\n%s", flag.c_str(), usage);
      return 2;
    }
    if (flag == "-p")
      provider = argv[i + 1];
    else if (flag == "-b")
      minBytes = parseSize(argv[i + 1]);
    else if (flag == "-e")
      maxBytes = parseSize(argv[i + 1]);
    else if (flag == "-f")
      factor = std::atof(argv[i + 1]);
    else if (flag == "-n")
      iters = std::atoi(argv[i + 1]);
    else if (flag == "-R")
      repeats = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "fabric_pingpong: unknown option %s\n%s", flag.c_str(), usage);
      return 2;
    }
  }
  efa::pinSocketProviders("lo", /*overwrite=*/false);  // loopback only
  int toChild[2], toParent[2];
  if (pipe(toChild) || pipe(toParent)) die("pipe failed");
  pid_t child = fork();
  const bool server = child == 0;  // the child answers pings and receives the stream
  const int out = server ? toParent[1] : toChild[1], in = server ? toChild[0] : toParent[0];

  Side s;
  auto choice = efa::chooseProvider(provider, 1);
  if (!choice.isOk()) die(choice.status().message());
  s.choice = std::move(choice.value());
  auto rail = efa::openRail(s.choice.use[0]);
  if (!rail.isOk()) die(rail.status().message());
  s.rail = std::move(rail.value());
  const std::string theirs = swap(out, in, s.rail->address);
  std::vector<std::string> addrs = {server ? theirs : "", server ? "" : theirs};
  auto inserted = efa::insertAddresses(*s.rail, addrs);
  if (!inserted.isOk()) die(inserted.status().message());
  s.peer = inserted.value()[server ? 0 : 1];

  TransportSide t;
  efa::EfaOptions options;
  options.provider = provider;
  options.rails = 1;
  auto fromEnvironment = efa::EfaOptions::fromEnvironment();  // TRNCCL_EFA_RNDV_BYTES as in init
  if (!fromEnvironment.isOk()) die(fromEnvironment.status().message());
  options.rendezvousBytes = fromEnvironment.value().rendezvousBytes;
  const int me = server ? 1 : 0;
  t.peer = 1 - me;
  auto opened = efa::EfaTransport::open(me, 2, options);
  if (!opened.isOk()) die(opened.status().message());
  t.transport = std::move(opened.value());
  std::vector<std::string> blobs(2);
  blobs[me] = t.transport->addressBlob();
  blobs[t.peer] = swap(out, in, blobs[me]);
  Status connected = t.transport->connect(blobs);
  if (!connected.isOk()) die(connected.message());

  if (!server)
    std::printf(
        "# fabric_pingpong: provider %s, domain %s, %d iterations per size, median of %d\n"
        "# transport: %s\n"
        "# %10s %10s %10s %7s %10s %10s %7s %11s %11s %7s\n",
        s.rail->info->fabric_attr->prov_name, s.rail->info->domain_attr->name, iters, repeats,
        t.transport->describe().c_str(), "bytes", "raw us", "trnccl us", "ratio", "raw xchg",
        "trnccl xchg", "ratio", "raw GB/s", "trnccl GB/s", "ratio");
  const int window = 16;
  std::vector<char> buffer(maxBytes * window + 1, 1);
  std::vector<fi_context2> ctx(window + 2);
  for (size_t bytes = minBytes; bytes <= maxBytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * factor))) {
    const int warmup = 10;
    const int rounds = std::max(4, iters / window);
    auto rawPingPong = [&] {
      return timed(-warmup, iters, [&] {
        if (server) {
          recv(s, buffer.data(), bytes, 1, &ctx[0]);
          waitFor(s, 1);
          send(s, buffer.data(), bytes, 2, &ctx[1]);
          waitFor(s, 1);
        } else {
          recv(s, buffer.data(), bytes, 2, &ctx[0]);
          send(s, buffer.data(), bytes, 1, &ctx[1]);
          waitFor(s, 2);
        }
      });
    };
    auto transportPingPong = [&] {
      return timed(-warmup, iters, [&] {
        if (server) {
          Op r = recvOp(t.peer, buffer.data(), bytes);
          progressAll(t, &r, 1);
          Op w = sendOp(t.peer, buffer.data(), bytes);
          progressAll(t, &w, 1);
        } else {
          Op ops[2] = {recvOp(t.peer, buffer.data(), bytes), sendOp(t.peer, buffer.data(), bytes)};
          progressAll(t, ops, 2);
        }
      });
    };
    // Exchange (what sendrecv_perf and every ring step do): both sides send and receive at once.
    auto rawExchange = [&] {
      return timed(-warmup, iters, [&] {
        recv(s, buffer.data() + bytes, bytes, 5, &ctx[0]);
        send(s, buffer.data(), bytes, 5, &ctx[1]);
        waitFor(s, 2);
      });
    };
    auto transportExchange = [&] {
      return timed(-warmup, iters, [&] {
        Op ops[2] = {recvOp(t.peer, buffer.data() + bytes, bytes),
                     sendOp(t.peer, buffer.data(), bytes)};
        progressAll(t, ops, 2);
      });
    };
    // Stream: window messages one way, then an acknowledgement.
    auto rawStream = [&] {
      return timed(-2, rounds, [&] {
        if (server) {
          for (int w = 0; w < window; ++w) recv(s, buffer.data() + w * bytes, bytes, 3, &ctx[w]);
          waitFor(s, window);
          send(s, nullptr, 0, 4, &ctx[window]);
          waitFor(s, 1);
        } else {
          recv(s, nullptr, 0, 4, &ctx[window]);
          for (int w = 0; w < window; ++w) send(s, buffer.data() + w * bytes, bytes, 3, &ctx[w]);
          waitFor(s, window + 1);
        }
      });
    };
    auto transportStream = [&] {
      std::vector<Op> ops(window + 1);
      return timed(-2, rounds, [&] {
        if (server) {
          for (int w = 0; w < window; ++w)
            ops[w] = recvOp(t.peer, buffer.data() + w * bytes, bytes);
          progressAll(t, ops.data(), window);
          ops[window] = sendOp(t.peer, nullptr, 0);
          progressAll(t, &ops[window], 1);
        } else {
          ops[window] = recvOp(t.peer, nullptr, 0);
          for (int w = 0; w < window; ++w)
            ops[w] = sendOp(t.peer, buffer.data() + w * bytes, bytes);
          progressAll(t, ops.data(), window + 1);
        }
      });
    };
    std::vector<double> rawLat, trLat, rawX, trX, rawBw, trBw;
    for (int r = 0; r < repeats; ++r) {
      rawLat.push_back(rawPingPong() / iters / 2 * 1e6);
      trLat.push_back(transportPingPong() / iters / 2 * 1e6);
      rawX.push_back(rawExchange() / iters * 1e6);
      trX.push_back(transportExchange() / iters * 1e6);
      rawBw.push_back(bytes * static_cast<double>(window) * rounds / rawStream() / 1e9);
      trBw.push_back(bytes * static_cast<double>(window) * rounds / transportStream() / 1e9);
    }
    if (!server) {
      const double rl = median(rawLat), tl = median(trLat), rb = median(rawBw), tb = median(trBw);
      const double rx = median(rawX), tx = median(trX);
      std::printf("  %10zu %10.2f %10.2f %7.2f %10.2f %10.2f %7.2f %11.3f %11.3f %7.2f\n", bytes,
                  rl, tl, tl / rl, rx, tx, tx / rx, rb, tb, tb / rb);
      std::fflush(stdout);
    }
  }
  if (!server) {
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  t.transport->drain(1.0);
  return 0;
}
