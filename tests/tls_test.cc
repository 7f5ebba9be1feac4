// TLS 1.3 on kvpoold's TCP port, from the client library (issue 20): bytes intact through
// partial writes and large values, the server's certificate checked, client certificates
// when the node asks for them, peers that must present one, plaintext refused, certificates
// renewed on SIGHUP. Certificates come from scripts/make-test-certs.sh (openssl).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "daemon.h"
#include "daemon_test.h"
#include "kvpool/client.h"

namespace kvpool {
namespace {

std::vector<std::byte> Pattern(uint64_t seed, size_t size) {
  std::vector<std::byte> v(size);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

class TlsTest : public testing::DaemonTest {
 protected:
  TlsTest() : DaemonTest("kvpool-tls") {}
  void SetUp() override {
    DaemonTest::SetUp();
    certs_ = dir_ + "/certs";
    ASSERT_EQ(std::system((std::string(KVPOOL_SOURCE_DIR) + "/scripts/make-test-certs.sh " +
                           certs_ + " >/dev/null")
                              .c_str()),
              0);
  }
  std::string Cert(const std::string& name) const { return certs_ + "/" + name; }
  void StartTls(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--tls-cert", Cert("server.pem"), "--tls-key",
                                     Cert("server.key")};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_TRUE(daemon_->Start(args)) << daemon_->output();
  }
  std::unique_ptr<Client> Connect(const std::string& ca, const std::string& cert = "",
                                  bool peer = false, const std::string& token = "") {
    ClientOptions o;
    o.address = daemon_->tcp_address();
    o.ns = "tls";
    o.tls = true;
    o.tls_ca = ca.empty() ? "" : Cert(ca);
    if (!cert.empty()) {
      o.tls_cert = Cert(cert + ".pem");
      o.tls_key = Cert(cert + ".key");
    }
    o.peer = peer;
    o.token = token;
    o.request_timeout_ms = 3000;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  std::string certs_;
};

TEST_F(TlsTest, BytesRoundTripThroughTls) {
  StartTls();
  auto c = Connect("ca.pem");
  ASSERT_TRUE(c);
  // Sizes around the 16 KiB record, a value of many records, and a batch.
  const size_t sizes[] = {1, 100, 16383, 16384, 16385, 65536, 1 << 20};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    ASSERT_TRUE(c->Put(BlockKey{1, i}, Pattern(i, sizes[i])).ok()) << sizes[i];
  }
  std::vector<std::byte> buf(1 << 20);
  for (size_t i = 0; i < std::size(sizes); ++i) {
    auto n = c->Get(BlockKey{1, i}, buf);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, sizes[i]);
    EXPECT_EQ(std::vector<std::byte>(buf.begin(), buf.begin() + *n), Pattern(i, sizes[i]));
  }
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> values;
  for (uint64_t i = 0; i < 64; ++i) {
    keys.push_back(BlockKey{2, i});
    values.push_back(Pattern(100 + i, 65536));
  }
  std::vector<PutOp> puts;
  for (size_t i = 0; i < keys.size(); ++i) puts.push_back(PutOp{keys[i], values[i], {}, {}});
  ASSERT_TRUE(c->PutBatch(puts).ok());
  for (const PutOp& p : puts) ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  std::vector<std::vector<std::byte>> out(keys.size(), std::vector<std::byte>(65536));
  std::vector<GetOp> gets;
  for (size_t i = 0; i < keys.size(); ++i) gets.push_back(GetOp{keys[i], out[i]});
  ASSERT_TRUE(c->GetBatch(gets).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(gets[i].status.ok()) << gets[i].status.ToString();
    EXPECT_EQ(out[i], values[i]) << i;
  }
  EXPECT_EQ(c->stats().crc_failures, 0u);
}

TEST_F(TlsTest, ServerCertificateIsChecked) {
  StartTls();
  auto rogue = Connect("rogue-ca.pem");  // a CA that did not sign the node's certificate
  ASSERT_TRUE(rogue);
  Status s = rogue->Put(BlockKey{1, 1}, Pattern(1, 100));
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.ToString().find("certificate"), std::string::npos) << s.ToString();
  // The right CA but the wrong name: the certificate is for localhost and 127.0.0.1.
  ClientOptions o;
  o.address = daemon_->tcp_address();
  o.tls = true;
  o.tls_ca = Cert("ca.pem");
  o.tls_server_name = "kvpool.example.com";
  auto named = std::move(Client::Create(o)).value();
  EXPECT_EQ(named->Ping().code(), Code::kUnavailable);
  EXPECT_TRUE(Connect("ca.pem")->Ping().ok());
}

TEST_F(TlsTest, PlaintextClientIsRefusedAndTheNodeServesOn) {
  StartTls();
  ClientOptions o;
  o.address = daemon_->tcp_address();
  o.request_timeout_ms = 2000;
  auto plain = std::move(Client::Create(o)).value();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(plain->Ping().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  auto c = Connect("ca.pem");
  EXPECT_TRUE(c->Put(BlockKey{3, 3}, Pattern(3, 4096)).ok());
  // A TLS client to a plaintext node fails too (no silent downgrade).
  daemon_->Stop();
  ASSERT_TRUE(daemon_->Start()) << daemon_->output();
  EXPECT_EQ(Connect("ca.pem")->Ping().code(), Code::kUnavailable);
}

TEST_F(TlsTest, MutualTlsRequiresACertificateOfTheClientCa) {
  StartTls({"--tls-client-ca", Cert("ca.pem"), "--tls-require-client-cert"});
  EXPECT_FALSE(Connect("ca.pem")->Ping().ok());                  // no certificate
  EXPECT_FALSE(Connect("ca.pem", "rogue-client")->Ping().ok());  // signed by another CA
  auto c = Connect("ca.pem", "client");
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_TRUE(c->Put(BlockKey{4, 4}, Pattern(4, 1000)).ok());
}

TEST_F(TlsTest, PeersMustPresentACertificateWhenTheNodeHasAClientCa) {
  std::string config = dir_ + "/kvpoold.toml";
  std::ofstream(config) << "[cluster]\npeer_token = \"pod-secret\"\n";
  StartTls({"--config", config, "--tls-client-ca", Cert("ca.pem")});
  // Ordinary clients may come without a certificate (client certificates are optional).
  EXPECT_TRUE(Connect("ca.pem")->Put(BlockKey{5, 5}, Pattern(5, 100)).ok());
  // A peer with the token but no certificate, or one from another CA, is refused.
  EXPECT_EQ(Connect("ca.pem", "", true, "pod-secret")->ListBlocks(10).status().code(),
            Code::kRefused);
  EXPECT_FALSE(Connect("ca.pem", "rogue-client", true, "pod-secret")->ListBlocks(10).ok());
  auto peer = Connect("ca.pem", "client", true, "pod-secret");
  auto listed = peer->ListBlocks(10);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->size(), 1u);
}

TEST_F(TlsTest, SighupReadsRenewedCertificates) {
  // The node's files are copies; a renewal replaces them in place.
  std::string live = dir_ + "/live";
  ASSERT_EQ(std::system(("mkdir -p " + live + " && cp " + Cert("server.pem") + " " +
                         Cert("server.key") + " " + live)
                            .c_str()),
            0);
  ASSERT_TRUE(
      daemon_->Start({"--tls-cert", live + "/server.pem", "--tls-key", live + "/server.key"}))
      << daemon_->output();
  auto before = Connect("ca.pem");
  ASSERT_TRUE(before->Put(BlockKey{6, 6}, Pattern(6, 100)).ok());
  // A new PKI: the node's new certificate chains to renewed/ca.pem only.
  std::string renewed = dir_ + "/renewed";
  ASSERT_EQ(std::system((std::string(KVPOOL_SOURCE_DIR) + "/scripts/make-test-certs.sh " + renewed +
                         " >/dev/null && cp " + renewed + "/server.pem " + renewed +
                         "/server.key " + live)
                            .c_str()),
            0);
  ASSERT_EQ(::kill(daemon_->pid(), SIGHUP), 0);
  bool renewed_ok = false;
  for (int i = 0; i < 60 && !renewed_ok; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ClientOptions o;
    o.address = daemon_->tcp_address();
    o.tls = true;
    o.tls_ca = renewed + "/ca.pem";
    renewed_ok = std::move(Client::Create(o)).value()->Ping().ok();
  }
  EXPECT_TRUE(renewed_ok) << daemon_->output();
  EXPECT_EQ(Connect("ca.pem")->Ping().code(), Code::kUnavailable);  // old CA: not any more
  // The connection made before the renewal keeps working.
  std::vector<std::byte> buf(100);
  EXPECT_TRUE(before->Get(BlockKey{6, 6}, buf).ok());
  // A broken renewal (a key that does not match) keeps the running certificate.
  ASSERT_EQ(std::system(("cp " + Cert("client.key") + " " + live + "/server.key").c_str()), 0);
  ASSERT_EQ(::kill(daemon_->pid(), SIGHUP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ClientOptions o;
  o.address = daemon_->tcp_address();
  o.tls = true;
  o.tls_ca = renewed + "/ca.pem";
  EXPECT_TRUE(std::move(Client::Create(o)).value()->Ping().ok());
  EXPECT_NE(daemon_->output().find("keeping the running TLS keys"), std::string::npos);
}

}  // namespace
}  // namespace kvpool
