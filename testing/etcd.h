// A real etcd (Debian's etcd-server) for tests: a single member on loopback ports chosen
// free, data in a temporary directory, stopped by PID.
#ifndef KVPOOL_TESTING_ETCD_H_
#define KVPOOL_TESTING_ETCD_H_

#include <sys/types.h>

#include <string>

namespace kvpool::testing {

class EtcdServer {
 public:
  explicit EtcdServer(std::string dir) : dir_(std::move(dir)) {}
  ~EtcdServer() { Stop(); }
  static bool Available();  // is the etcd binary installed
  // Starts and waits (up to 15 s) until it answers; false if it did not (output() says why).
  // With `tls_dir` (scripts/make-test-certs.sh's files): HTTPS with server.pem, and client
  // certificates of ca.pem required (etcd's --client-cert-auth).
  bool Start(const std::string& tls_dir = "");
  void Stop();   // SIGTERM, wait (SIGKILL after 5 s)
  void Pause();  // SIGSTOP: etcd stops answering (connections stay open)
  void Resume();
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  std::string output() const;

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int client_port_ = 0, peer_port_ = 0;
};

}  // namespace kvpool::testing

#endif  // KVPOOL_TESTING_ETCD_H_
