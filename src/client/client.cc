// The client of include/kvpool/client.h: one blocking socket, requests pipelined in order.
#include "kvpool/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>

#include "common/clock.h"
#include "common/crc32c.h"
#include "net/protocol.h"
#include "net/socket.h"
#include "net/tls.h"

namespace kvpool {

using net::Op;

class Client::Impl {
 public:
  explicit Impl(const ClientOptions& o, net::Address a) : o_(o), address_(std::move(a)) {}
  ~Impl() {
    if (shm_) ::munmap(shm_, o_.shared_memory_bytes);
  }

  Status Init() {
    if (o_.tls || !o_.tls_ca.empty() || !o_.tls_cert.empty()) {
      if (address_.unix_socket) return Status::InvalidArgument("TLS needs a TCP address");
      net::TlsOptions t;
      t.ca_file = o_.tls_ca;
      t.cert_file = o_.tls_cert;
      t.key_file = o_.tls_key;
      t.server_name = o_.tls_server_name.empty() ? address_.host : o_.tls_server_name;
      auto ctx = net::TlsContext::Client(t);
      if (!ctx.ok()) return ctx.status();
      tls_ctx_ = std::move(ctx).value();
    }
    if (o_.shared_memory_bytes == 0) return Status::Ok();
    if (o_.shared_memory_bytes <= net::kShmControlBytes) {
      return Status::InvalidArgument("shared_memory_bytes too small");
    }
    if (!address_.unix_socket) {
      return Status::InvalidArgument("shared memory needs a unix:/path address (same host)");
    }
    memfd_.reset(memfd_create("kvpool-client", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!memfd_.valid() ||
        ftruncate(memfd_.get(), static_cast<off_t>(o_.shared_memory_bytes)) != 0 ||
        fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return Status::IoError(std::string("memfd: ") + std::strerror(errno));
    }
    void* p =
        mmap(nullptr, o_.shared_memory_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_.get(), 0);
    if (p == MAP_FAILED) return Status::IoError(std::string("mmap: ") + std::strerror(errno));
    shm_ = static_cast<std::byte*>(p);
    return Status::Ok();
  }

  // --- connection -------------------------------------------------------------------
  Status EnsureConnected() {
    if (fd_.valid()) return Status::Ok();
    uint64_t now = NowNanos();
    if (now < retry_after_ns_) return Status::Unavailable(last_connect_error_);
    ++stats_.connects;
    Status s = Handshake();
    if (!s.ok() && s.code() == Code::kTimeout && deadline_ns_ != 0 && NowNanos() >= deadline_ns_) {
      ResetSocket();  // the caller's deadline, not a dead server: retry on the next call
      return s;
    }
    if (!s.ok()) {
      ResetSocket();
      ++stats_.connect_failures;
      last_connect_error_ = "kvpoold at " + address_.ToString() + ": " + s.ToString();
      retry_after_ns_ = NowNanos() + 100'000'000ull;  // do not hammer a dead server
      if (s.code() == Code::kRefused || s.code() == Code::kInvalidArgument) return s;
      return Status::Unavailable(last_connect_error_);
    }
    return Status::Ok();
  }

  Status Handshake() {
    int connect_ms = o_.connect_timeout_ms;
    if (deadline_ns_ != 0) {
      uint64_t now = NowNanos();
      if (now >= deadline_ns_) return Status::Timeout("deadline passed before connecting");
      connect_ms = static_cast<int>(
          std::min<uint64_t>(connect_ms, (deadline_ns_ - now + 999'999) / 1'000'000));
    }
    auto fd = net::Connect(address_, connect_ms);
    if (!fd.ok()) return fd.status();
    fd_ = std::move(fd).value();
    timeval tv{o_.request_timeout_ms / 1000, (o_.request_timeout_ms % 1000) * 1000};
    setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    net::SetBufferSizes(fd_.get(), 4 << 20);
    if (tls_ctx_) {
      auto session = tls_ctx_->NewSession(fd_.get());
      if (!session.ok()) return session.status();
      tls_ = std::move(session).value();
      if (Status t = net::TlsHandshake(*tls_, fd_.get(), connect_ms); !t.ok()) return t;
    }
    net::HelloRequest hello{o_.ns, o_.token,
                            (shm_ ? net::kHelloWantShm : 0u) | (o_.peer ? net::kHelloPeer : 0u),
                            shm_ ? o_.shared_memory_bytes : 0};
    std::vector<std::byte> meta;
    net::AppendHello(meta, hello);
    net::Header h;
    h.opcode = static_cast<uint8_t>(Op::kHello);
    h.request_id = ++next_id_;
    h.meta_len = static_cast<uint32_t>(meta.size());
    std::vector<std::byte> frame(net::kHeaderBytes);
    net::SealHeader(h, meta, frame.data());
    frame.insert(frame.end(), meta.begin(), meta.end());
    Status s = shm_ ? net::SendWithFd(fd_.get(), frame, memfd_.get()) : SendAll(frame, {}, {});
    if (!s.ok()) return s;
    net::Header r;
    std::vector<std::byte> rmeta;
    if (Status rs = ReadHeader(&r, &rmeta); !rs.ok()) return rs;
    if (r.flags != 0) return ReadError(r);
    limits_ = net::DecodeLimits(rmeta);
    if (shm_ && !limits_.shm_enabled) return Status::Internal("server did not map the region");
    if (limits_.max_batch == 0) limits_.max_batch = 1;
    return Status::Ok();
  }

  void ResetSocket() {
    tls_.reset();
    fd_.reset();
    staged_begin_ = staged_end_ = 0;  // bytes of a connection that is gone
  }

  void Disconnect(const Status& why) {
    ResetSocket();
    ++stats_.io_failures;
    for (Pending& p : pending_) Complete(p, why);
    pending_.clear();
  }

  // --- framing ------------------------------------------------------------------------
  // Sends the header, the metadata and the values in one gathered write (no staging copy).
  Status SendAll(std::span<const std::byte> head, std::span<const std::byte> meta,
                 std::span<const iovec> data) {
    std::vector<iovec> iov;
    iov.reserve(2 + data.size());
    iov.push_back(iovec{const_cast<std::byte*>(head.data()), head.size()});
    if (!meta.empty()) iov.push_back(iovec{const_cast<std::byte*>(meta.data()), meta.size()});
    iov.insert(iov.end(), data.begin(), data.end());
    if (tls_) return SendTls(iov);
    size_t i = 0;
    while (i < iov.size()) {
      msghdr msg{};
      msg.msg_iov = iov.data() + i;
      msg.msg_iovlen = std::min<size_t>(iov.size() - i, 512);
      if (deadline_ns_ != 0) {
        if (Status s = WaitReady(POLLOUT); !s.ok()) return s;
      }
      ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | (deadline_ns_ ? MSG_DONTWAIT : 0));
      if (n < 0) {
        if (errno == EINTR || (errno == EAGAIN && deadline_ns_ != 0)) continue;
        return errno == EAGAIN ? Status::Timeout("send timed out")
                               : Status::Unavailable(std::string("send: ") + std::strerror(errno));
      }
      size_t left = static_cast<size_t>(n);
      while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
      if (i < iov.size()) {
        iov[i].iov_base = static_cast<std::byte*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
      }
    }
    return Status::Ok();
  }

  // TLS: small pieces (the header, the metadata) go out in one record with what follows;
  // values are encrypted from the caller's memory. The records leave in one send (or a
  // few: the session holds at most 1 MiB before it sends).
  Status SendTls(std::span<const iovec> iov) {
    using Io = net::TlsSession::Io;
    constexpr size_t kCoalesce = 16 << 10;
    const net::TlsWait wait = [this](Io io) {
      return WaitReady(io == Io::kWantWrite ? POLLOUT : POLLIN);
    };
    std::vector<std::byte> staged;
    auto write_staged = [&]() -> Status {
      Status s = net::TlsWrite(*tls_, staged.data(), staged.size(), wait);
      staged.clear();
      return s;
    };
    for (const iovec& v : iov) {
      if (v.iov_len < 4096 && staged.size() + v.iov_len <= kCoalesce) {
        auto* b = static_cast<const std::byte*>(v.iov_base);
        staged.insert(staged.end(), b, b + v.iov_len);
        continue;
      }
      if (!staged.empty()) {
        if (Status s = write_staged(); !s.ok()) return s;
      }
      if (Status s = net::TlsWrite(*tls_, v.iov_base, v.iov_len, wait); !s.ok()) return s;
    }
    if (!staged.empty()) {
      if (Status s = write_staged(); !s.ok()) return s;
    }
    return net::TlsFlush(*tls_, wait);  // the request's records in one send
  }

  Status ReadTls(std::byte* p, size_t n) {
    while (n > 0) {
      if (deadline_ns_ != 0 && !tls_->HasPending()) {
        if (Status s = WaitReady(POLLIN); !s.ok()) return s;
      }
      size_t got = 0;
      net::TlsSession::Io io = tls_->Read(p, n, &got);
      if (io == net::TlsSession::Io::kOk) {
        p += got;
        n -= got;
      } else if (io == net::TlsSession::Io::kWantRead || io == net::TlsSession::Io::kWantWrite) {
        if (deadline_ns_ == 0) return Status::Timeout("no answer within request_timeout_ms");
      } else if (io == net::TlsSession::Io::kClosed) {
        return Status::Unavailable("server closed the connection");
      } else {
        return Status::Unavailable("TLS receive: " + tls_->error());
      }
    }
    return Status::Ok();
  }

  Status ReadAll(void* dst, size_t n) {
    auto* p = static_cast<std::byte*>(dst);
    if (tls_) return ReadTls(p, n);
    if (size_t k = std::min(n, staged_end_ - staged_begin_); k > 0) {  // received already
      std::memcpy(p, staged_.data() + staged_begin_, k);
      staged_begin_ += k;
      p += k;
      n -= k;
    }
    if (o_.busy_poll_us > 0 && n > 0 && !shm_) {  // spin briefly before sleeping in recv
      uint64_t until = NowNanos() + uint64_t{o_.busy_poll_us} * 1000;
      while (n > 0 && NowNanos() < until) {
        ssize_t got = ::recv(fd_.get(), p, n, MSG_DONTWAIT);
        if (got > 0) {
          p += got;
          n -= static_cast<size_t>(got);
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          break;  // the blocking path below reports it
        }
      }
    }
    // With a call deadline, wait in poll, never past it. On a Unix socket, wait in poll
    // too: a thread asleep in recv on a Unix stream socket is also woken each time the
    // server reads one of this client's requests (the kernel's write-space wake-up, which
    // recv's waiter does not filter), so every call would pay two wake-ups; poll's waiter
    // ignores wake-ups for events it did not ask for.
    while (n > 0 && (deadline_ns_ != 0 || address_.unix_socket)) {
      ssize_t got = ::recv(fd_.get(), p, n, MSG_DONTWAIT);
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN)
          return Status::Unavailable(std::string("recv: ") + std::strerror(errno));
        if (Status s = WaitReady(POLLIN); !s.ok()) return s;
        continue;
      }
      if (got == 0) return Status::Unavailable("server closed the connection");
      p += got;
      n -= static_cast<size_t>(got);
    }
    while (n > 0) {
      ssize_t got = ::recv(fd_.get(), p, n, MSG_WAITALL);
      if (got < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN ? Status::Timeout("no answer within request_timeout_ms")
                               : Status::Unavailable(std::string("recv: ") + std::strerror(errno));
      }
      if (got == 0) return Status::Unavailable("server closed the connection");
      p += got;
      n -= static_cast<size_t>(got);
    }
    return Status::Ok();
  }

  // Waits until the socket is ready for `events`, up to the call's deadline if there is
  // one, and at most request_timeout_ms (none if it is not positive).
  Status WaitReady(short events) {
    int ms = o_.request_timeout_ms > 0 ? o_.request_timeout_ms : -1;
    if (deadline_ns_ != 0) {
      uint64_t now = NowNanos();
      if (now >= deadline_ns_) return Status::Timeout("deadline passed");
      uint64_t left_ms = (deadline_ns_ - now + 999'999) / 1'000'000;
      ms = static_cast<int>(std::min<uint64_t>(left_ms, o_.request_timeout_ms));
    }
    pollfd pfd{fd_.get(), events, 0};
    int r = ::poll(&pfd, 1, ms);
    if (r < 0 && errno != EINTR)
      return Status::Unavailable(std::string("poll: ") + std::strerror(errno));
    if (r == 0) {
      return deadline_ns_ != 0 && NowNanos() >= deadline_ns_
                 ? Status::Timeout("deadline passed")
                 : Status::Timeout("no answer within request_timeout_ms");
    }
    return Status::Ok();
  }

  // One receive of whatever part of the answers has arrived (at least a byte, at most the
  // staging buffer), so that a response's header, its items and (for small values, or the
  // first bytes of a large one) its data cost one system call, not one each. ReadAll takes
  // from here first. Not with TLS (its records are buffered by OpenSSL) or busy polling.
  Status Stage() {
    if (tls_ || o_.busy_poll_us > 0 || staged_begin_ < staged_end_) return Status::Ok();
    if (staged_.empty()) staged_.resize(kStagingBytes);
    const bool wait_in_poll = deadline_ns_ != 0 || address_.unix_socket;  // as ReadAll
    for (;;) {
      ssize_t got =
          ::recv(fd_.get(), staged_.data(), staged_.size(), wait_in_poll ? MSG_DONTWAIT : 0);
      if (got > 0) {
        staged_begin_ = 0;
        staged_end_ = static_cast<size_t>(got);
        return Status::Ok();
      }
      if (got == 0) return Status::Unavailable("server closed the connection");
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return Status::Unavailable(std::string("recv: ") + std::strerror(errno));
      if (!wait_in_poll) return Status::Timeout("no answer within request_timeout_ms");
      if (Status s = WaitReady(POLLIN); !s.ok()) return s;
    }
  }

  Status ReadHeader(net::Header* h, std::vector<std::byte>* meta) {
    std::byte raw[net::kHeaderBytes];
    if (Status s = Stage(); !s.ok()) return s;
    if (Status s = ReadAll(raw, sizeof(raw)); !s.ok()) return s;
    *h = net::DecodeHeader(raw);
    net::Limits big;
    big.max_meta_bytes = 64u << 20;
    big.max_request_bytes = ~0ull;
    if (Status s = net::CheckHeader(*h, big, /*is_response=*/true); !s.ok()) {
      return Status::Unavailable("bad response frame: " + s.ToString());
    }
    meta->resize(h->meta_len);
    if (Status s = ReadAll(meta->data(), meta->size()); !s.ok()) return s;
    if (!net::CheckCrc(*h, raw, *meta)) return Status::Unavailable("response header CRC mismatch");
    return Status::Ok();
  }

  Status ReadError(const net::Header& h) {
    std::string msg(std::min<uint64_t>(h.data_len, 4096), '\0');
    if (Status s = ReadAll(msg.data(), msg.size()); !s.ok()) return s;
    if (h.data_len > msg.size()) return Status::Unavailable("oversized error message");
    return Status(net::CodeFromWire(h.flags & 0xFF), msg);
  }

  // --- requests -----------------------------------------------------------------------
  struct Pending {
    uint64_t id = 0;
    Op op{};
    std::span<GetOp> gets;
    std::span<PutOp> puts;
    std::span<KeyOp> keys;
    size_t* match = nullptr;
    std::string* text = nullptr;
    Status status;
  };

  bool InShm(const void* p, size_t n) const {
    auto* b = static_cast<const std::byte*>(p);
    return shm_ && b >= shm_ && n <= o_.shared_memory_bytes &&
           static_cast<size_t>(b - shm_) <= o_.shared_memory_bytes - n;
  }

  Status MakeRoom() {
    while (pending_.size() >= static_cast<size_t>(std::max(1, o_.max_pipelined))) {
      if (Status s = ReceiveOne(); !s.ok()) return s;
    }
    return Status::Ok();
  }

  Result<uint64_t> Send(Pending p, net::Header h, const std::vector<std::byte>& meta,
                        std::span<const iovec> data) {
    if (Status s = EnsureConnected(); !s.ok()) {
      Complete(p, s);
      return s;
    }
    if (Status s = MakeRoom(); !s.ok()) {
      Complete(p, s);
      return s;
    }
    ++stats_.requests;
    h.request_id = p.id = ++next_id_;
    h.opcode = static_cast<uint8_t>(p.op);
    h.meta_len = static_cast<uint32_t>(meta.size());
    std::byte head[net::kHeaderBytes];
    net::SealHeader(h, meta, head);
    if (Status s = SendAll(head, meta, data); !s.ok()) {
      Complete(p, s);
      Disconnect(s);
      return s;
    }
    pending_.push_back(std::move(p));
    return pending_.back().id;
  }

  // Sets every op of `p` to `s` (a whole-request or transport failure).
  void Complete(Pending& p, const Status& s) {
    p.status = s;
    for (GetOp& g : p.gets) g.status = s;
    for (PutOp& op : p.puts) op.status = s;
    for (KeyOp& k : p.keys) k.status = s;
  }

  // Same-host path: spin on the control block until the server has sent p's response, so
  // the recv that follows finds it waiting instead of sleeping (no wake-up).
  void SpinForResponse(uint64_t id) {
    if (!shm_ || o_.busy_poll_us == 0) return;
    std::atomic_ref<uint64_t> sent(*reinterpret_cast<uint64_t*>(shm_));
    uint64_t until = NowNanos() + uint64_t{o_.busy_poll_us} * 1000;
    while (sent.load(std::memory_order_acquire) < id && NowNanos() < until) {
      __builtin_ia32_pause();
    }
  }

  Status ReceiveOne() {
    Pending& p = pending_.front();
    SpinForResponse(p.id);
    net::Header h;
    std::vector<std::byte> meta;
    Status s = ReadHeader(&h, &meta);
    if (s.ok() && h.request_id != p.id) s = Status::Unavailable("response out of order");
    if (s.ok() && h.flags != 0) {
      s = ReadError(h);
      if (s.code() == Code::kUnavailable || s.code() == Code::kTimeout) {
        Disconnect(s);
        return s;
      }
      Complete(p, s);
      completed_status_ = s;
      pending_.pop_front();
      return Status::Ok();
    }
    if (s.ok()) s = Deliver(p, h, meta);
    if (!s.ok()) {
      Disconnect(s);
      return s;
    }
    pending_.pop_front();
    return Status::Ok();
  }

  Status Deliver(Pending& p, const net::Header& h, const std::vector<std::byte>& meta) {
    size_t items = p.gets.size() + p.puts.size() + p.keys.size();
    if (p.op != Op::kMatch && p.op != Op::kStat && p.op != Op::kPing && p.op != Op::kList &&
        p.op != Op::kLeave && meta.size() != items * net::kResponseItemBytes) {
      return Status::Unavailable("response item count does not match the request");
    }
    auto item = [&](size_t i) { return net::DecodeResponseItem(meta.data() + i * 16); };
    switch (p.op) {
      case Op::kGet:
        for (size_t i = 0; i < p.gets.size(); ++i) {
          GetOp& g = p.gets[i];
          net::ResponseItem r = item(i);
          g.size = r.size;
          g.crc = r.crc;
          g.status = r.code == 0 ? Status() : Status(net::CodeFromWire(r.code), {});
          if (r.code != 0) continue;
          if (r.size > g.buffer.size()) return Status::Unavailable("value larger than asked");
          if (!InShm(g.buffer.data(), g.buffer.size())) {
            if (Status s = ReadAll(g.buffer.data(), r.size); !s.ok()) return s;
          }
          bool checked = (r.flags & net::kVerifiedInShm) && InShm(g.buffer.data(), r.size);
          if (o_.verify_crc && !checked && Crc32c(g.buffer.data(), r.size) != r.crc) {
            ++stats_.crc_failures;
            g.status = Status::NotFound("value failed its CRC32C check (answered as a miss)");
          }
        }
        return Status::Ok();
      case Op::kPut:
        for (size_t i = 0; i < p.puts.size(); ++i) {
          net::ResponseItem r = item(i);
          Code code = net::CodeFromWire(r.code);
          // Per-item answers carry a code only: say what a refused put's code means.
          p.puts[i].status = r.code == 0 ? Status()
                             : code == Code::kNoSpace
                                 ? Status::NoSpace(
                                       "no room on the server: its DRAM is full of blocks "
                                       "in use, or the value does not fit this tenant's "
                                       "quota (STAT shows what the tenant holds)")
                                 : Status(code, {});
        }
        return Status::Ok();
      case Op::kExists:
      case Op::kErase:
        for (size_t i = 0; i < p.keys.size(); ++i) {
          net::ResponseItem r = item(i);
          p.keys[i].status = r.code == 0 ? Status() : Status(net::CodeFromWire(r.code), {});
        }
        return Status::Ok();
      case Op::kMatch:
        *p.match += h.count;
        return Status::Ok();
      case Op::kStat:
      case Op::kPing:
      case Op::kList:
      case Op::kLeave: {
        if (h.data_len > (128u << 20)) return Status::Unavailable("oversized response");
        std::string t(h.data_len, '\0');
        if (Status s = ReadAll(t.data(), t.size()); !s.ok()) return s;
        if (p.text) *p.text = std::move(t);
        return Status::Ok();
      }
      case Op::kHello:
        break;
    }
    return Status::Unavailable("unexpected response");
  }

  Status Wait(uint64_t ticket) {
    completed_status_ = Status();
    while (!pending_.empty() && pending_.front().id <= ticket) {
      if (Status s = ReceiveOne(); !s.ok()) return s;
    }
    return completed_status_;
  }

  // Frames of at most max_batch items and max_request_bytes of data.
  template <typename OpT, typename SizeFn, typename SendFn>
  Result<uint64_t> Chunked(std::span<OpT> ops, SizeFn inline_bytes, SendFn send) {
    if (Status s = EnsureConnected(); !s.ok()) {
      for (OpT& op : ops) op.status = s;
      return s;
    }
    uint64_t last = next_id_;
    size_t i = 0;
    while (i < ops.size()) {
      size_t j = i;
      uint64_t bytes = 0;
      while (j < ops.size() && j - i < limits_.max_batch &&
             (j == i || bytes + inline_bytes(ops[j]) <= limits_.max_request_bytes)) {
        bytes += inline_bytes(ops[j]);
        ++j;
      }
      auto id = send(ops.subspan(i, j - i));
      if (!id.ok()) {
        for (size_t k = j; k < ops.size(); ++k) ops[k].status = id.status();
        return id.status();
      }
      last = *id;
      i = j;
    }
    return last;
  }

  Result<uint64_t> SubmitGet(std::span<GetOp> ops) {
    return Chunked(
        ops, [](const GetOp&) { return 0; },
        [&](std::span<GetOp> part) {
          std::vector<std::byte> meta;
          meta.reserve(part.size() * net::kGetItemBytes);
          for (GetOp& g : part) {
            g.size = 0;
            net::GetItem it{g.key, g.buffer.size(), net::kInline};
            if (InShm(g.buffer.data(), g.buffer.size())) it.shm_offset = g.buffer.data() - shm_;
            net::AppendGetItem(meta, it);
          }
          net::Header h;
          h.count = static_cast<uint32_t>(part.size());
          Pending p;
          p.op = Op::kGet;
          p.gets = part;
          return Send(std::move(p), h, meta, {});
        });
  }

  Result<uint64_t> SubmitPut(std::span<PutOp> ops, bool overwrite) {
    auto inline_bytes = [this](const PutOp& op) -> uint64_t {
      return (InShm(op.value.data(), op.value.size()) ? 0 : op.value.size()) +
             op.token_ids.size() * 4;
    };
    return Chunked(ops, inline_bytes, [&](std::span<PutOp> part) {
      std::vector<std::byte> meta;
      std::vector<iovec> data;
      uint64_t data_len = 0;
      for (PutOp& op : part) {
        net::PutItem it;
        it.key = op.key;
        it.parent = op.parent;
        it.len = static_cast<uint32_t>(std::min<size_t>(op.value.size(), UINT32_MAX));
        it.crc = Crc32c(op.value.data(), op.value.size());
        it.flags = overwrite ? net::kPutOverwrite : 0;
        if (op.value.size() > UINT32_MAX) it.len = 0;  // the server answers kInvalidArgument
        if (InShm(op.value.data(), op.value.size())) {
          it.flags |= net::kPutFromShm;
          it.shm_offset = op.value.data() - shm_;
        } else if (it.len > 0) {
          data.push_back(iovec{const_cast<std::byte*>(op.value.data()), it.len});
          data_len += it.len;
        }
        // Token ids follow the item's value (little-endian u32s, this host's order on x86).
        if (!op.token_ids.empty() && op.token_ids.size() <= net::kMaxTokensPerBlock) {
          it.tokens = static_cast<uint32_t>(op.token_ids.size());
          data.push_back(
              iovec{const_cast<uint32_t*>(op.token_ids.data()), op.token_ids.size() * 4});
          data_len += op.token_ids.size() * 4;
        }
        net::AppendPutItem(meta, it);
      }
      net::Header h;
      h.count = static_cast<uint32_t>(part.size());
      h.data_len = data_len;
      Pending p;
      p.op = Op::kPut;
      p.puts = part;
      return Send(std::move(p), h, meta, data);
    });
  }

  Result<uint64_t> SubmitKeys(Op op, std::span<KeyOp> ops, uint32_t lease_ms = 0) {
    return Chunked(
        ops, [](const KeyOp&) { return 0; },
        [&](std::span<KeyOp> part) {
          std::vector<std::byte> meta;
          meta.reserve(part.size() * net::kKeyBytes);
          for (KeyOp& k : part) net::AppendKey(meta, k.key);
          net::Header h;
          h.count = static_cast<uint32_t>(part.size());
          h.reserved = lease_ms;  // EXISTS: hold what is found this long (0: a plain probe)
          Pending p;
          p.op = op;
          p.keys = part;
          return Send(std::move(p), h, meta, {});
        });
  }

  Result<size_t> MatchPrefix(std::span<const BlockKey> chain) {
    if (Status s = EnsureConnected(); !s.ok()) return s;
    size_t matched = 0;
    // One frame per max_batch keys; a later frame only counts if every earlier key matched.
    for (size_t i = 0; i < chain.size(); i += limits_.max_batch) {
      size_t n = std::min<size_t>(limits_.max_batch, chain.size() - i);
      std::vector<std::byte> meta;
      net::AppendKeys(meta, chain.subspan(i, n));
      net::Header h;
      h.count = static_cast<uint32_t>(n);
      size_t got = 0;
      Pending p;
      p.op = Op::kMatch;
      p.match = &got;
      auto id = Send(std::move(p), h, meta, {});
      if (!id.ok()) return id.status();
      if (Status s = Wait(*id); !s.ok()) return s;
      matched += got;
      if (got < n) break;
    }
    return matched;
  }

  Result<std::string> Text(Op op, std::string_view payload, uint16_t flags = 0) {
    std::string text;
    net::Header h;
    h.flags = flags;
    h.data_len = payload.size();
    Pending p;
    p.op = op;
    p.text = &text;
    iovec iov{const_cast<char*>(payload.data()), payload.size()};
    auto id = Send(std::move(p), h, {},
                   payload.empty() ? std::span<const iovec>() : std::span<const iovec>(&iov, 1));
    if (!id.ok()) return id.status();
    if (Status s = Wait(*id); !s.ok()) return s;
    return text;
  }

  // The running call's deadline (CLOCK_MONOTONIC ns), 0 for none. Set by the public
  // calls for their duration (a Client is used by one thread at a time).
  uint64_t deadline_ns_ = 0;

  struct DeadlineScope {
    Impl* impl;
    DeadlineScope(Impl* i, Deadline d) : impl(i) { impl->deadline_ns_ = d.steady_ns; }
    ~DeadlineScope() { impl->deadline_ns_ = 0; }
  };
  template <class OpT, class SubmitFn>
  Status Call(std::span<OpT> ops, Deadline deadline, SubmitFn submit);

  const ClientOptions o_;
  const net::Address address_;
  net::Fd fd_, memfd_;
  std::shared_ptr<const net::TlsContext> tls_ctx_;  // set when options ask for TLS
  std::unique_ptr<net::TlsSession> tls_;            // the connection's, with fd_
  std::byte* shm_ = nullptr;
  net::Limits limits_;
  uint64_t next_id_ = 0;
  uint64_t retry_after_ns_ = 0;
  std::string last_connect_error_;
  std::deque<Pending> pending_;
  Status completed_status_;
  ClientStats stats_;
  // Received, not yet read: [staged_begin_, staged_end_) of staged_ (see Stage).
  static constexpr size_t kStagingBytes = 4096;
  std::vector<std::byte> staged_;
  size_t staged_begin_ = 0, staged_end_ = 0;
};

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  auto a = net::ParseAddress(options.address);
  if (!a.ok()) return a.status();
  if (options.ns.empty() || options.ns.size() > 4096) {
    return Status::InvalidArgument("namespace must be 1..4096 bytes");
  }
  if (options.token.size() > 4096) return Status::InvalidArgument("token longer than 4096 bytes");
  auto impl = std::make_unique<Impl>(options, std::move(a).value());
  if (Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Status Client::Put(const BlockKey& key, std::span<const std::byte> value,
                   const PutOptions& options) {
  PutOp op{key, value, options.parent, {}};
  if (Status s = PutBatch(std::span<PutOp>(&op, 1), options.overwrite); !s.ok()) return s;
  return op.status;
}

Result<size_t> Client::Get(const BlockKey& key, std::span<std::byte> buffer) {
  GetOp op;
  op.key = key;
  op.buffer = buffer;
  if (Status s = GetBatch(std::span<GetOp>(&op, 1)); !s.ok()) return s;
  if (!op.status.ok()) return op.status;
  return op.size;
}

Result<bool> Client::Exists(const BlockKey& key, Deadline deadline) {
  KeyOp op{key, {}};
  if (Status s = ExistsBatch(std::span<KeyOp>(&op, 1), deadline); !s.ok()) return s;
  if (op.status.ok() || op.status.IsNotFound()) return op.status.ok();
  return op.status;
}

Status Client::Erase(const BlockKey& key) {
  KeyOp op{key, {}};
  if (Status s = EraseBatch(std::span<KeyOp>(&op, 1)); !s.ok()) return s;
  return op.status;
}

// A synchronous batch: submit, then wait, under the call's deadline.
template <class OpT, class SubmitFn>
Status Client::Impl::Call(std::span<OpT> ops, Deadline deadline, SubmitFn submit) {
  if (deadline.passed()) return ExpireAll(ops);
  DeadlineScope scope(this, deadline);
  auto t = submit();
  return t.ok() ? Wait(*t) : t.status();
}

Status Client::PutBatch(std::span<PutOp> ops, bool overwrite, Deadline deadline) {
  return impl_->Call(ops, deadline, [&] { return impl_->SubmitPut(ops, overwrite); });
}

Status Client::GetBatch(std::span<GetOp> ops, Deadline deadline) {
  return impl_->Call(ops, deadline, [&] { return impl_->SubmitGet(ops); });
}

Status Client::ExistsBatch(std::span<KeyOp> ops, Deadline deadline) {
  return impl_->Call(ops, deadline, [&] { return impl_->SubmitKeys(Op::kExists, ops); });
}

Status Client::HoldBatch(std::span<KeyOp> ops, std::chrono::milliseconds lease, Deadline deadline) {
  auto ms = static_cast<uint32_t>(std::clamp<int64_t>(lease.count(), 1, UINT32_MAX));
  return impl_->Call(ops, deadline, [&] { return impl_->SubmitKeys(Op::kExists, ops, ms); });
}

Status Client::EraseBatch(std::span<KeyOp> ops, Deadline deadline) {
  return impl_->Call(ops, deadline, [&] { return impl_->SubmitKeys(Op::kErase, ops); });
}

Result<size_t> Client::MatchPrefix(std::span<const BlockKey> chain, Deadline deadline) {
  if (deadline.passed()) return Status::Timeout("deadline passed before the call");
  Impl::DeadlineScope scope(impl_.get(), deadline);
  return impl_->MatchPrefix(chain);
}

Result<std::string> Client::ServerStats() { return impl_->Text(Op::kStat, {}); }

Result<Client::Figures> Client::ServerFigures() {
  auto r = impl_->Text(Op::kStat, {}, net::kStatFigures);
  if (!r.ok()) return r.status();
  uint32_t n = 0;
  if (r->size() < 8 || r->compare(0, 4, "KVS1") != 0 ||
      (std::memcpy(&n, r->data() + 4, 4), r->size() != 8 + uint64_t{n} * 8)) {
    return Status::Internal("the server did not answer STAT with figures (an older kvpoold?)");
  }
  auto at = [&](uint32_t i) -> uint64_t {
    uint64_t v = 0;
    if (i < n) std::memcpy(&v, r->data() + 8 + uint64_t{i} * 8, 8);
    return v;
  };
  Figures f;
  f.dram_used = at(net::kDramUsed);
  f.dram_capacity = at(net::kDramCapacity);
  f.dram_blocks = at(net::kDramBlocks);
  f.dram_hits = at(net::kDramHits);
  f.flash_used = at(net::kFlashUsed);
  f.flash_capacity = at(net::kFlashCapacity);
  f.flash_blocks = at(net::kFlashBlocks);
  f.flash_hits = at(net::kFlashHits);
  f.puts = at(net::kPuts);
  f.gets = at(net::kGets);
  f.misses = at(net::kMisses);
  f.tenant_scoped = at(net::kTenantScoped) != 0;
  return f;
}

Result<std::vector<HeldBlock>> Client::ListBlocks(size_t max) {
  uint64_t n = max;
  auto r = impl_->Text(Op::kList, std::string_view(reinterpret_cast<const char*>(&n), sizeof n));
  if (!r.ok()) return r.status();
  if (r->size() % net::kListedBlockBytes != 0) return Status::Unavailable("malformed LIST answer");
  std::vector<HeldBlock> out(r->size() / net::kListedBlockBytes);
  for (size_t i = 0; i < out.size(); ++i) {
    const char* p = r->data() + i * net::kListedBlockBytes;
    uint32_t flags;
    std::memcpy(&out[i].key.lo, p, 8);
    std::memcpy(&out[i].key.hi, p + 8, 8);
    std::memcpy(&out[i].size, p + 16, 4);
    std::memcpy(&flags, p + 20, 4);
    out[i].in_dram = flags & 1;
    out[i].uses = static_cast<uint8_t>(flags >> 8);
  }
  return out;
}

Status Client::Leave() { return impl_->Text(Op::kLeave, {}).status(); }

Status Client::Ping() {
  auto r = impl_->Text(Op::kPing, "ping");
  if (!r.ok()) return r.status();
  return *r == "ping" ? Status::Ok() : Status::Internal("ping echo mismatch");
}

Result<Client::Ticket> Client::SubmitGet(std::span<GetOp> ops) { return impl_->SubmitGet(ops); }
Result<Client::Ticket> Client::SubmitPut(std::span<PutOp> ops, bool overwrite) {
  return impl_->SubmitPut(ops, overwrite);
}
Result<Client::Ticket> Client::SubmitExists(std::span<KeyOp> ops) {
  return impl_->SubmitKeys(Op::kExists, ops);
}
Result<Client::Ticket> Client::SubmitErase(std::span<KeyOp> ops) {
  return impl_->SubmitKeys(Op::kErase, ops);
}
Status Client::Wait(Ticket ticket, Deadline deadline) {
  Impl::DeadlineScope scope(impl_.get(), deadline);
  return impl_->Wait(ticket);
}

Status Client::GetLayers(std::span<const std::span<GetOp>> layers,
                         const std::function<void(size_t)>& on_layer, Deadline deadline) {
  if (deadline.passed()) {
    for (auto ops : layers) (void)ExpireAll(ops);
    return Status::Timeout("deadline passed before the call");
  }
  Impl::DeadlineScope scope(impl_.get(), deadline);
  std::vector<Result<Ticket>> tickets;
  tickets.reserve(layers.size());
  for (auto ops : layers) tickets.push_back(impl_->SubmitGet(ops));
  Status first_error;
  for (size_t i = 0; i < layers.size(); ++i) {
    Status s = tickets[i].ok() ? impl_->Wait(*tickets[i]) : tickets[i].status();
    if (!s.ok() && first_error.ok()) first_error = s;
    if (on_layer) on_layer(i);
  }
  return first_error;
}

std::span<std::byte> Client::shared_memory() {
  return impl_->shm_ ? std::span<std::byte>(impl_->shm_, impl_->o_.shared_memory_bytes)
                           .subspan(net::kShmControlBytes)
                     : std::span<std::byte>();
}
bool Client::connected() const { return impl_->fd_.valid(); }
ClientStats Client::stats() const { return impl_->stats_; }

}  // namespace kvpool
