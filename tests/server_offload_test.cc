// Gets that must read flash leave the reactor free: an in-process Server over a real
// TieredStore whose flash device answers reads slowly (testing/faulty_device.h), one
// reactor, real clients on loopback.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "faulty_device.h"
#include "io/memory_device.h"
#include "kvpool/client.h"
#include "net/socket.h"
#include "server/server.h"
#include "server/tenants.h"
#include "store_testing.h"

namespace kvpool {
namespace {

using testing::FaultPlan;
using testing::FaultyDevice;
using testing::TestKey;
using testing::TestValue;

constexpr size_t kBlock = 32 * 1024;
constexpr int kBlocks = 300;  // 9.4 MiB into 4 MiB of DRAM: most end up on flash only
constexpr unsigned kDelayMs = 400;

class OffloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o = testing::SmallOptions(4 * kMiB);
    o.admission = Admission::kAll;
    auto dev = std::make_unique<FaultyDevice>(std::make_unique<io::MemoryDevice>(64 * kMiB), 7);
    dev_ = dev.get();
    store_ = testing::OpenStore(o, std::move(dev));
    ASSERT_TRUE(store_);
    server::ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.resp_listen = "127.0.0.1:0";
    so.reactors = 1;  // every connection on the same reactor
    so.io_threads = 1;
    so.reactor_nice = 0;
    auto s = server::Server::Start(so, store_.get());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    auto c = Connect();
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_TRUE(c->Put(TestKey(i), TestValue(TestKey(i), 0, kBlock)).ok());
    }
    // Which blocks the store holds where, asked without reading flash.
    server::Scope scope("test");
    for (int i = 0; i < kBlocks; ++i) {
      auto v = store_->ReadResident(scope.Key(TestKey(i)));
      if (v.ok()) in_dram_.push_back(i);
      if (v.status().code() == Code::kBusy) on_flash_.push_back(i);
    }
    ASSERT_GE(on_flash_.size(), 4u);
    ASSERT_GE(in_dram_.size(), 4u);
    dev_->SetPlan(FaultPlan{.read_delay_ms = kDelayMs});
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server_->port());
    o.ns = "test";
    o.request_timeout_ms = 10000;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok());
    return c.ok() ? std::move(c).value() : nullptr;
  }

  static bool Holds(Client& c, int i) {
    std::vector<std::byte> buf(kBlock);
    auto r = c.Get(TestKey(i), buf);
    return r.ok() && *r == kBlock && buf == TestValue(TestKey(i), 0, kBlock);
  }

  FaultyDevice* dev_ = nullptr;
  std::unique_ptr<Store> store_;
  std::unique_ptr<server::Server> server_;  // after store_: stopped before it goes
  std::vector<int> in_dram_, on_flash_;
};

TEST_F(OffloadTest, OtherClientsAreServedWhileAGetReadsFlash) {
  auto slow = Connect(), fast = Connect();
  std::atomic<bool> slow_done{false};
  bool slow_ok = false;
  std::thread t([&] {
    slow_ok = Holds(*slow, on_flash_[0]);
    slow_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its request is at the device
  auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(Holds(*fast, in_dram_[k])) << in_dram_[k];
  auto took = std::chrono::steady_clock::now() - t0;
  // Served while the flash read is still under way, not after it.
  EXPECT_FALSE(slow_done.load());
  EXPECT_LT(took, std::chrono::milliseconds(kDelayMs / 2));
  t.join();
  EXPECT_TRUE(slow_ok);
}

TEST_F(OffloadTest, AnswersStayInOrderBehindAFlashRead) {
  // One connection, pipelined: a get mixing a flash block and a DRAM block, then a get of
  // a DRAM block and a put. The later requests are answered after the flash read, in order.
  auto c = Connect();
  std::vector<std::byte> b0(kBlock), b1(kBlock), b2(kBlock);
  std::vector<GetOp> first{{TestKey(on_flash_[1]), b0, 0, 0, {}},
                           {TestKey(in_dram_[0]), b1, 0, 0, {}}};
  std::vector<GetOp> second{{TestKey(in_dram_[1]), b2, 0, 0, {}}};
  std::vector<std::byte> v = TestValue(TestKey(kBlocks), 0, kBlock);
  std::vector<PutOp> third{{TestKey(kBlocks), v, {}, {}}};
  auto t1 = c->SubmitGet(first);
  auto t2 = c->SubmitGet(second);
  auto t3 = c->SubmitPut(third);
  ASSERT_TRUE(t1.ok() && t2.ok() && t3.ok());
  ASSERT_TRUE(c->Wait(*t3).ok());
  ASSERT_TRUE(first[0].status.ok()) << first[0].status.ToString();
  ASSERT_TRUE(first[1].status.ok());
  ASSERT_TRUE(second[0].status.ok());
  EXPECT_TRUE(third[0].status.ok());
  EXPECT_EQ(b0, TestValue(TestKey(on_flash_[1]), 0, kBlock));
  EXPECT_EQ(b1, TestValue(TestKey(in_dram_[0]), 0, kBlock));
  EXPECT_EQ(b2, TestValue(TestKey(in_dram_[1]), 0, kBlock));
  EXPECT_TRUE(Holds(*c, kBlocks));
  // The flash read promoted its block: it is resident now.
  EXPECT_TRUE(store_->ReadResident(server::Scope("test").Key(TestKey(on_flash_[1]))).ok());
}

TEST_F(OffloadTest, AClientThatLeavesDuringAFlashReadDisturbsNobody) {
  {
    auto gone = Connect();
    std::vector<std::byte> buf(kBlock);
    std::vector<GetOp> ops{{TestKey(on_flash_[2]), buf, 0, 0, {}}};
    ASSERT_TRUE(gone->SubmitGet(ops).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }  // closed while its read is at the device; the answer has nowhere to go
  std::this_thread::sleep_for(std::chrono::milliseconds(kDelayMs));
  auto c = Connect();
  EXPECT_TRUE(Holds(*c, in_dram_[2]));
  EXPECT_TRUE(Holds(*c, on_flash_[3]));  // and the next flash read still works
  server_->Stop();                       // with nothing left behind (ASan/TSan runs check)
}

// A RESP client on a blocking socket: sends commands, reads exactly the expected bytes.
class Resp {
 public:
  explicit Resp(uint16_t port) {
    auto fd = net::Connect(net::Address{false, "127.0.0.1", port, {}}, 2000);
    EXPECT_TRUE(fd.ok());
    if (fd.ok()) fd_ = std::move(fd).value();
  }
  void Send(const std::vector<std::string>& args) {
    std::string m = "*" + std::to_string(args.size()) + "\r\n";
    for (const std::string& a : args) m += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    ASSERT_EQ(::send(fd_.get(), m.data(), m.size(), MSG_NOSIGNAL), static_cast<ssize_t>(m.size()));
  }
  std::string Read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::recv(fd_.get(), out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    return out;
  }

 private:
  net::Fd fd_;
};

std::string Bulk(const std::string& v) {
  return "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
}

TEST_F(OffloadTest, RespGetsOfFlashBlocksWaitOffTheReactorAndStayInOrder) {
  dev_->SetPlan({});
  uint16_t port = server_->resp_port();
  Resp setter(port);
  auto value = [](int i) { return std::string(kBlock, static_cast<char>('a' + i % 26)); };
  for (int i = 0; i < kBlocks; ++i) {
    setter.Send({"SET", "r" + std::to_string(i), value(i)});
    ASSERT_EQ(setter.Read(5), "+OK\r\n") << i;
  }
  server::Scope scope("resp");
  std::vector<int> dram, flash;
  for (int i = 0; i < kBlocks; ++i) {
    auto v = store_->ReadResident(scope.Key(KeyFromBytes("r" + std::to_string(i))));
    if (v.ok()) dram.push_back(i);
    if (v.status().code() == Code::kBusy) flash.push_back(i);
  }
  ASSERT_GE(flash.size(), 1u);
  ASSERT_GE(dram.size(), 2u);
  dev_->SetPlan(FaultPlan{.read_delay_ms = kDelayMs});
  std::string f = "r" + std::to_string(flash[0]), d = "r" + std::to_string(dram[0]);
  Resp slow(port), fast(port);
  slow.Send({"MGET", f, d, "nosuch"});
  slow.Send({"PING"});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = std::chrono::steady_clock::now();
  fast.Send({"GET", "r" + std::to_string(dram[1])});
  EXPECT_EQ(fast.Read(Bulk(value(dram[1])).size()), Bulk(value(dram[1])));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(kDelayMs / 2));
  std::string want = "*3\r\n" + Bulk(value(flash[0])) + Bulk(value(dram[0])) + "$-1\r\n+PONG\r\n";
  EXPECT_EQ(slow.Read(want.size()), want);
}

// Connections opened one after another from one thread spread over the reactors (the
// accepting reactor hands each to the least loaded one), and every one is served.
TEST(ReactorBalance, SequentialConnectionsSpreadOverTheReactors) {
  auto store = testing::OpenStore(testing::SmallOptions(4 * kMiB),
                                  std::make_unique<io::MemoryDevice>(16 * kMiB));
  ASSERT_TRUE(store);
  server::ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.resp_listen = "";
  so.reactors = 4;
  so.io_threads = 1;
  so.reactor_nice = 0;
  auto s = server::Server::Start(so, store.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 8; ++i) {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string((*s)->port());
    o.ns = "test";
    auto c = Client::Create(o);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->Put(TestKey(i), TestValue(TestKey(i), 0, 4096)).ok()) << i;
    clients.push_back(std::move(*c));
  }
  std::vector<size_t> per = (*s)->ConnectionsPerReactor();
  ASSERT_EQ(per.size(), 4u);
  for (size_t n : per) EXPECT_EQ(n, 2u) << "8 connections over 4 reactors";
  for (int i = 0; i < 8; ++i) {  // each connection still answers (on whichever reactor)
    std::vector<std::byte> buf(4096);
    auto r = clients[(i + 3) % 8]->Get(TestKey(i), buf);
    ASSERT_TRUE(r.ok()) << i;
    EXPECT_TRUE(buf == TestValue(TestKey(i), 0, 4096));
  }
  clients.clear();
  for (int wait = 0; wait < 200; ++wait) {  // closes are seen by their reactors (bounded)
    per = (*s)->ConnectionsPerReactor();
    if (per == std::vector<size_t>(4, 0)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(per, std::vector<size_t>(4, 0));
}

}  // namespace
}  // namespace kvpool
