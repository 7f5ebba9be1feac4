// Schema v2 roots, the pickle/CBOR encoders and engines' hashes. The byte strings below were
// produced by CPython 3.11's pickle (protocol 5) and python3-cbor2 (canonical=True); the
// hash chains are checked against Python's hashlib/xxhash in tests/engine_keys_test.py.
#include <gtest/gtest.h>

#include <set>

#include "keys/serialize.h"
#include "kvpool/engine_keys.h"
#include "kvpool/schema.h"

namespace kvpool {
namespace {

const std::string kParent(32, '\x01');

TEST(Serialize, PickleMatchesCpython) {
  // Each pickle is PROTO 5, FRAME <len>, SHORT_BINBYTES 32 <parent>, then the rest.
  struct Case {
    std::vector<uint32_t> tokens;
    const char* frame;
    const char* rest;
  } cases[] = {
      {{}, "8005952800000000000000", "94294e87942e"},
      {{7}, "8005952b00000000000000", "944b0785944e87942e"},
      {{1, 300, 70000}, "8005953300000000000000", "944b014d2c014a7011010087944e87942e"},
      {{0, 255, 256, 65535, 65536, 2147483647u, 2147483648u, 4294967295u},
       "8005954c00000000000000",
       "94284b004bff4d00014dffff4a000001004affffff7f8a0500000080008a05ffffffff0074944e87942e"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(engines::Hex(keys::PickleBlockTuple(kParent, c.tokens)),
              std::string(c.frame) + "4320" + engines::Hex(kParent) + c.rest);
  }
  EXPECT_EQ(engines::Hex(keys::PickleStr("0")), "80059505000000000000008c0130942e");
}

TEST(Serialize, CborMatchesCbor2Canonical) {
  EXPECT_EQ(engines::Hex(keys::CborBlockTuple(kParent, std::vector<uint32_t>{})),
            "835820" + engines::Hex(kParent) + "80f6");
  EXPECT_EQ(engines::Hex(keys::CborBlockTuple(
                kParent, std::vector<uint32_t>{0, 255, 256, 65535, 65536, 2147483647u, 2147483648u,
                                               4294967295u})),
            "835820" + engines::Hex(kParent) +
                "880018ff19010019ffff1a000100001a7fffffff1a800000001afffffffff6");
  EXPECT_EQ(engines::Hex(keys::CborStr("0")), "6130");
}

TEST(Serialize, DigestsOfKnownInputs) {
  // FIPS 180-2 "abc"; XXH3-128 of the empty input (xxhash's own test vector).
  EXPECT_EQ(engines::Hex(keys::Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(engines::Hex(keys::Xxh3_128Digest("")), "99aa06d3014798d86001c324468d497f");
}

TEST(EngineKeys, ChainsDependOnEveryEarlierToken) {
  std::vector<uint32_t> a(64), b(64);
  for (uint32_t i = 0; i < 64; ++i) a[i] = b[i] = i * 7 + 1;
  b[20] = 999;  // block 1 of 16-token blocks differs
  for (auto algo : {engines::VllmHash::kSha256, engines::VllmHash::kSha256Cbor,
                    engines::VllmHash::kXxhash, engines::VllmHash::kXxhashCbor}) {
    auto ha = engines::VllmBlockHashes(algo, "0", a, 16);
    auto hb = engines::VllmBlockHashes(algo, "0", b, 16);
    ASSERT_EQ(ha.size(), 4u);
    EXPECT_EQ(ha[0], hb[0]);
    for (int i = 1; i < 4; ++i) EXPECT_NE(ha[i], hb[i]);
    EXPECT_EQ(
        ha[0].size(),
        algo == engines::VllmHash::kSha256 || algo == engines::VllmHash::kSha256Cbor ? 32u : 16u);
    EXPECT_NE(engines::VllmBlockHashes(algo, "1", a, 16)[0], ha[0]);  // the seed matters
  }
  auto sa = engines::SglangPageHashes(a, 16), sb = engines::SglangPageHashes(b, 16);
  EXPECT_EQ(sa.size(), 4u);
  EXPECT_EQ(sa[0], sb[0]);
  EXPECT_NE(sa[3], sb[3]);
  EXPECT_EQ(sa[0].size(), 64u);
  EXPECT_EQ(engines::SglangPageHashes(a, 16, true)[0].size(), 16u);
  auto da = engines::DynamoBlockHashes(a, 16), db = engines::DynamoBlockHashes(b, 16);
  EXPECT_EQ(da.sequence[0], da.local[0]);
  EXPECT_NE(da.sequence[1], da.local[1]);
  EXPECT_EQ(da.local[2], db.local[2]);  // local hashes see only their own block
  EXPECT_NE(da.sequence[2], db.sequence[2]);
  // LMCache hashes the trailing partial chunk too.
  EXPECT_EQ(engines::LmcacheChunkHashes(engines::VllmHash::kSha256Cbor, "0", a, 48).size(), 2u);
  EXPECT_FALSE(engines::ParseVllmHash("md5").ok());
  // Schemes kvpool does not reproduce are refused by name, with the reason, never computed
  // as another algorithm (sha256_cbor_64bit was once taken for sha256_cbor: wrong hashes).
  auto old = engines::ParseVllmHash("sha256_cbor_64bit");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("not reproduced"), std::string_view::npos);
  auto builtin = engines::ParseVllmHash("builtin");
  ASSERT_FALSE(builtin.ok());
  EXPECT_NE(builtin.status().message().find("per-process"), std::string_view::npos);
  EXPECT_EQ(*engines::ParseVllmHash("sha256_cbor"), engines::VllmHash::kSha256Cbor);
}

TEST(Schema, EveryFieldSeparatesNamespaces) {
  NamespaceSpec base;
  base.model = "meta-llama/Llama-3.1-8B@main";
  base.layout = "mha/p16/l32/kv8/d128";
  std::vector<NamespaceSpec> specs(9, base);
  specs[1].tenant = "other";
  specs[2].model = "meta-llama/Llama-3.1-70B@main";
  specs[3].layout = "mha/p32/l32/kv8/d128";
  specs[4].dtype = "fp8_e4m3";
  specs[5].tp_size = 2;
  specs[6].tp_size = 2, specs[6].tp_rank = 1;
  specs[7].pp_size = 2;
  specs[8].salt = "s";
  std::set<BlockKey> roots;
  for (const auto& s : specs) {
    EXPECT_TRUE(s.Validate().ok()) << s.ToString();
    roots.insert(s.Root());
  }
  EXPECT_EQ(roots.size(), specs.size());
  // Length-prefixed fields: moving a byte from one field to the next changes the root.
  NamespaceSpec x = base, y = base;
  x.tenant = "ab", x.model = "c";
  y.tenant = "a", y.model = "bc";
  EXPECT_NE(x.Root(), y.Root());
  NamespaceSpec bad = base;
  bad.tp_rank = 1;
  EXPECT_FALSE(bad.Validate().ok());
  bad = base;
  bad.model.clear();
  EXPECT_FALSE(bad.Validate().ok());
  EXPECT_NE(ForeignKey(base.Root(), "sglang", "ab"), ForeignKey(base.Root(), "vllm", "ab"));
  EXPECT_NE(ForeignKey(base.Root(), "sglang", "ab"), ForeignKey(specs[1].Root(), "sglang", "ab"));
}

}  // namespace
}  // namespace kvpool
