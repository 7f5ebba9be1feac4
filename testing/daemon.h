// A real kvpoold process for integration tests: started from the build directory on
// loopback with port 0 (the ready file says which ports it got), stopped by PID.
#ifndef KVPOOL_TESTING_DAEMON_H_
#define KVPOOL_TESTING_DAEMON_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvpool::testing {

class Daemon {
 public:
  // `dir` is the data directory (created); extra flags are appended to the defaults
  // (--dram 64MiB --flash 0, loopback ports chosen by the kernel).
  explicit Daemon(std::string dir) : dir_(std::move(dir)) {}
  ~Daemon() { Stop(); }

  // Starts and waits (up to 10 s) for the ready file. False if it exited or never got ready;
  // output() then says why.
  bool Start(const std::vector<std::string>& extra = {}, const std::string& listen = "127.0.0.1:0",
             const std::string& resp_listen = "127.0.0.1:0");
  // SIGTERM and wait; returns the exit status (-1 if not running).
  int Stop();
  void Kill();  // SIGKILL and wait
  // SIGSTOP, and wait (up to 3 s) until every thread is stopped: connections stay open
  // and nothing is answered. False if it did not stop. Thaw() resumes it.
  bool Freeze();
  void Thaw();

  // Runs kvpoold with these arguments to completion; returns its exit code, output in *out.
  static int RunToExit(const std::vector<std::string>& args, std::string* out);

  int port() const { return port_; }
  int resp_port() const { return resp_port_; }
  std::string tcp_address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string unix_address() const { return "unix:" + dir_ + "/kvpoold.sock"; }
  const std::string& dir() const { return dir_; }
  std::string output() const;  // what it logged so far
  pid_t pid() const { return pid_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0, resp_port_ = 0;
};

// The kvpoold binary built beside the tests.
std::string KvpooldPath();

// A fresh directory $TMPDIR/<prefix>-XXXXXX (TMPDIR defaults to /tmp).
std::string MakeTempDir(const std::string& prefix);

// Runs the `kvpool` CLI built beside the tests with `args` (passed through the shell) to
// completion; returns its exit code, stdout and stderr together in *out.
int RunKvpoolCli(const std::string& args, std::string* out);

}  // namespace kvpool::testing

#endif  // KVPOOL_TESTING_DAEMON_H_
