#include "server/server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <latch>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "server/io_workers.h"
#include "server/native_connection.h"
#include "server/resp_connection.h"

namespace kvpool::server {

enum class Listener : uint64_t { kNative = 1, kResp = 2, kUnix = 3, kWake = 4 };

// One epoll loop on one thread. Owns its connections; the only thing it shares is the
// listening sockets (EPOLLEXCLUSIVE: one reactor wakes per new connection) and the store.
// The reactor that accepts a connection hands it to the reactor with the fewest (itself on
// a tie): EPOLLEXCLUSIVE tends to wake the same idle reactor for every accept, which put
// all of a client's connections on one thread (8 same-host connections moved no more than
// one did).
class Reactor final : public ReactorContext {
 public:
  explicit Reactor(Server& server)
      : server_(server), spin_ns_(uint64_t{server.options().busy_poll_us} * 1000) {}
  ~Reactor() {
    if (epoll_ >= 0) ::close(epoll_);
    if (wake_ >= 0) ::close(wake_);
  }

  Status Init(int native, int resp, int unix_fd) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_ < 0 || wake_ < 0)
      return Status::IoError("epoll/eventfd: " + std::string(strerror(errno)));
    auto add = [&](int fd, Listener l, uint32_t extra) {
      if (fd < 0) return;
      epoll_event ev{};
      ev.events = EPOLLIN | extra;
      ev.data.u64 = static_cast<uint64_t>(l);
      epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
    };
    add(native, Listener::kNative, EPOLLEXCLUSIVE);
    add(resp, Listener::kResp, EPOLLEXCLUSIVE);
    add(unix_fd, Listener::kUnix, EPOLLEXCLUSIVE);
    add(wake_, Listener::kWake, 0);
    listeners_[0] = native;
    listeners_[1] = resp;
    listeners_[2] = unix_fd;
    return Status::Ok();
  }

  void Wake() {
    uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof(one));
  }

  void Run() {
    constexpr int kMaxEvents = 128;
    constexpr size_t kSpinMaxConnections = 2;
    epoll_event events[kMaxEvents];
    // Connections with buffered work left, by fd and pointer (a closed one's fd may be
    // reused by a new connection before the list is walked).
    std::vector<std::pair<int, Connection*>> again, next_again;
    uint64_t last_event_ns = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      // Busy-poll for a short while after the last event, so a request that follows a
      // response closely is picked up without a wake-up (~20 us here). Only with few
      // connections: with many, their clients need the CPU more than we need the latency.
      bool spin = conns_.size() <= kSpinMaxConnections && NowNanos() - last_event_ns < spin_ns_;
      int n = epoll_wait(epoll_, events, kMaxEvents, again.empty() && !spin ? 1000 : 0);

      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == static_cast<uint64_t>(Listener::kWake)) {
          uint64_t v;
          (void)!::read(wake_, &v, sizeof(v));
          AdoptHandoffs();
          FinishJobs(next_again);
          continue;
        }
        if (tag >= 1 && tag <= 3) {
          Accept(static_cast<Listener>(tag));
          continue;
        }
        auto* c = reinterpret_cast<Connection*>(tag);
        Step(c, next_again);
      }
      for (auto [fd, c] : again) {
        auto it = conns_.find(fd);
        if (it != conns_.end() && it->second.get() == c) Step(c, next_again);
      }
      again.swap(next_again);
      next_again.clear();
      if (n > 0) last_event_ns = NowNanos();  // the spin window starts once work is done
      CloseSilent();
    }
    MutexLock lock(handoff_mu_);
    server_.open_connections().fetch_sub(static_cast<unsigned>(conns_.size() + handoff_.size()),
                                         std::memory_order_relaxed);
    conns_.clear();
    handoff_.clear();  // closes connections handed over too late to be served
  }

  // Closes the connections that have not completed a handshake within the server's
  // handshake timeout. Looked at about once a second (epoll_wait wakes at least that often).
  // Also closes those stuck part-way through a request past the request timeout, and idle
  // ones past the idle timeout.
  void CloseSilent() {
    const ServerOptions& o = server_.options();
    const uint64_t ms = 1'000'000;
    uint64_t handshake_ns = o.handshake_timeout_ms * ms, request_ns = o.request_timeout_ms * ms,
             idle_ns = o.idle_timeout_ms * ms;
    uint64_t now = NowNanos();
    if (now - last_sweep_ns_ < 1'000'000'000) return;
    last_sweep_ns_ = now;
    std::vector<int> silent, stuck;
    for (auto& [fd, c] : conns_) {
      if (!c->Handshaken()) {
        if (handshake_ns && now - c->attached_ns() > handshake_ns) silent.push_back(fd);
      } else if (c->InRequest()) {
        if (request_ns && now - c->request_start_ns() > request_ns) stuck.push_back(fd);
      } else if (idle_ns && now - c->last_request_ns() > idle_ns) {
        stuck.push_back(fd);
      }
    }
    for (int fd : silent) Close(fd);
    for (int fd : stuck) Close(fd);
    counters_.handshake_timeouts += silent.size();
    counters_.request_timeouts += stuck.size();
  }

  void Close(int fd) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    conns_.erase(fd);
    open_.fetch_sub(1, std::memory_order_relaxed);
    server_.open_connections().fetch_sub(1, std::memory_order_relaxed);
  }

  // Takes a connection accepted by another reactor (counted in open_ by the giver).
  void HandOff(net::Fd fd, Listener which) {
    {
      MutexLock lock(handoff_mu_);
      handoff_.emplace_back(std::move(fd), which);
    }
    Wake();
  }

  void Stop() {
    stop_.store(true, std::memory_order_release);
    Wake();
  }

  const ReactorCounters& counters() const { return counters_; }
  size_t open() const { return open_.load(std::memory_order_relaxed); }

  // Runs the job on an I/O thread; its Finish comes back to this reactor's thread.
  void Offload(Connection& c, std::shared_ptr<OffloadJob> job) override {
    server_.io().Submit([this, fd = c.fd(), id = c.id(), job = std::move(job)]() mutable {
      job->Run();
      {
        MutexLock lock(done_mu_);
        done_.push_back(Done{fd, id, std::move(job)});
      }
      Wake();
    });
  }

 private:
  struct Done {
    int fd;
    uint64_t id;
    std::shared_ptr<OffloadJob> job;
  };

  // Hands each finished job to its connection (if still open) and drives it on.
  void FinishJobs(std::vector<std::pair<int, Connection*>>& again) {
    std::vector<Done> done;
    {
      MutexLock lock(done_mu_);
      done.swap(done_);
    }
    for (Done& d : done) {
      auto it = conns_.find(d.fd);
      if (it == conns_.end() || it->second->id() != d.id) continue;  // closed meanwhile
      Connection* c = it->second.get();
      c->FinishJob(*d.job);
      d.job.reset();
      Step(c, again);
    }
  }

  void AdoptHandoffs() {
    std::vector<std::pair<net::Fd, Listener>> got;
    {
      MutexLock lock(handoff_mu_);
      got.swap(handoff_);
    }
    for (auto& [fd, which] : got) Adopt(std::move(fd), which);
  }

  // The reactor with the fewest connections (this one on a tie); its count is taken now, so
  // a burst of accepts spreads before the handed-off connections are adopted.
  Reactor* PickReactor() {
    Reactor* best = this;
    size_t least = open();
    for (auto& r : server_.reactors_) {
      size_t n = r->open();
      if (n < least) {
        best = r.get();
        least = n;
      }
    }
    best->open_.fetch_add(1, std::memory_order_relaxed);
    return best;
  }

  void Accept(Listener which) {
    int lfd = listeners_[static_cast<int>(which) - 1];
    for (int i = 0; i < 64; ++i) {
      int fd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: another reactor took it, or none left
      net::Fd owned(fd);
      const ServerOptions& o = server_.options();
      if (server_.open_connections().fetch_add(1, std::memory_order_relaxed) >= o.max_connections) {
        server_.open_connections().fetch_sub(1, std::memory_order_relaxed);
        ++counters_.refused;
        static constexpr char kResp[] = "-ERR max connections reached\r\n";
        if (which == Listener::kResp) (void)!::send(fd, kResp, sizeof(kResp) - 1, MSG_NOSIGNAL);
        continue;  // closed by owned's destructor
      }
      ++counters_.accepted;
      if (which != Listener::kUnix) net::SetNoDelay(fd);
      if (o.socket_buffer_bytes > 0) net::SetBufferSizes(fd, o.socket_buffer_bytes);
      Reactor* target = PickReactor();
      if (target == this) {
        Adopt(std::move(owned), which);
      } else {
        target->HandOff(std::move(owned), which);
      }
    }
  }

  // Serves an accepted connection on this reactor (open_ already counts it).
  void Adopt(net::Fd owned, Listener which) {
    const int fd = owned.get();
    std::unique_ptr<Connection> c;
    if (which == Listener::kResp) {
      c = std::make_unique<RespConnection>(server_, std::move(owned), counters_);
    } else {
      c = std::make_unique<NativeConnection>(server_, std::move(owned), counters_,
                                             which == Listener::kUnix);
    }
    c->Attach(this, server_.NextConnectionId(), NowNanos());
    if (which != Listener::kUnix) {
      if (auto tls = server_.tls()) {
        auto session = tls->NewSession(fd);
        if (!session.ok()) {
          ++counters_.tls_failures;
          open_.fetch_sub(1, std::memory_order_relaxed);
          server_.open_connections().fetch_sub(1, std::memory_order_relaxed);
          return;  // c closes the socket
        }
        c->UseTls(std::move(session).value());
      }
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = reinterpret_cast<uint64_t>(c.get());
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
    conns_[fd] = std::move(c);
  }

  void Step(Connection* c, std::vector<std::pair<int, Connection*>>& again) {
    Next next = c->Turn();
    if (next == Next::kClose) return Close(c->fd());
    if (next == Next::kAgain) {
      again.emplace_back(c->fd(), c);
      next = Next::kRead;
    }
    if (next != c->registered) {
      epoll_event ev{};
      // While a job runs the connection asks for nothing (its answers go out in order).
      ev.events = next == Next::kWait    ? 0u
                  : next == Next::kWrite ? uint32_t{EPOLLOUT | EPOLLRDHUP}
                                         : uint32_t{EPOLLIN | EPOLLRDHUP};
      ev.data.u64 = reinterpret_cast<uint64_t>(c);
      epoll_ctl(epoll_, EPOLL_CTL_MOD, c->fd(), &ev);
      c->registered = next;
    }
  }

  Server& server_;
  const uint64_t spin_ns_;
  int epoll_ = -1, wake_ = -1;
  int listeners_[3] = {-1, -1, -1};
  std::atomic<bool> stop_{false};
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;
  uint64_t last_sweep_ns_ = 0;
  std::atomic<size_t> open_{0};
  ReactorCounters counters_;
  Mutex done_mu_;
  std::vector<Done> done_ GUARDED_BY(done_mu_);  // finished jobs not yet handed back
  Mutex handoff_mu_;
  std::vector<std::pair<net::Fd, Listener>> handoff_ GUARDED_BY(handoff_mu_);
};

std::vector<size_t> Server::ConnectionsPerReactor() const {
  std::vector<size_t> out;
  for (auto& r : reactors_) out.push_back(r->open());
  return out;
}

std::string ServerStats::ToString() const {
  std::ostringstream o;
  o << "connections: " << connections_open << " open, " << connections_accepted << " accepted, "
    << connections_refused << " refused, " << handshake_timeouts << " closed before a handshake, "
    << request_timeouts << " closed mid-request or idle, " << tls_failures << " TLS failures\n"
    << "sealed blocks that did not open: " << seal_misses << "\n"
    << "requests: " << requests << ", protocol errors " << protocol_errors << ", auth failures "
    << auth_failures << "\n"
    << "bytes: " << bytes_in << " in, " << bytes_out << " out\n"
    << "leases: " << leases.held << " held (" << leases.held_bytes << " bytes), " << leases.granted
    << " granted, " << leases.loads << " loaded (" << leases.saved << " after eviction), "
    << leases.expired << " expired\n";
  return o.str();
}

Server::Server(const ServerOptions& options, Store* store)
    : options_(options),
      store_(store),
      tenants_(std::make_shared<const Tenants>(options.tenants)),
      leases_(options.max_lease_bytes) {}

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Store* store) {
  std::unique_ptr<Server> s(new Server(options, store));
  {
    MutexLock lock(s->tenants_mu_);
    s->ApplyQuotasLocked();
  }
  if (Status t = s->ReloadTls(); !t.ok()) return t;
  if (!options.listen.empty()) {
    auto a = net::ParseAddress(options.listen);
    if (!a.ok()) return a.status();
    auto fd = net::ListenTcp(*a);
    if (!fd.ok()) return fd.status();
    s->tcp_ = std::move(fd).value();
    s->port_ = net::LocalPort(s->tcp_.get());
  }
  if (!options.resp_listen.empty()) {
    auto a = net::ParseAddress(options.resp_listen);
    if (!a.ok()) return a.status();
    auto fd = net::ListenTcp(*a);
    if (!fd.ok()) return fd.status();
    s->resp_ = std::move(fd).value();
    s->resp_port_ = net::LocalPort(s->resp_.get());
  }
  if (!options.unix_path.empty()) {
    auto fd = net::ListenUnix(options.unix_path);
    if (!fd.ok()) return fd.status();
    s->unix_ = std::move(fd).value();
  }
  unsigned n =
      options.reactors ? options.reactors : std::max(1u, std::thread::hardware_concurrency());
  s->io_ = std::make_unique<IoWorkers>(options.io_threads ? options.io_threads : 2 * n);
  for (unsigned i = 0; i < n; ++i) {
    auto r = std::make_unique<Reactor>(*s);
    if (Status st = r->Init(s->tcp_.get(), s->resp_.get(), s->unix_.get()); !st.ok()) return st;
    s->reactors_.push_back(std::move(r));
  }
  // Each reactor sets its own thread's nice value (Linux: per thread) before it serves;
  // Start returns once all have tried, so the result can be logged.
  std::latch niced(static_cast<std::ptrdiff_t>(n));
  std::vector<int> errors(n, 0);
  const int nice = options.reactor_nice;
  for (unsigned i = 0; i < n; ++i) {
    s->threads_.emplace_back([p = s->reactors_[i].get(), nice, &niced, err = &errors[i]] {
      if (nice != 0 && ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice) != 0) {
        *err = errno;
      }
      niced.count_down();
      p->Run();
    });
  }
  niced.wait();
  s->reactor_nice_ = nice;
  for (int e : errors) {
    if (e == 0) continue;
    s->reactor_nice_ = ::getpriority(PRIO_PROCESS, 0);
    s->reactor_nice_error_ = std::string("nice ") + std::to_string(nice) + ": " + std::strerror(e) +
                             " (needs CAP_SYS_NICE or RLIMIT_NICE)";
    break;
  }
  return s;
}

Server::~Server() { Stop(); }

void Server::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& r : reactors_) r->Stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (io_) io_->Stop();  // jobs still queued run; their answers are dropped with the reactors
  if (!options_.unix_path.empty()) ::unlink(options_.unix_path.c_str());
}

std::shared_ptr<const Tenants> Server::tenants() const {
  MutexLock lock(tenants_mu_);
  return tenants_;
}

std::shared_ptr<const net::TlsContext> Server::tls() const {
  MutexLock lock(tenants_mu_);
  return tls_;
}

Status Server::ReloadTls() {
  if (options_.tls.cert_file.empty()) return Status::Ok();
  auto ctx = net::TlsContext::Server(options_.tls);
  if (!ctx.ok()) return ctx.status();
  MutexLock lock(tenants_mu_);
  tls_ = std::move(ctx).value();
  return Status::Ok();
}

void Server::SetTenants(std::vector<Tenant> tenants) {
  auto next = std::make_shared<const Tenants>(std::move(tenants));
  MutexLock lock(tenants_mu_);
  tenants_ = std::move(next);
  ApplyQuotasLocked();
}

void Server::ApplyQuotasLocked() {
  if (!store_) return;
  for (uint16_t id : quota_ids_) store_->SetQuota(id, {});
  quota_ids_.clear();
  for (const Tenant& t : tenants_->list()) {
    if (t.id == 0 || (t.dram_quota == 0 && t.flash_quota == 0)) continue;
    store_->SetQuota(t.id, {t.dram_quota, t.flash_quota});
    quota_ids_.push_back(t.id);
  }
}

std::vector<TenantSnapshot> Server::TenantSnapshots() const {
  std::vector<TenantSnapshot> out = tenant_stats_.Snapshot();
  std::shared_ptr<const Tenants> now = tenants();
  for (TenantSnapshot& s : out) {
    const Tenant* t = now->ByName(s.name);
    if (!t || t->id == 0) continue;
    TenantUsage u = store_ ? store_->Usage(t->id) : TenantUsage{};
    s.dram_bytes = u.dram_bytes;
    s.flash_bytes = u.flash_bytes;
    s.dram_quota = t->dram_quota;
    s.flash_quota = t->flash_quota;
  }
  return out;
}

ServerStats Server::GetStats() const {
  ServerStats s;
  for (const auto& r : reactors_) {
    const ReactorCounters& c = r->counters();
    s.connections_accepted += c.accepted;
    s.connections_refused += c.refused;
    s.requests += c.requests;
    s.protocol_errors += c.protocol_errors;
    s.auth_failures += c.auth_failures;
    s.handshake_timeouts += c.handshake_timeouts;
    s.request_timeouts += c.request_timeouts;
    s.tls_failures += c.tls_failures;
    s.seal_misses += c.seal_misses;
    s.bytes_in += c.bytes_in;
    s.bytes_out += c.bytes_out;
    s.connections_open += r->open();
  }
  s.leases = leases_.stats();
  return s;
}

}  // namespace kvpool::server
