// Raw libfabric point-to-point between two processes (fabtests fi_rdm_pingpong / fi_rdm_bw
// style): the baseline the efa transport is measured against. The parent and a forked child
// each open one RDM endpoint with the same provider and hints the transport uses
// (transports/efa/fabric.hpp), swap addresses through a pipe, then for each size run a
// ping-pong (half round trip = latency) and a one-way stream of 16 messages in flight followed
// by a zero-byte acknowledgement (bandwidth). Compare with
//   TRNCCL_TRANSPORT=efa TRNCCL_FI_PROVIDER=... trnccl-run -np 2 sendrecv_perf -b 8 -e 4M
// usage: fabric_pingpong [-p PROVIDER] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

size_t parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string provider = "tcp;ofi_rxm";
  size_t minBytes = 8, maxBytes = 4 << 20;
  double factor = 8;
  int iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
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
    else {
      std::fprintf(stderr,
                   "usage: fabric_pingpong [-p PROVIDER] [-b MIN] [-e MAX] [-f F] [-n N]\n");
      return 2;
    }
  }
  if (!std::getenv("FI_TCP_IFACE")) setenv("FI_TCP_IFACE", "lo", 1);  // loopback only
  int toChild[2], toParent[2];
  if (pipe(toChild) || pipe(toParent)) die("pipe failed");
  pid_t child = fork();
  const bool server = child == 0;  // the child answers pings and receives the stream

  Side s;
  auto choice = efa::chooseProvider(provider, 1);
  if (!choice.isOk()) die(choice.status().message());
  s.choice = std::move(choice.value());
  auto rail = efa::openRail(s.choice.use[0]);
  if (!rail.isOk()) die(rail.status().message());
  s.rail = std::move(rail.value());
  // Swap addresses: length-prefixed through the pipes.
  const std::string& mine = s.rail->address;
  uint32_t length = static_cast<uint32_t>(mine.size());
  int out = server ? toParent[1] : toChild[1], in = server ? toChild[0] : toParent[0];
  if (write(out, &length, 4) != 4 || write(out, mine.data(), length) != length) die("pipe write");
  uint32_t theirLength = 0;
  if (read(in, &theirLength, 4) != 4 || theirLength > 256) die("pipe read");
  std::string theirs(theirLength, '\0');
  if (read(in, theirs.data(), theirLength) != static_cast<ssize_t>(theirLength)) die("pipe read");
  std::vector<std::string> addrs = {server ? theirs : "", server ? "" : theirs};
  auto inserted = efa::insertAddresses(*s.rail, addrs);
  if (!inserted.isOk()) die(inserted.status().message());
  s.peer = inserted.value()[server ? 0 : 1];

  if (!server)
    std::printf(
        "# fabric_pingpong: provider %s, domain %s, %d iterations per size\n"
        "# %10s %14s %14s %14s\n",
        s.rail->info->fabric_attr->prov_name, s.rail->info->domain_attr->name, iters, "bytes",
        "latency (us)", "pingpong GB/s", "stream GB/s");
  const int window = 16;
  std::vector<char> buffer(maxBytes * window + 1, 1);
  std::vector<fi_context2> ctx(window + 2);
  for (size_t bytes = minBytes; bytes <= maxBytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * factor))) {
    const int warmup = 10;
    // Ping-pong.
    double start = 0;
    for (int it = -warmup; it < iters; ++it) {
      if (it == 0)
        start = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                    .count();
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
    }
    double pingpong =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
        start;
    // Stream: window messages one way, then an acknowledgement.
    const int rounds = std::max(4, iters / window);
    for (int it = -2; it < rounds; ++it) {
      if (it == 0)
        start = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                    .count();
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
    }
    double stream =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
        start;
    if (!server)
      std::printf("  %10zu %14.2f %14.3f %14.3f\n", bytes, pingpong / iters / 2 * 1e6,
                  bytes * 2.0 * iters / pingpong / 1e9,
                  bytes * static_cast<double>(window) * rounds / stream / 1e9);
  }
  if (!server) {
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 0;
}
