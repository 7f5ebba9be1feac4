#include "etcd.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "cluster/http.h"
#include "net/socket.h"

namespace kvpool::testing {
namespace {

int FreePort() {
  auto fd = net::ListenTcp(net::Address{false, "127.0.0.1", 0, {}});
  return fd.ok() ? net::LocalPort(fd->get()) : 0;
}

}  // namespace

bool EtcdServer::Available() { return ::access("/usr/bin/etcd", X_OK) == 0; }

bool EtcdServer::Start(const std::string& tls_dir) {
  ::mkdir(dir_.c_str(), 0755);
  client_port_ = FreePort();
  peer_port_ = FreePort();
  std::string client =
      (tls_dir.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") + std::to_string(client_port_);
  std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  std::vector<std::string> args = {"/usr/bin/etcd",
                                   "--name",
                                   "test",
                                   "--data-dir",
                                   dir_ + "/data",
                                   "--listen-client-urls",
                                   client,
                                   "--advertise-client-urls",
                                   client,
                                   "--listen-peer-urls",
                                   peer,
                                   "--initial-advertise-peer-urls",
                                   peer,
                                   "--initial-cluster",
                                   "test=" + peer,
                                   "--log-level",
                                   "warn"};
  std::shared_ptr<const net::TlsContext> probe_tls;
  if (!tls_dir.empty()) {
    args.insert(args.end(),
                {"--cert-file", tls_dir + "/server.pem", "--key-file", tls_dir + "/server.key",
                 "--client-cert-auth", "--trusted-ca-file", tls_dir + "/ca.pem"});
    net::TlsOptions o;
    o.ca_file = tls_dir + "/ca.pem";
    o.cert_file = tls_dir + "/client.pem";
    o.key_file = tls_dir + "/client.key";
    auto ctx = net::TlsContext::Client(o);
    if (!ctx.ok()) return false;
    probe_tls = std::move(ctx).value();
  }
  pid_ = fork();
  if (pid_ == 0) {
    int fd = ::open((dir_ + "/etcd.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (int i = 0; i < 300; ++i) {
    auto r =
        cluster::HttpPost(endpoint(), "/v3/kv/range", "{\"key\":\"AA==\"}", 500, probe_tls.get());
    if (r.ok()) return true;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Stop();
  return false;
}

void EtcdServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  int st;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  waitpid(pid_, &st, 0);
  pid_ = -1;
}

void EtcdServer::Pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}
void EtcdServer::Resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

std::string EtcdServer::output() const {
  std::ifstream f(dir_ + "/etcd.log");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kvpool::testing
