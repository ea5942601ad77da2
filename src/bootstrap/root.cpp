// The rendezvous root: one thread per unique id, alive until every rank got the table (or the
// job failed). It runs a poll loop so that one silent or malicious connection cannot stall
// the others.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/wire.hpp"
#include "core/clock.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "topology/host.hpp"

namespace trnccl::bootstrap {
namespace {

constexpr int64_t kStrayConnectionNs = 10LL * 1000 * 1000 * 1000;

struct Connection {
  Socket socket;
  std::vector<char> buffer;
  int64_t acceptedNs = 0;
};

void sendMessage(Socket& socket, wire::Type type, const void* payload, uint32_t length) {
  wire::Header header{wire::kMagic, wire::kVersion, static_cast<uint16_t>(type), length};
  Deadline deadline = Deadline::after(5.0);
  if (!socket.sendAll(&header, sizeof(header), deadline).isOk()) return;
  (void)socket.sendAll(payload, length, deadline);  // a rank that left needs no answer
}

void sendError(Socket& socket, const std::string& text) {
  sendMessage(socket, wire::Type::kError, text.data(), static_cast<uint32_t>(text.size()));
}

class Root {
 public:
  Root(Socket listener, uint64_t nonce, double idleSeconds)
      : listener_(std::move(listener)),
        nonce_(nonce),
        idleDeadline_(Deadline::after(idleSeconds)) {}

  void run() {
    while (!done_) {
      if (exchanging_) {
        exchangeStep();
        continue;
      }
      std::vector<pollfd> fds;
      fds.push_back({listener_.fd(), POLLIN, 0});
      for (auto& c : pending_) fds.push_back({c->socket.fd(), POLLIN, 0});
      int rc = ::poll(fds.data(), fds.size(), 100);
      if (rc < 0 && errno != EINTR) {
        TRNCCL_WARN(log::kBoot, "rendezvous root: poll failed: %s", strerror(errno));
        failAll("rendezvous root failed: poll error");
        return;
      }
      if (rc > 0 && (fds[0].revents & POLLIN)) acceptOne();
      for (size_t i = 1; i < fds.size() && !done_; ++i) {
        if (fds[i].revents) readFrom(i - 1);
      }
      pending_.erase(std::remove(pending_.begin(), pending_.end(), nullptr), pending_.end());
      dropStrays();
      if (!done_ && deadline_ && deadline_->expired()) failOnTimeout();
      // Nobody ever came (the launcher's children died): do not linger forever.
      if (!deadline_ && idleDeadline_.expired()) done_ = true;
    }
  }

 private:
  void acceptOne() {
    auto accepted = acceptWithin(listener_, 0);
    if (!accepted.isOk() || !accepted.value().valid()) return;
    auto c = std::make_unique<Connection>();
    c->socket = std::move(accepted.value());
    c->acceptedNs = nowNs();
    pending_.push_back(std::move(c));
  }

  void drop(size_t index, const char* why) {
    TRNCCL_WARN(log::kBoot, "rendezvous root: dropped a connection: %s", why);
    pending_[index].reset();
  }

  void readFrom(size_t index) {
    Connection& c = *pending_[index];
    char chunk[4096];
    ssize_t n = ::recv(c.socket.fd(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      pending_[index].reset();  // closed before saying hello: nothing to do
      return;
    }
    if (n < 0) return;
    c.buffer.insert(c.buffer.end(), chunk, chunk + n);
    if (c.buffer.size() < sizeof(wire::Header)) return;
    wire::Header header;
    std::memcpy(&header, c.buffer.data(), sizeof(header));
    constexpr uint32_t kHelloBytes = sizeof(wire::Hello) + sizeof(PeerInfo);
    if (header.magic != wire::kMagic || header.version != wire::kVersion ||
        header.type != static_cast<uint16_t>(wire::Type::kHello) || header.length != kHelloBytes) {
      return drop(index, "not a trnccl hello (bad magic, version, type or length)");
    }
    if (c.buffer.size() < sizeof(header) + kHelloBytes) return;
    wire::Hello hello;
    PeerInfo info;
    std::memcpy(&hello, c.buffer.data() + sizeof(header), sizeof(hello));
    std::memcpy(&info, c.buffer.data() + sizeof(header) + sizeof(hello), sizeof(info));
    if (hello.nonce != nonce_) return drop(index, "hello for another job (unique id mismatch)");
    handleHello(index, hello, info);
  }

  void handleHello(size_t index, const wire::Hello& hello, const PeerInfo& info) {
    Socket socket = std::move(pending_[index]->socket);
    pending_[index].reset();
    if (hello.nranks <= 0 || hello.rank < 0 || hello.rank >= hello.nranks) {
      sendError(socket,
                strformat("rank %d is out of range for nranks %d", hello.rank, hello.nranks));
      return;
    }
    if (nranks_ < 0) {
      nranks_ = hello.nranks;
      joined_.resize(nranks_);
      sockets_.resize(nranks_);
      double seconds = std::max<int64_t>(hello.timeoutMs, 100) / 1000.0;
      // Answer slightly before the ranks give up, so they get the list of missing ranks.
      timeoutSeconds_ = seconds;
      deadline_ = Deadline::after(seconds * 0.9);
    } else if (hello.nranks != nranks_) {
      sendError(socket, strformat("rank %d was initialised with nranks=%d but rank %d said "
                                  "nranks=%d; every rank must pass the same nranks",
                                  hello.rank, hello.nranks, firstRank_, nranks_));
      failAll(strformat("rank %d joined with nranks=%d, others with nranks=%d", hello.rank,
                        hello.nranks, nranks_));
      return;
    }
    if (firstRank_ < 0) firstRank_ = hello.rank;
    if (joined_[hello.rank]) {
      std::string text = strformat(
          "rank %d joined twice (pid %d on %s and pid %d on %s); each rank number must be "
          "used by exactly one process",
          hello.rank, joined_[hello.rank]->pid, joined_[hello.rank]->hostName, info.pid,
          info.hostName);
      sendError(socket, text);
      failAll(text);
      return;
    }
    joined_[hello.rank] = info;
    joined_[hello.rank]->rank = hello.rank;
    sockets_[hello.rank] = std::move(socket);
    ++joinedCount_;
    TRNCCL_TRACE(log::kBoot, "rendezvous root: rank %d/%d joined (pid %d, host %s)", hello.rank,
                 nranks_, info.pid, info.hostName);
    if (joinedCount_ == nranks_) sendTable();
  }

  void sendTable() {
    std::vector<PeerInfo> table(nranks_);
    for (int r = 0; r < nranks_; ++r) table[r] = *joined_[r];
    uint32_t bytes = static_cast<uint32_t>(table.size() * sizeof(PeerInfo));
    for (auto& s : sockets_) sendMessage(s, wire::Type::kTable, table.data(), bytes);
    // Second round: every rank sends one blob (its network addresses); see wire.hpp.
    exchanging_ = true;
    exchangeBuffers_.assign(nranks_, {});
    exchangeBlobs_.assign(nranks_, std::nullopt);
    deadline_ = Deadline::after(timeoutSeconds_ * 0.9);
  }

  void exchangeStep() {
    std::vector<pollfd> fds;
    std::vector<int> rankOf;
    for (int r = 0; r < nranks_; ++r)
      if (!exchangeBlobs_[r]) {
        fds.push_back({sockets_[r].fd(), POLLIN, 0});
        rankOf.push_back(r);
      }
    int rc = ::poll(fds.data(), fds.size(), 100);
    if (rc < 0 && errno != EINTR) return failAll("rendezvous root failed: poll error");
    for (size_t i = 0; i < fds.size() && !done_; ++i)
      if (fds[i].revents) readExchange(rankOf[i]);
    if (done_) return;
    int have = 0;
    for (auto& blob : exchangeBlobs_) have += blob.has_value();
    if (have == nranks_) return sendExchangeTable();
    if (deadline_->expired()) {
      std::string missing;
      for (int r = 0; r < nranks_; ++r)
        if (!exchangeBlobs_[r]) {
          if (!missing.empty()) missing += ',';
          missing += std::to_string(r);
        }
      failAll(
          strformat("bootstrap exchange timed out: ranks [%s] joined but never sent their "
                    "addresses (stuck or failed during init); raise TRNCCL_TIMEOUT if "
                    "they are only slow",
                    missing.c_str()));
    }
  }

  void readExchange(int rank) {
    std::vector<char>& buffer = exchangeBuffers_[rank];
    char chunk[4096];
    ssize_t n = ::recv(sockets_[rank].fd(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      sockets_[rank].close();
      return failAll(
          strformat("rank %d (pid %d on %s) left the job between the rendezvous and "
                    "the address exchange (its init failed or it died)",
                    rank, joined_[rank]->pid, joined_[rank]->hostName));
    }
    if (n < 0) return;
    buffer.insert(buffer.end(), chunk, chunk + n);
    if (buffer.size() < sizeof(wire::Header)) return;
    wire::Header header;
    std::memcpy(&header, buffer.data(), sizeof(header));
    if (header.magic != wire::kMagic || header.version != wire::kVersion ||
        header.type != static_cast<uint16_t>(wire::Type::kExchange) ||
        header.length > wire::kMaxExchangeBytes)
      return failAll(strformat("rank %d sent a malformed exchange message", rank));
    if (buffer.size() < sizeof(header) + header.length) return;
    exchangeBlobs_[rank] = std::string(buffer.data() + sizeof(header), header.length);
  }

  void sendExchangeTable() {
    std::string payload(4 + 4 * static_cast<size_t>(nranks_), '\0');
    uint32_t n = static_cast<uint32_t>(nranks_);
    std::memcpy(payload.data(), &n, 4);
    for (int r = 0; r < nranks_; ++r) {
      uint32_t length = static_cast<uint32_t>(exchangeBlobs_[r]->size());
      std::memcpy(payload.data() + 4 + 4 * r, &length, 4);
      payload += *exchangeBlobs_[r];
    }
    for (auto& s : sockets_)
      sendMessage(s, wire::Type::kExchangeTable, payload.data(),
                  static_cast<uint32_t>(payload.size()));
    done_ = true;
  }

  void failAll(const std::string& text) {
    for (auto& s : sockets_)
      if (s.valid()) sendError(s, text);
    done_ = true;
  }

  void failOnTimeout() {
    std::string missing, present;
    for (int r = 0; r < nranks_; ++r) {
      std::string& list = joined_[r] ? present : missing;
      if (!list.empty()) list += ",";
      list += std::to_string(r);
    }
    failAll(
        strformat("rendezvous timed out: %d of %d ranks joined; missing ranks [%s] "
                  "(joined [%s]). Check that every rank was started with the same unique "
                  "id, or raise TRNCCL_TIMEOUT",
                  joinedCount_, nranks_, missing.c_str(), present.c_str()));
  }

  void dropStrays() {
    int64_t now = nowNs();
    for (auto& c : pending_) {
      if (c && now - c->acceptedNs > kStrayConnectionNs) {
        TRNCCL_WARN(log::kBoot, "rendezvous root: dropped a connection that sent no hello");
        c.reset();
      }
    }
    pending_.erase(std::remove(pending_.begin(), pending_.end(), nullptr), pending_.end());
  }

  Socket listener_;
  uint64_t nonce_;
  std::vector<std::unique_ptr<Connection>> pending_;
  std::vector<std::optional<PeerInfo>> joined_;
  std::vector<Socket> sockets_;
  Deadline idleDeadline_;
  std::optional<Deadline> deadline_;
  int nranks_ = -1;
  int firstRank_ = -1;
  int joinedCount_ = 0;
  bool done_ = false;
  double timeoutSeconds_ = 0;
  bool exchanging_ = false;
  std::vector<std::vector<char>> exchangeBuffers_;
  std::vector<std::optional<std::string>> exchangeBlobs_;
};

uint64_t randomNonce() {
  std::random_device device;
  uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
  return value ^ static_cast<uint64_t>(nowNs()) ^ (static_cast<uint64_t>(getpid()) << 16);
}

}  // namespace

Status createUniqueId(trncclUniqueId* id) {
  Endpoint bound;
  auto listener = listenOn(env::getString(env::kBootstrapAddr), &bound);
  TRNCCL_RETURN_IF_ERROR(listener.status());
  UniqueIdData data{};
  data.magic = wire::kIdMagic;
  data.version = wire::kVersion;
  data.ipv4 = bound.ipv4;
  data.port = bound.port;
  data.nonce = randomNonce();
  data.rootPid = static_cast<int32_t>(getpid());
  data.rootMachineHash = topology::localHostIdentity().machineHash;
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, &data, sizeof(data));
  auto timeout = env::getSeconds(env::kTimeout);
  TRNCCL_RETURN_IF_ERROR(timeout.status());
  auto root = std::make_shared<Root>(std::move(listener.value()), data.nonce, 2 * timeout.value());
  std::thread([root] { root->run(); }).detach();
  TRNCCL_INFO(log::kBoot, "rendezvous root listening on %s", bound.toString().c_str());
  return Status::ok();
}

}  // namespace trnccl::bootstrap
