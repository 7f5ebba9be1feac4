// libFuzzer target for the TLS front: whatever a client sends to a TLS port (a ClientHello
// or garbage) goes through kvpool's server session (net/tls.h) the way the reactor drives
// it, non-blocking: the handshake fails or waits, reads fail or wait; never a crash, a hang
// or a read past the buffer. A throw-away certificate is made at start with openssl.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "net/tls.h"

namespace {

std::shared_ptr<const kvpool::net::TlsContext> Context() {
  static std::shared_ptr<const kvpool::net::TlsContext> ctx = [] {
    std::string dir = "/tmp/kvpool-tls-fuzz-" + std::to_string(getpid());
    std::string cmd = "mkdir -p " + dir + " && openssl req -x509 -newkey ec -pkeyopt " +
                      "ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=fuzz -keyout " + dir +
                      "/k.pem -out " + dir + "/c.pem >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) abort();
    kvpool::net::TlsOptions o;
    o.cert_file = dir + "/c.pem";
    o.key_file = dir + "/k.pem";
    o.ca_file = dir + "/c.pem";  // client certificates asked for: that path too
    auto c = kvpool::net::TlsContext::Server(o);
    if (!c.ok()) abort();
    std::system(("rm -rf " + dir).c_str());
    return std::move(c).value();
  }();
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  (void)!write(sv[1], data, size);  // small inputs: fits the socket buffer
  shutdown(sv[1], SHUT_WR);
  auto session = Context()->NewSession(sv[0]);
  if (session.ok()) {
    using Io = kvpool::net::TlsSession::Io;
    auto& s = **session;
    Io io = Io::kWantRead;
    for (int i = 0; i < 8 && io != Io::kOk && io != Io::kFailed; ++i) io = s.Handshake();
    if (io == Io::kOk) {
      char buf[4096];
      size_t got = 0;
      for (int i = 0; i < 64; ++i) {
        Io r = s.Read(buf, sizeof buf, &got);
        if (r != Io::kOk) break;
        if (got > sizeof buf) __builtin_trap();
      }
    }
  }
  close(sv[0]);
  close(sv[1]);
  return 0;
}
