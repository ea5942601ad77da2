// The rank side of the rendezvous, and the unique id's text form.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/wire.hpp"
#include "core/clock.hpp"
#include "core/strformat.hpp"
#include "core/text_file.hpp"
#include "topology/host.hpp"

namespace trnccl::bootstrap {

Result<UniqueIdData> parseUniqueId(const trncclUniqueId& id) {
  UniqueIdData data;
  std::memcpy(&data, id.internal, sizeof(data));
  if (data.magic != wire::kIdMagic || data.version != wire::kVersion || data.port == 0)
    return makeError(Code::kInvalidArgument,
                     "the unique id is not one made by trncclGetUniqueId of this trnccl version "
                     "(magic %#x, version %u)",
                     data.magic, data.version);
  return data;
}

struct Session::Impl {
  Socket socket;
  std::string root;
  UniqueIdData id{};
  std::vector<PeerInfo> table;
};

namespace {

// True when pid is known to have exited (gone, or a zombie nobody reaped yet).
bool processGone(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  auto stat = readTextFile(strformat("/proc/%d/stat", pid));
  if (!stat.isOk()) return true;
  const size_t close = stat.value().rfind(')');
  return close != std::string::npos && close + 2 < stat.value().size() &&
         (stat.value()[close + 2] == 'Z' || stat.value()[close + 2] == 'X');
}

// When the root stopped answering because the process holding it is gone (and it ran on
// this machine, where that can be checked), the sentence that says so -- naming its rank
// when the table is known -- else "".
std::string rootGone(const UniqueIdData& id, const std::vector<PeerInfo>& table,
                     bool waitForExit = true) {
  if (id.rootPid <= 0 || id.rootMachineHash != topology::localHostIdentity().machineHash) return "";
  // A killed process closes its sockets before it is marked as exited: give it a moment.
  bool gone = processGone(id.rootPid);
  for (int wait = 0; waitForExit && wait < 100 && !gone; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    gone = processGone(id.rootPid);
  }
  if (!gone) return "";
  for (size_t r = 0; r < table.size(); ++r)
    if (table[r].pid == id.rootPid && table[r].machineHash == id.rootMachineHash)
      return strformat(
          "rank %zu (pid %d), whose process held the rendezvous root, is gone (it "
          "exited or was killed; look at its output for why)",
          r, id.rootPid);
  return strformat(
      "the process that made the unique id (pid %d), which held the rendezvous "
      "root, is gone (it exited or was killed)",
      id.rootPid);
}

// A failure talking to the root, explained by the root's process being gone when it is.
Status explainRootFailure(Status status, const UniqueIdData& id,
                          const std::vector<PeerInfo>& table) {
  if (status.isOk() || status.code() == Code::kTimeout || status.code() == Code::kInvalidUsage)
    return status;
  std::string gone = rootGone(id, table);
  if (gone.empty()) return status;
  return Status(Code::kRemoteError, gone + ": " + status.message());
}

}  // namespace

Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

namespace {

struct Reply {
  uint16_t type;
  std::vector<char> payload;
};

// One message from the root; its error messages become this rank's Status.
Result<Reply> receiveReply(Socket& socket, const Deadline& deadline, const std::string& root,
                           double timeoutSeconds, const char* stage) {
  wire::Header reply;
  Status got = socket.recvAll(&reply, sizeof(reply), deadline);
  if (got.code() == Code::kTimeout)
    return makeError(Code::kTimeout,
                     "%s timed out after %.1f s: the root at %s did not answer (TRNCCL_TIMEOUT)",
                     stage, timeoutSeconds, root.c_str());
  TRNCCL_RETURN_IF_ERROR(got.withContext(std::string(stage) + " with " + root + ": "));
  if (reply.magic != wire::kMagic || reply.length > wire::kMaxPayload)
    return makeError(Code::kRemoteError, "%s: the root at %s sent a malformed reply", stage,
                     root.c_str());
  Reply out{reply.type, std::vector<char>(reply.length)};
  TRNCCL_RETURN_IF_ERROR(socket.recvAll(out.payload.data(), out.payload.size(), deadline));
  if (reply.type == static_cast<uint16_t>(wire::Type::kError)) {
    std::string text(out.payload.begin(), out.payload.end());
    const bool timedOut = text.find("timed out") != std::string::npos;
    const bool rankGone = text.find("left the job") != std::string::npos;
    return Status(timedOut   ? Code::kTimeout
                  : rankGone ? Code::kRemoteError
                             : Code::kInvalidUsage,
                  text);
  }
  return out;
}

Status sendMessage(Socket& socket, wire::Type type, const void* a, size_t aBytes, const void* b,
                   size_t bBytes, const Deadline& deadline) {
  wire::Header header{wire::kMagic, wire::kVersion, static_cast<uint16_t>(type),
                      static_cast<uint32_t>(aBytes + bBytes)};
  std::vector<char> message(sizeof(header) + aBytes + bBytes);
  std::memcpy(message.data(), &header, sizeof(header));
  if (aBytes) std::memcpy(message.data() + sizeof(header), a, aBytes);
  if (bBytes) std::memcpy(message.data() + sizeof(header) + aBytes, b, bBytes);
  return socket.sendAll(message.data(), message.size(), deadline);
}

}  // namespace

Result<Joined> rendezvous(const trncclUniqueId& id, int nranks, int rank, const PeerInfo& self,
                          double timeoutSeconds) {
  auto parsed = parseUniqueId(id);
  TRNCCL_RETURN_IF_ERROR(parsed.status());
  const UniqueIdData& data = parsed.value();
  Endpoint root{data.ipv4, data.port};
  Deadline deadline = Deadline::after(timeoutSeconds);

  const std::vector<PeerInfo> noTable;
  // Connect in slices: a root whose process is gone refuses every attempt, and saying so at
  // once beats retrying until the timeout.
  Result<Socket> connected = makeError(Code::kTimeout, "not connected");
  for (;;) {
    connected = connectTo(root, Deadline::after(std::min(0.25, deadline.remainingMs() / 1000.0)));
    if (connected.isOk() || deadline.expired()) break;
    if (std::string gone = rootGone(data, noTable, /*waitForExit=*/false); !gone.empty())
      return Status(Code::kRemoteError,
                    gone + ": cannot connect to the rendezvous root at " + root.toString());
  }
  TRNCCL_RETURN_IF_ERROR(connected.status());
  Socket& socket = connected.value();

  wire::Hello hello{data.nonce, nranks, rank, static_cast<int64_t>(timeoutSeconds * 1000)};
  TRNCCL_RETURN_IF_ERROR(explainRootFailure(
      sendMessage(socket, wire::Type::kHello, &hello, sizeof(hello), &self, sizeof(self), deadline),
      data, noTable));
  auto reply = receiveReply(socket, deadline, root.toString(), timeoutSeconds, "rendezvous");
  TRNCCL_RETURN_IF_ERROR(explainRootFailure(reply.status(), data, noTable));
  if (reply.value().type != static_cast<uint16_t>(wire::Type::kTable) ||
      reply.value().payload.size() != static_cast<size_t>(nranks) * sizeof(PeerInfo))
    return makeError(Code::kRemoteError, "rendezvous root sent a table of the wrong size");
  Joined joined;
  joined.table.resize(nranks);
  std::memcpy(joined.table.data(), reply.value().payload.data(), reply.value().payload.size());
  joined.session.impl_ = std::make_unique<Session::Impl>();
  joined.session.impl_->socket = std::move(socket);
  joined.session.impl_->root = root.toString();
  joined.session.impl_->id = data;
  joined.session.impl_->table = joined.table;
  return joined;
}

Result<std::vector<std::string>> Session::exchange(const std::string& blob, double timeoutSeconds) {
  if (!impl_ || !impl_->socket.valid())
    return makeError(Code::kInternalError, "bootstrap exchange without a rendezvous session");
  if (blob.size() > wire::kMaxExchangeBytes)
    return makeError(Code::kInternalError, "bootstrap exchange blob of %zu bytes (limit %u)",
                     blob.size(), wire::kMaxExchangeBytes);
  Deadline deadline = Deadline::after(timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(
      explainRootFailure(sendMessage(impl_->socket, wire::Type::kExchange, blob.data(), blob.size(),
                                     nullptr, 0, deadline),
                         impl_->id, impl_->table));
  auto reply =
      receiveReply(impl_->socket, deadline, impl_->root, timeoutSeconds, "bootstrap exchange");
  impl_->socket.close();  // one round per rendezvous
  TRNCCL_RETURN_IF_ERROR(explainRootFailure(reply.status(), impl_->id, impl_->table));
  const std::vector<char>& p = reply.value().payload;
  uint32_t n = 0;
  if (reply.value().type != static_cast<uint16_t>(wire::Type::kExchangeTable) || p.size() < 4)
    return makeError(Code::kRemoteError, "bootstrap exchange: malformed answer from the root");
  std::memcpy(&n, p.data(), 4);
  size_t offset = 4 + static_cast<size_t>(n) * 4;
  if (offset > p.size())
    return makeError(Code::kRemoteError, "bootstrap exchange: malformed answer from the root");
  std::vector<std::string> blobs(n);
  for (uint32_t r = 0; r < n; ++r) {
    uint32_t length;
    std::memcpy(&length, p.data() + 4 + r * 4, 4);
    if (offset + length > p.size())
      return makeError(Code::kRemoteError, "bootstrap exchange: malformed answer from the root");
    blobs[r].assign(p.data() + offset, length);
    offset += length;
  }
  return blobs;
}

std::string uniqueIdToHex(const trncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : id.internal) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

Result<trncclUniqueId> uniqueIdFromHex(const std::string& hex) {
  trncclUniqueId id{};
  if (hex.size() != 2 * sizeof(id.internal))
    return makeError(Code::kInvalidArgument, "a unique id in hex has %zu digits, expected %zu",
                     hex.size(), 2 * sizeof(id.internal));
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return makeError(Code::kInvalidArgument, "unique id hex has a non-hex digit");
    id.internal[i] = static_cast<char>(hi * 16 + lo);
  }
  return id;
}

}  // namespace trnccl::bootstrap
