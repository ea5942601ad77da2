// Minimal IPv4 TCP sockets with deadlines, for the bootstrap only (data never goes here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/clock.hpp"
#include "core/status.hpp"

namespace trnccl::bootstrap {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();

  Status sendAll(const void* data, size_t bytes, const Deadline& deadline);
  Status recvAll(void* data, size_t bytes, const Deadline& deadline);

 private:
  int fd_ = -1;
};

struct Endpoint {
  uint32_t ipv4 = 0;  // network byte order
  uint16_t port = 0;  // host byte order
  std::string toString() const;
};

// Listens on addr:0 (an ephemeral port) and returns the socket and the bound endpoint.
Result<Socket> listenOn(const std::string& addr, Endpoint* bound);
// Connects with retries until the deadline (the listener may not be up yet).
Result<Socket> connectTo(const Endpoint& endpoint, const Deadline& deadline);
// Waits for a connection until the deadline; returns an invalid Socket on timeout.
Result<Socket> acceptWithin(const Socket& listener, int timeoutMs);

}  // namespace trnccl::bootstrap
