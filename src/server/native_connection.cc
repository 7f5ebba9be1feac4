#include "server/native_connection.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "server/io_workers.h"
#include "server/leases.h"
#include "server/server.h"
#include "server/shm_copy.h"

namespace kvpool::server {

using net::kHeaderBytes;
using net::Op;

namespace {
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kFramesPerTurn = 32;  // then let the reactor's other connections run

}  // namespace

NativeConnection::NativeConnection(Server& server, net::Fd fd, ReactorCounters& counters,
                                   bool unix_socket)
    : Connection(server, std::move(fd), counters), unix_socket_(unix_socket), in_(kReadChunk) {}

NativeConnection::~NativeConnection() {
  reservations_.clear();
  if (shm_) ::munmap(shm_, shm_size_);
  if (passed_fd_ >= 0) ::close(passed_fd_);
}

void NativeConnection::PublishSent() {
  // While a get waits on flash, hdr_ is that request's: its answer has not gone out yet.
  if (shm_ && !waiting_) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(shm_))
        .store(hdr_.request_id, std::memory_order_release);
  }
}

Next NativeConnection::Drive() {
  bool failed = false;
  if (OutputPending()) {
    if (!Flush(&failed)) return failed ? Next::kClose : Next::kWrite;
    PublishSent();
  }
  if (state_ == State::kClosing) return Next::kClose;
  if (waiting_) return Next::kWait;
  for (int turn = 0; turn < kFramesPerTurn && !waiting_; ++turn) {
    if (state_ == State::kData) {
      Io r = ReceiveData();
      if (r == Io::kBlocked) return Next::kRead;
      if (r == Io::kFailed) return Next::kClose;  // vanished mid-frame: reservations drop
      state_ = State::kFrame;
      if (after_ == After::kPut) FinishPut();
      if (after_ == After::kPing) FinishPing();
      if (after_ == After::kList) StartList();
      after_ = After::kNothing;
    } else {
      Parse p = ParseNext();
      if (p == Parse::kNeedMore) {
        Io r = Fill();
        if (r == Io::kBlocked) return Next::kRead;
        if (r == Io::kFailed) return Next::kClose;
        continue;
      }
      if (p == Parse::kReady) {
        std::span<const std::byte> meta(in_.data() + in_start_ + kHeaderBytes, hdr_.meta_len);
        in_start_ += kHeaderBytes;  // meta stays readable until the next Fill
        HandleFrame(meta);
        in_start_ += hdr_.meta_len;
      }
    }
    if (OutputPending()) {
      if (!Flush(&failed)) return failed ? Next::kClose : Next::kWrite;
      PublishSent();
    }
    if (state_ == State::kClosing) return Next::kClose;
  }
  return waiting_ ? Next::kWait : Next::kAgain;
}

NativeConnection::Io NativeConnection::Fill() {
  if (in_start_ == in_end_) {
    in_start_ = in_end_ = 0;
  } else if (in_start_ > 0 && in_.size() - in_end_ < kReadChunk / 2) {
    std::memmove(in_.data(), in_.data() + in_start_, in_end_ - in_start_);
    in_end_ -= in_start_;
    in_start_ = 0;
  }
  if (in_end_ == in_.size()) return Io::kFailed;  // ParseNext grows the buffer when needed
  ssize_t n;
  do {
    if (unix_socket_ && !hello_done_) {
      n = net::ReceiveWithFd(fd(), in_.data() + in_end_, in_.size() - in_end_, &passed_fd_);
    } else {
      n = Receive(in_.data() + in_end_, in_.size() - in_end_);
    }
  } while (n < 0 && errno == EINTR);
  if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kBlocked : Io::kFailed;
  if (n == 0) return Io::kFailed;
  in_end_ += static_cast<size_t>(n);
  CountIn(static_cast<uint64_t>(n));
  return Io::kDone;
}

NativeConnection::Parse NativeConnection::ParseNext() {
  size_t avail = in_end_ - in_start_;
  if (avail < kHeaderBytes) return Parse::kNeedMore;
  const std::byte* h = in_.data() + in_start_;
  hdr_ = net::DecodeHeader(h);
  const net::Limits& limits = server_.options().limits;
  if (Status s = net::CheckHeader(hdr_, limits, /*is_response=*/false); !s.ok()) {
    ReplyError(s.code(), s.message(), /*close=*/true);
    return Parse::kBad;
  }
  size_t need = kHeaderBytes + hdr_.meta_len;
  if (avail < need) {
    if (in_.size() - in_start_ < need) {  // make room for the whole header + meta
      std::vector<std::byte> bigger(std::max(need, kReadChunk) + kReadChunk);
      std::memcpy(bigger.data(), h, avail);
      in_ = std::move(bigger);
      in_start_ = 0;
      in_end_ = avail;
    }
    return Parse::kNeedMore;
  }
  std::span<const std::byte> frame(h, need);
  Status s = net::ValidateRequest(frame, limits, /*data_available=*/false);
  if (!s.ok()) {
    ++counters_.protocol_errors;
    if (s.code() == Code::kTooLarge && hdr_.count > limits.max_batch) {
      // A well-formed frame over a limit: answer, skip its data, keep the connection.
      ReplyError(Code::kTooLarge, s.message(), /*close=*/false);
      in_start_ += need;
      targets_.assign(1, Target{nullptr, hdr_.data_len});
      BeginData(After::kNothing);
      return Parse::kBad;
    }
    ReplyError(s.code(), s.message(), /*close=*/true);
    return Parse::kBad;
  }
  return Parse::kReady;
}

void NativeConnection::BeginData(After after) {
  std::erase_if(targets_, [](const Target& t) { return t.len == 0; });
  target_ = target_pos_ = 0;
  after_ = after;
  state_ = State::kData;
}

void NativeConnection::ReplyError(Code code, std::string_view message, bool close) {
  net::Header h;
  h.opcode = hdr_.opcode | net::kResponseBit;
  h.request_id = hdr_.request_id;
  h.flags = static_cast<uint16_t>(code);
  h.data_len = message.size();
  size_t at = out_bytes_.size();
  out_bytes_.resize(at + kHeaderBytes + message.size());
  net::SealHeader(h, {}, out_bytes_.data() + at);
  if (!message.empty())
    std::memcpy(out_bytes_.data() + at + kHeaderBytes, message.data(), message.size());
  QueueOwned(at, kHeaderBytes + message.size());
  if (close) state_ = State::kClosing;
}

// Appends a response header + meta to out_bytes_ and queues them.
static size_t AppendResponse(std::vector<std::byte>& out, const net::Header& request,
                             uint32_t count, std::span<const std::byte> meta, uint64_t data_len) {
  net::Header h;
  h.opcode = request.opcode | net::kResponseBit;
  h.request_id = request.request_id;
  h.count = count;
  h.meta_len = static_cast<uint32_t>(meta.size());
  h.data_len = data_len;
  size_t at = out.size();
  out.resize(at + kHeaderBytes + meta.size());
  net::SealHeader(h, meta, out.data() + at);
  if (!meta.empty()) std::memcpy(out.data() + at + kHeaderBytes, meta.data(), meta.size());
  return at;
}

void NativeConnection::HandleFrame(std::span<const std::byte> meta) {
  CountRequest();
  server_.leases().Tick();
  Op op = static_cast<Op>(hdr_.opcode);
  if (!hello_done_ && op != Op::kHello) {
    ++counters_.auth_failures;
    ReplyError(Code::kRefused, "the first frame of a connection must be HELLO", true);
    return;
  }
  switch (op) {
    case Op::kHello:
      return DoHello(meta);
    case Op::kPut:
      return DoPut(meta);
    case Op::kGet:
      return DoGet(meta);
    case Op::kExists:
      if (hdr_.reserved > 0) return DoHold(meta);
      [[fallthrough]];
    case Op::kErase:
    case Op::kMatch:
      return DoKeys(op, meta);
    case Op::kStat:
      return DoStat();
    case Op::kPing:
      ping_data_.resize(hdr_.data_len);
      targets_.assign(1, Target{ping_data_.data(), hdr_.data_len});
      return BeginData(After::kPing);
    case Op::kList:
    case Op::kLeave:
      if (!peer_) {
        ping_data_.resize(hdr_.data_len);  // skip the data; the connection stays usable
        targets_.assign(1, Target{nullptr, hdr_.data_len});
        ReplyError(Code::kRefused, "LIST and LEAVE are for peer connections", false);
        return BeginData(After::kNothing);
      }
      if (op == Op::kLeave) return DoLeave();
      ping_data_.resize(hdr_.data_len);
      targets_.assign(1, Target{ping_data_.data(), hdr_.data_len});
      return BeginData(After::kList);
  }
}

// The node's blocks, hottest first, listed on an I/O thread (a walk of the whole index).
class ListJob final : public OffloadJob {
 public:
  ListJob(Store& store, size_t max) : store_(store), max_(max) {}
  void Run() override { blocks_ = store_.ListBlocks(max_); }
  void Finish(Connection& c) override { static_cast<NativeConnection&>(c).FinishList(blocks_); }

 private:
  Store& store_;
  size_t max_;
  std::vector<HeldBlock> blocks_;
};

void NativeConnection::StartList() {
  uint64_t max = 0;
  std::memcpy(&max, ping_data_.data(), sizeof max);
  constexpr uint64_t kMaxListed = 4u << 20;  // 96 MiB of answer at most
  Offload(std::make_shared<ListJob>(*server_.store(), std::min(max, kMaxListed)));
}

void NativeConnection::FinishList(const std::vector<HeldBlock>& blocks) {
  size_t at = AppendResponse(out_bytes_, hdr_, static_cast<uint32_t>(blocks.size()), {},
                             blocks.size() * net::kListedBlockBytes);
  for (const HeldBlock& b : blocks) {
    std::byte item[net::kListedBlockBytes];
    uint32_t flags = (b.in_dram ? 1u : 0u) | (uint32_t{b.uses} << 8);
    std::memcpy(item, &b.key.lo, 8);
    std::memcpy(item + 8, &b.key.hi, 8);
    std::memcpy(item + 16, &b.size, 4);
    std::memcpy(item + 20, &flags, 4);
    out_bytes_.insert(out_bytes_.end(), item, item + sizeof item);
  }
  QueueOwned(at, out_bytes_.size() - at);
}

void NativeConnection::DoLeave() {
  const auto& leave = server_.options().on_leave;
  if (!leave) return ReplyError(Code::kInvalidArgument, "this node is not in a pod", false);
  if (Status s = leave(); !s.ok()) return ReplyError(s.code(), s.message(), false);
  size_t at = AppendResponse(out_bytes_, hdr_, 0, {}, 0);
  QueueOwned(at, out_bytes_.size() - at);
}

void NativeConnection::DoHello(std::span<const std::byte> meta) {
  if (hello_done_) return ReplyError(Code::kInvalidArgument, "second HELLO", true);
  auto hello = net::DecodeHello(meta);
  if (!hello.ok()) return ReplyError(hello.status().code(), hello.status().message(), true);
  std::string tenant;
  uint32_t cap = 0;
  std::shared_ptr<const Tenants> tenants = server_.tenants();
  Status auth;
  if (hello->flags & net::kHelloPeer) {
    const std::string& peer_token = server_.options().peer_token;
    if (!tenants->open() && (peer_token.empty() || !SameToken(peer_token, hello->token))) {
      auth = Status::Refused("peer connections need the cluster's peer token");
    } else if (!server_.options().tls.ca_file.empty() && !peer_certified()) {
      // Mutual TLS configured: a node proves itself with a certificate of the cluster's CA,
      // not only with a token that may have leaked.
      auth = Status::Refused("peer connections need a client certificate of the cluster's CA");
    }
    tenant = "peer";
    peer_ = auth.ok();
  } else {
    auth = tenants->Authorize(hello->token, hello->ns, &tenant, &cap, &seal_keys_, &tenant_id_);
  }
  if (!auth.ok()) {
    ++counters_.auth_failures;
    return ReplyError(auth.code(), auth.message(), true);
  }
  tenant_name_ = tenant.empty() ? std::string(TenantStats::kOpen) : tenant;
  scoped_stats_ = !tenants->open() && !peer_;
  if (!CountAs(server_.tenant_stats().For(tenant_name_), cap)) {
    return ReplyError(Code::kRefused,
                      "this tenant has " + std::to_string(cap) +
                          " connections open on this node, its max_connections",
                      true);
  }
  net::Limits limits = server_.options().limits;
  limits.shm_enabled = 0;
  if (hello->flags & net::kHelloWantShm) {
    if (!unix_socket_ || passed_fd_ < 0) {
      return ReplyError(Code::kInvalidArgument,
                        "shared memory needs the Unix socket and an fd passed with HELLO", true);
    }
    struct stat st {};
    int seals = fcntl(passed_fd_, F_GET_SEALS);
    if (fstat(passed_fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < hello->shm_bytes ||
        hello->shm_bytes <= net::kShmControlBytes ||
        hello->shm_bytes > server_.options().max_shm_bytes) {
      return ReplyError(Code::kInvalidArgument, "shared-memory region missing or too large", true);
    }
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {  // a shrinking region would SIGBUS us
      return ReplyError(Code::kInvalidArgument,
                        "shared-memory fd must be a memfd sealed with F_SEAL_SHRINK", true);
    }
    void* p = ::mmap(nullptr, hello->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, passed_fd_, 0);
    if (p == MAP_FAILED)
      return ReplyError(Code::kIoError, "mmap of the client's region failed", true);
    shm_ = static_cast<std::byte*>(p);
    shm_size_ = hello->shm_bytes;
    limits.shm_enabled = 1;
  }
  if (passed_fd_ >= 0) {
    ::close(passed_fd_);
    passed_fd_ = -1;
  }
  scope_ = peer_ ? Scope::Raw() : Scope(hello->ns);
  hello_done_ = true;
  std::vector<std::byte> m;
  net::AppendLimits(m, limits);
  size_t at = AppendResponse(out_bytes_, hdr_, 0, m, 0);
  QueueOwned(at, out_bytes_.size() - at);
}

void NativeConnection::DoPut(std::span<const std::byte> meta) {
  Store* store = server_.store();
  const uint64_t max_value = server_.options().limits.max_value_bytes;
  put_items_.resize(hdr_.count);
  put_tokens_.resize(hdr_.count);
  results_.assign(hdr_.count, net::ResponseItem{});
  reservations_.clear();
  reservations_.resize(hdr_.count);
  checksummed_.assign(hdr_.count, 0);
  targets_.clear();
  // A request whose values outgrow what can be freed (its own reservations pin the rest)
  // fails its remaining items at once: each Reserve would wait for room that this very
  // request holds, stalling the reactor seconds per item.
  bool no_space = false;
  for (uint32_t i = 0; i < hdr_.count; ++i) {
    net::PutItem& it = put_items_[i];
    it = net::DecodePutItem(meta.data() + i * net::kPutItemBytes);
    put_tokens_[i].resize(it.tokens);  // filled from the data section before the commit
    bool from_shm = it.flags & net::kPutFromShm;
    Status s;
    if (it.len == 0) {
      s = Status::InvalidArgument("empty value");
    } else if (it.len > max_value) {
      s = Status::TooLarge("value over max_value_bytes");
    } else if (from_shm &&
               (!shm_ || it.shm_offset > shm_size_ || it.len > shm_size_ - it.shm_offset)) {
      s = Status::InvalidArgument("value outside the shared-memory region");
    } else if (it.key.empty()) {
      s = Status::InvalidArgument("the zero key is reserved");
    }
    BlockKey key = scope_.Key(it.key);
    bool overwrite = it.flags & net::kPutOverwrite;
    if (s.ok() && !overwrite && store->Exists(key)) s = Status::Exists();
    if (s.ok() && overwrite) server_.leases().Forget(key);  // the old bytes never come back
    if (s.ok() && no_space) s = Status::NoSpace("an earlier item of this request found no room");
    // A sealed tenant's value lands after the seal's prefix, encrypted in place at the end.
    const size_t at = value_offset();
    if (s.ok()) {
      PutOptions po{scope_.Key(it.parent), overwrite};
      po.token_ids = put_tokens_[i];
      auto r = ReserveValue(key, it.len, po);
      if (r.ok()) {
        reservations_[i] = std::move(r).value();
      } else {
        s = r.status();
        no_space = s.code() == Code::kNoSpace;
      }
    }
    results_[i].code = net::WireCode(s);
    if (from_shm) {
      if (reservations_[i].valid()) {
        // Checked on the way in; a mismatch is left to CommitVerified, which refuses it
        // (kCorruption) and counts it like any other.
        std::span<const std::byte> src(shm_ + it.shm_offset, it.len);
        checksummed_[i] =
            CopyVerified(reservations_[i].data().data() + at, src, it.crc, CopyHelpers());
      }
    } else {
      targets_.push_back(
          Target{reservations_[i].valid() ? reservations_[i].data().data() + at : nullptr, it.len});
    }
    if (it.tokens > 0) {
      targets_.push_back(
          Target{reinterpret_cast<std::byte*>(put_tokens_[i].data()), uint64_t{it.tokens} * 4});
    }
  }
  BeginData(After::kPut);
}

NativeConnection::Io NativeConnection::ReceiveData() {
  // Bytes that came in with the frame's header first, then straight from the socket.
  while (target_ < targets_.size() && in_start_ < in_end_) {
    Target& t = targets_[target_];
    size_t n = std::min(t.len - target_pos_, in_end_ - in_start_);
    if (t.dst) std::memcpy(t.dst + target_pos_, in_.data() + in_start_, n);
    in_start_ += n;
    target_pos_ += n;
    if (target_pos_ == t.len) {
      ++target_;
      target_pos_ = 0;
    }
  }
  constexpr size_t kMaxIov = 64;
  while (target_ < targets_.size()) {
    iovec iov[kMaxIov];
    size_t n = 0;
    for (size_t i = target_; i < targets_.size() && n < kMaxIov; ++i, ++n) {
      size_t skip = i == target_ ? target_pos_ : 0;
      size_t len = targets_[i].len - skip;
      if (targets_[i].dst) {
        iov[n] = iovec{targets_[i].dst + skip, len};
      } else {
        if (discard_.empty()) discard_.resize(kReadChunk);
        iov[n] = iovec{discard_.data(), std::min(len, discard_.size())};
        ++n;
        break;  // one discard piece at a time (it reuses one buffer)
      }
    }
    ssize_t got = ReceiveV(iov, static_cast<int>(n));
    if (got < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kBlocked : Io::kFailed;
    if (got == 0) return Io::kFailed;
    CountIn(static_cast<uint64_t>(got));
    size_t left = static_cast<size_t>(got);
    while (left > 0) {
      size_t avail = targets_[target_].len - target_pos_;
      size_t take = std::min(left, avail);
      target_pos_ += take;
      left -= take;
      if (target_pos_ == targets_[target_].len) {
        ++target_;
        target_pos_ = 0;
      }
    }
  }
  return Io::kDone;
}

void NativeConnection::FinishPut() {
  Store* store = server_.store();
  uint64_t stored = 0;
  for (uint32_t i = 0; i < put_items_.size(); ++i) {
    if (!reservations_[i].valid()) continue;
    uint32_t crc = put_items_[i].crc;
    Status s;
    if (seal_keys_) {
      s = SealReserved(scope_.Key(put_items_[i].key), crc, checksummed_[i],
                       std::move(reservations_[i]));
    } else {
      s = checksummed_[i] ? store->CommitChecksummed(std::move(reservations_[i]), crc)
                          : store->CommitVerified(std::move(reservations_[i]), crc);
    }
    results_[i].code = net::WireCode(s);
    stored += s.ok();
  }
  CountPuts(stored);
  reservations_.clear();
  std::vector<std::byte> m;
  m.reserve(results_.size() * net::kResponseItemBytes);
  for (const net::ResponseItem& r : results_) net::AppendResponseItem(m, r);
  size_t at = AppendResponse(out_bytes_, hdr_, static_cast<uint32_t>(results_.size()), m, 0);
  QueueOwned(at, out_bytes_.size() - at);
}

// A GET's blocks; the answer goes out on the reactor once they are all resolved.
class GetRead final : public BlockRead {
 public:
  GetRead(Store& store, std::vector<BlockKey> keys, std::vector<net::GetItem> items)
      : BlockRead(store, std::move(keys)), items_(std::move(items)) {}
  void Finish(Connection& c) override {
    static_cast<NativeConnection&>(c).FinishGet(items_, keys_, views_);
  }

 private:
  std::vector<net::GetItem> items_;
};

void NativeConnection::DoGet(std::span<const std::byte> meta) {
  std::vector<net::GetItem> items(hdr_.count);
  std::vector<BlockKey> keys(hdr_.count);
  for (uint32_t i = 0; i < hdr_.count; ++i) {
    items[i] = net::DecodeGetItem(meta.data() + i * net::kGetItemBytes);
    if (!items[i].key.empty()) keys[i] = scope_.Key(items[i].key);
  }
  StartRead(std::make_shared<GetRead>(*server_.store(), std::move(keys), std::move(items)));
}

IoWorkers* NativeConnection::CopyHelpers() {
  unsigned open = server_.open_connections().load(std::memory_order_relaxed);
  return open <= server_.reactor_count() ? &server_.io() : nullptr;
}

void NativeConnection::FinishGet(const std::vector<net::GetItem>& items,
                                 const std::vector<BlockKey>& keys,
                                 std::vector<Result<BlockView>>& views) {
  Leases& leases = server_.leases();
  uint64_t now = leases.empty() ? 0 : NowNanos();
  std::vector<std::byte> m;
  m.reserve(items.size() * net::kResponseItemBytes);
  uint64_t data_len = 0;
  std::vector<std::span<const std::byte>> inline_values;
  uint64_t hits = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const net::GetItem& it = items[i];
    Result<BlockView>& view = views[i];
    // A lease taken by an earlier lookup is released by this load, and answers it if the
    // store has let the block go meanwhile.
    std::shared_ptr<const BlockView> held;
    if (now != 0 && !keys[i].empty()) held = leases.Take(keys[i], now, !view.ok());
    const BlockView* src = view.ok() ? &*view : held.get();
    net::ResponseItem r;
    std::span<const std::byte> v;
    bool opened = false;  // v is this connection's own plaintext copy, not the view's bytes
    if (src != nullptr) {
      v = src->data();
      r.crc = src->crc();
      if (!peer_ && (seal_keys_ || IsSealed(v))) {
        // A sealed tenant's block opens with its keys; anyone else's sealed block is a miss.
        auto plain = OpenSealed(keys[i], v, &r.crc);
        if (plain.ok()) {
          v = *plain;
          opened = true;
        } else {
          src = nullptr;
        }
      }
    }
    if (src == nullptr) {
      r.code = static_cast<uint8_t>(!view.ok() && view.status().code() != Code::kCorruption
                                        ? view.status().code()
                                        : Code::kNotFound);
    } else {
      r.size = v.size();
      if (v.size() > it.max_len) {
        r.code = static_cast<uint8_t>(Code::kBufferTooSmall);
      } else if (it.shm_offset != net::kInline) {
        if (!shm_ || it.shm_offset > shm_size_ || v.size() > shm_size_ - it.shm_offset) {
          r.code = static_cast<uint8_t>(Code::kInvalidArgument);
        } else if (CopyVerified(shm_ + it.shm_offset, v, r.crc, CopyHelpers())) {
          r.flags = net::kVerifiedInShm;
        } else {  // the DRAM copy went bad: a miss, never wrong data
          r.code = static_cast<uint8_t>(Code::kNotFound);
        }
      } else {
        data_len += v.size();
        inline_values.push_back(v);
        // Pinned until sent (the bytes do not move with the view).
        if (opened) {
          // The plaintext is the connection's; the view can go.
        } else if (view.ok()) {
          views_.push_back(std::move(*view));
        } else {
          held_views_.push_back(std::move(held));
        }
      }
    }
    hits += r.code == 0;
    net::AppendResponseItem(m, r);
  }
  CountGets(items.size(), hits);
  size_t at = AppendResponse(out_bytes_, hdr_, hdr_.count, m, data_len);
  QueueOwned(at, out_bytes_.size() - at);
  for (std::span<const std::byte> v : inline_values) QueueView(v);
}

// An EXISTS with a lease: its blocks are read like a GET's (pinned, or read from flash on
// an I/O thread), then held instead of sent.
class HoldRead final : public BlockRead {
 public:
  HoldRead(Store& store, std::vector<BlockKey> keys) : BlockRead(store, std::move(keys)) {}
  void Finish(Connection& c) override {
    static_cast<NativeConnection&>(c).FinishHold(keys_, views_);
  }
};

std::vector<BlockKey> NativeConnection::ScopedKeys(std::span<const std::byte> meta) const {
  std::vector<BlockKey> keys(hdr_.count);
  for (uint32_t i = 0; i < hdr_.count; ++i) {
    keys[i] = scope_.Key(net::DecodeKey(meta.data() + i * net::kKeyBytes));
  }
  return keys;
}

void NativeConnection::DoHold(std::span<const std::byte> meta) {
  StartRead(std::make_shared<HoldRead>(*server_.store(), ScopedKeys(meta)));
}

void NativeConnection::FinishHold(const std::vector<BlockKey>& keys,
                                  std::vector<Result<BlockView>>& views) {
  uint64_t ttl_ms = std::min<uint64_t>(hdr_.reserved, server_.options().max_lease_ms);
  uint64_t now = NowNanos();
  std::vector<std::byte> m;
  m.reserve(keys.size() * net::kResponseItemBytes);
  for (size_t i = 0; i < keys.size(); ++i) {
    net::ResponseItem r;
    if (views[i].ok()) {
      server_.leases().Hold(keys[i], std::move(*views[i]), now, ttl_ms * 1'000'000);
    } else {
      r.code = static_cast<uint8_t>(Code::kNotFound);
    }
    net::AppendResponseItem(m, r);
  }
  size_t at = AppendResponse(out_bytes_, hdr_, hdr_.count, m, 0);
  QueueOwned(at, out_bytes_.size() - at);
}

void NativeConnection::DoKeys(Op op, std::span<const std::byte> meta) {
  Store* store = server_.store();
  std::vector<BlockKey> keys = ScopedKeys(meta);
  std::vector<std::byte> m;
  uint32_t count = hdr_.count;
  if (op == Op::kMatch) {
    bool any_empty = false;
    for (const BlockKey& k : keys) any_empty |= k.empty();
    count = any_empty ? 0 : static_cast<uint32_t>(store->MatchPrefix(keys).value());
  } else {
    for (const BlockKey& k : keys) {
      net::ResponseItem r;
      Status s;
      if (k.empty()) {
        s = Status::NotFound();
      } else if (op == Op::kExists) {
        s = store->Exists(k) ? Status::Ok() : Status::NotFound();
      } else {
        server_.leases().Forget(k);
        s = store->Erase(k);
      }
      r.code = net::WireCode(s);
      net::AppendResponseItem(m, r);
    }
  }
  size_t at = AppendResponse(out_bytes_, hdr_, count, m, 0);
  QueueOwned(at, out_bytes_.size() - at);
}

void NativeConnection::DoStat() {
  // On a node with tenants a tenant sees its own figures only, not the store's shape.
  std::string text = hdr_.flags & net::kStatFigures ? StatFigures()
                     : scoped_stats_
                         ? TenantStatsText()
                         : server_.store()->GetStats().ToString() + server_.GetStats().ToString();
  size_t at = AppendResponse(out_bytes_, hdr_, 0, {}, text.size());
  out_bytes_.insert(out_bytes_.end(), reinterpret_cast<const std::byte*>(text.data()),
                    reinterpret_cast<const std::byte*>(text.data()) + text.size());
  QueueOwned(at, out_bytes_.size() - at);
}

std::string NativeConnection::StatFigures() const {
  uint64_t f[net::kStatFigureCount] = {};
  if (scoped_stats_) {
    TenantUsage u;
    TenantQuota q;
    TenantHolding(&u, &q);
    uint64_t gets = tenant_ ? tenant_->gets.load(std::memory_order_relaxed) : 0;
    uint64_t hits = tenant_ ? tenant_->hits.load(std::memory_order_relaxed) : 0;
    f[net::kDramUsed] = u.dram_bytes;
    f[net::kDramCapacity] = q.dram_bytes;
    f[net::kFlashUsed] = u.flash_bytes;
    f[net::kFlashCapacity] = q.flash_bytes;
    f[net::kDramHits] = hits;  // the tiers are not told apart to a tenant
    f[net::kPuts] = tenant_ ? tenant_->puts.load(std::memory_order_relaxed) : 0;
    f[net::kGets] = gets;
    f[net::kMisses] = gets - std::min(gets, hits);
    f[net::kTenantScoped] = 1;
  } else {
    StoreStats s = server_.store()->GetStats();
    f[net::kDramUsed] = s.dram.used_bytes;
    f[net::kDramCapacity] = s.dram.capacity_bytes;
    f[net::kDramBlocks] = s.dram.blocks;
    f[net::kDramHits] = s.dram.hits;
    f[net::kFlashUsed] = s.flash.used_bytes;
    f[net::kFlashCapacity] = s.flash.capacity_bytes;
    f[net::kFlashBlocks] = s.flash.blocks;
    f[net::kFlashHits] = s.flash.hits;
    f[net::kPuts] = s.puts;
    f[net::kGets] = s.gets;
    f[net::kMisses] = s.misses;
  }
  std::string out = "KVS1";
  uint32_t n = net::kStatFigureCount;
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(reinterpret_cast<const char*>(f), sizeof f);
  return out;
}

void NativeConnection::FinishPing() {
  size_t at = AppendResponse(out_bytes_, hdr_, 0, {}, ping_data_.size());
  out_bytes_.insert(out_bytes_.end(), ping_data_.begin(), ping_data_.end());
  QueueOwned(at, out_bytes_.size() - at);
  ping_data_.clear();
}

}  // namespace kvpool::server
