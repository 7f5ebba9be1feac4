#include "net/protocol.h"

#include <gtest/gtest.h>

#include <random>

namespace kvpool::net {
namespace {

std::vector<std::byte> Frame(Op op, uint32_t count, const std::vector<std::byte>& meta,
                             uint64_t data_len, std::span<const std::byte> data = {}) {
  Header h;
  h.opcode = static_cast<uint8_t>(op);
  h.count = count;
  h.request_id = 99;
  h.meta_len = static_cast<uint32_t>(meta.size());
  h.data_len = data_len;
  std::vector<std::byte> f(kHeaderBytes);
  SealHeader(h, meta, f.data());
  f.insert(f.end(), meta.begin(), meta.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

TEST(Protocol, HeaderRoundTripsAndItsCrcCoversMeta) {
  std::vector<std::byte> meta;
  AppendKey(meta, BlockKey{1, 2});
  auto f = Frame(Op::kExists, 1, meta, 0);
  Header h = DecodeHeader(f.data());
  EXPECT_EQ(h.magic, kMagic);
  EXPECT_EQ(h.opcode, static_cast<uint8_t>(Op::kExists));
  EXPECT_EQ(h.request_id, 99u);
  EXPECT_EQ(h.meta_len, 16u);
  EXPECT_TRUE(CheckCrc(h, f.data(), std::span(f).subspan(kHeaderBytes)));
  EXPECT_TRUE(ValidateRequest(f, Limits{}, true).ok());
  f[kHeaderBytes + 3] ^= std::byte{4};  // a flipped meta bit
  EXPECT_EQ(ValidateRequest(f, Limits{}, true).code(), Code::kCorruption);
  EXPECT_EQ(DecodeKey(meta.data()), (BlockKey{1, 2}));
}

TEST(Protocol, ItemsRoundTrip) {
  std::vector<std::byte> m;
  PutItem p{
      BlockKey{3, 4}, BlockKey{5, 6}, 1234, 0xdeadbeef, kPutOverwrite | kPutFromShm, 16, 4096};
  AppendPutItem(m, p);
  ASSERT_EQ(m.size(), kPutItemBytes);
  PutItem q = DecodePutItem(m.data());
  EXPECT_EQ(q.tokens, 16u);
  EXPECT_EQ(q.key, p.key);
  EXPECT_EQ(q.parent, p.parent);
  EXPECT_EQ(q.len, p.len);
  EXPECT_EQ(q.crc, p.crc);
  EXPECT_EQ(q.flags, p.flags);
  EXPECT_EQ(q.shm_offset, p.shm_offset);
  m.clear();
  AppendGetItem(m, GetItem{BlockKey{7, 8}, 1 << 20, 64});
  ASSERT_EQ(m.size(), kGetItemBytes);
  GetItem g = DecodeGetItem(m.data());
  EXPECT_EQ(g.key, (BlockKey{7, 8}));
  EXPECT_EQ(g.max_len, 1u << 20);
  EXPECT_EQ(g.shm_offset, 64u);
  m.clear();
  AppendResponseItem(m, ResponseItem{3, kVerifiedInShm, 77, 1ull << 33});
  ASSERT_EQ(m.size(), kResponseItemBytes);
  ResponseItem r = DecodeResponseItem(m.data());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.flags, kVerifiedInShm);
  EXPECT_EQ(r.crc, 77u);
  EXPECT_EQ(r.size, 1ull << 33);
  m.clear();
  AppendHello(m, HelloRequest{"tenant/model", "tok", kHelloWantShm, 1 << 20});
  auto hello = DecodeHello(m);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->ns, "tenant/model");
  EXPECT_EQ(hello->token, "tok");
  EXPECT_EQ(hello->shm_bytes, 1u << 20);
  m.pop_back();
  EXPECT_FALSE(DecodeHello(m).ok());
}

TEST(Protocol, ValidationRejectsInconsistentFrames) {
  Limits limits;
  limits.max_batch = 4;
  std::vector<std::byte> meta;
  PutItem p;
  p.key = BlockKey{1, 1};
  p.len = 10;
  AppendPutItem(meta, p);
  std::vector<std::byte> data(10);
  EXPECT_TRUE(ValidateRequest(Frame(Op::kPut, 1, meta, 10, data), limits, true).ok());
  EXPECT_FALSE(ValidateRequest(Frame(Op::kPut, 1, meta, 9), limits, false).ok());   // lengths
  EXPECT_FALSE(ValidateRequest(Frame(Op::kPut, 2, meta, 10), limits, false).ok());  // count
  // Token ids follow the value: 10 bytes of value + 3 x 4 bytes; a value from shared
  // memory sends only its token ids; more than 65536 of them is malformed.
  meta.clear();
  p.tokens = 3;
  AppendPutItem(meta, p);
  EXPECT_TRUE(
      ValidateRequest(Frame(Op::kPut, 1, meta, 22, std::vector<std::byte>(22)), limits, true).ok());
  EXPECT_FALSE(ValidateRequest(Frame(Op::kPut, 1, meta, 10), limits, false).ok());
  meta.clear();
  p.flags = kPutFromShm;
  AppendPutItem(meta, p);
  EXPECT_TRUE(ValidateRequest(Frame(Op::kPut, 1, meta, 12), limits, false).ok());
  meta.clear();
  p.tokens = kMaxTokensPerBlock + 1;
  AppendPutItem(meta, p);
  EXPECT_FALSE(
      ValidateRequest(Frame(Op::kPut, 1, meta, uint64_t{p.tokens} * 4), limits, false).ok());
  EXPECT_EQ(
      ValidateRequest(Frame(Op::kExists, 5, std::vector<std::byte>(80), 0), limits, false).code(),
      Code::kTooLarge);
  EXPECT_FALSE(
      ValidateRequest(Frame(Op::kExists, 1, std::vector<std::byte>(16), 5), limits, false).ok());
  auto f = Frame(Op::kPing, 0, {}, 0);
  f[4] = std::byte{9};  // version
  Status s = ValidateRequest(f, limits, true);
  EXPECT_NE(s.message().find("version"), std::string_view::npos);
  f = Frame(Op::kPing, 0, {}, 0);
  f[5] = std::byte{0x42};  // opcode
  EXPECT_FALSE(ValidateRequest(f, limits, true).ok());
  f[5] = std::byte{0x88};  // a response opcode sent as a request
  EXPECT_FALSE(ValidateRequest(f, limits, true).ok());
  limits.max_request_bytes = 100;
  EXPECT_EQ(ValidateRequest(Frame(Op::kPing, 0, {}, 101), limits, false).code(), Code::kTooLarge);
}

TEST(Protocol, StatusCodesRoundTripAndUnknownBytesAreInternal) {
  for (uint8_t b = 0; b <= static_cast<uint8_t>(Code::kInternal); ++b) {
    EXPECT_EQ(WireCode(Status(CodeFromWire(b), "x")), b);
  }
  EXPECT_EQ(CodeFromWire(static_cast<uint8_t>(Code::kInternal) + 1), Code::kInternal);
  EXPECT_EQ(CodeFromWire(255), Code::kInternal);
}

TEST(Protocol, RandomBytesNeverPassAsFrames) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> junk(rng() % 200);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    EXPECT_FALSE(ValidateRequest(junk, Limits{}, true).ok());
  }
}

}  // namespace
}  // namespace kvpool::net
