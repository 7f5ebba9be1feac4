// The kvpoold server: reactors that serve a Store over the native protocol (TCP and a
// same-host Unix socket with shared memory) and over RESP2.
//
// One reactor (an epoll loop on its own thread) per core. The listening sockets are shared
// and registered with EPOLLEXCLUSIVE, so each new connection wakes one reactor, which owns
// it for its whole life: nothing on the request path is shared between reactors except the
// store, whose index is sharded.
#ifndef KVPOOL_SERVER_SERVER_H_
#define KVPOOL_SERVER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "kvpool/store.h"
#include "net/protocol.h"
#include "net/socket.h"
#include "net/tls.h"
#include "server/leases.h"
#include "server/tenant_stats.h"
#include "server/tenants.h"

namespace kvpool::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7400";       // native protocol over TCP
  std::string resp_listen = "127.0.0.1:7401";  // RESP2; empty: off
  std::string unix_path;                       // native protocol, same host; empty: off
  unsigned reactors = 0;                       // 0: one per online core
  unsigned max_connections = 1024;
  // A connection that has not completed its handshake (a native HELLO, a first RESP
  // command) this long after it was accepted is closed. 0: never.
  unsigned handshake_timeout_ms = 10'000;
  // A connection part-way through a request (a partial frame, command or TLS record) for
  // this long since its previous request completed is closed: a byte-at-a-time sender
  // cannot hold a slot. (A client that stops reading its answers is not: its socket fills,
  // and it holds one slot and its pinned answer until it reads, leaves or idles out.)
  // 0: never.
  unsigned request_timeout_ms = 30'000;
  // A connection with no request this long is closed (Redis's `timeout`). 0: never.
  unsigned idle_timeout_ms = 0;
  // TLS 1.3 on the TCP ports (native and RESP) when tls.cert_file is set; the Unix socket
  // stays plain (same host, file permissions). With tls.ca_file, clients may present
  // certificates (tls.require_client_cert: must), and peer connections must.
  net::TlsOptions tls;
  net::Limits limits;                    // max_batch, max_value_bytes, max_request_bytes, ...
  uint64_t max_shm_bytes = 64ull << 30;  // largest client region mapped
  std::vector<Tenant> tenants;           // empty: open (no tokens)
  std::string resp_namespace = "resp";
  int socket_buffer_bytes = 4 << 20;
  // A reactor keeps polling (without sleeping) this long after its last event, so the
  // next request of a busy client costs no wake-up. 0: always sleep in epoll_wait.
  unsigned busy_poll_us = 50;
  // Nice value of the reactor threads. Below 0 they win the CPU from the clients and batch
  // jobs beside them (on 2 vCPUs with 8 clients, -10 cut the TCP get P99 about 3x); needs
  // CAP_SYS_NICE or RLIMIT_NICE, else the threads stay at the process's priority (see
  // Server::reactor_nice()). 0 leaves them alone.
  int reactor_nice = -10;
  // Threads that run what a reactor must not wait on (gets that read flash); each has one
  // batch of reads in flight, so this is the flash queue depth reads can reach. 0: two per
  // reactor.
  unsigned io_threads = 0;
  // Lookup-and-lock (an EXISTS with a lease, server/leases.h): the most bytes held for
  // loads to come, and the longest a lease may ask for.
  uint64_t max_lease_bytes = 256ull << 20;
  uint32_t max_lease_ms = 60'000;
  // Peer connections (HELLO with kHelloPeer: the drain tool, other nodes) address stored
  // keys directly; on a node with tenants they need this token ("": refused).
  std::string peer_token;
  // A peer's LEAVE: take this node out of the pod's member list, keep serving. Unset: the
  // node is not in a pod (LEAVE answers kInvalidArgument).
  std::function<Status()> on_leave;
};

// Counters summed over reactors (each reactor writes only its own).
struct ServerStats {
  uint64_t connections_accepted = 0, connections_open = 0, connections_refused = 0;
  uint64_t handshake_timeouts = 0;  // closed for not completing the handshake in time
  uint64_t request_timeouts = 0;    // closed mid-request (or idle) past the timeouts
  uint64_t tls_failures = 0;        // TLS handshakes or records that failed
  uint64_t seal_misses = 0;         // sealed blocks that did not open (retired key, moved, foreign)
  uint64_t requests = 0, protocol_errors = 0, auth_failures = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  LeaseStats leases;
  std::string ToString() const;
};

class Reactor;
class IoWorkers;

class Server {
 public:
  // Binds every listener (failing clearly if one cannot be bound) and starts the reactors.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options, Store* store);
  ~Server();  // Stop()s

  // Closes the listeners and every connection, and joins the reactors.
  void Stop();

  uint16_t port() const { return port_; }
  uint16_t resp_port() const { return resp_port_; }
  unsigned reactor_count() const { return static_cast<unsigned>(reactors_.size()); }
  // The nice value the reactors run at, and why not the one asked for ("" if it was).
  int reactor_nice() const { return reactor_nice_; }
  const std::string& reactor_nice_error() const { return reactor_nice_error_; }
  ServerStats GetStats() const;
  // Open connections on each reactor (accepted connections go to the least loaded one).
  std::vector<size_t> ConnectionsPerReactor() const;

  // Shared, read-only after Start (options().tenants is the list the server started with).
  const ServerOptions& options() const { return options_; }
  Store* store() const { return store_; }
  // The tenants now: a connection authenticates against the list current at its HELLO or
  // AUTH; a reload (SetTenants, on SIGHUP) applies to those that come after. An
  // authenticated connection keeps its access (as a changed Unix group does).
  std::shared_ptr<const Tenants> tenants() const;
  // Also sets the store's quotas for them (Store::SetQuota; a tenant gone has none).
  void SetTenants(std::vector<Tenant> tenants);
  // Per-tenant counters with what each tenant holds in the store and its quotas.
  std::vector<TenantSnapshot> TenantSnapshots() const;
  // The TLS context new connections get (null: plain). ReloadTls reads options().tls's
  // files again (SIGHUP: renewed certificates); on an error the old context stays.
  std::shared_ptr<const net::TlsContext> tls() const;
  Status ReloadTls();
  TenantStats& tenant_stats() { return tenant_stats_; }
  std::atomic<unsigned>& open_connections() { return open_connections_; }
  IoWorkers& io() { return *io_; }
  Leases& leases() { return leases_; }
  uint64_t NextConnectionId() { return next_connection_id_.fetch_add(1) + 1; }

 private:
  friend class Reactor;  // picks the reactor an accepted connection goes to
  Server(const ServerOptions& options, Store* store);

  const ServerOptions options_;
  Store* const store_;
  mutable Mutex tenants_mu_;
  std::shared_ptr<const Tenants> tenants_ GUARDED_BY(tenants_mu_);
  std::shared_ptr<const net::TlsContext> tls_ GUARDED_BY(tenants_mu_);
  std::vector<uint16_t> quota_ids_ GUARDED_BY(tenants_mu_);  // quotas set
  void ApplyQuotasLocked() REQUIRES(tenants_mu_);
  TenantStats tenant_stats_;
  net::Fd tcp_, resp_, unix_;
  uint16_t port_ = 0, resp_port_ = 0;
  std::atomic<unsigned> open_connections_{0};
  std::vector<std::unique_ptr<Reactor>> reactors_;
  std::vector<std::thread> threads_;
  std::unique_ptr<IoWorkers> io_;  // after reactors_: destroyed first (it posts to them)
  std::atomic<uint64_t> next_connection_id_{0};
  Leases leases_;  // pins blocks of store_, which outlives the server
  int reactor_nice_ = 0;
  std::string reactor_nice_error_;
  bool stopped_ = false;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_SERVER_H_
