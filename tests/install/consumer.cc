// Uses only the public headers of an installed kvpool: a put and a get through the embedded
// store, and a client whose server is not there (kUnavailable, not a miss). Prints "ok".
#include <kvpool/client.h>
#include <kvpool/store.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  kvpool::StoreOptions o;
  o.dram_bytes = 8 << 20;
  o.max_value_bytes = 1 << 20;
  o.huge_pages = false;
  o.prefault = false;
  auto store = kvpool::Store::Open(o);
  if (!store.ok()) {
    std::printf("open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::vector<std::byte> value(5000, std::byte{42}), out(5000);
  kvpool::BlockKey key{7, 9};
  if (!(*store)->Put(key, value).ok()) return 2;
  auto got = (*store)->Get(key, out);
  if (!got.ok() || *got != value.size() || std::memcmp(out.data(), value.data(), value.size())) {
    return 3;
  }
  kvpool::ClientOptions c;
  c.address = "127.0.0.1:1";  // nothing listens there
  auto client = kvpool::Client::Create(c);
  if (!client.ok()) return 4;
  if ((*client)->Get(key, out).status().code() != kvpool::Code::kUnavailable) return 5;
  std::printf("ok\n");
  return 0;
}
