// The Mooncake trace format: one JSON object a line with timestamp, input_length,
// output_length and hash_ids (512-token prefix block ids). A strict, small parser: the
// objects are flat, and anything else is an error that names the line.
#ifndef KVPOOL_WORKLOAD_TRACE_H_
#define KVPOOL_WORKLOAD_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/status.h"

namespace kvpool::workload {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint64_t input_length = 0;
  uint64_t output_length = 0;
  std::vector<uint64_t> hash_ids;
};

// Parses one line (one JSON object). Unknown keys with number or number-array values are
// skipped; anything else is kInvalidArgument.
Result<TraceRequest> ParseTraceLine(std::string_view line);
// Reads a whole file; `limit` > 0 stops after that many requests. Blank lines are skipped.
// Errors name the path (and the line): a directory, a file with no request, a line whose
// input_length needs another number of hash ids (tokens_per_block tokens each; 0: unchecked).
Result<std::vector<TraceRequest>> LoadTrace(const std::string& path, size_t limit = 0,
                                            unsigned tokens_per_block = 512);

}  // namespace kvpool::workload

#endif  // KVPOOL_WORKLOAD_TRACE_H_
