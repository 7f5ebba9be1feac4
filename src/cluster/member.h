// A pool member: one kvpoold as clients see it (from a static list or from etcd).
//
// The member record in etcd is this JSON (docs/DEPLOY.md):
//   {"id":"node-a:7400","address":"10.0.0.5:7400","capacity":68719476736,
//    "labels":{"node":"node-a","rack":"r1","zone":"z1"},"protocol":1,"http":"10.0.0.5:7402"}
// ("http", the node's metrics and live page, only when it serves them.)
// A static list names members as "address[,capacity=SIZE][,id=ID][,node=..][,rack=..][,zone=..]",
// several separated by ';' (or one per line in a file).
#ifndef KVPOOL_CLUSTER_MEMBER_H_
#define KVPOOL_CLUSTER_MEMBER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/status.h"

namespace kvpool::cluster {

struct Labels {
  std::string node, rack, zone;
  friend bool operator==(const Labels&, const Labels&) = default;
};

struct Member {
  std::string id;         // stable across restarts: placement hashes it (default: address)
  std::string address;    // "host:port" of the native protocol
  uint64_t capacity = 1;  // advertised bytes; the placement weight
  Labels labels;
  uint32_t protocol = 1;
  std::string http;  // "host:port" of its HTTP endpoint (metrics, /api/stats); "" if none
  friend bool operator==(const Member&, const Member&) = default;
};

std::string EncodeMember(const Member& m);              // the JSON above
Result<Member> DecodeMember(std::string_view json);     // kInvalidArgument on bad input
Result<Member> ParseMemberSpec(std::string_view spec);  // "addr,capacity=64GiB,zone=z1"
Result<std::vector<Member>> ParseMemberList(std::string_view text);  // ';' or '\n' separated

}  // namespace kvpool::cluster

#endif  // KVPOOL_CLUSTER_MEMBER_H_
