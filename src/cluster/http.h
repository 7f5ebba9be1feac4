// A minimal HTTP/1.1 client for etcd's JSON gateway (and kvpoold's /api/stats): POST a
// JSON body or GET, read the response
// (Content-Length or chunked), or stream a chunked response (etcd's watch) piece by piece.
// The response parser is a pure function of the bytes fed to it (the fuzz target drives it).
#ifndef KVPOOL_CLUSTER_HTTP_H_
#define KVPOOL_CLUSTER_HTTP_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "kvpool/status.h"
#include "net/socket.h"
#include "net/tls.h"

namespace kvpool::cluster {

// Incremental response parser. Feed() bytes as they arrive; the decoded body accumulates in
// body() (take it with TakeBody() while streaming). Malformed input or a response over the
// limits is kInvalidArgument; the connection is then useless.
class HttpResponseParser {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 << 10;
  static constexpr size_t kMaxBodyBytes = 64 << 20;

  Status Feed(std::string_view data);
  bool headers_done() const { return state_ > State::kHeaders; }
  bool done() const { return state_ == State::kDone; }
  int status_code() const { return status_code_; }
  const std::string& body() const { return body_; }
  std::string TakeBody() { return std::exchange(body_, {}); }

 private:
  enum class State { kHeaders, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailer, kDone };
  Status ParseHeaders(std::string_view head);
  State state_ = State::kHeaders;
  std::string pending_;  // bytes not yet consumed (header text, a partial chunk-size line)
  std::string body_;
  int status_code_ = 0;
  bool chunked_ = false;
  size_t remaining_ = 0;  // Content-Length left, or bytes of the current chunk
  size_t body_total_ = 0;
};

class HttpConnection {
 public:
  // Connects to "host:port" within timeout_ms; every later read and write is bounded by it.
  // With `tls`, speaks HTTPS (the certificate checked against the address's host).
  static Result<HttpConnection> Open(const std::string& address, int timeout_ms,
                                     const net::TlsContext* tls = nullptr);
  // A header sent with every request from now on ("Authorization: <token>" for etcd auth).
  void SetAuthorization(std::string token) { authorization_ = std::move(token); }

  // Sends "POST path" with a JSON body.
  Status Post(std::string_view path, std::string_view body);
  // Sends "GET path" (a kvpoold's /api/stats, say).
  Status Get(std::string_view path);
  // Reads one whole response; its body in *body. Non-2xx is kIoError with the body as text.
  Status ReadResponse(std::string* body);
  // Streaming: reads what arrives within wait_ms and appends decoded body bytes to *out.
  // kOk with nothing appended means no data yet; kUnavailable when the stream ended.
  Status ReadSome(std::string* out, int wait_ms);

 private:
  Status Send(const std::string& request);
  // Some bytes of the response (blocking, up to the timeout): 0 when the peer closed.
  Result<size_t> Receive(char* buf, size_t len, bool wait);
  std::string Headers() const;
  static Status CertificateRefused();
  explicit HttpConnection(net::Fd fd, std::string host, int timeout_ms)
      : fd_(std::move(fd)), host_(std::move(host)), timeout_ms_(timeout_ms) {}
  net::Fd fd_;
  std::string host_;
  int timeout_ms_;
  std::unique_ptr<net::TlsSession> tls_;
  bool verdict_pending_ = false;  // etcd has not yet said whether it takes our certificate
  std::string authorization_;
  HttpResponseParser parser_;
};

// One request on a fresh connection: POST, read the response, close.
Result<std::string> HttpPost(const std::string& address, std::string_view path,
                             std::string_view body, int timeout_ms,
                             const net::TlsContext* tls = nullptr,
                             const std::string& authorization = "");

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_HTTP_H_
