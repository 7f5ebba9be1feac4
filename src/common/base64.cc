#include "common/base64.h"

#include <cstdint>

namespace kvpool {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v =
        uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (size_t rest = in.size() - i; rest > 0) {
    uint32_t v =
        uint32_t(uint8_t(in[i])) << 16 | (rest == 2 ? uint32_t(uint8_t(in[i + 1])) << 8 : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    int pad = 0;
    uint32_t v = 0;
    for (int j = 0; j < 4; ++j) {
      char c = in[i + j];
      int s;
      if (c == '=' && last && j >= 2) {
        s = 0;
        ++pad;
      } else {
        if (pad) return std::nullopt;  // data after padding
        s = Sextet(c);
        if (s < 0) return std::nullopt;
      }
      v = v << 6 | uint32_t(s);
    }
    if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff)))
      return std::nullopt;  // non-canonical
    out.push_back(char(v >> 16));
    if (pad < 2) out.push_back(char(v >> 8));
    if (pad < 1) out.push_back(char(v));
  }
  return out;
}

}  // namespace kvpool
