// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with Clang's
// thread-safety annotations, so `-Wthread-safety` (the KVPOOL_THREAD_SAFETY build, run in
// CI) checks every GUARDED_BY and REQUIRES below instead of leaving them as comments.
// libstdc++'s own types carry no annotations, which is why these wrappers exist. Under GCC
// the annotations expand to nothing and the wrappers cost nothing.
//
//   Mutex mu_;
//   int n_ GUARDED_BY(mu_) = 0;
//   void Add() { MutexLock l(mu_); ++n_; }
//   void Wait() { MutexLock l(mu_); cv_.Wait(l, [&]() REQUIRES(mu_) { return n_ > 0; }); }
#ifndef KVPOOL_COMMON_MUTEX_H_
#define KVPOOL_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KVPOOL_TSA(x) __attribute__((x))
#else
#define KVPOOL_TSA(x)
#endif

#define CAPABILITY(x) KVPOOL_TSA(capability(x))
#define SCOPED_CAPABILITY KVPOOL_TSA(scoped_lockable)
#define GUARDED_BY(x) KVPOOL_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) KVPOOL_TSA(pt_guarded_by(x))
#define REQUIRES(...) KVPOOL_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) KVPOOL_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KVPOOL_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVPOOL_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) KVPOOL_TSA(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) KVPOOL_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS KVPOOL_TSA(no_thread_safety_analysis)

namespace kvpool {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return m_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex m_;
};

struct AdoptLock {};
inline constexpr AdoptLock kAdoptLock{};

// Holds a Mutex for its scope; Unlock/Lock release and retake it inside the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  // Takes over a mutex this thread already holds (after a successful try_lock).
  MutexLock(Mutex& mu, AdoptLock) REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  friend class CondVar;
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable waited on under a MutexLock.
class CondVar {
 public:
  void Wait(MutexLock& l) {
    std::unique_lock<std::mutex> u(l.mu_.m_, std::adopt_lock);
    cv_.wait(u);
    u.release();
  }
  // False when the deadline passed first.
  template <class Clock, class Duration>
  bool WaitUntil(MutexLock& l, const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock<std::mutex> u(l.mu_.m_, std::adopt_lock);
    bool woken = cv_.wait_until(u, deadline) == std::cv_status::no_timeout;
    u.release();
    return woken;
  }
  template <class Rep, class Period>
  bool WaitFor(MutexLock& l, const std::chrono::duration<Rep, Period>& d) {
    return WaitUntil(l, std::chrono::steady_clock::now() + d);
  }
  // Waits until pred() (called with the lock held; annotate it REQUIRES(mu)).
  template <class Pred>
  void Wait(MutexLock& l, Pred pred) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) Wait(l);
  }
  // Waits until pred() or the time is up; returns pred().
  template <class Rep, class Period, class Pred>
  bool WaitFor(MutexLock& l, const std::chrono::duration<Rep, Period>& d,
               Pred pred) NO_THREAD_SAFETY_ANALYSIS {
    auto deadline = std::chrono::steady_clock::now() + d;
    while (!pred()) {
      if (!WaitUntil(l, deadline)) return pred();
    }
    return true;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace kvpool

#endif  // KVPOOL_COMMON_MUTEX_H_
