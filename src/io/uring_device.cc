#include "io/uring_device.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvpool::io {

struct UringDevice::Ring {
  io_uring ring;
  bool ok = false;
  explicit Ring(unsigned depth) { ok = io_uring_queue_init(depth, &ring, 0) == 0; }
  ~Ring() {
    if (ok) io_uring_queue_exit(&ring);
  }
};

namespace {
std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }
}  // namespace

Result<std::unique_ptr<UringDevice>> UringDevice::Open(const UringDeviceOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("flash path is empty");
  int fd = ::open(options.path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(Errno("open " + options.path, errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::IoError(Errno("fstat " + options.path, errno));
  }
  uint64_t size = options.size;
  if (S_ISBLK(st.st_mode)) {
    uint64_t dev_size = 0;
    if (ioctl(fd, BLKGETSIZE64, &dev_size) != 0) {
      ::close(fd);
      return Status::IoError(Errno("BLKGETSIZE64 " + options.path, errno));
    }
    if (size == 0 || size > dev_size) size = dev_size;
  } else if (S_ISREG(st.st_mode)) {
    if (size == 0) size = static_cast<uint64_t>(st.st_size);
    if (size == 0) {
      ::close(fd);
      return Status::InvalidArgument("flash file " + options.path + " is empty and no size given");
    }
    // Preallocate so that log writes never allocate blocks or grow the file.
    if (static_cast<uint64_t>(st.st_size) < size) {
      int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
      if (rc != 0) {
        ::close(fd);
        return Status::NoSpace(Errno("preallocate " + options.path, rc));
      }
    }
  } else {
    ::close(fd);
    return Status::InvalidArgument(options.path + " is neither a regular file nor a block device");
  }
  size -= size % kPageSize;
  auto dev = std::unique_ptr<UringDevice>(new UringDevice(fd, size, options.queue_depth));
  auto probe = dev->AcquireRing();
  if (!probe) return Status::IoError("io_uring_queue_init failed (io_uring unavailable?)");
  dev->ReleaseRing(std::move(probe));
  return dev;
}

UringDevice::UringDevice(int fd, uint64_t size, unsigned depth)
    : Device(size), fd_(fd), depth_(depth < 1 ? 1 : depth) {}

UringDevice::~UringDevice() {
  pool_.clear();
  ::close(fd_);
}

std::unique_ptr<UringDevice::Ring> UringDevice::AcquireRing() {
  {
    MutexLock lock(pool_mu_);
    if (!pool_.empty()) {
      auto r = std::move(pool_.back());
      pool_.pop_back();
      return r;
    }
  }
  auto r = std::make_unique<Ring>(depth_);
  if (!r->ok) return nullptr;
  return r;
}

void UringDevice::ReleaseRing(std::unique_ptr<Ring> ring) {
  MutexLock lock(pool_mu_);
  pool_.push_back(std::move(ring));
}

void UringDevice::SubmitImpl(std::span<IoRequest* const> requests) {
  auto ring = AcquireRing();
  if (!ring) {
    for (IoRequest* r : requests) r->status = Status::IoError("no io_uring ring");
    return;
  }
  io_uring* ur = &ring->ring;
  // Pending until a completion says otherwise (no message: no allocation).
  for (IoRequest* r : requests) r->status = Status(Code::kIoError, {});
  size_t next = 0, inflight = 0, done = 0;
  while (done < requests.size()) {
    // Keep the ring full: as completions arrive, more requests go in (sustained depth).
    while (next < requests.size() && inflight < depth_) {
      io_uring_sqe* sqe = io_uring_get_sqe(ur);
      if (!sqe) break;
      IoRequest* r = requests[next];
      if (r->op == IoRequest::Op::kRead) {
        io_uring_prep_read(sqe, fd_, r->buf, r->len, r->offset);
      } else {
        io_uring_prep_write(sqe, fd_, r->buf, r->len, r->offset);
      }
      io_uring_sqe_set_data64(sqe, next);
      ++next;
      ++inflight;
    }
    int rc = io_uring_submit_and_wait(ur, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // The ring is in an unknown state: requests not reaped stay kIoError, and the ring
      // is leaked rather than reused or torn down under I/O that may still be in flight.
      (void)ring.release();
      return;
    }
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(ur, head, cqe) {
      IoRequest* r = requests[io_uring_cqe_get_data64(cqe)];
      if (cqe->res < 0) {
        r->status = Status::IoError(Errno("flash I/O", -cqe->res));
      } else if (static_cast<uint32_t>(cqe->res) != r->len) {
        r->status = Status::IoError("short flash transfer");
      } else {
        r->status = Status::Ok();
      }
      ++seen;
    }
    io_uring_cq_advance(ur, seen);
    inflight -= seen;
    done += seen;
  }
  ReleaseRing(std::move(ring));
}

}  // namespace kvpool::io
