// Encryption at rest per tenant (issue 20): a sealed tenant's known plaintext is nowhere on
// the flash device (a plain tenant's is: the check can fail); its blocks read back from DRAM,
// from flash and after a restart; key rotation, retirement and crypto-shredding on SIGHUP;
// a sealed block copied under another key, or into a plain tenant's namespace, is a miss.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon.h"
#include "daemon_test.h"
#include "kvpool/client.h"
#include "server/sealer.h"
#include "server/tenants.h"

namespace kvpool {
namespace {

constexpr size_t kValue = 64 << 10;
constexpr char kKey1[] = "1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
constexpr char kKey2[] = "2 f0e1d2c3b4a5968778695a4b3c2d1e0ff0e1d2c3b4a5968778695a4b3c2d1e0f\n";

// A value whose every 32-byte run is a recognisable marker: "<tag>-block-<n>-..." repeated.
std::vector<std::byte> Marked(const std::string& tag, uint64_t n) {
  std::string unit = tag + "-block-" + std::to_string(n) + "-";
  std::vector<std::byte> v(kValue);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>(unit[i % unit.size()]);
  return v;
}

class SealedTest : public testing::DaemonTest {
 protected:
  SealedTest() : DaemonTest("kvpool-sealed") {}
  void WriteKeys(const std::string& text) {
    std::string tmp = keys_ + ".new";
    std::ofstream(tmp) << text;
    ::chmod(tmp.c_str(), 0600);
    ASSERT_EQ(::rename(tmp.c_str(), keys_.c_str()), 0);
  }
  void Start(const std::string& keys_text) {
    keys_ = dir_ + "/a.keys";
    WriteKeys(keys_text);
    config_ = dir_ + "/kvpoold.toml";
    std::ofstream(config_)
        << "[store]\nflash_writes_per_day = 0\n\n"
           "[cluster]\npeer_token = \"pod-secret\"\n\n"
           "[[tenant]]\nname = \"a\"\ntoken = \"alpha\"\nnamespaces = [\"a\"]\n"
           "encryption_key_file = \"" +
               keys_ +
               "\"\n\n"
               "[[tenant]]\nname = \"b\"\ntoken = \"beta\"\nnamespaces = [\"b\"]\n";
    ASSERT_TRUE(daemon_->Start({"--config", config_, "--dram", "16MiB", "--flash", "64MiB"}))
        << daemon_->output();
  }
  std::unique_ptr<Client> Connect(const std::string& ns, const std::string& token,
                                  bool peer = false) {
    ClientOptions o;
    o.address = daemon_->tcp_address();
    o.ns = ns;
    o.token = token;
    o.peer = peer;
    return std::move(Client::Create(o)).value();
  }
  // SIGHUP, then wait for the reload's log line (the n-th one).
  void Reload(int n) {
    ASSERT_EQ(::kill(daemon_->pid(), SIGHUP), 0);
    for (int i = 0; i < 100; ++i) {
      std::string log = daemon_->output();
      size_t count = 0;
      for (size_t at = log.find("SIGHUP: reloaded"); at != std::string::npos;
           at = log.find("SIGHUP: reloaded", at + 1))
        ++count;
      if (count >= size_t(n)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "no reload logged: " << daemon_->output();
  }
  bool Reads(Client& c, const BlockKey& k, const std::vector<std::byte>& want) {
    std::vector<std::byte> buf(kValue);
    auto n = c.Get(k, buf);
    return n.ok() && *n == want.size() && buf == want;
  }
  std::string FlashBytes() {
    std::ifstream f(dir_ + "/flash.kvpool", std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::string keys_, config_;
};

TEST_F(SealedTest, KnownPlaintextIsNowhereOnTheDevice) {
  Start(kKey1);
  auto a = Connect("a", "alpha");
  auto b = Connect("b", "beta");
  // 40 MiB each into a 16 MiB DRAM tier: most go to flash; the rest on the clean stop.
  for (uint64_t i = 0; i < 640; ++i) {
    ASSERT_TRUE(a->Put(BlockKey{1, i}, Marked("SECRETA", i)).ok()) << i;
    ASSERT_TRUE(b->Put(BlockKey{1, i}, Marked("PLAINBB", i)).ok()) << i;
  }
  size_t a_hits = 0;
  for (uint64_t i = 0; i < 640; i += 7) a_hits += Reads(*a, BlockKey{1, i}, Marked("SECRETA", i));
  EXPECT_GT(a_hits, 40u);  // from DRAM and from flash (what the log kept)
  a.reset();
  b.reset();
  ASSERT_EQ(daemon_->Stop(), 0);
  std::string flash = FlashBytes();
  ASSERT_GT(flash.size(), 32u << 20);
  EXPECT_EQ(flash.find("SECRETA-block-"), std::string::npos);  // sealed
  EXPECT_NE(flash.find("PLAINBB-block-"), std::string::npos);  // the control: plain tenant
  // A warm restart finds the sealed blocks and opens them.
  ASSERT_TRUE(daemon_->Start({"--config", config_, "--dram", "16MiB", "--flash", "64MiB"}))
      << daemon_->output();
  a = Connect("a", "alpha");
  size_t after = 0;
  for (uint64_t i = 0; i < 640; i += 7) after += Reads(*a, BlockKey{1, i}, Marked("SECRETA", i));
  EXPECT_GT(after, 40u);
}

TEST_F(SealedTest, RotationRetirementAndShredding) {
  Start(kKey1);
  auto a = Connect("a", "alpha");
  ASSERT_TRUE(a->Put(BlockKey{2, 1}, Marked("OLD", 1)).ok());
  WriteKeys(std::string(kKey1) + kKey2);  // rotation: version 2 seals from now on
  Reload(1);
  auto a2 = Connect("a", "alpha");  // keys are taken at HELLO
  ASSERT_TRUE(a2->Put(BlockKey{2, 2}, Marked("NEW", 2)).ok());
  EXPECT_TRUE(Reads(*a2, BlockKey{2, 1}, Marked("OLD", 1)));  // old blocks stay readable
  EXPECT_TRUE(Reads(*a2, BlockKey{2, 2}, Marked("NEW", 2)));
  // The stored bytes say which version sealed each (a peer reads them raw).
  auto peer = Connect("default", "pod-secret", true);
  std::vector<std::byte> raw(kValue + server::kSealOverhead);
  auto n = peer->Get(PoolKey(NamespaceRoot("a"), BlockKey{2, 2}), raw);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, kValue + server::kSealOverhead);
  EXPECT_TRUE(server::IsSealed(std::span(raw.data(), *n)));
  EXPECT_EQ(std::to_integer<int>(raw[8]), 2);
  // Retire version 1: its blocks become misses, version 2's stay.
  WriteKeys(kKey2);
  Reload(2);
  auto a3 = Connect("a", "alpha");
  EXPECT_FALSE(Reads(*a3, BlockKey{2, 1}, Marked("OLD", 1)));
  EXPECT_TRUE(Reads(*a3, BlockKey{2, 2}, Marked("NEW", 2)));
  // Shred: no keys at all. Every block of the tenant is a miss at once; puts are refused.
  WriteKeys("# shredded\n");
  Reload(3);
  auto a4 = Connect("a", "alpha");
  EXPECT_FALSE(Reads(*a4, BlockKey{2, 2}, Marked("NEW", 2)));
  EXPECT_EQ(a4->Put(BlockKey{2, 3}, Marked("X", 3)).code(), Code::kRefused);
  EXPECT_NE(daemon_->output().find("shredded"), std::string::npos);
}

TEST_F(SealedTest, MovedOrSwappedBlocksDoNotOpen) {
  Start(kKey1);
  auto a = Connect("a", "alpha");
  ASSERT_TRUE(a->Put(BlockKey{3, 1}, Marked("ONE", 1)).ok());
  ASSERT_TRUE(a->Put(BlockKey{3, 2}, Marked("TWO", 2)).ok());
  auto peer = Connect("default", "pod-secret", true);
  std::vector<std::byte> raw(kValue + server::kSealOverhead);
  auto n = peer->Get(PoolKey(NamespaceRoot("a"), BlockKey{3, 1}), raw);
  ASSERT_TRUE(n.ok());
  raw.resize(*n);
  // Block 1's sealed bytes written over block 2's key: a miss, never block 1's value.
  ASSERT_TRUE(
      peer->Put(PoolKey(NamespaceRoot("a"), BlockKey{3, 2}), raw, PutOptions{.overwrite = true})
          .ok());
  std::vector<std::byte> buf(kValue);
  EXPECT_EQ(a->Get(BlockKey{3, 2}, buf).status().code(), Code::kNotFound);
  EXPECT_TRUE(Reads(*a, BlockKey{3, 1}, Marked("ONE", 1)));
  // Into the plain tenant's namespace: b gets a miss, not ciphertext.
  ASSERT_TRUE(peer->Put(PoolKey(NamespaceRoot("b"), BlockKey{3, 1}), raw).ok());
  auto b = Connect("b", "beta");
  EXPECT_EQ(b->Get(BlockKey{3, 1}, buf).status().code(), Code::kNotFound);
  // One flipped byte of a sealed block: a miss.
  raw[100] ^= std::byte{1};
  ASSERT_TRUE(
      peer->Put(PoolKey(NamespaceRoot("a"), BlockKey{3, 1}), raw, PutOptions{.overwrite = true})
          .ok());
  EXPECT_EQ(a->Get(BlockKey{3, 1}, buf).status().code(), Code::kNotFound);
}

TEST(TenantKeys, ParsesAndRefusesBadLists) {
  auto k = server::TenantKeys::Parse("t", std::string("# keys\n\n") + kKey2 + kKey1);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->current()->version, 2u);
  EXPECT_EQ((*k)->versions(), (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(server::TenantKeys::Parse("t", "")->get()->shredded());
  for (const char* bad :
       {"1 00", "x 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        "0 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        "1 zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "1"}) {
    auto r = server::TenantKeys::Parse("t", bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_EQ(r.status().ToString().find("0102"), std::string::npos);  // no digits
  }
  EXPECT_FALSE(server::TenantKeys::Parse("t", std::string(kKey1) + kKey1).ok());  // twice
  // A command's output is a key list too; a failing or silent-forever command is an error.
  auto cmd = server::TenantKeys::Load("t", "", std::string("printf '") + kKey1 + "'");
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ((*cmd)->current()->version, 1u);
  EXPECT_FALSE(server::TenantKeys::Load("t", "", "exit 3").ok());
  EXPECT_FALSE(server::TenantKeys::Load("t", "/nonexistent/keys", "").ok());
}

TEST(Sealer, RoundTripAndBinding) {
  auto keys = std::move(server::TenantKeys::Parse("t", kKey1)).value();
  std::vector<std::byte> buf(server::kSealOverhead + 1000);
  for (size_t i = 0; i < 1000; ++i) buf[server::kSealPrefix + i] = std::byte(i * 7);
  std::vector<std::byte> plain(buf.begin() + server::kSealPrefix, buf.end() - server::kSealTag);
  ASSERT_TRUE(server::Seal(*keys, BlockKey{1, 2}, 0xABCD, buf).ok());
  std::vector<std::byte> out(1000);
  auto crc = server::Open(*keys, BlockKey{1, 2}, buf, out.data());
  ASSERT_TRUE(crc.ok());
  EXPECT_EQ(*crc, 0xABCDu);
  EXPECT_EQ(out, plain);
  EXPECT_FALSE(server::Open(*keys, BlockKey{1, 3}, buf, out.data()).ok());  // another key
  auto other = std::move(server::TenantKeys::Parse("u", kKey1)).value();    // another tenant
  EXPECT_FALSE(server::Open(*other, BlockKey{1, 2}, buf, out.data()).ok());
}

}  // namespace
}  // namespace kvpool
