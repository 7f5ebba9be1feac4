// `kvpool cluster drain NODE`: takes a node out of the pod without losing its hot blocks.
//
// 1. The node leaves the member list (a peer LEAVE: it revokes its etcd lease) and keeps
//    serving; clients place new blocks on the others, and a miss there reads through from
//    the node (PoolClient's handoff).
// 2. Its blocks, hottest first (a peer LIST), are read from it and stored insert-only at
//    their owners among the remaining members (placement over stored keys, as clients
//    compute it), in batches, with progress.
// 3. It can then be stopped: its hot blocks are where clients look for them.
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.h"
#include "cluster/membership.h"
#include "cluster/placement.h"
#include "cluster_cli.h"
#include "common/units.h"
#include "kvpool/client.h"

namespace kvpool::tools {
namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kvpool cluster drain: %s\n", msg.c_str());
  return 2;
}

// TLS to the nodes (a pod whose nodes have --tls-cert): the CA, and this tool's certificate
// (a node with a client CA wants one from peers).
struct PeerTls {
  std::string ca, cert, key;
};

std::unique_ptr<Client> PeerClient(const std::string& address, const std::string& token,
                                   const PeerTls& tls) {
  ClientOptions o;
  o.address = address;
  o.peer = true;
  o.token = token;
  o.tls_ca = tls.ca;
  o.tls_cert = tls.cert;
  o.tls_key = tls.key;
  o.request_timeout_ms = 10'000;
  auto c = Client::Create(o);
  return c.ok() ? std::move(c).value() : nullptr;
}

}  // namespace

int DrainCommand(int argc, char** argv) {
  std::string node, etcd, prefix = "/kvpool/members/", token;
  PeerTls tls;
  size_t max_blocks = 4u << 20, batch = 64;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--etcd" && (v = value())) {
      etcd = v;
    } else if (a == "--etcd-prefix" && (v = value())) {
      prefix = v;
    } else if (a == "--token" && (v = value())) {
      token = v;
    } else if (a == "--tls-ca" && (v = value())) {
      tls.ca = v;
    } else if (a == "--tls-cert" && (v = value())) {
      tls.cert = v;
    } else if (a == "--tls-key" && (v = value())) {
      tls.key = v;
    } else if (a == "--max-blocks" && (v = value())) {
      auto n = ParseSize(v);
      if (!n.ok() || *n == 0) return Fail("--max-blocks: a positive count");
      max_blocks = *n;
    } else if (a == "--batch" && (v = value())) {
      auto n = ParseSize(v);
      if (!n.ok() || *n == 0 || *n > 1024) return Fail("--batch: 1..1024");
      batch = *n;
    } else if (!a.empty() && a[0] != '-' && node.empty()) {
      node = a;
    } else {
      return Fail("unknown or incomplete option '" + a + "'");
    }
  }
  if (node.empty() || etcd.empty()) return Fail("usage: kvpool cluster drain NODE --etcd HOSTS");
  auto pod = cluster::Membership::FromEtcd(cluster::SplitEndpoints(etcd), prefix, 1000);
  if (!pod->WaitReady(3000)) return Fail("etcd at " + etcd + " did not answer within 3 s");
  std::string address;
  // The view holds the list alive while it is read (a range-for over *Current().members
  // would read a list the watcher may free meanwhile).
  cluster::MembershipView listed = pod->Current();
  for (const auto& m : *listed.members) {
    if (m.id == node || m.address == node) address = m.address, node = m.id;
  }
  if (address.empty()) return Fail("no member '" + node + "' under " + prefix + " in etcd");
  auto source = PeerClient(address, token, tls);
  if (!source) return Fail("bad address " + address);

  // 1. Out of the member list; wait until the list says so.
  if (Status s = source->Leave(); !s.ok()) return Fail(node + " refused to leave: " + s.ToString());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<cluster::Member> rest;
  while (true) {
    rest.clear();
    bool gone = true;
    cluster::MembershipView view = pod->Current();
    for (const auto& m : *view.members) {
      if (m.id == node) {
        gone = false;
      } else {
        rest.push_back(m);
      }
    }
    if (gone) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      return Fail(node + " is still in the member list after 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::fprintf(stderr, "%s (%s) left the member list; %zu members remain\n", node.c_str(),
               address.c_str(), rest.size());
  if (rest.empty()) return Fail("no member left to take its blocks (it keeps serving them)");

  // 2. Its blocks, hottest first, to their owners now.
  auto blocks = source->ListBlocks(max_blocks);
  if (!blocks.ok()) return Fail("listing " + node + "'s blocks: " + blocks.status().ToString());
  cluster::Placement placement(rest);
  std::vector<std::unique_ptr<Client>> owners;
  for (const auto& m : rest) {
    owners.push_back(PeerClient(m.address, token, tls));
    if (!owners.back()) return Fail("bad address " + m.address);
  }
  uint64_t moved = 0, there = 0, gone = 0, failed = 0, bytes = 0;
  auto start = std::chrono::steady_clock::now();
  for (size_t at = 0; at < blocks->size(); at += batch) {
    size_t n = std::min(batch, blocks->size() - at);
    std::vector<std::vector<std::byte>> bufs(n);
    std::vector<GetOp> gets(n);
    for (size_t i = 0; i < n; ++i) {
      const HeldBlock& b = (*blocks)[at + i];
      bufs[i].resize(b.size);
      gets[i].key = b.key;
      gets[i].buffer = bufs[i];
    }
    if (Status s = source->GetBatch(gets); !s.ok() && s.code() != Code::kNotFound) {
      return Fail("reading from " + node + ": " + s.ToString());
    }
    std::map<size_t, std::vector<PutOp>> puts;
    for (size_t i = 0; i < n; ++i) {
      if (!gets[i].status.ok()) {
        ++gone;  // evicted or erased since the listing
        continue;
      }
      size_t o = placement.size() == 1 ? 0 : placement.Owner(gets[i].key);
      puts[o].push_back(
          PutOp{gets[i].key, std::span<const std::byte>(bufs[i].data(), gets[i].size), {}, {}});
    }
    for (auto& [o, part] : puts) {
      (void)owners[o]->PutBatch(part, /*overwrite=*/false);
      for (const PutOp& p : part) {
        if (p.status.ok()) {
          ++moved;
          bytes += p.value.size();
        } else if (p.status.code() == Code::kExists) {
          ++there;
        } else {
          ++failed;
        }
      }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(
        stderr,
        "\r%zu/%zu blocks: %llu moved (%s), %llu already there, %llu gone, %llu failed, %.1f s",
        at + n, blocks->size(), (unsigned long long)moved, FormatSize(bytes).c_str(),
        (unsigned long long)there, (unsigned long long)gone, (unsigned long long)failed, secs);
  }
  std::fprintf(stderr, "\n");
  std::printf(
      "drained %s: %zu blocks listed, %llu moved (%s), %llu already at their owner, %llu "
      "gone before they were read, %llu failed; it has left the pod and can be stopped\n",
      node.c_str(), blocks->size(), (unsigned long long)moved, FormatSize(bytes).c_str(),
      (unsigned long long)there, (unsigned long long)gone, (unsigned long long)failed);
  return failed ? 1 : 0;
}

}  // namespace kvpool::tools
