// One native-protocol connection (docs/PROTOCOL.md): reads frames, runs them against the
// store, sends responses. Requests of a connection are answered in order.
//
// Data path: PUT values are received straight into reserved DRAM slots (readv into the
// reservations; only bytes that arrived with the frame's header are copied out of the
// read buffer); GET values are sent straight from pinned DRAM records (sendmsg of views).
// Over the Unix socket with a shared-memory region, values skip the socket: the server
// copies between the region and DRAM (one copy).
//
// A get of a block held only on flash never waits on the reactor: the request goes to the
// server's I/O threads (Store::Read there), the connection stops reading frames until the
// answer is back, and the reactor serves its other connections meanwhile.
#ifndef KVPOOL_SERVER_NATIVE_CONNECTION_H_
#define KVPOOL_SERVER_NATIVE_CONNECTION_H_

#include <string_view>
#include <vector>

#include "net/protocol.h"
#include "server/connection.h"
#include "server/tenants.h"

namespace kvpool::server {

class IoWorkers;

class NativeConnection final : public Connection {
 public:
  NativeConnection(Server& server, net::Fd fd, ReactorCounters& counters, bool unix_socket);
  ~NativeConnection() override;
  Next Drive() override;
  bool Handshaken() const override { return hello_done_; }
  bool MidRequest() const override {
    return !waiting_ && (state_ == State::kData || in_end_ > in_start_);
  }

 private:
  enum class State { kFrame, kData, kClosing };
  enum class Parse { kNeedMore, kReady, kBad };
  enum class Io { kDone, kBlocked, kFailed };
  enum class After { kNothing, kPut, kPing, kList };
  struct Target {
    std::byte* dst;  // null: discard
    size_t len;
  };

  Io Fill();          // reads what the socket has into in_
  Parse ParseNext();  // is a whole header + meta buffered? (kBad: replied and closing)
  void HandleFrame(std::span<const std::byte> meta);
  Io ReceiveData();
  void ReplyError(Code code, std::string_view message, bool close);
  void BeginData(After after);  // receive targets_, then run `after`

  void DoHello(std::span<const std::byte> meta);
  void DoPut(std::span<const std::byte> meta);
  void FinishPut();
  void DoGet(std::span<const std::byte> meta);
  // Answers a get whose blocks are resolved: views[i] is item i's view or its status.
  void FinishGet(const std::vector<net::GetItem>& items, const std::vector<BlockKey>& keys,
                 std::vector<Result<BlockView>>& views);
  // EXISTS with a lease (header.reserved = milliseconds): found blocks are held for the GET
  // that follows (server/leases.h).
  void DoHold(std::span<const std::byte> meta);
  // The frame's meta as keys (16 bytes each), in this connection's namespace.
  std::vector<BlockKey> ScopedKeys(std::span<const std::byte> meta) const;
  void FinishHold(const std::vector<BlockKey>& keys, std::vector<Result<BlockView>>& views);
  // The I/O threads, offered half of each large copy into shared memory while the server
  // is lightly loaded (at most one open connection per reactor: the other cores are
  // likely idle); null otherwise, when splitting would only add a hand-off.
  IoWorkers* CopyHelpers();
  friend class GetRead;
  friend class HoldRead;
  void DoKeys(net::Op op, std::span<const std::byte> meta);
  void DoStat();
  // STAT with kStatFigures: the store's figures (a tenant: its own), net/protocol.h.
  std::string StatFigures() const;
  void FinishPing();
  void StartList();
  void DoLeave();

 public:
  void FinishList(const std::vector<HeldBlock>& blocks);

 private:
  const bool unix_socket_;
  std::vector<std::byte> in_;
  size_t in_start_ = 0, in_end_ = 0;
  State state_ = State::kFrame;
  net::Header hdr_;
  bool hello_done_ = false;
  bool peer_ = false;          // HELLO with kHelloPeer: stored keys, LIST and LEAVE
  bool scoped_stats_ = false;  // a tenant on a node with tenants: STAT tells its own only
  Scope scope_;
  int passed_fd_ = -1;
  std::byte* shm_ = nullptr;
  size_t shm_size_ = 0;
  void PublishSent();  // writes the last answered request id into the control block

  // The frame whose data is being received.
  After after_ = After::kNothing;
  std::vector<Target> targets_;
  size_t target_ = 0, target_pos_ = 0;
  std::vector<net::PutItem> put_items_;
  std::vector<std::vector<uint32_t>> put_tokens_;  // each item's token ids, received after it
  std::vector<Reservation> reservations_;
  std::vector<net::ResponseItem> results_;
  // Per put item: copied out of shared memory with its CRC checked on the way, so the
  // commit need not checksum it again.
  std::vector<uint8_t> checksummed_;
  std::vector<std::byte> ping_data_;
  std::vector<std::byte> discard_;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_NATIVE_CONNECTION_H_
