// TLS 1.3 over a connected socket (OpenSSL): contexts built from PEM files, and a session
// that wraps one fd, blocking or not.
//
// A session never owns the fd. On a non-blocking fd every call may answer kWantRead or
// kWantWrite: wait for that readiness and call again with the same arguments. On a blocking
// fd with SO_RCVTIMEO/SO_SNDTIMEO a timeout also comes back as kWantRead/kWantWrite.
//
// Records written are gathered in the session and go out with Flush(), one send() for all
// of them (OpenSSL's socket BIO makes a system call per 16 KiB record: for a 64 KiB value
// that cost more than the encryption). Reads ask the socket for as much as it has
// (read-ahead), not a record header and a body apiece.
//
// kTLS: where the kernel has the TLS module, server sessions use OpenSSL's socket BIO and
// hand the record layer to the kernel after the handshake (SSL_OP_ENABLE_KTLS). Where the
// kernel took the sending side (ktls_send()), a caller may write application data with
// plain send/sendmsg on the fd (gathered, no user-space copy); reads always go through
// Read() (it uses the kernel's receive side when there is one).
//
// Thread safety: a context is immutable once built and shared freely; a session is used by
// one thread at a time.
#ifndef KVPOOL_NET_TLS_H_
#define KVPOOL_NET_TLS_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "kvpool/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace kvpool::net {

struct TlsOptions {
  std::string cert_file;  // PEM chain presented to the peer (server: required)
  std::string key_file;   // its private key (default: cert_file)
  // Server: CA bundle that client certificates must chain to; empty: none asked for.
  // Client: CA bundle the server's certificate must chain to; empty: the system's.
  std::string ca_file;
  // Server: refuse a client that presents no valid certificate (needs ca_file). Without it,
  // a client may present one (then it must verify) or not (peer_verified() tells).
  bool require_client_cert = false;
  // Client: the name the server's certificate must carry (DNS name or IP address), also
  // sent as SNI when it is a name. Empty: the server's certificate is not checked (tests).
  std::string server_name;
  bool verify_server = true;  // client: false accepts any certificate (tests only)
};

class TlsSession;

class TlsContext {
 public:
  // Loads and checks the files now, so that a bad path or key fails at start (or at a
  // reload, which then keeps the old context), with OpenSSL's reason in the message.
  static Result<std::shared_ptr<const TlsContext>> Server(const TlsOptions& options);
  static Result<std::shared_ptr<const TlsContext>> Client(const TlsOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A session on `fd` (server: accepting; client: connecting, checking `server_name`
  // instead of the options' when it is given).
  Result<std::unique_ptr<TlsSession>> NewSession(int fd, const std::string& server_name = "") const;
  bool is_server() const { return server_; }

 private:
  TlsContext(SSL_CTX* ctx, bool server, bool ktls, TlsOptions options)
      : ctx_(ctx), server_(server), ktls_(ktls), options_(std::move(options)) {}
  SSL_CTX* ctx_;
  bool server_;
  bool ktls_;  // sessions use OpenSSL's socket BIO, so the kernel can take the records
  TlsOptions options_;
};

class TlsSession {
 public:
  enum class Io { kOk, kWantRead, kWantWrite, kClosed, kFailed };

  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Runs the handshake; kOk once it is complete.
  Io Handshake();
  bool established() const { return established_; }
  // Reads up to len bytes (*got > 0 on kOk). kClosed: the peer closed (cleanly or not).
  Io Read(void* buf, size_t len, size_t* got);
  // Encrypts up to len bytes (*put > 0 on kOk; may be less than len) into the outgoing
  // records; Flush() sends them. kWantWrite: too much is waiting to go out, Flush first.
  Io Write(const void* buf, size_t len, size_t* put);
  // Sends the outgoing records: kOk when none is left, kWantWrite when the socket is full.
  Io Flush();
  bool has_outgoing() const;
  // Decrypted or undecrypted bytes held inside the session: readable although the socket
  // may not be (a poller must not wait for the fd then).
  bool HasPending() const;
  // The peer presented a certificate that verified against the context's CA.
  bool peer_verified() const;
  // Client: the server asked for a certificate (a CertificateRequest).
  bool server_asked_certificate() const;
  // The kernel encrypts what is written to the fd (after the handshake).
  bool ktls_send() const;
  // OpenSSL's reason for the last kFailed (and the verification error, if any).
  const std::string& error() const { return error_; }

  struct Outgoing;  // the records not sent yet (tls.cc's BIO writes there)

 private:
  friend class TlsContext;
  explicit TlsSession(SSL* ssl);
  Io Classify(int ret);
  SSL* ssl_;
  std::unique_ptr<Outgoing> out_;  // null with OpenSSL's socket BIO (kTLS)
  bool established_ = false;
  bool asked_certificate_ = false;  // client: the server sent a CertificateRequest
  std::string error_;
};

// Whether this kernel offers kTLS (the "tls" TCP upper-layer protocol), probed once.
bool KernelTlsAvailable();

// Blocking helpers over a session whose fd is blocking (with socket timeouts) or that the
// caller polls: they wait in poll() for at most timeout_ms per step.
Status TlsHandshake(TlsSession& s, int fd, int timeout_ms);
// Writes all of data and flushes.
Status TlsWriteAll(TlsSession& s, int fd, const void* data, size_t len, int timeout_ms);
Status TlsFlush(TlsSession& s, int fd, int timeout_ms);
// With the caller's wait: `wait(io)` blocks until the socket is ready for what
// kWantRead/kWantWrite asks (a deadline of its own, say), or says why not. TlsWrite
// encrypts all of data into the session's outgoing records (sending only when they reach
// 1 MiB); TlsFlush sends them.
using TlsWait = std::function<Status(TlsSession::Io)>;
Status TlsWrite(TlsSession& s, const void* data, size_t len, const TlsWait& wait);
Status TlsFlush(TlsSession& s, const TlsWait& wait);
// Reads at least one byte (up to len) into buf; kUnavailable when the peer closed.
Result<size_t> TlsReadSome(TlsSession& s, int fd, void* buf, size_t len, int timeout_ms);

}  // namespace kvpool::net

#endif  // KVPOOL_NET_TLS_H_
