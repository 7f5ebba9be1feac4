// libFuzzer target for what the cluster layer reads from the network and from users: etcd's
// HTTP responses (fed in two pieces at a split the input chooses), member records (JSON),
// static member lists and base64. Malformed input is an error; never a crash, and a body
// is never longer than the bytes fed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/http.h"
#include "cluster/member.h"
#include "common/base64.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t split = all.empty() ? 0 : data[0] % (all.size() + 1);
  kvpool::cluster::HttpResponseParser p;
  kvpool::Status s = p.Feed(all.substr(0, split));
  if (s.ok()) s = p.Feed(all.substr(split));
  if (s.ok() && p.body().size() > all.size()) __builtin_trap();

  auto m = kvpool::cluster::DecodeMember(all);
  if (m.ok()) {
    auto again = kvpool::cluster::DecodeMember(kvpool::cluster::EncodeMember(*m));
    if (!again.ok() || !(*again == *m)) __builtin_trap();  // records round-trip
  }
  (void)kvpool::cluster::ParseMemberList(all);
  auto decoded = kvpool::Base64Decode(all);
  if (decoded && kvpool::Base64Encode(*decoded) != all) __builtin_trap();  // canonical input only
  return 0;
}
