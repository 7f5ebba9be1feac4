// Must NOT compile with -Wthread-safety -Werror (scripts/test.sh checks that it fails): a
// guarded member read without its mutex, and a REQUIRES function called without it. Shows
// that the KVPOOL_THREAD_SAFETY build really checks the annotations.
#include "common/mutex.h"

namespace {
class Counter {
 public:
  int Read() { return n_; }      // error: reading n_ requires holding mu_
  void Bump() { BumpLocked(); }  // error: calling BumpLocked requires holding mu_
  void BumpLocked() REQUIRES(mu_) { ++n_; }
  void Ok() {
    kvpool::MutexLock l(mu_);
    BumpLocked();
  }

 private:
  kvpool::Mutex mu_;
  int n_ GUARDED_BY(mu_) = 0;
};
}  // namespace

int main() {
  Counter c;
  c.Ok();
  c.Bump();
  return c.Read();
}
