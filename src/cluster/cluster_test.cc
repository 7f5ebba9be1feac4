// Units of the cluster layer: base64, member records, placement, the HTTP response parser.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "cluster/etcd.h"
#include "cluster/http.h"
#include "cluster/member.h"
#include "cluster/placement.h"
#include "common/base64.h"

namespace kvpool::cluster {
namespace {

TEST(Base64, KnownVectorsAndRoundTrip) {
  // RFC 4648 section 10.
  const std::pair<const char*, const char*> v[] = {{"", ""},
                                                   {"f", "Zg=="},
                                                   {"fo", "Zm8="},
                                                   {"foo", "Zm9v"},
                                                   {"foob", "Zm9vYg=="},
                                                   {"fooba", "Zm9vYmE="},
                                                   {"foobar", "Zm9vYmFy"}};
  for (auto [plain, enc] : v) {
    EXPECT_EQ(Base64Encode(plain), enc);
    EXPECT_EQ(Base64Decode(enc).value_or("?"), plain);
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    EXPECT_EQ(Base64Decode(Base64Encode(s)).value_or("?"), s);
  }
  for (const char* bad : {"Zg=", "Z===", "Zg==Zg==", "Zm9v!A==", "=Zg=", "Zm=v", "Zh==", "Zm9="}) {
    EXPECT_FALSE(Base64Decode(bad).has_value()) << bad;
  }
}

TEST(Member, SpecsRecordsAndErrors) {
  auto m = ParseMemberSpec("10.0.0.5:7400,capacity=64GiB,zone=z1,rack=r4,node=host7,id=a");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->address, "10.0.0.5:7400");
  EXPECT_EQ(m->id, "a");
  EXPECT_EQ(m->capacity, 64ull << 30);
  EXPECT_EQ(m->labels, (Labels{"host7", "r4", "z1"}));
  auto back = DecodeMember(EncodeMember(*m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *m);
  EXPECT_EQ(EncodeMember(*m).find("http"), std::string::npos);  // absent unless served
  m->http = "10.0.0.5:7402";
  back = DecodeMember(EncodeMember(*m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->http, "10.0.0.5:7402");
  EXPECT_FALSE(DecodeMember(R"({"address":"h:1","capacity":1,"http":"noport"})").ok());

  auto plain = ParseMemberSpec("127.0.0.1:7400");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->id, "127.0.0.1:7400");  // the id defaults to the address
  EXPECT_EQ(plain->capacity, 1u);

  EXPECT_FALSE(ParseMemberSpec("no-port").ok());
  EXPECT_FALSE(ParseMemberSpec("h:1,capacity=0").ok());
  EXPECT_FALSE(ParseMemberSpec("h:1,colour=red").ok());
  EXPECT_FALSE(ParseMemberSpec("h:1,zone").ok());
  EXPECT_FALSE(DecodeMember("{").ok());
  EXPECT_FALSE(DecodeMember("[]").ok());
  EXPECT_FALSE(DecodeMember(R"({"id":"x"})").ok());  // no address
  EXPECT_FALSE(DecodeMember(R"({"address":"h:1","capacity":0})").ok());

  auto list = ParseMemberList("a:1,capacity=2 ; b:2\n# comment\n\nc:3,id=c");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[2].id, "c");
  EXPECT_FALSE(ParseMemberList("a:1;a:1").ok());  // same id twice
}

std::vector<Member> Members(size_t n) {
  std::vector<Member> ms;
  for (size_t i = 0; i < n; ++i) {
    Member m;
    m.id = "m" + std::to_string(i);
    m.address = "h:" + std::to_string(1000 + i);
    m.capacity = 1 + i % 3;  // weights 1, 2, 3
    ms.push_back(m);
  }
  return ms;
}

TEST(Placement, SharesFollowWeights) {
  auto ms = Members(6);
  Placement p(ms);
  std::vector<size_t> count(ms.size());
  std::mt19937_64 rng(7);
  const size_t kKeys = 120000;
  for (size_t i = 0; i < kKeys; ++i) ++count[p.Owner({rng(), rng()})];
  double total = 0;
  for (auto& m : ms) total += double(m.capacity);
  for (size_t i = 0; i < ms.size(); ++i) {
    double expect = double(ms[i].capacity) / total;
    EXPECT_NEAR(double(count[i]) / kKeys, expect, expect * 0.05) << ms[i].id;
  }
}

TEST(Placement, MembershipChangesMoveOnlyTheChangedMembersKeys) {
  auto ms = Members(5);
  std::vector<BlockKey> keys(20000);
  std::mt19937_64 rng(9);
  for (auto& k : keys) k = {rng(), rng()};
  Placement before(ms);
  auto more = ms;
  Member extra;
  extra.id = "new";
  extra.address = "h:9";
  extra.capacity = 2;
  more.push_back(extra);
  Placement after(more);
  auto fewer = std::vector<Member>(ms.begin() + 1, ms.end());
  Placement gone(fewer);
  size_t joined_moves = 0;
  for (const BlockKey& k : keys) {
    const std::string& old_owner = ms[before.Owner(k)].id;
    const std::string& new_owner = more[after.Owner(k)].id;
    if (new_owner != old_owner) {
      EXPECT_EQ(new_owner, "new");  // keys move only to the newcomer
      ++joined_moves;
    }
    const std::string& left_owner = fewer[gone.Owner(k)].id;
    if (old_owner != ms[0].id) EXPECT_EQ(left_owner, old_owner);  // only the leaver's keys move
  }
  EXPECT_NEAR(double(joined_moves) / keys.size(), 2.0 / 11.0, 0.02);
  // Rank: the owner first, every member once; the runner-up is where the key goes when
  // the owner leaves.
  std::vector<size_t> rank(ms.size());
  for (int i = 0; i < 200; ++i) {
    before.Rank(keys[i], rank);
    EXPECT_EQ(rank[0], before.Owner(keys[i]));
    std::vector<size_t> sorted = rank;
    std::sort(sorted.begin(), sorted.end());
    for (size_t j = 0; j < sorted.size(); ++j) EXPECT_EQ(sorted[j], j);
    if (rank[0] == 0) EXPECT_EQ(fewer[gone.Owner(keys[i])].id, ms[rank[1]].id);
  }
}

TEST(Placement, SameListSameOwnersInAnyOrder) {
  auto ms = Members(4);
  auto rev = std::vector<Member>(ms.rbegin(), ms.rend());
  Placement a(ms), b(rev);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    BlockKey k{rng(), rng()};
    EXPECT_EQ(ms[a.Owner(k)].id, rev[b.Owner(k)].id);
  }
}

TEST(HttpParser, ContentLengthAndChunkedAtEverySplit) {
  const std::string fixed =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
      "11\r\n\r\n{\"a\":\"bc\"}\n";
  const std::string chunked =
      "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n "
      "world\r\n0\r\n\r\n";
  for (size_t split = 0; split <= chunked.size(); ++split) {
    HttpResponseParser p;
    ASSERT_TRUE(p.Feed(chunked.substr(0, split)).ok());
    ASSERT_TRUE(p.Feed(chunked.substr(split)).ok());
    ASSERT_TRUE(p.done()) << split;
    EXPECT_EQ(p.body(), "hello world");
  }
  HttpResponseParser bytewise;
  for (char c : fixed) ASSERT_TRUE(bytewise.Feed(std::string_view(&c, 1)).ok());
  EXPECT_TRUE(bytewise.done());
  EXPECT_EQ(bytewise.status_code(), 200);
  EXPECT_EQ(bytewise.body(), "{\"a\":\"bc\"}\n");
  // Streaming: the body is taken as it comes.
  HttpResponseParser s;
  ASSERT_TRUE(s.Feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab\n\r\n").ok());
  EXPECT_EQ(s.TakeBody(), "ab\n");
  EXPECT_FALSE(s.done());
}

TEST(HttpParser, MalformedResponsesAreErrors) {
  for (const char* bad : {"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\nContent-Length: 1\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nX: y\r\n\r\n",  // no length at all
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
                          "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nnocolon\r\n\r\n"}) {
    HttpResponseParser p;
    EXPECT_FALSE(p.Feed(bad).ok()) << bad;
  }
  HttpResponseParser huge;
  std::string head = "HTTP/1.1 200 OK\r\n" + std::string(HttpResponseParser::kMaxHeaderBytes, 'x');
  EXPECT_FALSE(huge.Feed(head).ok());
}

TEST(Etcd, PrefixEndAndEndpoints) {
  EXPECT_EQ(PrefixEnd("/kvpool/"), "/kvpool0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(SplitEndpoints("http://a:1/, b:2,,"), (std::vector<std::string>{"a:1", "b:2"}));
}

}  // namespace
}  // namespace kvpool::cluster
