// One RESP2 connection: the subset of Redis that caches use (GET SET MGET MSET EXISTS DEL
// PING INFO DBSIZE FLUSHALL QUIT, SET's EX/PX/NX/XX, AUTH, and the handshake commands
// client libraries send), over the same store as the native protocol.
//
// Keys are byte strings hashed into the `resp_namespace` namespace (XXH3-128 of the key,
// then scoped as native keys are). Values carry an 8-byte expiry prefix (Unix ms, 0 =
// none); an expired value reads as a miss. SET overwrites, as in Redis. GET replies are
// sent straight from the pinned DRAM record.
#ifndef KVPOOL_SERVER_RESP_CONNECTION_H_
#define KVPOOL_SERVER_RESP_CONNECTION_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/connection.h"
#include "server/resp_parser.h"
#include "server/tenants.h"

namespace kvpool::server {

class RespConnection final : public Connection {
 public:
  RespConnection(Server& server, net::Fd fd, ReactorCounters& counters);
  Next Drive() override;
  bool Handshaken() const override { return commands_ > 0; }
  bool MidRequest() const override { return !waiting_ && in_end_ > in_start_; }

 private:
  enum class Io { kDone, kBlocked, kFailed };
  Io Fill();
  // Runs one command; false: close after the replies queued so far are sent.
  bool Execute(const std::vector<std::string_view>& args);

  BlockKey KeyOf(std::string_view key) const;
  // The stored bytes as this connection may read them: opened if sealed (an empty span when
  // a sealed block does not open for this tenant), as they are otherwise.
  std::span<const std::byte> Plain(const BlockKey& key, std::span<const std::byte> stored);
  // Appends the value of `key` as a bulk string (or nil) to the output.
  // GET (array false) or MGET: values held only on flash are read on an I/O thread, and
  // no further command runs until the reply is out (replies stay in order).
  void ReplyValues(std::span<const std::string_view> names, bool array);
  void ReplyViews(const std::vector<BlockKey>& keys, std::vector<Result<BlockView>>& views,
                  bool array);
  friend class MgetRead;
  void Reply(std::string_view text);  // raw protocol bytes
  void ReplyError(std::string_view message);
  void ReplyInt(long long v);
  void ReplyBulk(std::string_view s);
  Status Set(std::string_view key, std::string_view value, uint64_t expiry_ms, bool overwrite);
  // The key's expiry (unix ms, 0: none), or nullopt if it is not held (or has expired).
  std::optional<uint64_t> ExpiryOf(std::string_view key);

  std::vector<char> in_;
  size_t in_start_ = 0, in_end_ = 0;
  bool closing_ = false;
  bool authed_;
  Scope scope_;
  RespLimits limits_;
  std::vector<std::string_view> args_;
  std::string client_name_;  // CLIENT SETNAME
  uint64_t commands_ = 0;    // complete commands parsed
  bool in_multi_ = false;
  std::vector<std::vector<std::string>> queued_;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_RESP_CONNECTION_H_
