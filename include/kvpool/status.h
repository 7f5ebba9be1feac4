// Status and Result<T>: the one error type of kvpool.
//
// A Status is a code plus an optional message. OK carries no allocation (the message
// pointer is null), so returning OK on the data path costs a register. Errors say whether
// a retry may help (kBusy, kTimeout, kIoError are retryable).
//
// Thread safety: values; copy freely between threads.
#ifndef KVPOOL_STATUS_H_
#define KVPOOL_STATUS_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvpool {

// The values are the wire codes of docs/PROTOCOL.md: fixed, never renumbered (a code
// received beyond kInternal is read as kInternal).
enum class Code : unsigned char {
  kOk = 0,
  kNotFound = 1,         // a miss: the block is not held (or was lost, or failed its CRC)
  kExists = 2,           // insert-only put of a key already held; the data was not rewritten
  kInvalidArgument = 3,  // the caller's fault; retrying the same call fails again
  kTooLarge = 4,         // value larger than a configured limit
  kBufferTooSmall = 5,   // get: the caller's buffer is smaller than the value
  kNoSpace = 6,          // no room even after eviction (everything pinned or reserved)
  kBusy = 7,             // transient overload; retryable
  kTimeout = 8,          // deadline passed; retryable
  kIoError = 9,          // device or network failure; retryable
  kCorruption = 10,      // data failed verification (answered to callers as kNotFound)
  kRefused = 11,         // not allowed (authentication, namespace, TLS peer certificate)
  kUnavailable = 12,     // server unreachable; retryable
  kInternal = 13,
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string_view msg = {}) { return Status(Code::kNotFound, msg); }
  static Status Exists(std::string_view msg = {}) { return Status(Code::kExists, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status TooLarge(std::string_view msg) { return Status(Code::kTooLarge, msg); }
  static Status BufferTooSmall(std::string_view msg) { return Status(Code::kBufferTooSmall, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, msg); }
  static Status Timeout(std::string_view msg) { return Status(Code::kTimeout, msg); }
  static Status IoError(std::string_view msg) { return Status(Code::kIoError, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status Refused(std::string_view msg) { return Status(Code::kRefused, msg); }
  static Status Unavailable(std::string_view msg) { return Status(Code::kUnavailable, msg); }
  static Status Internal(std::string_view msg) { return Status(Code::kInternal, msg); }

  Status(Code code, std::string_view msg);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool retryable() const {
    return code_ == Code::kBusy || code_ == Code::kTimeout || code_ == Code::kIoError ||
           code_ == Code::kUnavailable;
  }
  std::string_view message() const { return msg_ ? std::string_view(*msg_) : std::string_view(); }
  // "OK" or "NotFound: message".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::unique_ptr<std::string> msg_;  // null unless a message was given
};

// A value or an error. REQUIRES: the Status given to the error constructor is not OK.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvpool

#endif  // KVPOOL_STATUS_H_
