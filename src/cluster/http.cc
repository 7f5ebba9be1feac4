#include "cluster/http.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace kvpool::cluster {
namespace {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

Status Bad(std::string_view why) {
  return Status::InvalidArgument("HTTP response: " + std::string(why));
}

}  // namespace

Status HttpResponseParser::ParseHeaders(std::string_view head) {
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return Bad("bad status line");
  }
  int code = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(status_line[i]))) return Bad("bad status code");
    code = code * 10 + (status_line[i] - '0');
  }
  status_code_ = code;
  bool have_length = false;
  head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
  while (!head.empty()) {
    eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return Bad("header without ':'");
    std::string_view name = Trim(line.substr(0, colon)), value = Trim(line.substr(colon + 1));
    if (IEquals(name, "Transfer-Encoding")) {
      if (!IEquals(value, "chunked")) return Bad("unsupported transfer encoding");
      chunked_ = true;
    } else if (IEquals(name, "Content-Length")) {
      if (value.empty() || value.size() > 12) return Bad("bad Content-Length");
      size_t n = 0;
      for (char c : value) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return Bad("bad Content-Length");
        n = n * 10 + size_t(c - '0');
      }
      if (n > kMaxBodyBytes) return Bad("body too large");
      remaining_ = n;
      have_length = true;
    }
  }
  if (chunked_) {
    state_ = State::kChunkSize;
  } else if (have_length) {
    state_ = remaining_ == 0 ? State::kDone : State::kBody;
  } else {
    return Bad("neither Content-Length nor chunked");  // etcd always sends one of them
  }
  return Status::Ok();
}

Status HttpResponseParser::Feed(std::string_view data) {
  while (!data.empty() && state_ != State::kDone) {
    switch (state_) {
      case State::kHeaders: {
        size_t old = pending_.size();
        pending_.append(data);
        size_t end = pending_.find("\r\n\r\n", old >= 3 ? old - 3 : 0);
        if (end == std::string::npos) {
          if (pending_.size() > kMaxHeaderBytes) return Bad("headers too large");
          return Status::Ok();
        }
        if (end > kMaxHeaderBytes) return Bad("headers too large");
        if (Status s = ParseHeaders(std::string_view(pending_).substr(0, end + 2)); !s.ok())
          return s;
        std::string rest = pending_.substr(end + 4);
        pending_.clear();
        return Feed(rest);
      }
      case State::kBody:
      case State::kChunkData: {
        size_t n = std::min(remaining_, data.size());
        body_total_ += n;
        if (body_total_ > kMaxBodyBytes) return Bad("body too large");
        body_.append(data.substr(0, n));
        data.remove_prefix(n);
        remaining_ -= n;
        if (remaining_ == 0) state_ = state_ == State::kBody ? State::kDone : State::kChunkEnd;
        break;
      }
      case State::kChunkEnd: {  // the CRLF after a chunk's data
        while (!data.empty() && pending_.size() < 2) {
          pending_.push_back(data.front());
          data.remove_prefix(1);
        }
        if (pending_.size() < 2) break;
        if (pending_ != "\r\n") return Bad("chunk not followed by CRLF");
        pending_.clear();
        state_ = State::kChunkSize;
        break;
      }
      case State::kChunkSize:
      case State::kTrailer: {
        size_t eol = data.find('\n');
        if (eol == std::string_view::npos) {
          pending_.append(data);
          if (pending_.size() > 1024) return Bad("chunk size line too long");
          return Status::Ok();
        }
        pending_.append(data.substr(0, eol + 1));
        data.remove_prefix(eol + 1);
        if (pending_.size() > 1024) return Bad("chunk size line too long");
        std::string line = std::move(pending_);
        pending_.clear();
        if (line.size() < 2 || line[line.size() - 2] != '\r') return Bad("bare LF");
        line.resize(line.size() - 2);
        if (state_ == State::kTrailer) {
          if (line.empty()) state_ = State::kDone;
          break;
        }
        size_t semi = line.find(';');
        std::string_view hex = std::string_view(line).substr(0, semi);
        if (hex.empty() || hex.size() > 8) return Bad("bad chunk size");
        size_t n = 0;
        for (char c : hex) {
          int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                              : -1;
          if (d < 0) return Bad("bad chunk size");
          n = n * 16 + size_t(d);
        }
        if (n > kMaxBodyBytes) return Bad("chunk too large");
        remaining_ = n;
        state_ = n == 0 ? State::kTrailer : State::kChunkData;
        break;
      }
      case State::kDone:
        break;
    }
  }
  return Status::Ok();
}

Result<HttpConnection> HttpConnection::Open(const std::string& address, int timeout_ms,
                                            const net::TlsContext* tls) {
  auto addr = net::ParseAddress(address);
  if (!addr.ok()) return addr.status();
  if (addr->unix_socket) return Status::InvalidArgument("etcd endpoint must be host:port");
  auto fd = net::Connect(*addr, timeout_ms);
  if (!fd.ok()) return fd.status();
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  HttpConnection c(std::move(fd).value(), address, timeout_ms);
  if (tls) {
    auto session = tls->NewSession(c.fd_.get(), addr->host);
    if (!session.ok()) return session.status();
    c.tls_ = std::move(session).value();
    // A handshake etcd refuses (no client certificate, an unknown CA) is a refusal, not an
    // outage: the node is told at start instead of retrying for ever.
    if (Status s = net::TlsHandshake(*c.tls_, c.fd_.get(), timeout_ms); !s.ok()) {
      if (s.code() == Code::kTimeout) return s;
      return Status(Code::kRefused,
                    "TLS with etcd at " + address + ": " + std::string(s.message()));
    }
    // TLS 1.3: etcd's verdict on a client certificate comes after the client's handshake is
    // over, as an alert and a close, and etcd (Go) sends its session tickets before it: a
    // close before the first answer is that refusal.
    c.verdict_pending_ = c.tls_->server_asked_certificate();
  }
  return c;
}

Status HttpConnection::CertificateRefused() {
  return Status(Code::kRefused,
                "etcd closed the connection after the TLS handshake (client certificate refused)");
}

std::string HttpConnection::Headers() const {
  return "Host: " + host_ + "\r\n" +
         (authorization_.empty() ? "" : "Authorization: " + authorization_ + "\r\n");
}

Status HttpConnection::Post(std::string_view path, std::string_view body) {
  std::string req =
      "POST " + std::string(path) + " HTTP/1.1\r\n" + Headers() +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n";
  req.append(body);
  return Send(req);
}

Status HttpConnection::Get(std::string_view path) {
  return Send("GET " + std::string(path) + " HTTP/1.1\r\n" + Headers() + "\r\n");
}

Status HttpConnection::Send(const std::string& req) {
  if (tls_) {
    Status s = net::TlsWriteAll(*tls_, fd_.get(), req.data(), req.size(), timeout_ms_);
    if (!s.ok() && verdict_pending_ && s.code() != Code::kTimeout) return CertificateRefused();
    return s.ok() ? s : Status(Code::kUnavailable, "etcd send: " + std::string(s.message()));
  }
  size_t off = 0;
  while (off < req.size()) {
    ssize_t n = ::send(fd_.get(), req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status(Code::kUnavailable, std::string("etcd send: ") + std::strerror(errno));
    off += size_t(n);
  }
  return Status::Ok();
}

Result<size_t> HttpConnection::Receive(char* buf, size_t len, bool wait) {
  if (tls_) {
    if (!wait && !tls_->HasPending()) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return Status(Code::kTimeout, "no data");
    }
    auto got = net::TlsReadSome(*tls_, fd_.get(), buf, len, timeout_ms_);
    if (!got.ok() && got.status().message().find("alert") != std::string_view::npos) {
      // TLS 1.3: etcd refuses a client certificate after the client's handshake is over.
      return Status(Code::kRefused, "etcd refused the TLS client: " + got.status().ToString());
    }
    if (!got.ok() && got.status().code() == Code::kUnavailable) return size_t{0};  // closed
    return got;
  }
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, len, wait ? 0 : MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status(errno == EAGAIN ? Code::kTimeout : Code::kUnavailable,
                    std::string("etcd recv: ") + std::strerror(errno));
    }
    return size_t(n);
  }
}

Status HttpConnection::ReadResponse(std::string* body) {
  char buf[16384];
  while (!parser_.done()) {
    auto n = Receive(buf, sizeof(buf), /*wait=*/true);
    if (!n.ok()) return n.status();
    if (*n == 0 && verdict_pending_) return CertificateRefused();
    if (*n == 0) return Status(Code::kUnavailable, "etcd closed the connection");
    verdict_pending_ = false;
    if (Status s = parser_.Feed(std::string_view(buf, *n)); !s.ok()) return s;
  }
  *body = parser_.TakeBody();
  int code = parser_.status_code();
  // etcd auth: no or a wrong credential, an expired token, no permission (etcd says so in
  // a 400 as often as in a 401/403).
  bool auth = code == 401 || code == 403 ||
              (code == 400 && (body->find("user name is empty") != std::string::npos ||
                               body->find("permission denied") != std::string::npos ||
                               body->find("authentication failed") != std::string::npos ||
                               body->find("invalid auth token") != std::string::npos));
  if (auth) {
    return Status(Code::kRefused, "etcd answered HTTP " + std::to_string(code) + ": " + *body);
  }
  if (parser_.status_code() / 100 != 2) {
    return Status(Code::kIoError,
                  "etcd answered HTTP " + std::to_string(parser_.status_code()) + ": " + *body);
  }
  return Status::Ok();
}

Status HttpConnection::ReadSome(std::string* out, int wait_ms) {
  if (!tls_ || !tls_->HasPending()) {
    pollfd p{fd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno != EINTR) return Status(Code::kUnavailable, std::strerror(errno));
    if (r <= 0) return Status::Ok();
  }
  char buf[16384];
  auto n = Receive(buf, sizeof(buf), /*wait=*/false);
  if (!n.ok() && n.status().code() == Code::kTimeout) return Status::Ok();
  if (!n.ok() || *n == 0) return Status(Code::kUnavailable, "etcd stream ended");
  if (Status s = parser_.Feed(std::string_view(buf, *n)); !s.ok()) return s;
  if (parser_.headers_done() && parser_.status_code() / 100 != 2) {
    return Status(Code::kIoError, "etcd answered HTTP " + std::to_string(parser_.status_code()));
  }
  out->append(parser_.TakeBody());
  if (parser_.done()) return Status(Code::kUnavailable, "etcd stream ended");
  return Status::Ok();
}

Result<std::string> HttpPost(const std::string& address, std::string_view path,
                             std::string_view body, int timeout_ms, const net::TlsContext* tls,
                             const std::string& authorization) {
  auto conn = HttpConnection::Open(address, timeout_ms, tls);
  if (!conn.ok()) return conn.status();
  conn->SetAuthorization(authorization);
  if (Status s = conn->Post(path, body); !s.ok()) return s;
  std::string out;
  if (Status s = conn->ReadResponse(&out); !s.ok()) return s;
  return out;
}

}  // namespace kvpool::cluster
