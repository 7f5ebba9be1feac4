#include "kvpool/status.h"

namespace kvpool {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kExists:
      return "Exists";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kTooLarge:
      return "TooLarge";
    case Code::kBufferTooSmall:
      return "BufferTooSmall";
    case Code::kNoSpace:
      return "NoSpace";
    case Code::kBusy:
      return "Busy";
    case Code::kTimeout:
      return "Timeout";
    case Code::kIoError:
      return "IoError";
    case Code::kCorruption:
      return "Corruption";
    case Code::kRefused:
      return "Refused";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kInternal:
      return "Internal";
  }
  return "Unknown";
}

Status::Status(Code code, std::string_view msg) : code_(code) {
  if (!msg.empty()) msg_ = std::make_unique<std::string>(msg);
}

Status::Status(const Status& other) : code_(other.code_) {
  if (other.msg_) msg_ = std::make_unique<std::string>(*other.msg_);
}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    code_ = other.code_;
    msg_ = other.msg_ ? std::make_unique<std::string>(*other.msg_) : nullptr;
  }
  return *this;
}

std::string Status::ToString() const {
  std::string s(CodeName(code_));
  if (msg_) {
    s += ": ";
    s += *msg_;
  }
  return s;
}

}  // namespace kvpool
