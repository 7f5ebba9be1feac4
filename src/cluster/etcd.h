// etcd v3 through its JSON gateway (HTTP/1.1 on the client port, keys and values base64):
// leases with keep-alive, put, delete, prefix range and a streaming prefix watch. Enough
// for membership; each call opens its own short connection (calls are rare: one
// keep-alive per second or so), trying the endpoints in turn.
#ifndef KVPOOL_CLUSTER_ETCD_H_
#define KVPOOL_CLUSTER_ETCD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvpool/status.h"
#include "net/tls.h"

namespace kvpool::cluster {

struct EtcdKv {
  std::string key, value;
};

struct EtcdEvent {
  bool deleted = false;  // DELETE (or lease expiry); otherwise PUT
  EtcdKv kv;             // value empty for a delete
};

// How to reach an etcd that has auth on, TLS, or both (docs/DEPLOY.md). With a user, every
// call carries a token from /v3/auth/authenticate (fetched again when etcd says it
// expired); with TLS, calls are HTTPS, the server's certificate checked against tls_ca, and
// tls_cert/tls_key presented (etcd's --client-cert-auth: the certificate's CN is the user).
struct EtcdAccess {
  std::string user, password;
  std::string tls_ca, tls_cert, tls_key;
  // etcdctl's variables: ETCDCTL_USER ("name" or "name:password"), ETCDCTL_PASSWORD,
  // ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY.
  static EtcdAccess FromEnvironment();
  bool tls() const { return !tls_ca.empty() || !tls_cert.empty(); }  // HTTPS to etcd
  bool configured() const { return !user.empty() || tls(); }
};

class Etcd {
 public:
  // endpoints: "host:port" of etcd's client URLs (comma-separated in config text).
  Etcd(std::vector<std::string> endpoints, int timeout_ms, EtcdAccess access = {});

  Result<int64_t> LeaseGrant(int ttl_seconds);
  // The lease's remaining TTL in seconds; 0 if it has expired (or never existed).
  Result<int64_t> LeaseKeepAlive(int64_t lease);
  Status LeaseRevoke(int64_t lease);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);
  // Every key starting with `prefix`, and the store revision the answer reflects.
  Status RangePrefix(const std::string& prefix, std::vector<EtcdKv>* kvs, int64_t* revision);
  // Streams changes under `prefix` from revision `from` on, calling on_event for each,
  // until `stop` is set (checked every 100 ms) or the stream fails (the Status says why;
  // kOk only after stop). *last_revision is the revision of the last event seen.
  Status WatchPrefix(const std::string& prefix, int64_t from,
                     const std::function<void(const EtcdEvent&)>& on_event,
                     const std::atomic<bool>& stop, int64_t* last_revision);

  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  Result<std::string> Call(const char* path, const std::string& body);
  // POST on one endpoint, with the auth token (fetched first if there is none yet).
  Result<std::string> CallOne(const std::string& endpoint, const char* path,
                              const std::string& body);
  Status Authenticate(const std::string& endpoint);
  std::vector<std::string> endpoints_;
  int timeout_ms_;
  EtcdAccess access_;
  std::shared_ptr<const net::TlsContext> tls_;  // set when access_.tls()
  Status tls_error_;                            // why the TLS context could not be made
  std::string token_;                           // etcd auth token ("" until authenticated)
  size_t preferred_ = 0;                        // the endpoint that answered last
};

// The key after every key with this prefix (etcd's range_end for a prefix).
std::string PrefixEnd(const std::string& prefix);
std::vector<std::string> SplitEndpoints(const std::string& text);

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_ETCD_H_
