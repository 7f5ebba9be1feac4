#include "daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/proc_stat.h"

namespace kvpool::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int JsonInt(const std::string& json, const std::string& field) {
  size_t at = json.find("\"" + field + "\":");
  return at == std::string::npos ? 0 : std::atoi(json.c_str() + at + field.size() + 3);
}

pid_t SpawnKvpoold(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string bin = KvpooldPath();
    std::vector<char*> argv{bin.data()};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string MakeTempDir(const std::string& prefix) {
  std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string t = base + "/" + prefix + "-XXXXXX";
  char* d = mkdtemp(t.data());
  return d ? std::string(d) : base;
}

std::string KvpooldPath() {
  char exe[4096] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string self(exe, n > 0 ? n : 0);
  return self.substr(0, self.rfind('/') + 1) + "kvpoold";
}

int RunKvpoolCli(const std::string& args, std::string* out) {
  std::string cli = KvpooldPath();
  cli = cli.substr(0, cli.rfind('/') + 1) + "kvpool";
  out->clear();
  FILE* p = popen((cli + " " + args + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool Daemon::Start(const std::vector<std::string>& extra, const std::string& listen,
                   const std::string& resp_listen) {
  ::mkdir(dir_.c_str(), 0755);
  std::string ready = dir_ + "/ready.json";
  ::unlink(ready.c_str());
  std::vector<std::string> args = {
      "--data-dir",    dir_,        "--dram",     "64MiB", "--flash",      "0",  "--listen", listen,
      "--resp-listen", resp_listen, "--reactors", "2",     "--ready-file", ready};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = SpawnKvpoold(args, dir_ + "/kvpoold.log");
  for (int i = 0; i < 1000; ++i) {
    std::string json = ReadFile(ready);
    if (!json.empty()) {
      port_ = JsonInt(json, "port");
      resp_port_ = JsonInt(json, "resp_port");
      return true;
    }
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  return false;
}

int Daemon::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGCONT);  // a frozen daemon would not act on SIGTERM
  ::kill(pid_, SIGTERM);
  int st = 0;
  for (int i = 0; i < 1000; ++i) {  // 10 s, then SIGKILL
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  return -1;
}

void Daemon::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int st;
  waitpid(pid_, &st, 0);
  pid_ = -1;
}

bool Daemon::Freeze() {
  if (pid_ <= 0) return false;
  ::kill(pid_, SIGSTOP);
  // kill() returns before the threads stop: wait until each is stopped ('T') in its stat.
  for (int i = 0; i < 150; ++i) {
    std::vector<ProcStat> threads = ProcStat::OfThreads(pid_);
    bool all = !threads.empty();
    for (const ProcStat& t : threads) all &= t.Field(3) == "T" || t.Field(3) == "t";
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void Daemon::Thaw() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

std::string Daemon::output() const { return ReadFile(dir_ + "/kvpoold.log"); }

int Daemon::RunToExit(const std::vector<std::string>& args, std::string* out) {
  char tmpl[] = "/tmp/kvpoold-run-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd >= 0) ::close(fd);
  pid_t pid = SpawnKvpoold(args, tmpl);
  int st = 0;
  waitpid(pid, &st, 0);
  *out = ReadFile(tmpl);
  ::unlink(tmpl);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace kvpool::testing
