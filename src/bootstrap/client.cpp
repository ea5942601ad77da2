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

Result<std::vector<PeerInfo>> rendezvous(const trncclUniqueId& id, int nranks, int rank,
                                         const PeerInfo& self, double timeoutSeconds) {
  auto parsed = parseUniqueId(id);
  TRNCCL_RETURN_IF_ERROR(parsed.status());
  const UniqueIdData& data = parsed.value();
  Endpoint root{data.ipv4, data.port};
  Deadline deadline = Deadline::after(timeoutSeconds);

  auto connected = connectTo(root, deadline);
  TRNCCL_RETURN_IF_ERROR(connected.status());
  Socket& socket = connected.value();

  wire::Hello hello{data.nonce, nranks, rank, static_cast<int64_t>(timeoutSeconds * 1000)};
  wire::Header header{wire::kMagic, wire::kVersion, static_cast<uint16_t>(wire::Type::kHello),
                      static_cast<uint32_t>(sizeof(hello) + sizeof(PeerInfo))};
  std::vector<char> message(sizeof(header) + header.length);
  std::memcpy(message.data(), &header, sizeof(header));
  std::memcpy(message.data() + sizeof(header), &hello, sizeof(hello));
  std::memcpy(message.data() + sizeof(header) + sizeof(hello), &self, sizeof(self));
  TRNCCL_RETURN_IF_ERROR(socket.sendAll(message.data(), message.size(), deadline));

  wire::Header reply;
  Status got = socket.recvAll(&reply, sizeof(reply), deadline);
  if (got.code() == Code::kTimeout)
    return makeError(Code::kTimeout,
                     "rendezvous timed out after %.1f s: the root at %s did not answer "
                     "(TRNCCL_TIMEOUT)",
                     timeoutSeconds, root.toString().c_str());
  TRNCCL_RETURN_IF_ERROR(got.withContext("rendezvous with " + root.toString() + ": "));
  if (reply.magic != wire::kMagic || reply.length > wire::kMaxPayload)
    return makeError(Code::kRemoteError, "rendezvous root at %s sent a malformed reply",
                     root.toString().c_str());
  std::vector<char> payload(reply.length);
  TRNCCL_RETURN_IF_ERROR(socket.recvAll(payload.data(), payload.size(), deadline));
  if (reply.type == static_cast<uint16_t>(wire::Type::kError)) {
    std::string text(payload.begin(), payload.end());
    bool timedOut = text.find("timed out") != std::string::npos;
    return Status(timedOut ? Code::kTimeout : Code::kInvalidUsage, text);
  }
  if (reply.type != static_cast<uint16_t>(wire::Type::kTable) ||
      reply.length != static_cast<uint32_t>(nranks) * sizeof(PeerInfo))
    return makeError(Code::kRemoteError, "rendezvous root sent a table of the wrong size");
  std::vector<PeerInfo> table(nranks);
  std::memcpy(table.data(), payload.data(), payload.size());
  return table;
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
