// What every BlockStore shares: deadlines, views and the copying ReadBatch.
#include "kvpool/block_store.h"

#include <algorithm>
#include <vector>

#include "common/clock.h"
#include "kvpool/store.h"

namespace kvpool {

Deadline Deadline::After(std::chrono::nanoseconds d) {
  return Deadline{NowNanos() + static_cast<uint64_t>(std::max<int64_t>(d.count(), 1))};
}

bool Deadline::passed() const { return steady_ns != 0 && NowNanos() >= steady_ns; }

void BlockView::Reset() {
  if (owner_) owner_->ReleaseView(*this);
  owner_ = nullptr;
  owned_.reset();
  data_ = {};
}

BlockView& BlockView::operator=(BlockView&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = other.owner_;
    record_ = other.record_;
    owned_ = std::move(other.owned_);
    data_ = other.data_;
    crc_ = other.crc_;
    other.owner_ = nullptr;
    other.data_ = {};
  }
  return *this;
}

BlockView::~BlockView() { Reset(); }

BlockView BlockView::Owning(std::unique_ptr<std::byte[]> bytes, size_t size, uint32_t crc) {
  BlockView v;
  v.data_ = {bytes.get(), size};
  v.owned_ = std::move(bytes);
  v.crc_ = crc;
  return v;
}

Status BlockStore::ReadBatch(std::span<const BlockKey> keys, std::span<Result<BlockView>> out,
                             Deadline deadline) {
  if (out.size() < keys.size()) return Status::InvalidArgument("fewer results than keys");
  // First the sizes: a get into no buffer answers kBufferTooSmall with the size.
  std::vector<GetOp> ops(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ops[i].key = keys[i];
  if (Status s = GetBatch(ops, deadline); !s.ok()) {
    for (size_t i = 0; i < keys.size(); ++i) out[i] = s;
    return s;
  }
  std::vector<std::unique_ptr<std::byte[]>> bufs(keys.size());
  std::vector<GetOp> reads;
  std::vector<size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    GetOp& op = ops[i];
    if (op.status.ok() && op.size == 0) {  // an empty value fits no buffer at all
      out[i] = BlockView::Owning(nullptr, 0, op.crc);
    } else if (op.status.code() == Code::kBufferTooSmall) {
      bufs[i] = std::make_unique_for_overwrite<std::byte[]>(op.size);
      reads.push_back(GetOp{keys[i], {bufs[i].get(), op.size}});
      index.push_back(i);
    } else {
      out[i] = op.status.ok() ? Status::Internal("empty buffer filled") : op.status;
    }
  }
  if (reads.empty()) return Status::Ok();
  Status s = GetBatch(reads, deadline);
  for (size_t j = 0; j < reads.size(); ++j) {
    const GetOp& r = reads[j];
    size_t i = index[j];
    if (!s.ok()) {
      out[i] = s;
    } else if (r.status.ok()) {
      out[i] = BlockView::Owning(std::move(bufs[i]), r.size, r.crc);
    } else {
      // kBufferTooSmall: the key was overwritten with a larger value in between.
      out[i] =
          r.status.code() == Code::kBufferTooSmall ? Status::NotFound("value changed") : r.status;
    }
  }
  return s;
}

}  // namespace kvpool
