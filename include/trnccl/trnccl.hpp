// Header-only C++ wrapper over the C ABI: RAII communicators and requests, typed buffers,
// and trnccl::Error (code + the library's sentence) instead of result codes.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trnccl.h"

namespace trnccl {

class Error : public std::runtime_error {
 public:
  Error(trncclResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  trncclResult_t code() const { return code_; }

 private:
  trncclResult_t code_;
};

inline void check(trncclResult_t result, trncclComm_t comm = nullptr) {
  if (result == trncclSuccess) return;
  std::string text = trncclGetErrorString(result);
  const char* detail = trncclGetLastError(comm);
  if (detail && *detail) text += std::string(": ") + detail;
  throw Error(result, text);
}

template <typename T>
struct DataType;
template <>
struct DataType<int8_t> {
  static constexpr trncclDataType_t value = trncclInt8;
};
template <>
struct DataType<uint8_t> {
  static constexpr trncclDataType_t value = trncclUint8;
};
template <>
struct DataType<int32_t> {
  static constexpr trncclDataType_t value = trncclInt32;
};
template <>
struct DataType<uint32_t> {
  static constexpr trncclDataType_t value = trncclUint32;
};
template <>
struct DataType<int64_t> {
  static constexpr trncclDataType_t value = trncclInt64;
};
template <>
struct DataType<uint64_t> {
  static constexpr trncclDataType_t value = trncclUint64;
};
template <>
struct DataType<float> {
  static constexpr trncclDataType_t value = trncclFloat32;
};
template <>
struct DataType<double> {
  static constexpr trncclDataType_t value = trncclFloat64;
};

class UniqueId {
 public:
  static UniqueId create() {
    UniqueId id;
    check(trncclGetUniqueId(&id.raw_));
    return id;
  }
  static UniqueId fromRaw(const trncclUniqueId& raw) {
    UniqueId id;
    id.raw_ = raw;
    return id;
  }
  const trncclUniqueId& raw() const { return raw_; }

 private:
  trncclUniqueId raw_{};
};

// A pending non-blocking call. Destroying an unfinished request waits for it.
class Request {
 public:
  Request() = default;
  explicit Request(trncclRequest_t raw) : raw_(raw) {}
  Request(Request&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      finish();
      raw_ = std::exchange(other.raw_, nullptr);
    }
    return *this;
  }
  ~Request() { finish(); }

  // True once complete; throws if the operation failed.
  bool test() {
    if (!raw_) return true;
    int done = 0;
    check(trncclTest(&raw_, &done));
    return done != 0;
  }
  // Returns false if timeoutMs passed first (the request stays pending).
  bool wait(int64_t timeoutMs = TRNCCL_TIMEOUT_DEFAULT) {
    if (!raw_) return true;
    trncclResult_t result = trncclWait(&raw_, timeoutMs);
    if (result == trncclTimeout && raw_) return false;
    check(result);
    return true;
  }

 private:
  void finish() noexcept {
    if (raw_) (void)trncclWait(&raw_, TRNCCL_TIMEOUT_DEFAULT);
  }
  trncclRequest_t raw_ = nullptr;
};

// A buffer registered with a communicator (trncclCommRegister) until release() or
// destruction. release() throws if a call still uses the buffer; the destructor cannot, so
// release first where that may happen. Must not outlive its Comm.
class Registration {
 public:
  Registration() = default;
  Registration(trncclComm_t comm, void* handle) : comm_(comm), handle_(handle) {}
  Registration(Registration&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)),
        handle_(std::exchange(other.handle_, nullptr)) {}
  Registration& operator=(Registration&& other) noexcept {
    if (this != &other) {
      reset();
      comm_ = std::exchange(other.comm_, nullptr);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration() { reset(); }
  void release() {
    if (handle_) {
      check(trncclCommDeregister(comm_, handle_), comm_);
      handle_ = nullptr;
    }
  }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  void reset() noexcept {
    if (handle_) (void)trncclCommDeregister(comm_, std::exchange(handle_, nullptr));
  }
  trncclComm_t comm_ = nullptr;
  void* handle_ = nullptr;
};

class Comm {
 public:
  Comm(int nranks, const UniqueId& id, int rank) {
    check(trncclCommInitRank(&comm_, nranks, id.raw(), rank));
  }
  Comm(int nranks, const UniqueId& id, int rank, const trncclConfig_t& config) {
    check(trncclCommInitRankConfig(&comm_, nranks, id.raw(), rank, &config));
  }
  Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    if (this != &other) {
      reset();
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() { reset(); }

  trncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  int rank() const {
    int r = -1;
    check(trncclCommUserRank(comm_, &r), comm_);
    return r;
  }
  int size() const {
    int n = 0;
    check(trncclCommCount(comm_, &n), comm_);
    return n;
  }

  // Returns an empty Comm for TRNCCL_SPLIT_NOCOLOR.
  Comm split(int color, int key) const {
    trncclComm_t child = nullptr;
    check(trncclCommSplit(comm_, color, key, &child, nullptr), comm_);
    return Comm(child);
  }
  void abort() {
    if (comm_) check(trncclCommAbort(std::exchange(comm_, nullptr)));
  }
  // Keeps `buffer` registered for network transports until the Registration goes.
  template <typename T>
  Registration registerBuffer(std::span<T> buffer) {
    void* handle = nullptr;
    check(trncclCommRegister(comm_, const_cast<std::remove_const_t<T>*>(buffer.data()),
                             buffer.size_bytes(), &handle),
          comm_);
    return Registration(comm_, handle);
  }

  template <typename T>
  void allReduce(std::span<const T> send, std::span<T> recv, trncclRedOp_t op = trncclSum) {
    requireSize(recv.size() >= send.size(), "allReduce: recv is smaller than send");
    check(trncclAllReduce(send.data(), recv.data(), send.size(), DataType<T>::value, op, comm_),
          comm_);
  }
  template <typename T>
  void allReduce(std::span<T> inPlace, trncclRedOp_t op = trncclSum) {
    check(trncclAllReduce(inPlace.data(), inPlace.data(), inPlace.size(), DataType<T>::value, op,
                          comm_),
          comm_);
  }
  template <typename T>
  Request allReduceAsync(std::span<const T> send, std::span<T> recv, trncclRedOp_t op = trncclSum) {
    requireSize(recv.size() >= send.size(), "allReduceAsync: recv is smaller than send");
    trncclRequest_t raw = nullptr;
    check(trncclAllReduceAsync(send.data(), recv.data(), send.size(), DataType<T>::value, op, comm_,
                               &raw),
          comm_);
    return Request(raw);
  }
  template <typename T>
  void allGather(std::span<const T> send, std::span<T> recv) {
    requireSize(recv.size() >= send.size() * size(), "allGather: recv needs size()*send");
    check(trncclAllGather(send.data(), recv.data(), send.size(), DataType<T>::value, comm_), comm_);
  }
  template <typename T>
  void reduceScatter(std::span<const T> send, std::span<T> recv, trncclRedOp_t op = trncclSum) {
    requireSize(send.size() >= recv.size() * size(), "reduceScatter: send needs size()*recv");
    check(trncclReduceScatter(send.data(), recv.data(), recv.size(), DataType<T>::value, op, comm_),
          comm_);
  }
  template <typename T>
  void broadcast(std::span<T> buffer, int root) {
    check(trncclBroadcast(buffer.data(), buffer.data(), buffer.size(), DataType<T>::value, root,
                          comm_),
          comm_);
  }
  template <typename T>
  void allToAll(std::span<const T> send, std::span<T> recv) {
    requireSize(send.size() % size() == 0 && recv.size() >= send.size(),
                "allToAll: send must split evenly across ranks and fit in recv");
    check(trncclAllToAll(send.data(), recv.data(), send.size() / size(), DataType<T>::value, comm_),
          comm_);
  }
  template <typename T>
  void send(std::span<const T> data, int peer) {
    check(trncclSend(data.data(), data.size(), DataType<T>::value, peer, comm_), comm_);
  }
  template <typename T>
  void recv(std::span<T> data, int peer) {
    check(trncclRecv(data.data(), data.size(), DataType<T>::value, peer, comm_), comm_);
  }
  void barrier() { check(trncclBarrier(comm_), comm_); }

 private:
  explicit Comm(trncclComm_t raw) : comm_(raw) {}
  void reset() noexcept {
    if (comm_) (void)trncclCommDestroy(std::exchange(comm_, nullptr));
  }
  static void requireSize(bool ok, const char* what) {
    if (!ok) throw Error(trncclInvalidArgument, what);
  }
  trncclComm_t comm_ = nullptr;
};

// RAII group: trncclGroupStart now, trncclGroupEnd at scope exit (or end() to see errors).
class Group {
 public:
  Group() { check(trncclGroupStart()); }
  ~Group() {
    if (open_) (void)trncclGroupEnd();
  }
  void end() {
    open_ = false;
    check(trncclGroupEnd());
  }

 private:
  bool open_ = true;
};

}  // namespace trnccl
