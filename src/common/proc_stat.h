// The fields of a process's or thread's /proc stat line, as proc(5) numbers them: field 1
// the pid, 2 the command (parentheses stripped, spaces kept), 3 the state, 14/15 utime and
// stime in clock ticks, 19 the nice value, ...
#ifndef KVPOOL_COMMON_PROC_STAT_H_
#define KVPOOL_COMMON_PROC_STAT_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvpool {

class ProcStat {
 public:
  // /proc/PID/stat; empty (no fields) if it cannot be read.
  static ProcStat OfProcess(pid_t pid);
  // /proc/PID/task/*/stat: one per thread (none if the process is gone).
  static std::vector<ProcStat> OfThreads(pid_t pid);

  bool empty() const { return fields_.empty(); }
  // Field n (1-based, as in proc(5)); "" past the end.
  const std::string& Field(size_t n) const;
  long long Number(size_t n) const;  // 0 if absent or not a number

 private:
  static ProcStat Parse(const std::string& line);
  std::vector<std::string> fields_;
};

}  // namespace kvpool

#endif  // KVPOOL_COMMON_PROC_STAT_H_
