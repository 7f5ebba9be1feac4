// The server's I/O threads: blocking work a reactor must not wait on (a get that has to
// read flash) runs here, and its result goes back to the reactor that asked.
//
// Thread safety: Submit and Stop may be called from any thread.
#ifndef KVPOOL_SERVER_IO_WORKERS_H_
#define KVPOOL_SERVER_IO_WORKERS_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace kvpool::server {

class IoWorkers {
 public:
  explicit IoWorkers(unsigned threads);
  ~IoWorkers() { Stop(); }

  // Runs `task` on one of the threads, in submission order across the pool. After Stop a
  // task runs on the caller's thread (nothing is lost).
  void Submit(std::function<void()> task);
  // Runs what is queued, then joins the threads.
  void Stop();

 private:
  void Loop();

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_IO_WORKERS_H_
