#include "bench_targets.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <type_traits>

#include "kvpool/client.h"
#include "kvpool/pool.h"
#include "net/socket.h"

namespace kvpool::bench {
namespace {

Status Errno(const std::string& what) {
  return Status::IoError(what + ": " + std::strerror(errno));
}

uint16_t FreePort() {
  auto fd = net::ListenTcp(net::Address{false, "127.0.0.1", 0, {}});
  return fd.ok() ? net::LocalPort(fd->get()) : 0;
}

// Starts argv[0] with stdout/stderr to `log`; returns its pid.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid < 0) return Errno("fork");
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Gives every thread of `pid` the nice value `nice` (what kvpoold does for its reactors),
// so a peer can be compared at the same priority.
Status ReniceThreads(pid_t pid, int nice) {
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    id_t tid = static_cast<id_t>(std::stoul(e.path().filename().string()));
    if (::setpriority(PRIO_PROCESS, tid, nice) != 0) {
      return Status::Refused("--peer-nice " + std::to_string(nice) + ": " + std::strerror(errno));
    }
  }
  return ec ? Status::IoError(dir + ": " + ec.message()) : Status::Ok();
}

// Up to 30 s while the server lives: kvpoold prefaults its 1 GiB DRAM tier before it
// listens, which took over 5 s on this 2-core VM while other tests ran beside it.
Status WaitForPort(uint16_t port, pid_t pid, const std::string& log) {
  for (int i = 0; i < 3000; ++i) {
    auto fd = net::Connect(net::Address{false, "127.0.0.1", port, {}}, 100);
    // A connect to a port nobody listens on yet can meet itself (TCP simultaneous open
    // when the kernel picks the same port as the source): that is not the server.
    if (fd.ok() && net::LocalPort(fd->get()) != port) return Status::Ok();
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      std::ifstream f(log);
      std::stringstream ss;
      ss << f.rdbuf();
      return Status::Unavailable("server exited at start: " + ss.str().substr(0, 400));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Unavailable("server did not listen on port " + std::to_string(port));
}

// A blocking socket with a small read-ahead buffer: lines are read through it, values
// are read straight into the caller's buffer.
class SockConn : public BenchConn {
 public:
  explicit SockConn(net::Fd fd) : fd_(std::move(fd)) { net::SetBufferSizes(fd_.get(), 4 << 20); }

 protected:
  Status Send(std::span<const iovec> iov_in) {
    std::vector<iovec> iov(iov_in.begin(), iov_in.end());
    size_t i = 0;
    while (i < iov.size()) {
      msghdr m{};
      m.msg_iov = iov.data() + i;
      m.msg_iovlen = std::min<size_t>(iov.size() - i, 512);
      ssize_t n = ::sendmsg(fd_.get(), &m, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("send");
      }
      size_t left = static_cast<size_t>(n);
      while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
      if (i < iov.size()) {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
      }
    }
    return Status::Ok();
  }
  Status Send(std::string_view s) {
    iovec v{const_cast<char*>(s.data()), s.size()};
    return Send(std::span<const iovec>(&v, 1));
  }
  Status Fill() {
    if (pos_ == end_) pos_ = end_ = 0;
    if (end_ == sizeof(buf_)) {
      std::memmove(buf_, buf_ + pos_, end_ - pos_);
      end_ -= pos_;
      pos_ = 0;
    }
    ssize_t n = ::recv(fd_.get(), buf_ + end_, sizeof(buf_) - end_, 0);
    if (n <= 0) return n == 0 ? Status::Unavailable("server closed") : Errno("recv");
    end_ += static_cast<size_t>(n);
    return Status::Ok();
  }
  Result<std::string> Line() {
    while (true) {
      void* nl = std::memchr(buf_ + pos_, '\n', end_ - pos_);
      if (nl) {
        size_t len = static_cast<char*>(nl) - (buf_ + pos_);
        std::string line(buf_ + pos_, len && buf_[pos_ + len - 1] == '\r' ? len - 1 : len);
        pos_ += len + 1;
        return line;
      }
      if (Status s = Fill(); !s.ok()) return s;
    }
  }
  Status Read(std::byte* dst, size_t n) {
    size_t from_buf = std::min(n, end_ - pos_);
    std::memcpy(dst, buf_ + pos_, from_buf);
    pos_ += from_buf;
    dst += from_buf;
    n -= from_buf;
    while (n > 0) {
      ssize_t got = ::recv(fd_.get(), dst, n, MSG_WAITALL);
      if (got <= 0) return got == 0 ? Status::Unavailable("server closed") : Errno("recv");
      dst += got;
      n -= static_cast<size_t>(got);
    }
    return Status::Ok();
  }
  Status Skip(size_t n) {
    std::byte tmp[16];
    while (n > 0) {
      size_t k = std::min(n, sizeof(tmp));
      if (Status s = Read(tmp, k); !s.ok()) return s;
      n -= k;
    }
    return Status::Ok();
  }

  net::Fd fd_;
  char buf_[16384];
  size_t pos_ = 0, end_ = 0;
};

class RedisConn final : public SockConn {
 public:
  using SockConn::SockConn;
  Status Get(std::span<const std::string> keys, std::span<std::span<std::byte>> bufs) override {
    std::string cmd = "*" + std::to_string(keys.size() + 1) + "\r\n" +
                      (keys.size() == 1 ? "$3\r\nGET\r\n" : "$4\r\nMGET\r\n");
    for (const std::string& k : keys) cmd += "$" + std::to_string(k.size()) + "\r\n" + k + "\r\n";
    if (Status s = Send(cmd); !s.ok()) return s;
    if (keys.size() > 1) {
      auto head = Line();
      if (!head.ok()) return head.status();
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      auto line = Line();
      if (!line.ok()) return line.status();
      if (line->empty() || (*line)[0] != '$' || *line == "$-1") {
        return Status::NotFound("redis: " + *line);
      }
      size_t len = std::stoul(line->substr(1));
      if (len != bufs[i].size()) return Status::Internal("redis: unexpected size");
      if (Status s = Read(bufs[i].data(), len); !s.ok()) return s;
      if (Status s = Skip(2); !s.ok()) return s;
    }
    return Status::Ok();
  }
  Status Put(const std::string& key, std::span<const std::byte> value) override {
    std::string head = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n" + key +
                       "\r\n$" + std::to_string(value.size()) + "\r\n";
    iovec iov[3] = {{head.data(), head.size()},
                    {const_cast<std::byte*>(value.data()), value.size()},
                    {const_cast<char*>("\r\n"), 2}};
    if (Status s = Send(iov); !s.ok()) return s;
    auto line = Line();
    if (!line.ok()) return line.status();
    return *line == "+OK" ? Status::Ok() : Status::Internal("redis SET: " + *line);
  }
};

class MemcachedConn final : public SockConn {
 public:
  using SockConn::SockConn;
  Status Get(std::span<const std::string> keys, std::span<std::span<std::byte>> bufs) override {
    std::string cmd = "get";
    for (const std::string& k : keys) cmd += " " + k;
    cmd += "\r\n";
    if (Status s = Send(cmd); !s.ok()) return s;
    size_t i = 0;
    while (true) {
      auto line = Line();
      if (!line.ok()) return line.status();
      if (*line == "END") break;
      // VALUE <key> <flags> <bytes>
      size_t sp = line->rfind(' ');
      if (!line->starts_with("VALUE ") || sp == std::string::npos || i >= keys.size()) {
        return Status::Internal("memcached: " + *line);
      }
      size_t len = std::stoul(line->substr(sp + 1));
      if (len != bufs[i].size()) return Status::Internal("memcached: unexpected size");
      if (Status s = Read(bufs[i].data(), len); !s.ok()) return s;
      if (Status s = Skip(2); !s.ok()) return s;
      ++i;
    }
    return i == keys.size() ? Status::Ok() : Status::NotFound("memcached: a miss");
  }
  Status Put(const std::string& key, std::span<const std::byte> value) override {
    std::string head = "set " + key + " 0 0 " + std::to_string(value.size()) + "\r\n";
    iovec iov[3] = {{head.data(), head.size()},
                    {const_cast<std::byte*>(value.data()), value.size()},
                    {const_cast<char*>("\r\n"), 2}};
    if (Status s = Send(iov); !s.ok()) return s;
    auto line = Line();
    if (!line.ok()) return line.status();
    return *line == "STORED" ? Status::Ok() : Status::Internal("memcached set: " + *line);
  }
};

// The loopback limit: each request is an 8-byte length; the echo server answers with that
// many bytes. Same request/response shape as a get, with no store behind it.
class EchoConn final : public SockConn {
 public:
  using SockConn::SockConn;
  Status Get(std::span<const std::string> keys, std::span<std::span<std::byte>> bufs) override {
    std::vector<uint64_t> sizes;
    for (auto& b : bufs) sizes.push_back(b.size());
    iovec v{sizes.data(), sizes.size() * 8};
    if (Status s = Send(std::span<const iovec>(&v, 1)); !s.ok()) return s;
    for (auto& b : bufs) {
      if (Status s = Read(b.data(), b.size()); !s.ok()) return s;
    }
    return Status::Ok();
  }
  Status Put(const std::string&, std::span<const std::byte>) override { return Status::Ok(); }
};

// kvpool through the client library: one node (Client) or the pool (PoolClient).
template <class ClientT>
class KvpoolConn final : public BenchConn {
 public:
  explicit KvpoolConn(std::unique_ptr<ClientT> c) : c_(std::move(c)) {}
  Status Get(std::span<const std::string> keys, std::span<std::span<std::byte>> bufs) override {
    ops_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ops_[i].key = KeyFromBytes(keys[i]);
      ops_[i].buffer = bufs[i];
    }
    if (Status s = c_->GetBatch(ops_); !s.ok()) return s;
    for (const GetOp& op : ops_) {
      if (!op.status.ok()) return op.status;
    }
    return Status::Ok();
  }
  Status Put(const std::string& key, std::span<const std::byte> value) override {
    return c_->Put(KeyFromBytes(key), value, PutOptions{.parent = {}, .overwrite = true});
  }
  std::span<std::byte> Buffer(size_t bytes) override {
    if constexpr (std::is_same_v<ClientT, Client>) {  // the pool has no same-host region
      std::span<std::byte> shm = c_->shared_memory();
      if (shm.size() >= used_ + bytes) {
        auto b = shm.subspan(used_, bytes);
        used_ += bytes;
        return b;
      }
    }
    return BenchConn::Buffer(bytes);
  }

 private:
  std::unique_ptr<ClientT> c_;
  std::vector<GetOp> ops_;
  size_t used_ = 0;
};

class FsyncConn final : public BenchConn {
 public:
  explicit FsyncConn(std::string dir) : dir_(std::move(dir)) {}
  Status Get(std::span<const std::string> keys, std::span<std::span<std::byte>> bufs) override {
    for (size_t i = 0; i < keys.size(); ++i) {
      int fd = ::open((dir_ + "/" + keys[i]).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::NotFound("no file");
      ssize_t n = ::pread(fd, bufs[i].data(), bufs[i].size(), 0);
      ::close(fd);
      if (n != static_cast<ssize_t>(bufs[i].size())) return Status::IoError("short read");
    }
    return Status::Ok();
  }
  Status Put(const std::string& key, std::span<const std::byte> value) override {
    int fd = ::open((dir_ + "/" + key).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("open");
    ssize_t n = ::pwrite(fd, value.data(), value.size(), 0);
    int rc = ::fsync(fd);
    ::close(fd);
    return n == static_cast<ssize_t>(value.size()) && rc == 0 ? Status::Ok() : Errno("write");
  }

 private:
  std::string dir_;
};

class ProcessTarget : public BenchTarget {
 public:
  enum class Kind { kKvpool, kKvpoolShm, kKvpoolTls, kRedis, kMemcached, kEcho };
  ProcessTarget(std::string name, Kind kind, const BenchEnv& env)
      : name_(std::move(name)), kind_(kind), env_(env) {}
  std::string name() const override { return name_; }
  uint16_t port() const { return port_; }
  Result<std::unique_ptr<BenchConn>> Connect() override {
    if (kind_ == Kind::kKvpool || kind_ == Kind::kKvpoolShm || kind_ == Kind::kKvpoolTls) {
      ClientOptions o;
      o.ns = "bench";
      o.request_timeout_ms = 20000;
      o.busy_poll_us = env_.busy_poll_us;
      if (kind_ == Kind::kKvpoolShm) {
        o.address = "unix:" + unix_path_;
        o.shared_memory_bytes = 160ull << 20;
      } else {
        o.address = "127.0.0.1:" + std::to_string(port_);
      }
      if (kind_ == Kind::kKvpoolTls) {
        o.tls = true;
        o.tls_ca = cert_;  // self-signed: its own CA
      }
      auto c = Client::Create(o);
      if (!c.ok()) return c.status();
      if (Status s = (*c)->Ping(); !s.ok()) return s;
      return std::unique_ptr<BenchConn>(new KvpoolConn<Client>(std::move(c).value()));
    }
    auto fd = net::Connect(net::Address{false, "127.0.0.1", port_, {}}, 2000);
    if (!fd.ok()) return fd.status();
    switch (kind_) {
      case Kind::kRedis:
        return std::unique_ptr<BenchConn>(new RedisConn(std::move(fd).value()));
      case Kind::kMemcached:
        return std::unique_ptr<BenchConn>(new MemcachedConn(std::move(fd).value()));
      default:
        return std::unique_ptr<BenchConn>(new EchoConn(std::move(fd).value()));
    }
  }
  Status Start(const BenchEnv& env) {
    std::string log = env.work_dir + "/" + name_ + ".log";
    port_ = FreePort();
    std::string port = std::to_string(port_);
    std::vector<std::string> argv;
    switch (kind_) {
      case Kind::kKvpool:
      case Kind::kKvpoolShm:
      case Kind::kKvpoolTls: {
        std::string dir = env.work_dir + "/kvpoold-" + name_;
        unix_path_ = dir + "/kvpoold.sock";
        argv = {env.kvpoold_path,
                "--data-dir",
                dir,
                "--dram",
                "1GiB",
                "--flash",
                "0",
                "--listen",
                "127.0.0.1:" + port,
                "--resp-listen",
                "off"};
        argv.insert(argv.end(), env.kvpoold_args.begin(), env.kvpoold_args.end());
        if (kind_ == Kind::kKvpoolTls) {
          // A throw-away self-signed certificate for 127.0.0.1 (openssl from Debian).
          cert_ = env.work_dir + "/tls-cert.pem";
          std::string key = env.work_dir + "/tls-key.pem";
          std::string cmd =
              "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
              "-subj /CN=kvpool-bench -addext subjectAltName=IP:127.0.0.1 -keyout '" +
              key + "' -out '" + cert_ + "' >/dev/null 2>&1";
          if (std::system(cmd.c_str()) != 0)
            return Status::Unavailable("kvpool-tls: openssl could not make a certificate");
          argv.insert(argv.end(), {"--tls-cert", cert_, "--tls-key", key});
        }
        break;
      }
      case Kind::kRedis:
        argv = {"redis-server",
                "--port",
                port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--daemonize",
                "no"};
        break;
      case Kind::kMemcached:
        argv = {"memcached", "-l", "127.0.0.1", "-p", port, "-U", "0",   "-m",
                "2048",      "-I", "4m",        "-t", "2",  "-c", "1024"};
        if (getuid() == 0) argv.insert(argv.end(), {"-u", "root"});
        break;
      case Kind::kEcho:
        argv = {"/proc/self/exe", "bench", "--echo-server", port};
        break;
    }
    auto pid = Spawn(argv, log);
    if (!pid.ok()) return pid.status();
    Adopt(*pid);
    if (Status st = WaitForPort(port_, *pid, log); !st.ok()) return st;
    if ((kind_ == Kind::kRedis || kind_ == Kind::kMemcached) && env.peer_nice != 0) {
      if (Status st = ReniceThreads(*pid, env.peer_nice); !st.ok()) return st;
    }
    if (kind_ == Kind::kKvpoolShm) {  // the Unix socket too, not only the TCP port
      for (int i = 0; i < 500; ++i) {
        auto fd = net::Connect(net::Address{true, {}, 0, unix_path_}, 100);
        if (fd.ok()) return Status::Ok();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return Status::Unavailable("kvpoold did not listen on " + unix_path_);
    }
    return Status::Ok();
  }

 private:
  std::string name_;
  Kind kind_;
  BenchEnv env_;
  uint16_t port_ = 0;
  std::string unix_path_;
  std::string cert_;  // kvpool-tls: the node's certificate
};

// N kvpoold nodes (static membership) behind one PoolClient per connection.
class PoolTarget final : public BenchTarget {
 public:
  PoolTarget(std::string name, std::vector<std::unique_ptr<ProcessTarget>> nodes)
      : name_(std::move(name)), nodes_(std::move(nodes)) {}
  std::string name() const override { return name_; }
  std::vector<pid_t> ServerPids() const override {
    std::vector<pid_t> pids;
    for (auto& n : nodes_) {
      for (pid_t p : n->ServerPids()) pids.push_back(p);
    }
    return pids;
  }
  Result<std::unique_ptr<BenchConn>> Connect() override {
    PoolOptions o;
    for (auto& n : nodes_) o.members += "127.0.0.1:" + std::to_string(n->port()) + ";";
    o.client.ns = "bench";
    o.node_timeout_ms = 20000;
    auto c = PoolClient::Create(o);
    if (!c.ok()) return c.status();
    return std::unique_ptr<BenchConn>(new KvpoolConn<PoolClient>(std::move(c).value()));
  }

 private:
  std::string name_;
  std::vector<std::unique_ptr<ProcessTarget>> nodes_;
};

class FsyncTarget final : public BenchTarget {
 public:
  explicit FsyncTarget(std::string dir) : dir_(std::move(dir)) {}
  ~FsyncTarget() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string name() const override { return "fsync-files"; }
  Result<std::unique_ptr<BenchConn>> Connect() override {
    return std::unique_ptr<BenchConn>(new FsyncConn(dir_));
  }

 private:
  std::string dir_;
};

}  // namespace

std::span<std::byte> BenchConn::Buffer(size_t bytes) {
  // One allocation per connection, sized by the first call (the harness asks once).
  own_.assign(bytes, std::byte{0x5a});
  return own_;
}

std::vector<pid_t> BenchTarget::ServerPids() const {
  if (pid_ <= 0) return {};
  return {pid_};
}

BenchTarget::~BenchTarget() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 300; ++i) {
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  int st;
  waitpid(pid_, &st, 0);
}

Result<std::unique_ptr<BenchTarget>> StartTarget(const std::string& name, const BenchEnv& env) {
  using K = ProcessTarget::Kind;
  K kind;
  if (name == "fsync") {
    std::string dir = env.work_dir + "/fsync-files";
    ::mkdir(dir.c_str(), 0755);
    return std::unique_ptr<BenchTarget>(new FsyncTarget(dir));
  }
  if (name == "pool1" || name == "pool2" || name == "pool3") {
    std::vector<std::unique_ptr<ProcessTarget>> nodes;
    for (int i = 0; i < name[4] - '0'; ++i) {
      auto t = std::make_unique<ProcessTarget>(name + "-" + std::to_string(i), K::kKvpool, env);
      if (Status s = t->Start(env); !s.ok()) return Status(s.code(), name + ": " + s.ToString());
      nodes.push_back(std::move(t));
    }
    return std::unique_ptr<BenchTarget>(new PoolTarget(name, std::move(nodes)));
  }
  if (name == "kvpool")
    kind = K::kKvpool;
  else if (name == "kvpool-shm")
    kind = K::kKvpoolShm;
  else if (name == "kvpool-tls")
    kind = K::kKvpoolTls;
  else if (name == "redis")
    kind = K::kRedis;
  else if (name == "memcached")
    kind = K::kMemcached;
  else if (name == "echo")
    kind = K::kEcho;
  else
    return Status::InvalidArgument("unknown bench target '" + name + "'");
  auto t = std::make_unique<ProcessTarget>(name, kind, env);
  if (Status s = t->Start(env); !s.ok()) return Status(s.code(), name + ": " + s.ToString());
  return std::unique_ptr<BenchTarget>(std::move(t));
}

}  // namespace kvpool::bench
