// The HTTP port of a kvpoold node: the Prometheus metrics (/metrics), the live page (/)
// and its JSON (/api/stats). A small server of fixed routes, off the reactors.
//
// One thread: it accepts on its own socket (loopback by default), reads one request of at
// most 8 KiB within 2 s (TLS handshake included, when it has TLS), answers it and closes
// the connection. GET and HEAD only; a query
// string is ignored. A client that sends nothing is dropped after 2 s, so it can delay a
// scrape, not stop it.
//
// Thread safety: the methods are thread-safe; routes' bodies are rendered on the
// endpoint's thread.
#ifndef KVPOOL_SERVER_HTTP_ENDPOINT_H_
#define KVPOOL_SERVER_HTTP_ENDPOINT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/status.h"
#include "net/tls.h"

namespace kvpool::server {

struct HttpRoute {
  std::string path;  // exact, e.g. "/metrics"
  std::string content_type;
  std::function<std::string()> body;  // called once per request
};

class HttpEndpoint {
 public:
  // The TLS context a request is served with (null: plain HTTP); asked once per connection,
  // so a reloaded certificate applies to the next one.
  using TlsSource = std::function<std::shared_ptr<const net::TlsContext>()>;
  // `listen`: "host:port" (port 0: any).
  static Result<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen,
                                                     std::vector<HttpRoute> routes,
                                                     TlsSource tls = nullptr);
  ~HttpEndpoint();
  uint16_t port() const { return port_; }
  // Requests answered with 200, per route (index into the routes given to Start).
  uint64_t served(size_t route) const;

 private:
  HttpEndpoint() = default;
  void Loop();
  void Serve(int fd);

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::vector<HttpRoute> routes_;
  TlsSource tls_;
  std::unique_ptr<std::atomic<uint64_t>[]> served_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_HTTP_ENDPOINT_H_
