#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace trnccl::bootstrap {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

static Status waitFor(int fd, short events, const Deadline& deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remainingMs());
    if (rc > 0) return Status::ok();
    if (rc == 0) return makeError(Code::kTimeout, "bootstrap socket %s timed out", what);
    if (errno != EINTR)
      return makeError(Code::kSystemError, "bootstrap poll failed: %s", strerror(errno));
  }
}

Status Socket::sendAll(const void* data, size_t bytes, const Deadline& deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      TRNCCL_RETURN_IF_ERROR(waitFor(fd_, POLLOUT, deadline, "send"));
      continue;
    }
    return makeError(Code::kRemoteError, "bootstrap send failed: %s", strerror(errno));
  }
  return Status::ok();
}

Status Socket::recvAll(void* data, size_t bytes, const Deadline& deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd_, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return makeError(Code::kRemoteError, "bootstrap connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      TRNCCL_RETURN_IF_ERROR(waitFor(fd_, POLLIN, deadline, "receive"));
      continue;
    }
    return makeError(Code::kRemoteError, "bootstrap receive failed: %s", strerror(errno));
  }
  return Status::ok();
}

std::string Endpoint::toString() const {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = ipv4;
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(port);
}

Result<Socket> listenOn(const std::string& addr, Endpoint* bound) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    return makeError(Code::kInvalidArgument, "TRNCCL_BOOTSTRAP_ADDR='%s' is not an IPv4 address",
                     addr.c_str());
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return makeError(Code::kSystemError, "socket(): %s", strerror(errno));
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return makeError(Code::kSystemError,
                     "cannot bind the rendezvous socket to %s: %s "
                     "(check TRNCCL_BOOTSTRAP_ADDR)",
                     addr.c_str(), strerror(errno));
  if (::listen(s.fd(), 1024) != 0)
    return makeError(Code::kSystemError, "listen(): %s", strerror(errno));
  socklen_t len = sizeof(sa);
  getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len);
  bound->ipv4 = sa.sin_addr.s_addr;
  bound->port = ntohs(sa.sin_port);
  return s;
}

Result<Socket> connectTo(const Endpoint& endpoint, const Deadline& deadline) {
  int backoffMs = 1;
  while (true) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) return makeError(Code::kSystemError, "socket(): %s", strerror(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(endpoint.port);
    sa.sin_addr.s_addr = endpoint.ipv4;
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      int one = 1;
      setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return s;
    }
    int err = errno;
    if (deadline.expired())
      return makeError(Code::kTimeout, "cannot connect to the rendezvous root at %s: %s",
                       endpoint.toString().c_str(), strerror(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(backoffMs));
    backoffMs = std::min(backoffMs * 2, 100);
  }
}

Result<Socket> acceptWithin(const Socket& listener, int timeoutMs) {
  pollfd p{listener.fd(), POLLIN, 0};
  int rc = ::poll(&p, 1, timeoutMs);
  if (rc == 0) return Socket();
  if (rc < 0) {
    if (errno == EINTR) return Socket();
    return makeError(Code::kSystemError, "poll on rendezvous socket: %s", strerror(errno));
  }
  int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return Socket();
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Socket(fd);
}

}  // namespace trnccl::bootstrap
