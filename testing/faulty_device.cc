#include "faulty_device.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace kvpool::testing {

FaultyDevice::FaultyDevice(std::unique_ptr<io::Device> inner, uint64_t seed)
    : io::Device(inner->size()), inner_(std::move(inner)), rng_(seed) {}

void FaultyDevice::SetPlan(const FaultPlan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = plan;
}

FaultyDevice::Injected FaultyDevice::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

void FaultyDevice::SubmitImpl(std::span<io::IoRequest* const> requests) {
  enum Fault { kNone, kEio, kShort, kFlip, kFull };
  std::vector<Fault> faults(requests.size(), kNone);
  std::vector<io::IoRequest> pass;
  std::vector<size_t> pass_of;
  unsigned delay_ms = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (io::IoRequest* r : requests) {
      if (r->op == io::IoRequest::Op::kRead) delay_ms = plan_.read_delay_ms;
    }
    std::uniform_real_distribution<double> u(0, 1);
    for (size_t i = 0; i < requests.size(); ++i) {
      bool read = requests[i]->op == io::IoRequest::Op::kRead;
      if (read) {
        double x = u(rng_);
        if (x < plan_.read_eio) {
          faults[i] = kEio;
          ++injected_.eio;
        } else if (x < plan_.read_eio + plan_.read_short) {
          faults[i] = kShort;
          ++injected_.short_reads;
        } else if (x < plan_.read_eio + plan_.read_short + plan_.read_flip) {
          faults[i] = kFlip;
          ++injected_.flips;
        }
      } else if (plan_.device_full) {
        faults[i] = kFull;
        ++injected_.write_errors;
      } else if (u(rng_) < plan_.write_eio) {
        faults[i] = kEio;
        ++injected_.write_errors;
      }
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (faults[i] == kEio || faults[i] == kFull) continue;
    io::IoRequest r = *requests[i];
    if (faults[i] == kShort && r.len > io::kPageSize) r.len -= io::kPageSize;
    pass.push_back(r);
    pass_of.push_back(i);
  }
  if (delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));  // a slow device
  inner_->Submit(pass);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (faults[i] == kEio) requests[i]->status = Status::IoError("injected EIO");
    if (faults[i] == kFull) requests[i]->status = Status::NoSpace("injected ENOSPC");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::uniform_int_distribution<uint64_t> bit(0, 8 * io::kPageSize - 1);
  for (size_t j = 0; j < pass.size(); ++j) {
    io::IoRequest* r = requests[pass_of[j]];
    r->status = pass[j].status;
    Fault f = faults[pass_of[j]];
    if (f == kShort && r->len > io::kPageSize) {
      // A device that lies: reports success but the last page never arrived. Only the
      // block CRC can catch this.
      std::memset(static_cast<char*>(r->buf) + r->len - io::kPageSize, 0, io::kPageSize);
    } else if (f == kShort) {
      r->status = Status::IoError("injected short read");
    } else if (f == kFlip && r->status.ok()) {
      uint64_t b = bit(rng_) % (8ull * r->len);
      static_cast<unsigned char*>(r->buf)[b / 8] ^= static_cast<unsigned char>(1u << (b % 8));
    }
  }
}

}  // namespace kvpool::testing
