#include "crash_device.h"

#include <vector>

namespace kvpool::testing {

void SharedDevice::SubmitImpl(std::span<io::IoRequest* const> requests) {
  std::vector<io::IoRequest> copy;
  copy.reserve(requests.size());
  for (io::IoRequest* r : requests) copy.push_back(*r);
  inner_->Submit(copy);
  for (size_t i = 0; i < requests.size(); ++i) requests[i]->status = copy[i].status;
}

CrashDevice::CrashDevice(std::shared_ptr<io::Device> inner, int64_t crash_at, bool torn)
    : io::Device(inner->size()), inner_(std::move(inner)), crash_at_(crash_at), torn_(torn) {}

uint64_t CrashDevice::writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}

void CrashDevice::SubmitImpl(std::span<io::IoRequest* const> requests) {
  // Decided in order under the lock: which requests pass whole, which one is torn.
  std::vector<io::IoRequest> pass;
  std::vector<io::IoRequest*> passed;
  std::vector<io::IoRequest*> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (io::IoRequest* r : requests) {
      if (r->op == io::IoRequest::Op::kRead) {
        pass.push_back(*r);
        passed.push_back(r);
        continue;
      }
      int64_t index = static_cast<int64_t>(writes_++);
      if (crash_at_ < 0 || index < crash_at_) {
        pass.push_back(*r);
        passed.push_back(r);
        continue;
      }
      if (index == crash_at_) {
        crashed_.store(true, std::memory_order_release);
        if (torn_ && r->len > io::kPageSize) {
          io::IoRequest part = *r;
          part.len = io::kPageSize;  // the first page made it, the rest did not
          inner_->Submit(std::span<io::IoRequest>(&part, 1));
        }
      }
      dead.push_back(r);
    }
  }
  inner_->Submit(pass);
  for (size_t i = 0; i < pass.size(); ++i) passed[i]->status = pass[i].status;
  for (io::IoRequest* r : dead) r->status = Status::IoError("crashed");
}

}  // namespace kvpool::testing
