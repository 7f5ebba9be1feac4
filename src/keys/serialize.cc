#include "keys/serialize.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <cassert>

#include "common/bytes.h"

namespace kvpool::keys {
namespace {

// pickle opcodes (Lib/pickle.py).
constexpr char kProto = '\x80', kFrame = '\x95', kMemoize = '\x94', kStop = '.';
constexpr char kShortBinBytes = 'C', kShortBinUnicode = '\x8c', kNone = 'N';
constexpr char kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = '\x8a';
constexpr char kMark = '(', kTuple = 't', kEmptyTuple = ')';
constexpr char kTuple1 = '\x85', kTuple2 = '\x86', kTuple3 = '\x87';

void PickleInt(std::string& out, uint32_t v) {
  if (v <= 0xff) {
    out.push_back(kBinInt1);
    AppendLe(out, v, 1);
  } else if (v <= 0xffff) {
    out.push_back(kBinInt2);
    AppendLe(out, v, 2);
  } else if (v <= 0x7fffffff) {
    out.push_back(kBinInt);
    AppendLe(out, v, 4);
  } else {  // a positive value with bit 31 set needs a fifth byte for the sign
    out.push_back(kLong1);
    out.push_back('\x05');
    AppendLe(out, v, 5);
  }
}

// PROTO 5, then one FRAME holding the body (the C pickler frames any body of >= 4 bytes).
std::string Framed(const std::string& body) {
  std::string out{kProto, '\x05'};
  if (body.size() >= 4) {
    out.push_back(kFrame);
    AppendLe(out, body.size(), 8);
  }
  out += body;
  return out;
}

// CBOR head: major type in the top 3 bits, shortest length encoding (canonical).
void CborHead(std::string& out, unsigned major, uint64_t v) {
  unsigned char m = static_cast<unsigned char>(major << 5);
  if (v < 24) {
    out.push_back(static_cast<char>(m | v));
  } else if (v <= 0xff) {
    out.push_back(static_cast<char>(m | 24));
    AppendBe(out, v, 1);
  } else if (v <= 0xffff) {
    out.push_back(static_cast<char>(m | 25));
    AppendBe(out, v, 2);
  } else if (v <= 0xffffffffull) {
    out.push_back(static_cast<char>(m | 26));
    AppendBe(out, v, 4);
  } else {
    out.push_back(static_cast<char>(m | 27));
    AppendBe(out, v, 8);
  }
}

}  // namespace

std::string PickleBlockTuple(std::string_view parent, std::span<const uint32_t> tokens) {
  assert(parent.size() < 256 && tokens.size() <= 8192);
  std::string body;
  body.reserve(parent.size() + tokens.size() * 5 + 16);
  body.push_back(kShortBinBytes);
  body.push_back(static_cast<char>(parent.size()));
  body.append(parent);
  body.push_back(kMemoize);
  if (tokens.empty()) {
    body.push_back(kEmptyTuple);  // the empty tuple is a singleton: not memoized
  } else {
    if (tokens.size() > 3) body.push_back(kMark);
    for (uint32_t t : tokens) PickleInt(body, t);
    static constexpr char kSmall[] = {0, kTuple1, kTuple2, kTuple3};
    body.push_back(tokens.size() <= 3 ? kSmall[tokens.size()] : kTuple);
    body.push_back(kMemoize);
  }
  body.push_back(kNone);
  body.push_back(kTuple3);
  body.push_back(kMemoize);
  body.push_back(kStop);
  return Framed(body);
}

std::string PickleStr(std::string_view s) {
  assert(s.size() < 256);
  std::string body{kShortBinUnicode, static_cast<char>(s.size())};
  body.append(s);
  body.push_back(kMemoize);
  body.push_back(kStop);
  return Framed(body);
}

std::string CborBlockTuple(std::string_view parent, std::span<const uint32_t> tokens) {
  std::string out;
  out.reserve(parent.size() + tokens.size() * 5 + 16);
  CborHead(out, 4, 3);  // array of 3
  CborHead(out, 2, parent.size());
  out.append(parent);
  CborHead(out, 4, tokens.size());
  for (uint32_t t : tokens) CborHead(out, 0, t);
  out.push_back(static_cast<char>(0xf6));  // null
  return out;
}

std::string CborStr(std::string_view s) {
  std::string out;
  CborHead(out, 3, s.size());
  out.append(s);
  return out;
}

std::string Sha256(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(md), n);
}

std::string Xxh3_128Digest(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  std::string out;
  AppendBe(out, h.high64, 8);
  AppendBe(out, h.low64, 8);
  return out;
}

}  // namespace kvpool::keys
