// What `kvpool bench` drives: a server process it starts (kvpoold, redis-server,
// memcached, a TCP echo child) and per-thread connections that get and put blocks. Each
// peer is spoken to in its own protocol by a minimal client here (RESP, memcached text),
// reading values straight into the caller's buffer, so no client library's overhead
// tilts the comparison.
#ifndef KVPOOL_BENCH_BENCH_TARGETS_H_
#define KVPOOL_BENCH_BENCH_TARGETS_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvpool/status.h"

namespace kvpool::bench {

// One client connection, used by one thread.
class BenchConn {
 public:
  virtual ~BenchConn() = default;
  // Gets keys[i] into buffers[i] (each exactly the value's size); all must hit.
  virtual Status Get(std::span<const std::string> keys,
                     std::span<std::span<std::byte>> buffers) = 0;
  virtual Status Put(const std::string& key, std::span<const std::byte> value) = 0;
  // A buffer for values of this connection (shared memory for kvpool's same-host path).
  virtual std::span<std::byte> Buffer(size_t bytes);

 protected:
  std::vector<std::byte> own_;
};

// A running server (or none, for in-process targets) and how to connect to it.
class BenchTarget {
 public:
  virtual ~BenchTarget();
  virtual std::string name() const = 0;
  virtual Result<std::unique_ptr<BenchConn>> Connect() = 0;
  // The server processes behind this target (none for in-process ones), whose CPU time the
  // benchmark reports per item beside its own.
  virtual std::vector<pid_t> ServerPids() const;
  // Targets whose gets are not network round trips (the fsync directory, memcpy) report
  // themselves to the table the same way.

 protected:
  void Adopt(pid_t pid) { pid_ = pid; }  // stopped (SIGTERM, then SIGKILL) by the destructor
  pid_t pid_ = -1;
};

struct BenchEnv {
  std::string kvpoold_path;               // next to the kvpool binary
  std::string work_dir;                   // scratch: kvpoold's data dir, the fsync directory
  unsigned busy_poll_us = 0;              // kvpool clients: ClientOptions::busy_poll_us
  std::vector<std::string> kvpoold_args;  // appended to the benchmark's kvpoold command line
  int peer_nice = 0;  // nice value given to every thread of redis-server and memcached (0: none)
};

// name: kvpool (TCP), kvpool-shm (Unix socket + shared memory), redis, memcached, echo
// (the loopback limit: a server that answers each request with N bytes), fsync (a file per
// block, written with fsync, read with open/read/close).
Result<std::unique_ptr<BenchTarget>> StartTarget(const std::string& name, const BenchEnv& env);

}  // namespace kvpool::bench

#endif  // KVPOOL_BENCH_BENCH_TARGETS_H_
