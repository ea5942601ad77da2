// The rank side of the rendezvous, and the unique id's text form.
#include <cstring>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/wire.hpp"
#include "core/clock.hpp"

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
};

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
    bool timedOut = text.find("timed out") != std::string::npos;
    return Status(timedOut ? Code::kTimeout : Code::kInvalidUsage, text);
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

  auto connected = connectTo(root, deadline);
  TRNCCL_RETURN_IF_ERROR(connected.status());
  Socket& socket = connected.value();

  wire::Hello hello{data.nonce, nranks, rank, static_cast<int64_t>(timeoutSeconds * 1000)};
  TRNCCL_RETURN_IF_ERROR(sendMessage(socket, wire::Type::kHello, &hello, sizeof(hello), &self,
                                     sizeof(self), deadline));
  auto reply = receiveReply(socket, deadline, root.toString(), timeoutSeconds, "rendezvous");
  TRNCCL_RETURN_IF_ERROR(reply.status());
  if (reply.value().type != static_cast<uint16_t>(wire::Type::kTable) ||
      reply.value().payload.size() != static_cast<size_t>(nranks) * sizeof(PeerInfo))
    return makeError(Code::kRemoteError, "rendezvous root sent a table of the wrong size");
  Joined joined;
  joined.table.resize(nranks);
  std::memcpy(joined.table.data(), reply.value().payload.data(), reply.value().payload.size());
  joined.session.impl_ = std::make_unique<Session::Impl>();
  joined.session.impl_->socket = std::move(socket);
  joined.session.impl_->root = root.toString();
  return joined;
}

Result<std::vector<std::string>> Session::exchange(const std::string& blob, double timeoutSeconds) {
  if (!impl_ || !impl_->socket.valid())
    return makeError(Code::kInternalError, "bootstrap exchange without a rendezvous session");
  if (blob.size() > wire::kMaxExchangeBytes)
    return makeError(Code::kInternalError, "bootstrap exchange blob of %zu bytes (limit %u)",
                     blob.size(), wire::kMaxExchangeBytes);
  Deadline deadline = Deadline::after(timeoutSeconds);
  TRNCCL_RETURN_IF_ERROR(sendMessage(impl_->socket, wire::Type::kExchange, blob.data(), blob.size(),
                                     nullptr, 0, deadline));
  auto reply =
      receiveReply(impl_->socket, deadline, impl_->root, timeoutSeconds, "bootstrap exchange");
  impl_->socket.close();  // one round per rendezvous
  TRNCCL_RETURN_IF_ERROR(reply.status());
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
