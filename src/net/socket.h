// Sockets: an owning fd, listening and connecting on TCP (IPv4 loopback or any address)
// and Unix sockets, addresses as "host:port" or "unix:/path", and passing an fd over a
// Unix socket (SCM_RIGHTS). Thin wrappers; errors come back as Status with errno's text.
#ifndef KVPOOL_NET_SOCKET_H_
#define KVPOOL_NET_SOCKET_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvpool/status.h"

namespace kvpool::net {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Address {
  bool unix_socket = false;
  std::string host;  // TCP: dotted IPv4 or "localhost"
  uint16_t port = 0;
  std::string path;  // Unix socket path
  std::string ToString() const;
};

// "127.0.0.1:7400", "localhost:7400", ":7400" (all interfaces) or "unix:/run/kvpool.sock".
Result<Address> ParseAddress(std::string_view text);

// Listening sockets, non-blocking. TCP sets SO_REUSEADDR; port 0 picks a free port.
Result<Fd> ListenTcp(const Address& address, int backlog = 1024);
Result<Fd> ListenUnix(const std::string& path, int backlog = 1024);
// The bound port of a TCP socket.
uint16_t LocalPort(int fd);

// A blocking connected socket (TCP_NODELAY on TCP), or kUnavailable within timeout_ms.
Result<Fd> Connect(const Address& address, int timeout_ms);

Status SetNonBlocking(int fd);
void SetNoDelay(int fd);
void SetBufferSizes(int fd, int bytes);

// Sends all of `data` on a blocking Unix socket, with `fd_to_send` attached to its first byte.
Status SendWithFd(int sock, std::span<const std::byte> data, int fd_to_send);
// recv() that also takes an attached fd (stored in *fd, which must be -1; a second fd is
// closed). Returns what recvmsg returns.
ssize_t ReceiveWithFd(int sock, std::byte* buffer, size_t len, int* fd);

}  // namespace kvpool::net

#endif  // KVPOOL_NET_SOCKET_H_
