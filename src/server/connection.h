// A connection owned by one reactor: the native and RESP protocol state machines derive
// from it. The reactor calls Turn() when the socket is readable or writable (or when the
// connection asked to run again); it runs the TLS handshake if the connection has TLS, then
// Drive, which does as much work as it can without blocking.
#ifndef KVPOOL_SERVER_CONNECTION_H_
#define KVPOOL_SERVER_CONNECTION_H_

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvpool/store.h"
#include "net/socket.h"
#include "net/tls.h"
#include "server/sealer.h"
#include "server/tenant_stats.h"

namespace kvpool::server {

class Server;
// Written only by the owning reactor's thread (uncontended); read by Server::GetStats.
struct ReactorCounters {
  std::atomic<uint64_t> accepted{0}, refused{0}, requests{0}, protocol_errors{0}, auth_failures{0},
      bytes_in{0}, bytes_out{0}, handshake_timeouts{0}, tls_failures{0}, request_timeouts{0},
      seal_misses{0};
};

enum class Next {
  kRead,   // wait until readable
  kWrite,  // wait until writable
  kAgain,  // more buffered work: run again after other connections had a turn
  kWait,   // an offloaded job is running: no interest until it finishes
  kClose,
};

class Connection;

// Blocking work (a flash read) a connection hands off so that its reactor never waits on
// a device: Run() on one of the server's I/O threads, then Finish() on the reactor's
// thread with the connection, if it is still open (if not, the job is just destroyed).
class OffloadJob {
 public:
  virtual ~OffloadJob() = default;
  virtual void Run() = 0;
  virtual void Finish(Connection& c) = 0;
};

// The blocks of one GET-like request. Constructing it pins the DRAM-resident ones
// (Store::ReadResident); Run reads the rest, held only on flash, with one Store::ReadBatch;
// Finish (the request's answer) is the subclass's. Connection::StartRead runs it.
class BlockRead : public OffloadJob {
 public:
  BlockRead(Store& store, std::vector<BlockKey> keys);  // an empty key is a miss
  bool on_flash() const { return on_flash_; }
  void Run() override;

 protected:
  Store& store_;
  std::vector<BlockKey> keys_;
  std::vector<Result<BlockView>> views_;  // views_[i]: keys_[i]'s block, or why not

 private:
  bool on_flash_ = false;  // some view is kBusy: Run must read it
};

// What a connection may ask of the reactor that owns it.
class ReactorContext {
 public:
  virtual void Offload(Connection& c, std::shared_ptr<OffloadJob> job) = 0;

 protected:
  ~ReactorContext() = default;
};

class Connection {
 public:
  Connection(Server& server, net::Fd fd, ReactorCounters& counters)
      : server_(server), fd_(std::move(fd)), counters_(counters) {}
  virtual ~Connection() {
    if (tenant_) tenant_->connections.fetch_sub(1, std::memory_order_relaxed);
  }
  // What the protocol implements: as much work as can be done without blocking.
  virtual Next Drive() = 0;
  // One turn: the TLS handshake while it lasts, then the protocol's Drive(). The reactor
  // calls this, never Drive() directly.
  Next Turn();
  // Serves the socket with TLS from now on (before the first Turn).
  void UseTls(std::unique_ptr<net::TlsSession> tls) { tls_ = std::move(tls); }
  bool tls() const { return tls_ != nullptr; }
  int fd() const { return fd_.get(); }
  // Set by the reactor once, before the first Drive; id is unique within the process.
  void Attach(ReactorContext* reactor, uint64_t id, uint64_t now_ns) {
    reactor_ = reactor;
    id_ = id;
    attached_ns_ = request_start_ns_ = last_request_ns_ = now_ns;
  }
  uint64_t attached_ns() const { return attached_ns_; }
  // Whether the client has done what makes it a client: a native HELLO accepted, a first
  // RESP command completed. Connections that have not within the server's handshake
  // timeout are closed (a port full of silent sockets must not lock clients out).
  virtual bool Handshaken() const = 0;
  // Whether part of a request has arrived and the rest has not: a client that stays so
  // longer than the server's request timeout is closed (a byte-at-a-time sender must not
  // hold a connection slot for ever). progress_ns(): when bytes last arrived.
  virtual bool MidRequest() const = 0;
  // MidRequest, or part of a TLS record held (a trickle of record bytes is a request too).
  bool InRequest() const { return MidRequest() || (tls_ && tls_->HasPending()); }
  // When the request now in progress began (its first bytes, or the previous request's
  // end), and when the last request completed: the reactor's request and idle timeouts.
  uint64_t request_start_ns() const { return request_start_ns_; }
  uint64_t last_request_ns() const { return last_request_ns_; }
  uint64_t id() const { return id_; }
  // The reactor hands a finished job back (the connection stops waiting, then answers).
  void FinishJob(OffloadJob& job) {
    waiting_ = false;
    job.Finish(*this);
  }
  // The interest the reactor last registered for this connection.
  Next registered = Next::kRead;

 protected:
  // Output: bytes owned by the connection, then views of blocks (sent in place, no copy).
  // Flush sends as much as the socket takes; true when everything went out.
  bool Flush(bool* failed);
  bool OutputPending() const { return out_pos_ < out_total_ || (tls_ && tls_->has_outgoing()); }
  void QueueOwned(size_t offset, size_t len);  // a range of out_bytes_
  void QueueView(std::span<const std::byte> bytes);
  void ResetOutput();

  // The socket, through TLS when the connection has it: recv/readv's contract (-1 with
  // errno EAGAIN when nothing can be read now, 0 when the peer closed).
  ssize_t Receive(void* buf, size_t len);
  ssize_t ReceiveV(const iovec* iov, int n);
  // A certificate the client presented verified against the server's client CA.
  bool peer_certified() const { return tls_ && tls_->peer_verified(); }

  // Encryption at rest (server/sealer.h), for a tenant with keys (seal_keys_). SealReserved
  // checks the value's CRC (unless `checksummed`: verified on the way in), seals it in place
  // (the reservation is the value plus kSealOverhead, the value at kSealPrefix) and commits
  // it. OpenSealed returns the plaintext of a sealed block, kept by the connection until its
  // answer is sent, and the client's CRC in *crc; kNotFound when it does not open.
  // ReserveValue reserves a put of `len` value bytes: for a sealed tenant the value and
  // the seal around it (kRefused once its keys are shredded); the value goes at
  // value_offset() in it.
  Result<Reservation> ReserveValue(const BlockKey& key, size_t len, PutOptions options);
  size_t value_offset() const { return seal_keys_ ? kSealPrefix : 0; }
  Status SealReserved(const BlockKey& stored_key, uint32_t crc, bool checksummed,
                      Reservation reservation);
  Result<std::span<const std::byte>> OpenSealed(const BlockKey& stored_key,
                                                std::span<const std::byte> stored, uint32_t* crc);
  std::shared_ptr<const TenantKeys> seal_keys_;
  uint16_t tenant_id_ = 0;  // the store's id of the connection's tenant (PutOptions::tenant)
  // What the tenant holds in the store, and its quotas (zeros with no tenant); as a line of
  // STAT ("" with no tenant).
  void TenantHolding(TenantUsage* usage, TenantQuota* quota) const;
  std::string TenantUsageText() const;

  // Per-tenant counts (server/tenant_stats.h): CountAs once the connection authenticated;
  // the rest add to the reactor's counters and, from then on, to the tenant's.
  // False (and nothing counted) when the tenant already has `cap` connections open.
  bool CountAs(TenantCounters* tenant, uint32_t cap = 0);
  void CountRequest();
  void CountIn(uint64_t bytes);
  void CountGets(uint64_t gets, uint64_t hits);
  void CountPuts(uint64_t puts);

  Server& server_;
  net::Fd fd_;
  ReactorCounters& counters_;
  TenantCounters* tenant_ = nullptr;
  std::string tenant_name_;
  // The tenant's own figures, as STAT and INFO give them to a tenant.
  std::string TenantStatsText() const;
  // Answers `read` now if all its blocks are in DRAM; otherwise its flash reads run on an
  // I/O thread and the connection waits (no further requests) until FinishJob.
  void StartRead(std::shared_ptr<BlockRead> read);
  // Runs `job` on an I/O thread (inline without a reactor); the connection waits for it.
  void Offload(std::shared_ptr<OffloadJob> job);

  ReactorContext* reactor_ = nullptr;  // null: blocking work runs inline
  uint64_t id_ = 0;
  uint64_t attached_ns_ = 0;
  bool waiting_ = false;  // a job of this connection's is running: answers stay in order
  std::vector<std::byte> out_bytes_;
  std::vector<BlockView> views_;  // keep the queued blocks pinned until sent
  std::vector<std::shared_ptr<const BlockView>> held_views_;  // leased ones, likewise
  std::vector<std::vector<std::byte>> opened_;  // plaintexts of sealed blocks, likewise

 private:
  struct Piece {
    bool owned;
    size_t offset;  // into out_bytes_ (owned) or unused
    const std::byte* ptr;
    size_t len;
  };
  bool SendTls(bool* failed);  // Flush through a user-space TLS session
  std::unique_ptr<net::TlsSession> tls_;
  bool tls_wants_write_ = false;   // a TLS read needs the socket writable first
  bool tls_read_blocked_ = false;  // the last TLS read wanted more bytes from the socket
  uint64_t request_start_ns_ = 0, last_request_ns_ = 0;
  bool was_mid_ = false;
  std::vector<Piece> pieces_;
  size_t piece_ = 0, piece_pos_ = 0;
  uint64_t out_pos_ = 0, out_total_ = 0;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_CONNECTION_H_
