#include "server/connection.h"

#include <sys/socket.h>

#include <cerrno>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "server/server.h"

namespace kvpool::server {

Next Connection::Turn() {
  using Io = net::TlsSession::Io;
  if (tls_ && !tls_->established()) {
    switch (tls_->Handshake()) {
      case Io::kOk:
        break;
      case Io::kWantRead:
        return Next::kRead;
      case Io::kWantWrite:
        return Next::kWrite;
      default:
        ++counters_.tls_failures;
        if (log::Enabled(log::Level::kDebug)) log::Debug("TLS handshake: " + tls_->error());
        return Next::kClose;
    }
  }
  tls_wants_write_ = false;
  Next next = Drive();
  bool mid = next != Next::kClose && InRequest();
  if (mid && !was_mid_) request_start_ns_ = NowNanos();
  was_mid_ = mid;
  if (tls_ && next == Next::kRead) {
    if (tls_wants_write_) return Next::kWrite;
    if (tls_->has_outgoing() && tls_->Flush() == Io::kWantWrite) return Next::kWrite;
    // Bytes read ahead that the protocol has not asked for yet: the socket will not say
    // so. (After a read that wanted more, what is held is a partial record: wait.)
    if (!tls_read_blocked_ && tls_->HasPending()) return Next::kAgain;
  }
  return next;
}

ssize_t Connection::Receive(void* buf, size_t len) {
  ssize_t n;
  if (!tls_) {
    do {
      n = ::recv(fd_.get(), buf, len, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
  } else {
    using Io = net::TlsSession::Io;
    size_t got = 0;
    Io io = tls_->Read(buf, len, &got);
    tls_read_blocked_ = io == Io::kWantRead;
    switch (io) {
      case Io::kOk:
        n = static_cast<ssize_t>(got);
        break;
      case Io::kWantWrite:
        tls_wants_write_ = true;
        [[fallthrough]];
      case Io::kWantRead:
        errno = EAGAIN;
        return -1;
      case Io::kClosed:
        return 0;
      default:
        ++counters_.tls_failures;
        errno = EIO;
        return -1;
    }
  }
  return n;
}

ssize_t Connection::ReceiveV(const iovec* iov, int n) {
  if (tls_) return Receive(iov[0].iov_base, iov[0].iov_len);  // the caller loops
  ssize_t got;
  do {
    got = ::readv(fd_.get(), iov, n);
  } while (got < 0 && errno == EINTR);
  return got;
}

bool Connection::CountAs(TenantCounters* tenant, uint32_t cap) {
  if (tenant_ == tenant) return true;
  if (tenant) {
    uint64_t was = tenant->connections.fetch_add(1, std::memory_order_relaxed);
    if (cap != 0 && was >= cap) {
      tenant->connections.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
  }
  if (tenant_) tenant_->connections.fetch_sub(1, std::memory_order_relaxed);
  tenant_ = tenant;
  return true;
}

std::string Connection::TenantStatsText() const {
  auto r = [&](const std::atomic<uint64_t> TenantCounters::*f) {
    return std::to_string(tenant_ ? (tenant_->*f).load(std::memory_order_relaxed) : 0);
  };
  return "tenant " + tenant_name_ + ": connections " + r(&TenantCounters::connections) +
         ", requests " + r(&TenantCounters::requests) + ", gets " + r(&TenantCounters::gets) +
         ", hits " + r(&TenantCounters::hits) + ", puts " + r(&TenantCounters::puts) +
         ", bytes in " + r(&TenantCounters::bytes_in) + ", bytes out " +
         r(&TenantCounters::bytes_out) + "\n" + TenantUsageText();
}

void Connection::TenantHolding(TenantUsage* u, TenantQuota* q) const {
  *u = {};
  *q = {};
  if (tenant_id_ == 0) return;
  *u = server_.store()->Usage(tenant_id_);
  std::shared_ptr<const Tenants> now = server_.tenants();
  if (const Tenant* t = now->ById(tenant_id_)) *q = {t->dram_quota, t->flash_quota};
}

std::string Connection::TenantUsageText() const {
  if (tenant_id_ == 0) return {};
  TenantUsage u;
  TenantQuota q;
  TenantHolding(&u, &q);
  auto of = [](uint64_t quota) {
    return quota ? " of quota " + std::to_string(quota) : std::string(" (no quota)");
  };
  return "tenant " + tenant_name_ + " holds: dram " + std::to_string(u.dram_bytes) + " bytes" +
         of(q.dram_bytes) + ", flash " + std::to_string(u.flash_bytes) + " bytes" +
         of(q.flash_bytes) + "\n";
}

Result<Reservation> Connection::ReserveValue(const BlockKey& key, size_t len, PutOptions options) {
  options.tenant = tenant_id_;
  if (!seal_keys_) return server_.store()->Reserve(key, len, options);
  if (seal_keys_->shredded())
    return Status::Refused("this tenant's encryption keys have been removed");
  return server_.store()->Reserve(key, len + kSealOverhead, options);
}

Status Connection::SealReserved(const BlockKey& stored_key, uint32_t crc, bool checksummed,
                                Reservation reservation) {
  std::span<std::byte> buf = reservation.data();
  if (!checksummed && Crc32c(buf.data() + kSealPrefix, buf.size() - kSealOverhead) != crc) {
    return Status::Corruption("value does not match its CRC32C");  // released with it
  }
  if (Status s = Seal(*seal_keys_, stored_key, crc, buf); !s.ok()) return s;
  return server_.store()->Commit(std::move(reservation));
}

Result<std::span<const std::byte>> Connection::OpenSealed(const BlockKey& stored_key,
                                                          std::span<const std::byte> stored,
                                                          uint32_t* crc) {
  if (!seal_keys_ || !IsSealed(stored)) {
    ++counters_.seal_misses;  // another tenant's sealed block, or ours but not sealed
    return Status::NotFound();
  }
  std::vector<std::byte> plain(stored.size() - kSealOverhead);
  auto got = Open(*seal_keys_, stored_key, stored, plain.data());
  if (!got.ok()) {
    ++counters_.seal_misses;
    return got.status();
  }
  *crc = *got;
  opened_.push_back(std::move(plain));
  return std::span<const std::byte>(opened_.back());
}

void Connection::CountRequest() {
  // The next request starts no earlier than this one's end (a pipelining client is always
  // part-way through one: its clock restarts with every request it completes).
  request_start_ns_ = last_request_ns_ = NowNanos();
  ++counters_.requests;
  if (tenant_) tenant_->requests.fetch_add(1, std::memory_order_relaxed);
}

void Connection::CountIn(uint64_t bytes) {
  counters_.bytes_in += bytes;
  if (tenant_) tenant_->bytes_in.fetch_add(bytes, std::memory_order_relaxed);
}

void Connection::CountGets(uint64_t gets, uint64_t hits) {
  if (!tenant_) return;
  tenant_->gets.fetch_add(gets, std::memory_order_relaxed);
  tenant_->hits.fetch_add(hits, std::memory_order_relaxed);
}

void Connection::CountPuts(uint64_t puts) {
  if (tenant_ && puts) tenant_->puts.fetch_add(puts, std::memory_order_relaxed);
}

void Connection::QueueOwned(size_t offset, size_t len) {
  if (len == 0) return;
  out_total_ += len;
  if (!pieces_.empty() && pieces_.back().owned &&
      pieces_.back().offset + pieces_.back().len == offset) {
    pieces_.back().len += len;  // adjacent bytes: one iovec
    return;
  }
  pieces_.push_back(Piece{true, offset, nullptr, len});
}

void Connection::QueueView(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  pieces_.push_back(Piece{false, 0, bytes.data(), bytes.size()});
  out_total_ += bytes.size();
}

void Connection::ResetOutput() {
  out_bytes_.clear();
  views_.clear();
  held_views_.clear();
  opened_.clear();
  pieces_.clear();
  piece_ = piece_pos_ = 0;
  out_pos_ = out_total_ = 0;
}

bool Connection::Flush(bool* failed) {
  // With kTLS the kernel encrypts what sendmsg hands it: the gathered path below serves.
  if (tls_ && !tls_->ktls_send()) return SendTls(failed);
  constexpr size_t kMaxIov = 64;
  while (out_pos_ < out_total_) {
    iovec iov[kMaxIov];
    size_t n = 0;
    for (size_t i = piece_; i < pieces_.size() && n < kMaxIov; ++i, ++n) {
      const Piece& p = pieces_[i];
      const std::byte* base = p.owned ? out_bytes_.data() + p.offset : p.ptr;
      size_t skip = i == piece_ ? piece_pos_ : 0;
      iov[n].iov_base = const_cast<std::byte*>(base + skip);
      iov[n].iov_len = p.len - skip;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      if (errno == EINTR) continue;
      *failed = true;
      return false;
    }
    counters_.bytes_out += static_cast<uint64_t>(sent);
    if (tenant_)
      tenant_->bytes_out.fetch_add(static_cast<uint64_t>(sent), std::memory_order_relaxed);
    out_pos_ += static_cast<uint64_t>(sent);
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      size_t avail = pieces_[piece_].len - piece_pos_;
      if (left >= avail) {
        left -= avail;
        ++piece_;
        piece_pos_ = 0;
      } else {
        piece_pos_ += left;
        left = 0;
      }
    }
  }
  ResetOutput();
  return true;
}

bool Connection::SendTls(bool* failed) {
  using Io = net::TlsSession::Io;
  while (out_pos_ < out_total_) {
    const Piece& p = pieces_[piece_];
    const std::byte* base = (p.owned ? out_bytes_.data() + p.offset : p.ptr) + piece_pos_;
    size_t put = 0;
    Io io = tls_->Write(base, p.len - piece_pos_, &put);
    if (io == Io::kWantWrite || io == Io::kWantRead) return false;  // 1 MiB waits to go out
    if (io != Io::kOk) {
      if (io == Io::kFailed) ++counters_.tls_failures;
      *failed = true;
      return false;
    }
    counters_.bytes_out += put;
    if (tenant_) tenant_->bytes_out.fetch_add(put, std::memory_order_relaxed);
    out_pos_ += put;
    piece_pos_ += put;
    if (piece_pos_ == p.len) {
      ++piece_;
      piece_pos_ = 0;
    }
  }
  if (out_total_ > 0) ResetOutput();  // every byte is in a record: the views may go
  Io io = tls_->Flush();              // the records, in one send
  if (io == Io::kWantWrite) return false;
  if (io != Io::kOk) {
    if (io == Io::kFailed) ++counters_.tls_failures;
    *failed = true;
    return false;
  }
  return true;
}

BlockRead::BlockRead(Store& store, std::vector<BlockKey> keys)
    : store_(store), keys_(std::move(keys)) {
  views_.reserve(keys_.size());
  for (const BlockKey& k : keys_) {
    views_.push_back(k.empty() ? Result<BlockView>(Status::NotFound()) : store_.ReadResident(k));
    on_flash_ |= views_.back().status().code() == Code::kBusy;
  }
}

void BlockRead::Run() {
  std::vector<BlockKey> busy;
  std::vector<size_t> at;
  for (size_t i = 0; i < views_.size(); ++i) {
    if (views_[i].status().code() != Code::kBusy) continue;
    busy.push_back(keys_[i]);
    at.push_back(i);
  }
  std::vector<Result<BlockView>> read;
  read.reserve(busy.size());
  for (size_t j = 0; j < busy.size(); ++j) read.emplace_back(Status::NotFound());
  (void)store_.ReadBatch(busy, read);
  for (size_t j = 0; j < at.size(); ++j) views_[at[j]] = std::move(read[j]);
}

void Connection::StartRead(std::shared_ptr<BlockRead> read) {
  if (!read->on_flash()) return read->Finish(*this);
  Offload(std::move(read));
}

void Connection::Offload(std::shared_ptr<OffloadJob> job) {
  if (!reactor_) {  // no reactor to come back to: run here
    job->Run();
    return job->Finish(*this);
  }
  waiting_ = true;
  reactor_->Offload(*this, std::move(job));
}

}  // namespace kvpool::server
