#include "net/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kvpool::net {
namespace {

// OpenSSL's queued errors as one line (and the queue emptied).
std::string DrainErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

Status Fail(const std::string& what) { return Status::InvalidArgument(what + ": " + DrainErrors()); }

// A client's socket BIO that sends with MSG_NOSIGNAL: a library must not raise SIGPIPE in
// its host process when the server has gone (OpenSSL's socket BIO uses write()). Servers
// keep OpenSSL's socket BIO, which kTLS needs (kvpoold ignores SIGPIPE).
int NsWrite(BIO* b, const char* data, int len) {
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
  BIO_clear_retry_flags(b);
  ssize_t n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

int NsRead(BIO* b, char* data, int len) {
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b)));
  BIO_clear_retry_flags(b);
  ssize_t n = ::recv(fd, data, static_cast<size_t>(len), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  return static_cast<int>(n);
}

long NsCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

BIO_METHOD* NoSigpipeMethod() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kvpool socket");
    BIO_meth_set_write(meth, NsWrite);
    BIO_meth_set_read(meth, NsRead);
    BIO_meth_set_ctrl(meth, NsCtrl);
    BIO_meth_set_create(meth, [](BIO* b) {
      BIO_set_init(b, 1);
      return 1;
    });
    return meth;
  }();
  return m;
}

bool IsIpAddress(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

SSL_CTX* NewContext(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

}  // namespace

Result<std::shared_ptr<const TlsContext>> TlsContext::Server(const TlsOptions& o) {
  if (o.cert_file.empty()) return Status::InvalidArgument("TLS: a certificate file is required");
  if (o.require_client_cert && o.ca_file.empty())
    return Status::InvalidArgument("TLS: requiring client certificates needs a client CA file");
  ERR_clear_error();
  SSL_CTX* ctx = NewContext(true);
  if (!ctx) return Fail("TLS context");
  std::shared_ptr<const TlsContext> owner(new TlsContext(ctx, true, o));
  const std::string& key = o.key_file.empty() ? o.cert_file : o.key_file;
  if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
    return Fail("TLS certificate " + o.cert_file);
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
    return Fail("TLS key " + key);
  if (SSL_CTX_check_private_key(ctx) != 1) return Fail("TLS key " + key + " vs certificate");
  // No session tickets: kvpool connections are long-lived, and a ticket is a post-handshake
  // write that would stand between the handshake and kTLS.
  SSL_CTX_set_num_tickets(ctx, 0);
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1)
      return Fail("TLS client CA " + o.ca_file);
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.ca_file.c_str());
    if (names) SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx,
                       SSL_VERIFY_PEER | (o.require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                       nullptr);
  }
  return owner;
}

Result<std::shared_ptr<const TlsContext>> TlsContext::Client(const TlsOptions& o) {
  ERR_clear_error();
  SSL_CTX* ctx = NewContext(false);
  if (!ctx) return Fail("TLS context");
  std::shared_ptr<const TlsContext> owner(new TlsContext(ctx, false, o));
  if (!o.cert_file.empty()) {
    const std::string& key = o.key_file.empty() ? o.cert_file : o.key_file;
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
      return Fail("TLS client certificate " + o.cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
      return Fail("TLS client key " + key);
    if (SSL_CTX_check_private_key(ctx) != 1) return Fail("TLS client key vs certificate");
  }
  if (o.verify_server) {
    int ok = o.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx)
                               : SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr);
    if (ok != 1) return Fail("TLS CA " + o.ca_file);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  return owner;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

Result<std::unique_ptr<TlsSession>> TlsContext::NewSession(int fd) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (!ssl) return Fail("TLS session");
  std::unique_ptr<TlsSession> s(new TlsSession(ssl));
  if (server_) {
    if (SSL_set_fd(ssl, fd) != 1) return Fail("TLS session fd");
    SSL_set_accept_state(ssl);
    return s;
  }
  BIO* bio = BIO_new(NoSigpipeMethod());
  if (!bio) return Fail("TLS BIO");
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(ssl, bio, bio);
  const std::string& name = options_.server_name;
  if (!name.empty() && options_.verify_server) {
    if (IsIpAddress(name)) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (SSL_set1_host(ssl, name.c_str()) != 1) return Fail("TLS server name " + name);
    }
  }
  if (!name.empty() && !IsIpAddress(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
  SSL_set_connect_state(ssl);
  return s;
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

TlsSession::Io TlsSession::Classify(int ret) {
  int e = SSL_get_error(ssl_, ret);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kClosed;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        if (errno == 0 || errno == ECONNRESET || errno == EPIPE) return Io::kClosed;
        error_ = std::string("TLS: ") + std::strerror(errno);
        return Io::kFailed;
      }
      [[fallthrough]];
    default: {
      error_ = DrainErrors();
      long v = SSL_get_verify_result(ssl_);
      if (v != X509_V_OK) error_ += std::string(" (") + X509_verify_cert_error_string(v) + ")";
      return Io::kFailed;
    }
  }
}

TlsSession::Io TlsSession::Handshake() {
  if (established_) return Io::kOk;
  ERR_clear_error();
  errno = 0;
  int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = true;
    return Io::kOk;
  }
  Io io = Classify(r);
  return io == Io::kClosed ? Io::kFailed : io;  // a close mid-handshake is a failed one
}

TlsSession::Io TlsSession::Read(void* buf, size_t len, size_t* got) {
  ERR_clear_error();
  errno = 0;
  size_t n = 0;
  if (SSL_read_ex(ssl_, buf, len, &n) == 1) {
    *got = n;
    return Io::kOk;
  }
  *got = 0;
  return Classify(0);
}

TlsSession::Io TlsSession::Write(const void* buf, size_t len, size_t* put) {
  ERR_clear_error();
  errno = 0;
  size_t n = 0;
  if (SSL_write_ex(ssl_, buf, len, &n) == 1) {
    *put = n;
    return Io::kOk;
  }
  *put = 0;
  return Classify(0);
}

bool TlsSession::HasPending() const { return SSL_has_pending(ssl_) == 1; }

bool TlsSession::peer_verified() const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  return cert && SSL_get_verify_result(ssl_) == X509_V_OK;
}

bool TlsSession::ktls_send() const { return BIO_get_ktls_send(SSL_get_wbio(ssl_)) == 1; }

namespace {

Status Wait(int fd, TlsSession::Io io, int timeout_ms, const char* what) {
  pollfd p{fd, static_cast<short>(io == TlsSession::Io::kWantWrite ? POLLOUT : POLLIN), 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return Status::Timeout(std::string("TLS ") + what + " timed out");
  if (r < 0) return Status::Unavailable(std::string("poll: ") + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

Status TlsHandshake(TlsSession& s, int fd, int timeout_ms) {
  for (;;) {
    TlsSession::Io io = s.Handshake();
    if (io == TlsSession::Io::kOk) return Status::Ok();
    if (io == TlsSession::Io::kFailed || io == TlsSession::Io::kClosed)
      return Status::Unavailable("TLS handshake: " + s.error());
    if (Status w = Wait(fd, io, timeout_ms, "handshake"); !w.ok()) return w;
  }
}

Status TlsWriteAll(TlsSession& s, int fd, const void* data, size_t len, int timeout_ms) {
  auto* p = static_cast<const char*>(data);
  while (len > 0) {
    size_t put = 0;
    TlsSession::Io io = s.Write(p, len, &put);
    if (io == TlsSession::Io::kOk) {
      p += put;
      len -= put;
      continue;
    }
    if (io == TlsSession::Io::kClosed) return Status::Unavailable("TLS: peer closed");
    if (io == TlsSession::Io::kFailed) return Status::Unavailable("TLS write: " + s.error());
    if (Status w = Wait(fd, io, timeout_ms, "write"); !w.ok()) return w;
  }
  return Status::Ok();
}

Result<size_t> TlsReadSome(TlsSession& s, int fd, void* buf, size_t len, int timeout_ms) {
  for (;;) {
    size_t got = 0;
    TlsSession::Io io = s.Read(buf, len, &got);
    if (io == TlsSession::Io::kOk) return got;
    if (io == TlsSession::Io::kClosed) return Status::Unavailable("TLS: peer closed");
    if (io == TlsSession::Io::kFailed) return Status::Unavailable("TLS read: " + s.error());
    if (Status w = Wait(fd, io, timeout_ms, "read"); !w.ok()) return w;
  }
}

}  // namespace kvpool::net
