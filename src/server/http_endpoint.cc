#include "server/http_endpoint.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "net/socket.h"

namespace kvpool::server {
namespace {

// The request line for the debug log: printable ASCII only, at most 120 characters.
std::string RequestLine(const std::string& req) {
  std::string out;
  for (char c : req.substr(0, std::min(req.find("\r\n"), size_t{120}))) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& listen,
                                                          std::vector<HttpRoute> routes,
                                                          TlsSource tls) {
  auto addr = net::ParseAddress(listen);
  if (!addr.ok()) {
    return Status::InvalidArgument("HTTP listen address: " + std::string(addr.status().message()));
  }
  if (addr->unix_socket) return Status::InvalidArgument("HTTP listen address: TCP only");
  auto fd = net::ListenTcp(*addr, 64);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<HttpEndpoint> h(new HttpEndpoint());
  h->listen_fd_ = fd->release();
  h->port_ = net::LocalPort(h->listen_fd_);
  h->served_ = std::make_unique<std::atomic<uint64_t>[]>(routes.size());
  h->routes_ = std::move(routes);
  h->tls_ = std::move(tls);
  HttpEndpoint* self = h.get();
  h->thread_ = std::thread([self] { self->Loop(); });
  return h;
}

HttpEndpoint::~HttpEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

uint64_t HttpEndpoint::served(size_t route) const {
  return route < routes_.size() ? served_[route].load(std::memory_order_relaxed) : 0;
}

void HttpEndpoint::Loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void HttpEndpoint::Serve(int fd) {
  constexpr int kTimeoutMs = 2000;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::unique_ptr<net::TlsSession> tls;
  if (auto ctx = tls_ ? tls_() : nullptr) {
    auto s = ctx->NewSession(fd);
    if (!s.ok()) return;
    tls = std::move(s).value();
    if (Status h = net::TlsHandshake(*tls, fd, kTimeoutMs); !h.ok()) {
      if (log::Enabled(log::Level::kDebug)) log::Debug("http: " + std::string(h.message()));
      return;
    }
  }
  std::string req;
  char buf[2048];
  uint64_t until = NowNanos() + uint64_t{kTimeoutMs} * 1'000'000;
  while (req.size() < 8192 && req.find("\r\n\r\n") == std::string::npos) {
    if (NowNanos() > until) return;  // a byte at a time: 2 s for the whole request
    ssize_t n;
    if (tls) {
      auto got = net::TlsReadSome(*tls, fd, buf, sizeof buf, kTimeoutMs);
      n = got.ok() ? static_cast<ssize_t>(*got) : -1;
    } else {
      n = recv(fd, buf, sizeof buf, 0);
    }
    if (n <= 0) return;  // closed, or silent for 2 s
    req.append(buf, static_cast<size_t>(n));
  }
  std::string status = "200 OK", type = "text/plain; charset=utf-8", body;
  bool head = req.rfind("HEAD ", 0) == 0;
  if (req.find("\r\n\r\n") == std::string::npos) {
    status = "431 Request Header Fields Too Large";
    body = "request header over 8 KiB\n";
  } else if (!head && req.rfind("GET ", 0) != 0) {
    status = "405 Method Not Allowed";
    body = "only GET and HEAD\n";
  } else {
    size_t start = req.find(' ') + 1;
    std::string path = req.substr(start, req.find_first_of(" ?\r", start) - start);
    size_t i = 0;
    while (i < routes_.size() && routes_[i].path != path) ++i;
    if (i == routes_.size()) {
      status = "404 Not Found";
      body = "not found; this endpoint serves:";
      for (const HttpRoute& r : routes_) body += " " + r.path;
      body += "\n";
    } else {
      type = routes_[i].content_type;
      body = routes_[i].body();
      served_[i].fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (log::Enabled(log::Level::kDebug)) log::Debug("http: " + RequestLine(req) + " -> " + status);
  std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head) out += body;
  if (tls) {
    (void)net::TlsWriteAll(*tls, fd, out.data(), out.size(), kTimeoutMs);
    return;
  }
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace kvpool::server
