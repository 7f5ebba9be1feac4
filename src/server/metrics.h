// Prometheus metrics of a kvpoold node: the text exposition format (version 0.0.4) of its
// store's and server's counters, and a small HTTP endpoint that serves it.
//
// Names follow Prometheus's conventions: `kvpool_` prefix, base units (`_bytes`,
// `_seconds`), `_total` on counters, the tier as a label. Latencies are histograms with
// fixed bounds (1 us to 1 s), so a pod's nodes can be summed.
//
// The endpoint is one thread, off the reactors: it accepts on its own socket (loopback by
// default), reads one request of at most 8 KiB within 2 s, answers GET /metrics and closes.
// A client that sends nothing is dropped after 2 s, so it can delay a scrape, not stop it.
//
// Thread safety: Render* are pure; MetricsEndpoint's methods are thread-safe.
#ifndef KVPOOL_SERVER_METRICS_H_
#define KVPOOL_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kvpool/stats.h"
#include "kvpool/status.h"
#include "server/server.h"

namespace kvpool::server {

std::string RenderMetrics(const StoreStats& store, const ServerStats& server);

class MetricsEndpoint {
 public:
  // `listen`: "host:port" (port 0: any). `render` is called once per scrape.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const std::string& listen,
                                                        std::function<std::string()> render);
  ~MetricsEndpoint();
  uint16_t port() const { return port_; }
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }

 private:
  MetricsEndpoint() = default;
  void Loop();
  void Serve(int fd);

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> scrapes_{0};
  std::thread thread_;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_METRICS_H_
