#include "server/resp_parser.h"

#include <charconv>

namespace kvpool::server {
namespace {

// Reads "<digits>\r\n" at in[pos]; returns false if incomplete, sets *bad if malformed.
bool ReadNumber(std::string_view in, size_t* pos, long long* value, bool* bad) {
  size_t eol = in.find("\r\n", *pos);
  if (eol == std::string_view::npos) {
    if (in.size() - *pos > 32) *bad = true;  // no number is that long
    return false;
  }
  const char* b = in.data() + *pos;
  const char* e = in.data() + eol;
  auto [end, ec] = std::from_chars(b, e, *value);
  if (ec != std::errc() || end != e) {
    *bad = true;
    return false;
  }
  *pos = eol + 2;
  return true;
}

RespParse Inline(std::string_view in, const RespLimits& limits, std::vector<std::string_view>* args,
                 size_t* consumed, std::string* error) {
  size_t eol = in.find('\n');
  if (eol == std::string_view::npos) {
    if (in.size() > limits.max_inline_bytes) {
      *error = "inline command too long";
      return RespParse::kError;
    }
    return RespParse::kIncomplete;
  }
  std::string_view line = in.substr(0, eol);
  if (line.ends_with('\r')) line.remove_suffix(1);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) {
      if (args->size() == limits.max_args) {
        *error = "too many arguments";
        return RespParse::kError;
      }
      args->push_back(line.substr(start, i - start));
    }
  }
  *consumed = eol + 1;
  return RespParse::kOk;
}

}  // namespace

RespParse ParseRespCommand(std::string_view in, const RespLimits& limits,
                           std::vector<std::string_view>* args, size_t* consumed,
                           std::string* error) {
  args->clear();
  if (in.empty()) return RespParse::kIncomplete;
  if (in[0] != '*') return Inline(in, limits, args, consumed, error);
  size_t pos = 1;
  long long n = 0;
  bool bad = false;
  if (!ReadNumber(in, &pos, &n, &bad)) {
    if (bad) *error = "invalid multibulk length";
    return bad ? RespParse::kError : RespParse::kIncomplete;
  }
  if (n < 0 || static_cast<unsigned long long>(n) > limits.max_args) {
    *error = "invalid multibulk length";
    return RespParse::kError;
  }
  for (long long i = 0; i < n; ++i) {
    if (pos >= in.size()) return RespParse::kIncomplete;
    if (in[pos] != '$') {
      *error = std::string("expected '$', got '") + in[pos] + "'";
      return RespParse::kError;
    }
    ++pos;
    long long len = 0;
    if (!ReadNumber(in, &pos, &len, &bad)) {
      if (bad) *error = "invalid bulk length";
      return bad ? RespParse::kError : RespParse::kIncomplete;
    }
    if (len < 0 || static_cast<unsigned long long>(len) > limits.max_bulk_bytes) {
      *error = "invalid bulk length";
      return RespParse::kError;
    }
    size_t ulen = static_cast<size_t>(len);
    if (in.size() - pos < ulen + 2) return RespParse::kIncomplete;
    if (in[pos + ulen] != '\r' || in[pos + ulen + 1] != '\n') {
      *error = "bulk string not terminated by CRLF";
      return RespParse::kError;
    }
    args->push_back(in.substr(pos, ulen));
    pos += ulen + 2;
  }
  *consumed = pos;
  return RespParse::kOk;
}

}  // namespace kvpool::server
