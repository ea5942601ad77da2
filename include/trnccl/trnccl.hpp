// Header-only C++ wrapper over the C ABI: RAII communicators and requests, typed buffers,
// and trnccl::Error (code + the library's sentence) instead of result codes.
#pragma once

#include <algorithm>
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

// MoE token dispatch and combine (include/trnccl.h, trncclEp*). Token buffers are spans of any
// element type whose bytes hold the group's payload type (bf16 has no C++ type: use uint16_t;
// fp8: uint8_t). An fp8 group dispatches with dispatchScaled and combines in bf16.
class EpRouting {
 public:
  EpRouting(EpRouting&& other) noexcept
      : raw_(std::exchange(other.raw_, nullptr)),
        comm_(other.comm_),
        tokenBytes_(other.tokenBytes_),
        combineBytes_(other.combineBytes_),
        topk_(other.topk_),
        numTokens_(other.numTokens_),
        localExperts_(other.localExperts_),
        layout_(other.layout_) {}
  EpRouting& operator=(EpRouting&& other) noexcept {
    if (this != &other) {
      reset();
      raw_ = std::exchange(other.raw_, nullptr);
      comm_ = other.comm_;
      tokenBytes_ = other.tokenBytes_;
      combineBytes_ = other.combineBytes_;
      topk_ = other.topk_;
      numTokens_ = other.numTokens_;
      localExperts_ = other.localExperts_;
      layout_ = other.layout_;
    }
    return *this;
  }
  EpRouting(const EpRouting&) = delete;
  EpRouting& operator=(const EpRouting&) = delete;
  ~EpRouting() { reset(); }

  trncclEpRouting_t get() const { return raw_; }
  // Rows (flat) or slots (expert-major) this rank receives.
  size_t numRecv() const {
    size_t n = 0;
    check(trncclEpRoutingGetCounts(raw_, &n, nullptr, 0), comm_);
    return n;
  }
  // Per local expert, the (token, expert) pairs this rank receives.
  std::vector<int32_t> perExpertCounts() const {
    std::vector<int32_t> counts(localExperts_);
    check(trncclEpRoutingGetCounts(raw_, nullptr, counts.data(), localExperts_), comm_);
    return counts;
  }

  // weights: numTokens x topk (empty: all 1); outIdx: flat layout only (may be empty).
  template <typename T>
  void dispatch(std::span<const T> tokens, size_t hidden, std::span<const float> weights,
                std::span<T> outTokens, std::span<float> outWeights,
                std::span<int64_t> outIdx = {}) {
    const size_t rows = checkDispatch(tokens.size_bytes(), hidden, weights.size(),
                                      outTokens.size_bytes(), outWeights.size(), outIdx.size());
    check(trncclEpDispatch(raw_, tokens.data(), hidden, weights.empty() ? nullptr : weights.data(),
                           outTokens.data(), outWeights.empty() ? nullptr : outWeights.data(),
                           outIdx.empty() ? nullptr : outIdx.data(), rows),
          comm_);
  }
  template <typename T>
  Request dispatchAsync(std::span<const T> tokens, size_t hidden, std::span<const float> weights,
                        std::span<T> outTokens, std::span<float> outWeights,
                        std::span<int64_t> outIdx = {}) {
    const size_t rows = checkDispatch(tokens.size_bytes(), hidden, weights.size(),
                                      outTokens.size_bytes(), outWeights.size(), outIdx.size());
    trncclRequest_t raw = nullptr;
    check(trncclEpDispatchAsync(raw_, tokens.data(), hidden,
                                weights.empty() ? nullptr : weights.data(), outTokens.data(),
                                outWeights.empty() ? nullptr : outWeights.data(),
                                outIdx.empty() ? nullptr : outIdx.data(), rows, &raw),
          comm_);
    return Request(raw);
  }
  // fp8 groups: scales holds one float per token, outScales one per received row or slot.
  template <typename T>
  void dispatchScaled(std::span<const T> tokens, std::span<const float> scales, size_t hidden,
                      std::span<const float> weights, std::span<T> outTokens,
                      std::span<float> outScales, std::span<float> outWeights,
                      std::span<int64_t> outIdx = {}) {
    size_t rows = checkDispatch(tokens.size_bytes(), hidden, weights.size(), outTokens.size_bytes(),
                                outWeights.size(), outIdx.size());
    if (scales.size() < numTokens_)
      throw Error(trncclInvalidArgument,
                  "EpRouting::dispatchScaled: scales needs one float per token");
    if (!outScales.empty()) rows = std::min(rows, outScales.size());
    check(trncclEpDispatchScaled(raw_, tokens.data(), scales.data(), hidden,
                                 weights.empty() ? nullptr : weights.data(), outTokens.data(),
                                 outScales.empty() ? nullptr : outScales.data(),
                                 outWeights.empty() ? nullptr : outWeights.data(),
                                 outIdx.empty() ? nullptr : outIdx.data(), rows),
          comm_);
  }
  // out: numTokens x hidden, the sum of every row or slot that came from each token.
  template <typename T>
  void combine(std::span<const T> expertTokens, size_t hidden, std::span<T> out,
               bool weighted = false) {
    if (out.size_bytes() < numTokens_ * hidden * combineBytes_ ||
        expertTokens.size_bytes() < numRecv() * hidden * combineBytes_)
      throw Error(trncclInvalidArgument,
                  "EpRouting::combine: out needs numTokens x hidden and expertTokens numRecv() x "
                  "hidden elements");
    check(trncclEpCombine(raw_, expertTokens.data(), hidden, out.data(), weighted ? 1 : 0), comm_);
  }

 private:
  friend class EpGroup;
  EpRouting(trncclEpRouting_t raw, trncclComm_t comm, size_t tokenBytes, size_t combineBytes,
            int topk, size_t numTokens, int localExperts, trncclEpLayout_t layout)
      : raw_(raw),
        comm_(comm),
        tokenBytes_(tokenBytes),
        combineBytes_(combineBytes),
        topk_(topk),
        numTokens_(numTokens),
        localExperts_(localExperts),
        layout_(layout) {}
  // Returns the output capacity in rows or slots; throws on a span too small.
  size_t checkDispatch(size_t tokenBytes, size_t hidden, size_t weights, size_t outBytes,
                       size_t outWeights, size_t outIdx) const {
    const size_t row = hidden * tokenBytes_;
    if (hidden == 0 || tokenBytes < numTokens_ * row ||
        (weights != 0 && weights < numTokens_ * topk_))
      throw Error(trncclInvalidArgument,
                  "EpRouting::dispatch: tokens need numTokens x hidden elements and weights "
                  "numTokens x topk (or none)");
    const size_t perRow = layout_ == trncclEpLayoutFlat ? static_cast<size_t>(topk_) : 1;
    size_t rows = outBytes / row;
    if (outWeights) rows = std::min(rows, outWeights / perRow);
    if (outIdx && layout_ == trncclEpLayoutFlat) rows = std::min(rows, outIdx / perRow);
    return rows;
  }
  void reset() noexcept {
    if (raw_) (void)trncclEpRoutingDestroy(std::exchange(raw_, nullptr));
  }
  trncclEpRouting_t raw_ = nullptr;
  trncclComm_t comm_ = nullptr;
  size_t tokenBytes_ = 0;    // bytes per element dispatched
  size_t combineBytes_ = 0;  // bytes per element combined (bf16 for fp8 groups)
  int topk_ = 0;
  size_t numTokens_ = 0;
  int localExperts_ = 0;
  trncclEpLayout_t layout_ = trncclEpLayoutFlat;
};

// An expert-parallel group on comm (collective); must not outlive it.
class EpGroup {
 public:
  EpGroup(const Comm& comm, const trncclEpConfig_t& config)
      : comm_(comm.get()),
        tokenBytes_(elementBytes(config.payloadType)),
        combineBytes_(isFp8(config.payloadType) ? 2 : tokenBytes_),
        localExperts_(config.numExperts / std::max(1, comm.size())) {
    check(trncclEpGroupCreate(comm_, &config, &raw_), comm_);
  }
  EpGroup(EpGroup&& other) noexcept
      : raw_(std::exchange(other.raw_, nullptr)),
        comm_(other.comm_),
        tokenBytes_(other.tokenBytes_),
        combineBytes_(other.combineBytes_),
        localExperts_(other.localExperts_) {}
  EpGroup(const EpGroup&) = delete;
  EpGroup& operator=(const EpGroup&) = delete;
  ~EpGroup() {
    if (raw_) (void)trncclEpGroupDestroy(raw_);
  }
  trncclEpGroup_t get() const { return raw_; }

  // topkIdx: numTokens x topk expert ids (-1 = none). Collective.
  template <typename Index>
  EpRouting route(std::span<const Index> topkIdx, int topk,
                  trncclEpLayout_t layout = trncclEpLayoutFlat) {
    static_assert(std::is_same_v<Index, int32_t> || std::is_same_v<Index, int64_t>,
                  "top-k ids are int32_t or int64_t");
    if (topk <= 0 || topkIdx.size() % topk != 0)
      throw Error(trncclInvalidArgument, "EpGroup::route: topkIdx must hold numTokens x topk ids");
    const size_t numTokens = topkIdx.size() / topk;
    trncclEpRouting_t raw = nullptr;
    check(trncclEpCreateRouting(raw_, topkIdx.data(), DataType<Index>::value, numTokens, topk,
                                layout, &raw),
          comm_);
    return EpRouting(raw, comm_, tokenBytes_, combineBytes_, topk, numTokens, localExperts_,
                     layout);
  }

 private:
  static bool isFp8(trncclDataType_t t) { return t == trncclFloat8e4m3 || t == trncclFloat8e5m2; }
  static size_t elementBytes(trncclDataType_t t) {
    return t == trncclFloat64 ? 8 : t == trncclFloat32 ? 4 : isFp8(t) ? 1 : 2;
  }
  trncclEpGroup_t raw_ = nullptr;
  trncclComm_t comm_ = nullptr;
  size_t tokenBytes_ = 2;
  size_t combineBytes_ = 2;
  int localExperts_ = 0;
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
