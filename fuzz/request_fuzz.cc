// libFuzzer target for the native protocol's request parser: any bytes must be accepted
// as a consistent frame or rejected with a reason; never a crash or an out-of-bounds read
// (run under ASan). Accepted frames are decoded item by item as the server does.
#include <cstddef>
#include <cstdint>
#include <span>

#include "net/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvpool::net;
  std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);
  Limits limits;
  limits.max_batch = 64;
  for (bool with_data : {false, true}) {
    kvpool::Status s = ValidateRequest(frame, limits, with_data);
    if (!s.ok()) {
      if (s.message().empty()) __builtin_trap();  // every rejection says why
      continue;
    }
    Header h = DecodeHeader(frame.data());
    const std::byte* meta = frame.data() + kHeaderBytes;
    volatile uint64_t sink = 0;
    for (uint32_t i = 0; i < h.count; ++i) {
      switch (static_cast<Op>(h.opcode)) {
        case Op::kPut: sink = sink + DecodePutItem(meta + i * kPutItemBytes).len; break;
        case Op::kGet: sink = sink + DecodeGetItem(meta + i * kGetItemBytes).max_len; break;
        case Op::kExists:
        case Op::kErase:
        case Op::kMatch: sink = sink + DecodeKey(meta + i * kKeyBytes).lo; break;
        default: break;
      }
    }
    if (static_cast<Op>(h.opcode) == Op::kHello) {
      auto hello = DecodeHello(frame.subspan(kHeaderBytes, h.meta_len));
      if (!hello.ok()) __builtin_trap();  // ValidateRequest accepted it
    }
  }
  DecodeLimits(frame);
  return 0;
}
