#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace kvpool::net {
namespace {

Status Errno(std::string_view what) {
  return Status::IoError(std::string(what) + ": " + std::strerror(errno));
}

Result<sockaddr_in> ToSockaddr(const Address& a) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(a.port);
  std::string host = a.host == "localhost" ? "127.0.0.1" : a.host;
  if (host.empty() || host == "*") {
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return Status::InvalidArgument("not an IPv4 address: '" + a.host + "'");
  }
  return sa;
}

Result<sockaddr_un> ToSockaddrUn(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
    return Status::InvalidArgument("Unix socket path empty or longer than " +
                                   std::to_string(sizeof(sa.sun_path) - 1) + " bytes: " + path);
  }
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  return sa;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string Address::ToString() const {
  return unix_socket ? "unix:" + path : host + ":" + std::to_string(port);
}

Result<Address> ParseAddress(std::string_view text) {
  Address a;
  if (text.starts_with("unix:")) {
    a.unix_socket = true;
    a.path = std::string(text.substr(5));
    if (a.path.empty()) return Status::InvalidArgument("empty Unix socket path in '" +
                                                       std::string(text) + "'");
    return a;
  }
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return Status::InvalidArgument("address '" + std::string(text) +
                                   "' is not host:port or unix:/path");
  }
  a.host = std::string(text.substr(0, colon));
  std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return Status::InvalidArgument("bad port in address '" + std::string(text) + "'");
  }
  a.port = static_cast<uint16_t>(value);
  if (Result<sockaddr_in> sa = ToSockaddr(a); !sa.ok()) return sa.status();
  return a;
}

Result<Fd> ListenTcp(const Address& address, int backlog) {
  auto sa = ToSockaddr(address);
  if (!sa.ok()) return sa.status();
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    return Errno("bind " + address.ToString());
  }
  if (::listen(fd.get(), backlog) != 0) return Errno("listen " + address.ToString());
  return fd;
}

Result<Fd> ListenUnix(const std::string& path, int backlog) {
  auto sa = ToSockaddrUn(path);
  if (!sa.ok()) return sa.status();
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket");
  ::unlink(path.c_str());  // a stale socket from an earlier run (the data dir lock is held)
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    return Errno("bind " + path);
  }
  if (::listen(fd.get(), backlog) != 0) return Errno("listen " + path);
  return fd;
}

uint16_t LocalPort(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return 0;
  return ntohs(sa.sin_port);
}

Result<Fd> Connect(const Address& address, int timeout_ms) {
  Fd fd;
  int rc;
  if (address.unix_socket) {
    auto sa = ToSockaddrUn(address.path);
    if (!sa.ok()) return sa.status();
    fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Errno("socket");
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa));
  } else {
    auto sa = ToSockaddr(address);
    if (!sa.ok()) return sa.status();
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Errno("socket");
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa));
  }
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd.get(), POLLOUT, 0};
    rc = ::poll(&p, 1, timeout_ms);
    if (rc == 0) return Status::Unavailable("connect to " + address.ToString() + " timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc < 0) err = errno;
    errno = err;
    rc = err == 0 ? 0 : -1;
  }
  if (rc != 0) {
    return Status::Unavailable("connect to " + address.ToString() + ": " + std::strerror(errno));
  }
  int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  if (!address.unix_socket) SetNoDelay(fd.get());
  return fd;
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return Errno("fcntl");
  return Status::Ok();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void SetBufferSizes(int fd, int bytes) {
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

Status SendWithFd(int sock, std::span<const std::byte> data, int fd_to_send) {
  iovec iov{const_cast<std::byte*>(data.data()), data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd_to_send, sizeof(int));
  ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  if (n <= 0) return Errno("sendmsg(SCM_RIGHTS)");
  for (size_t done = static_cast<size_t>(n); done < data.size();) {
    ssize_t m = ::send(sock, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (m <= 0) return Errno("send");
    done += static_cast<size_t>(m);
  }
  return Status::Ok();
}

ssize_t ReceiveWithFd(int sock, std::byte* buffer, size_t len, int* fd) {
  iovec iov{buffer, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int got;
      std::memcpy(&got, CMSG_DATA(c), sizeof(int));
      if (*fd < 0) {
        *fd = got;
      } else {
        ::close(got);
      }
    }
  }
  return n;
}

}  // namespace kvpool::net
