// libFuzzer target for the trace parser: any bytes must yield a request or a clear error,
// never a crash, hang or out-of-bounds read (run under ASan).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "workload/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = kvpool::workload::ParseTraceLine(line);
  if (r.ok()) {
    volatile size_t n = r->hash_ids.size();
    (void)n;
  } else if (r.status().message().empty()) {
    __builtin_trap();  // every rejection must say why
  }
  return 0;
}
